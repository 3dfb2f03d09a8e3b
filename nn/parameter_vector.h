// torch.nn.utils.parameters_to_vector / vector_to_parameters: every parameter flattened into one
// vector and back (second-order methods, weight averaging, hypernetworks).
//
//   mg::Tensor v = nn::parameters_to_vector(model.parameters());     // [total numel]
//   nn::vector_to_parameters(v * 0.5, model.parameters());
#pragma once
#include "mixgrad/core/tensor.h"

namespace mg::nn {

// The parameters flattened and concatenated in order: one 1-D tensor (a copy), differentiable.
// They must share one device and dtype.
Tensor parameters_to_vector(const Tensors& params);

// Copies consecutive slices of vec (1-D, as many elements as the parameters together) into the
// parameters, in place and without recording a gradient, converting to each parameter's dtype.
// Unlike PyTorch, which makes each parameter a view of vec, the parameters keep their own memory
// (an optimizer's state and a captured CUDA graph stay attached to them).
void vector_to_parameters(const Tensor& vec, const Tensors& params);

}  // namespace mg::nn
