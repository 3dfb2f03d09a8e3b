// The plan of an elementwise loop over an output shape, shared by the CPU loops (ops/cpu/loops.h)
// and the CUDA launchers: operands broadcast to the output shape (zero strides), then adjacent
// dims that are contiguous for every operand merged and size-1 dims dropped, so dense tensors
// become one flat dim. Strides in the plan are in bytes, since operands may differ in dtype.
#pragma once
#include <array>
#include <cstdint>

#include "mixgrad/core/tensor.h"

namespace mg {

// Strides (in elements) of `t` broadcast to `out_shape` (0 along broadcast dims).
Strides broadcast_strides(const Tensor& t, const Shape& out_shape);

template <int N>
struct LoopPlan {
  Shape shape;                              // after merging dims
  std::array<Strides, N> strides;           // in bytes
};

// Merges adjacent dims that are contiguous for all operands and drops size-1 dims.
template <int N>
LoopPlan<N> make_plan(const Shape& shape, const std::array<Strides, N>& elem_strides,
                      const std::array<int64_t, N>& elem_sizes) {
  LoopPlan<N> plan;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !plan.shape.empty();
    for (int k = 0; k < N && merge; ++k) {
      merge = plan.strides[k].back() == elem_strides[k][d] * elem_sizes[k] * shape[d];
    }
    if (merge) {
      plan.shape.back() *= shape[d];
      for (int k = 0; k < N; ++k) plan.strides[k].back() = elem_strides[k][d] * elem_sizes[k];
    } else {
      plan.shape.push_back(shape[d]);
      for (int k = 0; k < N; ++k) plan.strides[k].push_back(elem_strides[k][d] * elem_sizes[k]);
    }
  }
  if (plan.shape.empty()) {
    plan.shape.push_back(1);
    for (int k = 0; k < N; ++k) plan.strides[k].push_back(elem_sizes[k]);
  }
  return plan;
}

}  // namespace mg
