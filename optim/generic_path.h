// Which code path an optimizer, clipping or unscale pass takes for a set of tensors: the CPU's
// fused multi-tensor loops over raw pointers (optim/multi_tensor.h, optim/functors.h), or the
// device-generic path written with public ops (elementwise ops and reductions), which runs on
// every device whose kernels are registered — CUDA today.
//
// Decision: until the fused CUDA multi-tensor kernels exist (the next CUDA issue), a tensor that
// is not on the CPU takes the generic path: one op launch per operation per tensor, state in
// opmath (f32, f64 for f64), each op rounding to opmath once; the fused path keeps every
// intermediate in registers and rounds to the parameter's dtype once at the end. The two agree to
// a few f32 ulps (the fused loop may contract a*b+c into one FMA; the ops round the product
// first). Because the generic path is device-generic it is tested on the CPU: a test forces it
// for CPU tensors with ForceGenericPathGuard and compares it with the fused path.
//
//   { mg::optim::ForceGenericPathGuard force;  opt.step(); }   // CPU tensors, generic path
#pragma once
#include "mixgrad/core/tensor.h"

namespace mg::optim {

// True when any defined tensor of `tensors` is not on the CPU, or while a ForceGenericPathGuard
// lives on this thread.
bool use_generic_path(const Tensors& tensors);
bool use_generic_path(const Tensor& t);

// Test hook: while one lives (on this thread; guards nest), CPU tensors take the generic path too.
class ForceGenericPathGuard {
 public:
  ForceGenericPathGuard();
  ~ForceGenericPathGuard();
  ForceGenericPathGuard(const ForceGenericPathGuard&) = delete;
  ForceGenericPathGuard& operator=(const ForceGenericPathGuard&) = delete;
};

// fn::aten_lerp with ops (a + w (b - a) for w < 0.5, else b - (b - a)(1 - w)): PyTorch 2.x's
// exp_avg.lerp_(g, w), for the generic path of the optimizers that use it.
Tensor aten_lerp(const Tensor& a, const Tensor& b, double w);

// The generic path's start of an Adam-like step (NAdam, RAdam): the parameter and gradient in
// opmath, the gradient negated to maximize, weight decay applied (decoupled: p *= 1 - lr *
// weight_decay; else g += weight_decay * p), then m = aten_lerp(m, g, 1 - beta1) and
// v = beta2 v + (1 - beta2) g^2 in place. Returns {p, g} (p is param itself when no conversion
// was needed; the caller copies it back otherwise). Call it under NoGradGuard.
struct AdamLikeStart {
  Tensor p, g;
};
AdamLikeStart adam_like_start(const Tensor& param, const Tensor& grad, Tensor m, Tensor v, DType opmath, bool maximize,
                              double weight_decay, bool decoupled, double lr, double beta1, double beta2);

// Throws DeviceError "<who>: <what> <i> is on <dev> but <what> 0 is on <dev0>" unless every
// defined tensor is on one device; returns that device (the CPU when none is defined).
Device common_device(const Tensors& tensors, const char* who, const char* what);

}  // namespace mg::optim
