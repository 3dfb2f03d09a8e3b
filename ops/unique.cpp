#include "mixgrad/ops/unique.h"

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/error.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/core/shape.h"
#include "mixgrad/ops/logical.h"
#include "mixgrad/ops/arg_checks.h"
#include "mixgrad/ops/nonzero.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/sort.h"

namespace mg {
namespace {

// The runs of equal neighbours along dim 0 of `lines` (n >= 1): 1-D values, or [n, m] slices
// equal when all their elements are. Returns the first line of each run, the run of each line
// (`group`, i64) and the run lengths.
UniqueResult runs(const Tensor& lines, bool want_group, bool want_counts) {
  const int64_t n = lines.size(0);
  Tensor differs = ne(slice(lines, 0, 1, n), slice(lines, 0, 0, n - 1));
  if (lines.dim() == 2) differs = any(differs, {1});
  const Tensor first = ones({1}, {.dtype = DType::Bool, .device = lines.device()});
  const Tensor starts = cat({first, differs}, 0);  // bool [n]
  UniqueResult r;
  const Tensor begin = reshape(nonzero(starts), {-1});
  r.values = index_select(lines, 0, begin);
  if (want_group) r.inverse = cumsum(starts, 0) - 1.0;
  if (want_counts) {
    const Tensor end = cat({slice(begin, 0, 1, begin.size(0)), full({1}, double(n), {.dtype = DType::I64, .device = lines.device()})}, 0);
    r.counts = end - begin;
  }
  return r;
}

UniqueResult unique_impl(const char* op, const Tensor& x, bool sorted, bool return_inverse, bool return_counts) {
  check_defined(op, x);
  NoGradGuard no_grad;  // not differentiable, as PyTorch's
  // bool has no sort of its own: as u8 and back
  const bool is_bool = x.dtype() == DType::Bool;
  const Tensor flat = reshape(is_bool ? to(x, DType::U8) : x, {-1});
  const int64_t n = flat.size(0);
  UniqueResult r;
  if (n == 0) {
    r.values = zeros({0}, {.dtype = x.dtype(), .device = x.device()});
    if (return_inverse) r.inverse = zeros(x.shape(), {.dtype = DType::I64, .device = x.device()});
    if (return_counts) r.counts = zeros({0}, {.dtype = DType::I64, .device = x.device()});
    return r;
  }
  Tensor order;
  const Tensor line = sorted ? (order = argsort(flat), index_select(flat, 0, order)) : flat;
  r = runs(line, return_inverse, return_counts);
  if (is_bool) r.values = to(r.values, DType::Bool);
  if (return_inverse) {
    // group[i] belongs to the element at order[i]: undo the sort with the inverse permutation
    if (sorted) r.inverse = index_select(r.inverse, 0, argsort(order));
    r.inverse = reshape(r.inverse, x.shape());
  }
  return r;
}

// The slices of x along `dim`, as [n, m] lines (m = elements per slice), sorted lexicographically
// when `sorted`: one stable argsort per slice position, the last first, so earlier positions
// decide and equal slices keep their order.
UniqueResult unique_dim_impl(const char* op, const Tensor& x, int64_t dim, bool sorted, bool return_inverse,
                             bool return_counts) {
  check_defined(op, x);
  MG_CHECK(x.dim() > 0, ShapeError, op, ": a 0-d tensor has no dim ", dim, " to take slices along");
  const int64_t d = wrap_dim(dim, x.dim(), op);
  NoGradGuard no_grad;
  const bool is_bool = x.dtype() == DType::Bool;
  // dim first, the others in their order (the order in which slices are compared)
  std::vector<int64_t> perm{d}, back(size_t(x.dim()));
  for (int64_t i = 0; i < x.dim(); ++i)
    if (i != d) perm.push_back(i);
  for (size_t i = 0; i < perm.size(); ++i) back[size_t(perm[i])] = int64_t(i);
  const Tensor moved = permute(is_bool ? to(x, DType::U8) : x, perm);
  const int64_t n = x.size(d);
  const Shape slice_shape(moved.shape().begin() + 1, moved.shape().end());
  int64_t m = 1;
  for (const int64_t s : slice_shape) m *= s;
  MG_CHECK(n == 0 || m > 0, ShapeError, op, ": the slices of ", describe(x), " along dim ", dim,
           " are empty: with nothing to compare there is no distinct slice");
  UniqueResult r;
  if (n == 0) {
    r.values = contiguous(x);
    if (return_inverse) r.inverse = zeros({0}, {.dtype = DType::I64, .device = x.device()});
    if (return_counts) r.counts = zeros({0}, {.dtype = DType::I64, .device = x.device()});
    return r;
  }
  const Tensor lines = reshape(contiguous(moved), {n, m});
  Tensor order, ordered = lines;
  if (sorted) {
    order = arange(0, n, 1, {.dtype = DType::I64, .device = x.device()});
    for (int64_t j = m - 1; j >= 0; --j) order = index_select(order, 0, argsort(index_select(select(lines, 1, j), 0, order)));
    ordered = index_select(lines, 0, order);
  }
  r = runs(ordered, return_inverse, return_counts);
  Shape value_shape{r.values.size(0)};
  value_shape.insert(value_shape.end(), slice_shape.begin(), slice_shape.end());
  r.values = contiguous(permute(reshape(r.values, value_shape), back));
  if (is_bool) r.values = to(r.values, DType::Bool);
  if (return_inverse && sorted) r.inverse = index_select(r.inverse, 0, argsort(order));
  return r;
}

}  // namespace

UniqueResult unique_dim(const Tensor& x, int64_t dim, bool return_inverse, bool return_counts) {
  return unique_dim_impl("unique_dim", x, dim, /*sorted=*/true, return_inverse, return_counts);
}
UniqueResult unique_dim_consecutive(const Tensor& x, int64_t dim, bool return_inverse, bool return_counts) {
  return unique_dim_impl("unique_dim_consecutive", x, dim, /*sorted=*/false, return_inverse, return_counts);
}

UniqueResult unique(const Tensor& x, bool return_inverse, bool return_counts) {
  return unique_impl("unique", x, /*sorted=*/true, return_inverse, return_counts);
}
UniqueResult unique_consecutive(const Tensor& x, bool return_inverse, bool return_counts) {
  return unique_impl("unique_consecutive", x, /*sorted=*/false, return_inverse, return_counts);
}

}  // namespace mg
