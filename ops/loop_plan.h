// The plan of an elementwise loop over an output shape, shared by the CPU loops (ops/cpu/loops.h)
// and the CUDA launchers: operands broadcast to the output shape (zero strides), then adjacent
// dims that are contiguous for every operand merged and size-1 dims dropped, so dense tensors
// become one flat dim. Elementwise loops first put the dims in the output's memory order
// (make_elementwise_plan), so channels-last tensors are dense too. Strides in the plan are in bytes, since operands may differ in dtype.
#pragma once
#include <algorithm>
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

// make_plan over the dims reordered so that operand 0 (the output) is walked in memory order:
// dims sorted by its strides, largest first (stable, so a row-major output keeps today's order).
// A channels-last output [N, C, H, W] is walked N, H, W, C and, with inputs of the same layout,
// merges into one dense run. For elementwise loops only, where the visiting order is free.
template <int N>
LoopPlan<N> make_elementwise_plan(const Shape& shape, const std::array<Strides, N>& elem_strides,
                                  const std::array<int64_t, N>& elem_sizes) {
  const std::size_t nd = shape.size();
  bool ordered = true;
  for (std::size_t d = 1; d < nd && ordered; ++d) ordered = elem_strides[0][d - 1] >= elem_strides[0][d];
  if (ordered) return make_plan<N>(shape, elem_strides, elem_sizes);
  std::vector<std::size_t> perm(nd);
  for (std::size_t d = 0; d < nd; ++d) perm[d] = d;
  std::stable_sort(perm.begin(), perm.end(),
                   [&](std::size_t a, std::size_t b) { return elem_strides[0][a] > elem_strides[0][b]; });
  Shape pshape(nd);
  std::array<Strides, N> pstrides;
  for (int k = 0; k < N; ++k) pstrides[k].resize(nd);
  for (std::size_t d = 0; d < nd; ++d) {
    pshape[d] = shape[perm[d]];
    for (int k = 0; k < N; ++k) pstrides[k][d] = elem_strides[k][perm[d]];
  }
  return make_plan<N>(pshape, pstrides, elem_sizes);
}

}  // namespace mg
