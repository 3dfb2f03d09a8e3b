// Helpers shared by the reduction ops (ops/reduce.cpp, ops/reduce_more.cpp).
#pragma once
#include <vector>

#include "mixgrad/core/tensor.h"
#include "mixgrad/ops/op.h"

namespace mg {

// Canonical attrs for a reduction of x over `dims` (empty = all).
OpAttrs reduce_attrs(const char* op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim);
// Broadcasts a reduced gradient back over the input shape.
Tensor expand_reduced(const Tensor& g, const Shape& input_shape, const std::vector<int64_t>& dims, bool keepdim);
// Number of elements each output of the reduction covers.
int64_t reduced_count(const Shape& shape, const std::vector<int64_t>& dims);
// Rules of the remaining reductions (prod, amax, amin, max_dim, ..., cumsum).
void register_reduce_rules_extra();

}  // namespace mg
