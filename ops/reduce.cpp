// Reductions over any set of dims with keepdim. Dims are normalised (wrapped, sorted, unique) by
// the public functions before dispatch, so kernels and backward rules see canonical attrs.dims.
// f16/bf16 inputs accumulate in f32 and round once (DESIGN §3).
#include <cmath>

#include "mixgrad/ops/backward_ctx.h"
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/infer.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/reduce_common.h"
#include "mixgrad/ops/register.h"

namespace mg {

OpAttrs reduce_attrs(const char* op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  MG_CHECK(x.defined(), Error, op, ": undefined input tensor");
  return {.dims = reduction_dims(op, dims, x.dim()), .keepdim = keepdim};
}

Tensor expand_reduced(const Tensor& g, const Shape& input_shape, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor t = g;
  if (!keepdim) {
    Shape kept = reduced_shape(input_shape, dims, /*keepdim=*/true);
    t = reshape(t, kept);
  }
  return expand(t, input_shape);
}

int64_t reduced_count(const Shape& shape, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= shape[d];
  return n;
}

namespace {

DType sum_dtype(DType t) { return is_floating(t) ? t : DType::I64; }

InferResult infer_sum(const Tensors& in, const OpAttrs& a) {
  return {{{reduced_shape(in[0].shape(), a.dims, a.keepdim), sum_dtype(in[0].dtype())}}, in[0].dtype()};
}
InferResult infer_mean(const Tensors& in, const OpAttrs& a) {
  check_floating("mean", in[0]);
  return {{{reduced_shape(in[0].shape(), a.dims, a.keepdim), in[0].dtype()}}, in[0].dtype()};
}

// d sum = 1 for every reduced element
Tensors sum_bw(const BackwardCtx& c, const Tensors& g) {
  return {expand_reduced(g[0], c.input_shape(0), c.attrs().dims, c.attrs().keepdim)};
}
// d mean = 1 / N
Tensors mean_bw(const BackwardCtx& c, const Tensors& g) {
  const double n = double(reduced_count(c.input_shape(0), c.attrs().dims));
  return {expand_reduced(g[0] / n, c.input_shape(0), c.attrs().dims, c.attrs().keepdim)};
}

}  // namespace

void register_reduce_rules() {
  set_op_rule(OpId::sum, {.infer = infer_sum, .backward = sum_bw});
  set_op_rule(OpId::mean, {.infer = infer_mean, .backward = mean_bw});
  register_reduce_rules_extra();
}

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return dispatch1(OpId::sum, {x}, reduce_attrs("sum", x, dims, keepdim));
}
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return dispatch1(OpId::mean, {x}, reduce_attrs("mean", x, dims, keepdim));
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  const int64_t lead = x.dim() - int64_t(shape.size());
  MG_CHECK(lead >= 0, ShapeError, "sum_to: cannot sum ", describe(x), " to more dims: ", shape);
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < lead) {
      dims.push_back(d);
    } else if (shape[d - lead] == 1 && x.shape()[d] != 1) {
      dims.push_back(d);
    } else {
      MG_CHECK(shape[d - lead] == x.shape()[d], ShapeError, "sum_to: cannot sum ", describe(x),
               " to shape ", shape);
    }
  }
  if (dims.empty()) return reshape(x, shape);
  return reshape(sum(x, dims, /*keepdim=*/true), shape);
}

}  // namespace mg
