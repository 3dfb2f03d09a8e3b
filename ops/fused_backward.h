// Whether an activation's backward may run its fused (grad, x) op: an ordinary backward (grad
// mode off; a recorded one, create_graph = true, builds the derivative from public ops, whose
// graph gives double backward) with a gradient of the saved tensor's shape and floating dtype.
// Shared by the activations' backward rules (ops/elementwise.cpp, ops/activation.cpp).
#pragma once
#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/tensor.h"

namespace mg {

inline bool fused_backward(const Tensor& g, const Tensor& saved) {
  return !GradMode::is_enabled() && is_floating(g.dtype()) && g.dtype() == saved.dtype() && g.shape() == saved.shape();
}

}  // namespace mg
