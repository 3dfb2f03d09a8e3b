// Shape/dtype inference helpers shared by the op groups. They produce the same error text on
// every device because they run before any kernel is chosen.
#pragma once
#include <optional>

#include "mixgrad/ops/op_rule.h"

namespace mg {

// Throws DTypeError naming `op` unless t is floating.
void check_floating(const char* op, const Tensor& t);
// Throws DTypeError unless a and b have the same dtype.
void check_same_dtype(const char* op, const Tensor& a, const Tensor& b);
// Throws DTypeError unless `index` is i64 or i32.
void check_index_dtype(const char* op, const Tensor& index);

// The output's layout follows the inputs (elementwise_layout, ops/layout.h).
// One output, same shape and dtype as input 0 (floating only / any dtype).
InferResult infer_unary_floating(const char* op, const Tensors& in);
InferResult infer_unary_any(const char* op, const Tensors& in);
// Broadcast shape of all inputs, all of one dtype; output dtype `out` (or the input dtype).
InferResult infer_broadcast(const char* op, const Tensors& in, std::optional<DType> out = std::nullopt);

// Reduction helpers: dims wrapped, sorted, deduplicated (empty -> all dims).
std::vector<int64_t> reduction_dims(const char* op, const std::vector<int64_t>& dims, int64_t ndim);
Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& dims, bool keepdim);

}  // namespace mg
