#include "mixgrad/ops/infer.h"

#include <algorithm>

#include "mixgrad/ops/layout.h"

namespace mg {

void check_floating(const char* op, const Tensor& t) {
  MG_CHECK(is_floating(t.dtype()), DTypeError, op,
           ": expected a floating tensor (f64, f32, f16, bf16), got ", describe(t));
}

void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  MG_CHECK(a.dtype() == b.dtype(), DTypeError, op, ": expected tensors of the same dtype, got ",
           describe(a), " and ", describe(b), "\n  hint: convert one with .to(",
           dtype_name(a.dtype()), ")");
}

void check_index_dtype(const char* op, const Tensor& index) {
  MG_CHECK(index.dtype() == DType::I64 || index.dtype() == DType::I32, DTypeError, op,
           ": expected an i64 or i32 index tensor, got ", describe(index));
}

InferResult infer_unary_floating(const char* op, const Tensors& in) {
  check_floating(op, in[0]);
  return {{{in[0].shape(), in[0].dtype(), elementwise_layout(in, in[0].shape())}}, in[0].dtype()};
}

InferResult infer_unary_any(const char*, const Tensors& in) {
  return {{{in[0].shape(), in[0].dtype(), elementwise_layout(in, in[0].shape())}}, in[0].dtype()};
}

InferResult infer_broadcast(const char* op, const Tensors& in, std::optional<DType> out) {
  Shape shape = in[0].shape();
  for (std::size_t i = 1; i < in.size(); ++i) {
    MG_CHECK(in[i].dtype() == in[0].dtype(), DTypeError, op,
             ": expected inputs of one dtype, got ", describe(in[0]), " and ", describe(in[i]));
    shape = broadcast_shapes(shape, in[i].shape(), op);
  }
  return {{{shape, out.value_or(in[0].dtype()), elementwise_layout(in, shape)}}, in[0].dtype()};
}

std::vector<int64_t> reduction_dims(const char* op, const std::vector<int64_t>& dims, int64_t ndim) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap_dim(d, ndim, op));
  std::sort(out.begin(), out.end());
  MG_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), IndexError, op,
           ": dim appears more than once in ", dims);
  // A 0-d tensor reduces over "dim 0" as if it were [1].
  if (ndim == 0) out.clear();
  return out;
}

Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < int64_t(shape.size()); ++d) {
    const bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!reduced) {
      out.push_back(shape[d]);
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return out;
}

}  // namespace mg
