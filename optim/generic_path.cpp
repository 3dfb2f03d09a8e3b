// The path switch and its test hook (optim/generic_path.h).
#include "mixgrad/optim/generic_path.h"

#include "mixgrad/core/error.h"
#include "mixgrad/ops/ops.h"

namespace mg::optim {
namespace {
thread_local int force_depth = 0;
}  // namespace

bool use_generic_path(const Tensor& t) { return force_depth > 0 || (t.defined() && !t.device().is_cpu()); }

bool use_generic_path(const Tensors& tensors) {
  if (force_depth > 0) return true;
  for (const Tensor& t : tensors) {
    if (t.defined() && !t.device().is_cpu()) return true;
  }
  return false;
}

ForceGenericPathGuard::ForceGenericPathGuard() { ++force_depth; }
ForceGenericPathGuard::~ForceGenericPathGuard() { --force_depth; }

Tensor aten_lerp(const Tensor& a, const Tensor& b, double w) {
  return w < 0.5 ? a + (b - a) * w : b - (b - a) * (1.0 - w);
}

AdamLikeStart adam_like_start(const Tensor& param, const Tensor& grad, Tensor m, Tensor v, DType opmath, bool maximize,
                              double weight_decay, bool decoupled, double lr, double beta1, double beta2) {
  Tensor p = to(param, opmath);
  Tensor g = to(grad, opmath);
  if (maximize) g = neg(g);
  if (weight_decay != 0.0) {
    if (decoupled) p.mul_(1.0 - lr * weight_decay);
    else g = add(g, p, weight_decay);
  }
  m.copy_(aten_lerp(m, g, 1.0 - beta1));
  v.mul_(beta2).add_(mul(g * (1.0 - beta2), g));
  return {p, g};
}

Device common_device(const Tensors& tensors, const char* who, const char* what) {
  const Tensor* first = nullptr;
  std::size_t first_i = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (!t.defined()) continue;
    if (!first) {
      first = &t;
      first_i = i;
      continue;
    }
    MG_CHECK(t.device() == first->device(), DeviceError, who, ": ", what, " ", i, " is on ", t.device().str(),
             " but ", what, " ", first_i, " is on ", first->device().str(),
             "\n  hint: move the whole model to one device before training");
  }
  return first ? first->device() : Device::cpu();
}

}  // namespace mg::optim
