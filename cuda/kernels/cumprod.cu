// CUDA kernel of cumprod (ops/ops.h): the last dim of a contiguous input, one thread per line
// running fn::cumprod_line (the CPU's code, so the same products in the same order: the CPU's
// bits). A line is sequential: fine for many lines or short ones (a schedule of 1,000 steps),
// slow for one line of millions.
#include <cuda_runtime.h>

#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/kernels/launch.h"
#include "mixgrad/ops/cumprod_line.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/ops.h"

namespace mg::cuda {
namespace {

template <typename T>
__global__ void cumprod_lines_kernel(int64_t lines, int64_t n, const T* x, fn::cumprod_out_t<T>* out) {
  for (int64_t l = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; l < lines; l += int64_t(gridDim.x) * blockDim.x) {
    fn::cumprod_line<T>(x + l * n, out + l * n, n);
  }
}

template <typename T>
void cumprod_kernel(const Tensors& in, Tensors& out, const OpAttrs&) {
  const Tensor x = contiguous(in[0]);
  if (x.numel() == 0) return;
  const int64_t n = x.dim() == 0 ? 1 : x.size(-1), lines = x.numel() / n;
  const LaunchContext ctx(x.device());
  cumprod_lines_kernel<T><<<ctx.blocks(lines), kThreads, 0, ctx.stream>>>(
      lines, n, static_cast<const T*>(x.data_ptr()), static_cast<fn::cumprod_out_t<T>*>(out[0].data_ptr()));
  MG_CUDA_CHECK_LAUNCH("cumprod kernel");
}

}  // namespace

void register_cumprod_kernels() {
#define MG_REG_CUMPROD(E, n, T) register_kernel(OpId::cumprod, DeviceType::CUDA, DType::E, cumprod_kernel<T>);
  MG_FORALL_DTYPES(MG_REG_CUMPROD)
#undef MG_REG_CUMPROD
}

}  // namespace mg::cuda
