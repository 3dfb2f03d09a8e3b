#include "mixgrad/ops/sort.h"

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/error.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/core/shape.h"
#include "mixgrad/ops/arg_checks.h"
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/infer.h"
#include "mixgrad/ops/logical.h"
#include "mixgrad/ops/nonzero.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/register.h"

namespace mg {
namespace {

// argsort: any numeric dtype (bool has no order to speak of here), indices of x's shape.
InferResult infer_argsort(const Tensors& in, const OpAttrs&) {
  const Tensor& x = in[0];
  MG_CHECK(x.dtype() != DType::Bool, DTypeError, "argsort: expected a numeric tensor, got ", describe(x),
           "\n  hint: convert a mask with to(m, DType::U8) to sort it");
  return {{{x.shape(), DType::I64}}, x.dtype()};
}

}  // namespace

void register_sort_rules() { set_op_rule(OpId::argsort, {.infer = infer_argsort}); }

Tensor argsort(const Tensor& x, int64_t dim, bool descending) {
  check_defined("argsort", x);
  if (x.dim() == 0) {
    wrap_dim(dim, 1, "argsort");
    return zeros({}, {.dtype = DType::I64, .device = x.device()});
  }
  const int64_t d = wrap_dim(dim, x.dim(), "argsort");
  const int64_t last = x.dim() - 1;
  const OpAttrs a{.mode = descending ? 1 : 0};
  if (d == last) return dispatch1(OpId::argsort, {x}, a);
  // The op sorts the last dim: move `d` there and the indices back.
  return contiguous(transpose(dispatch1(OpId::argsort, {transpose(x, d, last)}, a), d, last));
}

std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending) {
  const Tensor indices = argsort(x, dim, descending);
  if (x.dim() == 0) return {x.clone(), indices};
  return {gather(x, dim, indices), indices};
}

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest) {
  check_defined("topk", x);
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "topk");
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  MG_CHECK(k >= 0 && k <= n, Error, "topk: k (", k, ") must be in [0, ", n, "], the size of dim ", dim, " of ",
           describe(x));
  if (x.dim() == 0) return {x.clone(), zeros({}, {.dtype = DType::I64, .device = x.device()})};
  const Tensor indices = contiguous(narrow(argsort(x, d, largest), d, 0, k));
  return {gather(x, d, indices), indices};
}

namespace {

// The element at sorted position `position` (i64, x's shape with dim d of size 1) of each slice
// along d: (values, indices), d squeezed unless keepdim.
std::pair<Tensor, Tensor> at_sorted_position(const Tensor& x, int64_t d, const Tensor& position, bool keepdim) {
  Tensor indices = gather(argsort(x, d), d, position);
  Tensor values = gather(x, d, indices);
  if (!keepdim) {
    indices = squeeze(indices, d);
    values = squeeze(values, d);
  }
  return {values, indices};
}

// The slices along d are non-empty, as PyTorch requires; a 0-d x counts as one element.
int64_t checked_slice_dim(const char* op, const Tensor& x, int64_t dim) {
  check_defined(op, x);
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), op);
  MG_CHECK(x.dim() == 0 || x.size(d) > 0, ShapeError, op, ": dim ", dim, " of ", describe(x),
           " is empty: there is no element to pick");
  return d;
}

// median (skip_nan false) and nanmedian along one dim: the lower median's sorted position per
// slice. NaN sorts last, so with c NaN in a slice of n the first NaN is at n - c and the lower
// median of the others at (n - c - 1) / 2 (at (n - 1) / 2 when all are NaN: a NaN either way).
std::pair<Tensor, Tensor> median_along(const char* op, const Tensor& x, int64_t dim, bool keepdim, bool skip_nan) {
  const int64_t d = checked_slice_dim(op, x, dim);
  if (x.dim() == 0) {
    auto [v, i] = median_along(op, reshape(x, {1}), 0, true, skip_nan);
    return {reshape(v, {}), reshape(i, {})};
  }
  const int64_t n = x.size(d);
  const Tensor nan_count = sum(isnan(x), {d}, /*keepdim=*/true);  // i64
  const Tensor others = static_cast<double>(n) - nan_count;
  const Tensor middle = full_like(nan_count, static_cast<double>((n - 1) / 2));
  const Tensor zero = zeros_like(nan_count);
  const Tensor position = skip_nan ? where(gt(others, zero), floor_divide(others - 1.0, 2.0), middle)
                                   : where(gt(nan_count, zero), others, middle);
  return at_sorted_position(x, d, position, keepdim);
}

// The median of every element: the value from the sort; when recorded, the gradient split evenly
// among the elements equal to it (or the NaN ones), through max over just those elements (max,
// not amax: it splits a NaN result's gradient among the NaN elements).
Tensor median_of_all(const char* op, const Tensor& x, bool skip_nan) {
  check_defined(op, x);
  if (x.numel() == 0) {
    MG_CHECK(is_floating(x.dtype()), Error, op, ": ", describe(x), " is empty: an integer median has no NaN to return");
    const Tensor nan = full({}, NAN, {.dtype = x.dtype(), .device = x.device()});
    // recorded, NaN + 0 * sum(x) keeps x in the graph (its gradient is empty), as PyTorch's
    return GradMode::is_enabled() && x.requires_grad() ? nan + sum(x) * 0.0 : nan;
  }
  const Tensor flat = reshape(x, {-1});
  const Tensor m = median_along(op, flat.detach(), 0, false, skip_nan).first;
  if (!(GradMode::is_enabled() && x.requires_grad())) return m;
  const Tensor tied = logical_or(eq(flat, m), logical_and(isnan(flat), isnan(m)));
  return max(masked_select(flat, tied));
}

}  // namespace

std::pair<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim, bool keepdim) {
  const int64_t d = checked_slice_dim("kthvalue", x, dim);
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  MG_CHECK(k >= 1 && k <= n, Error, "kthvalue: k (", k, ") must be in [1, ", n, "], the size of dim ", dim, " of ",
           describe(x));
  if (x.dim() == 0) return {x.clone(), zeros({}, {.dtype = DType::I64, .device = x.device()})};
  Shape one = x.shape();
  one[std::size_t(d)] = 1;
  return at_sorted_position(x, d, full(one, static_cast<double>(k - 1), {.dtype = DType::I64, .device = x.device()}),
                            keepdim);
}

std::pair<Tensor, Tensor> median(const Tensor& x, int64_t dim, bool keepdim) {
  return median_along("median", x, dim, keepdim, /*skip_nan=*/false);
}
std::pair<Tensor, Tensor> nanmedian(const Tensor& x, int64_t dim, bool keepdim) {
  return median_along("nanmedian", x, dim, keepdim, /*skip_nan=*/true);
}
Tensor median(const Tensor& x) { return median_of_all("median", x, /*skip_nan=*/false); }
Tensor nanmedian(const Tensor& x) { return median_of_all("nanmedian", x, /*skip_nan=*/true); }

}  // namespace mg
