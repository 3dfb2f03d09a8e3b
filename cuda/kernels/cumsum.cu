// CUDA kernels of cumsum along attrs.dim, by the CPU's rule and with the CPU's bits (the same
// additions in the same order; cuda/host/reducers.h): lines longer than one leaf of 128 in three
// steps with one thread per (line, leaf) — leaf sums, the pairwise nodes above them level by
// level, then each leaf's offset and in-order running sum; single leaves one thread per line
// (cumsum_line). Integer lines take the same three steps: wrapping i64 addition is associative, so
// any order gives the CPU's (sequential) bits. Any input strides; the output is contiguous.
// Accumulation: f32 for f16/bf16/f32, f64 for f64, i64 for integers and bool (which give i64).
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

// Long lines, one thread per (line, leaf); t = leaf · lines + line, so neighbouring
// threads take neighbouring lines (coalesced when the lines are strided, dim != last).
template <typename T>
__global__ void cumsum_leaf_kernel(int64_t lines, int64_t size, int64_t x_stride, const ReduceDims kept,
                                   const ScanLevels lv, const T* __restrict__ x, acc_t<T>* __restrict__ nodes) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < lines * lv.leaves; t += stride) {
    const int64_t line = t % lines, leaf = t / lines, l0 = leaf * kReduceLeaf;
    const int64_t l1 = l0 + kReduceLeaf < size ? l0 + kReduceLeaf : size;
    nodes[line * lv.total + leaf] = cumsum_leaf_total(x + kept.offset(line), x_stride, l0, l1);
  }
}

// Level b of every line's pairwise nodes from level b - 1.
template <typename Acc>
__global__ void cumsum_level_kernel(int64_t lines, const ScanLevels lv, int b, Acc* __restrict__ nodes) {
  const int64_t count = lv.leaves >> b, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < lines * count; t += stride) {
    const int64_t line = t % lines, j = t / lines;
    Acc* n = nodes + line * lv.total;
    n[lv.start[b] + j] = r_add(n[lv.start[b - 1] + 2 * j], n[lv.start[b - 1] + 2 * j + 1]);
  }
}

template <typename T, typename O>
__global__ void cumsum_scan_kernel(int64_t lines, int64_t size, int64_t inner, int64_t x_stride, const ReduceDims kept,
                                   const ScanLevels lv, const T* __restrict__ x, const acc_t<T>* __restrict__ nodes,
                                   O* __restrict__ out) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < lines * lv.leaves; t += stride) {
    const int64_t line = t % lines, leaf = t / lines, l0 = leaf * kReduceLeaf;
    const int64_t l1 = l0 + kReduceLeaf < size ? l0 + kReduceLeaf : size;
    const acc_t<T> offset = cumsum_leaf_offset(nodes + line * lv.total, lv, leaf);
    cumsum_leaf_scan(x + kept.offset(line), x_stride, l0, l1, offset,
                     out + (line / inner) * size * inner + line % inner, inner);
  }
}

// A 0-d x: out = x converted, as the CPU's 0-d case (no 0 + x, which would turn -0 into +0).
template <typename T, typename O>
__global__ void cumsum_scalar_kernel(const T* __restrict__ x, O* __restrict__ out) {
  out[0] = static_cast<O>(static_cast<acc_t<T>>(x[0]));
}

// out[0] [x's shape] = Σ_{k <= i} x[..., k, ...] along a.dim
template <typename T>
void cumsum_cuda(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using O = int_widened_t<T>;
  const Tensor& x = in[0];
  const T* data = static_cast<const T*>(x.data_ptr());
  if (x.dim() == 0) {
    const LaunchContext ctx(x.device());
    cumsum_scalar_kernel<T, O><<<1, 1, 0, ctx.stream>>>(data, out[0].data<O>());
    MG_CUDA_CHECK_LAUNCH("cumsum_scalar_kernel");
    return;
  }
  const std::vector<int64_t> dims = {a.dim};
  const int64_t size = x.shape()[a.dim], x_stride = x.strides()[a.dim];
  int64_t inner = 1;
  for (int64_t d = a.dim + 1; d < x.dim(); ++d) inner *= x.shape()[d];
  // The kept dims of a reduction over `dim` enumerate the lines in the output's order.
  const ReducePlan p = make_reduce_plan(x.shape(), x.strides(), dims, int64_t(sizeof(T)),
                                        reinterpret_cast<std::uintptr_t>(data));
  if (size == 0 || p.out_numel == 0) return;
  const LaunchContext ctx(x.device());
  {
    if (size > kReduceLeaf) {  // leaves in parallel (three kernels), the same bits as one thread per line
      using Acc = acc_t<T>;
      const int64_t lines = p.out_numel;
      const ScanLevels lv = make_scan_levels((size + kReduceLeaf - 1) / kReduceLeaf);
      const Tensor workspace =
          empty({lines * lv.total * int64_t(sizeof(Acc))}, {.dtype = DType::U8, .device = x.device()});
      Acc* nodes = static_cast<Acc*>(workspace.data_ptr());
      cumsum_leaf_kernel<T><<<ctx.blocks(lines * lv.leaves), kThreads, 0, ctx.stream>>>(lines, size, x_stride, p.kept,
                                                                                      lv, data, nodes);
      MG_CUDA_CHECK_LAUNCH("cumsum_leaf_kernel");
      for (int b = 1; b < lv.count; ++b) {
        cumsum_level_kernel<Acc><<<ctx.blocks(lines * (lv.leaves >> b)), kThreads, 0, ctx.stream>>>(lines, lv, b, nodes);
        MG_CUDA_CHECK_LAUNCH("cumsum_level_kernel");
      }
      cumsum_scan_kernel<T, O><<<ctx.blocks(lines * lv.leaves), kThreads, 0, ctx.stream>>>(
          lines, size, inner, x_stride, p.kept, lv, data, nodes, out[0].data<O>());
      MG_CUDA_CHECK_LAUNCH("cumsum_scan_kernel");
      return;
    }
  }
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
