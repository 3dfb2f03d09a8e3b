// The backward engine: runs the graph in reverse creation order (a node runs only after every
// gradient for it has arrived), accumulating into leaves' .grad, or returning gradients for
// chosen inputs (grad()). With create_graph the backward ops themselves are recorded, so the
// result can be differentiated again.
//
//   mg::Tensor g = mg::autograd::grad({loss}, {w}, {}, /*retain_graph=*/true, /*create_graph=*/true)[0];
//   mg::Tensor penalty = (g * g).sum();  penalty.backward();
#pragma once
#include <optional>

#include "mixgrad/core/tensor.h"

namespace mg::autograd {

// Accumulates d(outputs)/d(leaf) into every reachable leaf's .grad. `grad_outputs[i]` may be
// undefined for a one-element output (it defaults to ones).
void backward(const Tensors& outputs, const Tensors& grad_outputs = {}, bool retain_graph = false,
              bool create_graph = false);

// Returns d(outputs)/d(inputs) without touching .grad. retain_graph defaults to create_graph.
// An input not reachable from the outputs gives an error unless allow_unused, then undefined.
Tensors grad(const Tensors& outputs, const Tensors& inputs, const Tensors& grad_outputs = {},
             std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
             bool allow_unused = false);

// Whether the backward pass running on this thread accumulates into .grad (backward) rather than
// returning gradients (grad); true outside any pass. Nodes that run a nested backward of their own
// (ops/checkpoint.cpp) read it.
bool pass_accumulates_grad();

}  // namespace mg::autograd
