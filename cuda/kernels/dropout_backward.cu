// CUDA kernel of dropout_backward (f64/f32/f16/bf16), mirroring ops/cpu/norm_kernels.cpp:
// (grad, bool keep) -> grad * keep * (1 / (1 - p)), the product in opmath (acc_t) rounded once,
// so a dropped element is grad * 0 = +-0 as on the CPU. Dense inputs (strided ones are made
// contiguous first), one thread per element, grid-stride.
#include <cuda_runtime.h>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/half.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/kernels/launch.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/ops.h"

namespace mg::cuda {
namespace {

template <typename T>
__global__ void dropout_backward_dense_kernel(int64_t n, const T* __restrict__ g, const bool* __restrict__ keep,
                                              T* __restrict__ dx, acc_t<T> scale) {
  using A = acc_t<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    dx[i] = static_cast<T>(static_cast<A>(g[i]) * A(keep[i] ? 1 : 0) * scale);
  }
}

// in = (grad, keep [grad's shape] bool); out = (dx [grad's shape]); attrs.alpha = p
template <typename T>
void dropout_backward_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using A = acc_t<T>;
  NoGradGuard no_grad;  // the dense copies are not part of the graph
  const Tensor g = contiguous(in[0]), keep = contiguous(in[1]);
  const int64_t n = g.numel();
  if (n == 0) return;
  const LaunchContext ctx(g.device());
  const A scale = A(1.0 / (1.0 - a.alpha));  // as the CPU: the divide in double, then rounded to A
  dropout_backward_dense_kernel<T><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(
      n, static_cast<const T*>(g.data_ptr()), static_cast<const bool*>(keep.data_ptr()),
      static_cast<T*>(out[0].data_ptr()), scale);
  MG_CUDA_CHECK_LAUNCH("dropout_backward kernel");
}

}  // namespace

void register_dropout_backward_kernels() {
  constexpr DeviceType cuda = DeviceType::CUDA;
  register_kernel(OpId::dropout_backward, cuda, DType::F64, dropout_backward_kernel<double>);
  register_kernel(OpId::dropout_backward, cuda, DType::F32, dropout_backward_kernel<float>);
  register_kernel(OpId::dropout_backward, cuda, DType::F16, dropout_backward_kernel<Half>);
  register_kernel(OpId::dropout_backward, cuda, DType::BF16, dropout_backward_kernel<BFloat16>);
}

}  // namespace mg::cuda
