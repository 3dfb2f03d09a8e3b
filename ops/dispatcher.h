// The one dispatcher (DESIGN §2). Every op's public function is a one-liner into dispatch(),
// which in order:
//   1. applies the autocast policy to the floating inputs (through the hook amp/ installs; only
//      while autocast is enabled),
//   2. checks devices and infers output shapes/dtypes (the same errors on every device),
//   3. allocates outputs and calls the kernel registered for (op, device, dtype) — or builds the
//      view for view ops,
//   4. records an autograd node when grad mode is on and an input requires grad.
//
//   mg::Tensor y = mg::dispatch(mg::OpId::exp, {x})[0];
#pragma once
#include "mixgrad/core/tensor.h"
#include "mixgrad/ops/op.h"

namespace mg {

// Runs `op` out of place and returns its outputs.
Tensors dispatch(OpId op, Tensors inputs, const OpAttrs& attrs = {});
// Convenience for single-output ops.
Tensor dispatch1(OpId op, Tensors inputs, const OpAttrs& attrs = {});
// Runs `op` with inputs {self, others...} and writes the result into `self` (add_, mul_, fill_,
// copy_, ...). The result must have self's shape; it is cast to self's dtype. Under autograd the
// tensor's history is rebased onto the new node; a leaf that requires grad or a view is refused.
void dispatch_inplace(OpId op, const Tensor& self, const Tensors& others, const OpAttrs& attrs = {});

// The autocast hook: the one function that applies autocast. It rewrites the floating `inputs`
// according to `policy` and the thread's autocast state for `device` (the device type the op runs
// on); `op` names the op in errors (banned ops). The dispatcher calls it with op_policy(op) for every op, and user-defined functions
// (ops/custom_function.h) with their declared policy. Installed by amp/; none by default.
using AutocastHook = void (*)(CastPolicy policy, const char* op, Tensors& inputs, DeviceType device);
void set_autocast_hook(AutocastHook hook);
// Runs the hook (when one is installed and autocast is enabled on this thread for the device type
// of the first defined input).
void apply_autocast(CastPolicy policy, const char* op, Tensors& inputs);

// Registers every op rule and CPU kernel (and the CUDA kernels when built with CUDA) exactly
// once. dispatch() calls it; calling it again is free.
void init();

}  // namespace mg
