// A kernel adapter for backends whose kernel of an op is written for NCHW outputs only (today the
// CUDA batch norm and pooling kernels): the op's infer rule may allocate an output channels-last
// (ops/layout.h); the adapter runs the kernel into a dense NCHW temporary and copies it into that
// output, so the layout the dispatcher promised holds on every device. Outputs already contiguous
// are passed through untouched (no copy). The CPU kernels are layout-aware and do not use it.
//
//   register_kernel(OpId::batch_norm, DeviceType::CUDA, d, nchw_outputs<batch_norm_kernel<T>>);
#pragma once
#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/ops.h"

namespace mg {

template <KernelFn kKernel>
void nchw_outputs(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  Tensors dense = out;
  bool staged = false;
  for (Tensor& t : dense) {
    if (t.defined() && !t.is_contiguous()) {
      t = empty(t.shape(), {.dtype = t.dtype(), .device = t.device()});
      staged = true;
    }
  }
  kKernel(in, dense, attrs);
  if (!staged) return;
  NoGradGuard no_grad;
  for (std::size_t j = 0; j < out.size(); ++j) {
    if (!dense[j].is_same(out[j])) out[j].copy_(dense[j]);
  }
}

}  // namespace mg
