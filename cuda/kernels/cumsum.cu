// CUDA kernel of cumsum along attrs.dim: one thread per line (every position of the other dims),
// lines of a grid-stride loop, each line by cumsum_line (cuda/host/reducers.h): the CPU's rule and
// the CPU's bits. Any input strides; the output is contiguous. Accumulation: f32 for
// f16/bf16/f32, f64 for f64, i64 for integers and bool (which give i64).
#include "mixgrad/cuda/kernels/reduce.cuh"
#include "mixgrad/ops/kernel_registry.h"

namespace mg::cuda {
namespace {

template <typename T>
using int_widened_t = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, T, int64_t>;

// x: lines at kept.offset(line), `size` terms `x_stride` apart; out [same shape, contiguous].
template <typename T, typename O>
__global__ void cumsum_kernel(int64_t lines, int64_t size, int64_t inner, int64_t x_stride, const ReduceDims kept,
                              const T* __restrict__ x, O* __restrict__ out) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t line = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; line < lines; line += stride) {
    cumsum_line<T, O>(x + kept.offset(line), x_stride, size, out + (line / inner) * size * inner + line % inner,
                      inner);
  }
}

// out[0] [x's shape] = Σ_{k <= i} x[..., k, ...] along a.dim
template <typename T>
void cumsum_cuda(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using O = int_widened_t<T>;
  const Tensor& x = in[0];
  const T* data = static_cast<const T*>(x.data_ptr());
  int64_t size = 1, inner = 1, x_stride = 1;
  std::vector<int64_t> dims;
  if (x.dim() > 0) {
    dims = {a.dim};
    size = x.shape()[a.dim];
    x_stride = x.strides()[a.dim];
    for (int64_t d = a.dim + 1; d < x.dim(); ++d) inner *= x.shape()[d];
  }
  // The kept dims of a reduction over `dim` enumerate the lines in the output's order.
  const ReducePlan p = make_reduce_plan(x.shape(), x.strides(), dims, int64_t(sizeof(T)),
                                        reinterpret_cast<std::uintptr_t>(data));
  if (size == 0 || p.out_numel == 0) return;
  const LaunchContext ctx(x.device());
  cumsum_kernel<T, O><<<ctx.blocks(p.out_numel), kThreads, 0, ctx.stream>>>(p.out_numel, size, inner, x_stride,
                                                                           p.kept, data, out[0].data<O>());
  MG_CUDA_CHECK_LAUNCH("cumsum_kernel");
}

}  // namespace

void register_cumsum_kernels() {
#define MG_REG_CUMSUM(E, n, T) register_kernel(OpId::cumsum, DeviceType::CUDA, DType::E, cumsum_cuda<T>);
  MG_FORALL_DTYPES(MG_REG_CUMSUM)
#undef MG_REG_CUMSUM
}

}  // namespace mg::cuda
