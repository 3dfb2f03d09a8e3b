#include "mixgrad/ops/quantile.h"

#include <cmath>
#include <vector>

#include "mixgrad/core/error.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/core/shape.h"
#include "mixgrad/ops/arg_checks.h"
#include "mixgrad/ops/logical.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/sort.h"

namespace mg {
namespace {

// a + (b - a) w, in PyTorch's lerp form (from the nearer end, so w = 0 and w = 1 give a and b).
Tensor lerp(const Tensor& a, const Tensor& b, const Tensor& w) {
  return where(lt(w, scalar_like(0.5, w)), a + w * (b - a), b - (b - a) * (1.0 - w));
}

struct Slices {
  Tensor sorted;     // x (in the compute dtype) sorted along d, NaN last
  Tensor nan_count;  // i64, keepdim shape
  int64_t d = 0;
  int64_t n = 0;
};

// One q over prepared slices: the ranks, then the interpolation; keepdim shape.
Tensor quantile_of(const Slices& s, double q, bool skip_nan, QuantileInterpolation how) {
  // Ranks in the compute dtype (q rounded to it first), as PyTorch's. A slice that must give NaN
  // ranks its last element: a NaN, as the sort puts them last.
  const Tensor nans = to(s.nan_count, s.sorted.dtype());
  const Tensor last = full_like(nans, double(s.n - 1));
  const Tensor zero = zeros_like(nans);
  const Tensor others = double(s.n) - nans;
  const Tensor rank = skip_nan ? where(gt(others, zero), (others - 1.0) * q, last) : where(gt(nans, zero), last, last * q);
  const auto at = [&](const Tensor& r) { return gather(s.sorted, s.d, to(r, DType::I64)); };
  switch (how) {
    case QuantileInterpolation::Lower: return at(floor(rank));
    case QuantileInterpolation::Higher: return at(ceil(rank));
    case QuantileInterpolation::Nearest: return at(round(rank));
    case QuantileInterpolation::Midpoint: return lerp(at(floor(rank)), at(ceil(rank)), full_like(rank, 0.5));
    case QuantileInterpolation::Linear: break;
  }
  const Tensor below = floor(rank);
  return lerp(at(below), at(ceil(rank)), rank - below);
}

Tensor quantile_impl(const char* op, const Tensor& x, const std::vector<double>& qs, bool q_is_tensor,
                     std::optional<int64_t> dim, bool keepdim, QuantileInterpolation how, bool skip_nan) {
  check_defined(op, x);
  MG_CHECK(is_floating(x.dtype()), DTypeError, op, ": expected a floating tensor, got ", describe(x),
           "\n  hint: convert it with to(x, DType::F32)");
  MG_CHECK(x.numel() > 0, ShapeError, op, ": the input ", describe(x), " is empty");
  for (double q : qs) MG_CHECK(q >= 0.0 && q <= 1.0, Error, op, ": q must be in [0, 1], got ", q);
  const DType compute = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  const Tensor xc = x.dtype() == compute ? x : to(x, compute);
  Slices s;
  Tensor data = xc;
  if (dim) {
    s.d = wrap_dim(*dim, std::max<int64_t>(x.dim(), 1), op);
    if (x.dim() == 0) data = reshape(xc, {1});
  } else {
    data = reshape(xc, {-1});
  }
  s.n = data.size(s.d);
  if (dim) MG_CHECK(s.n > 0, ShapeError, op, ": dim ", *dim, " of ", describe(x), " is empty");
  s.sorted = sort(data, s.d).first;
  s.nan_count = sum(isnan(data), {s.d}, /*keepdim=*/true);
  // The result's shape: without dim, every dim of size 1 with keepdim, else 0-d; with dim, x's
  // shape with dim kept (size 1) or dropped.
  Shape out_shape;
  if (!dim) {
    if (keepdim) out_shape = Shape(std::size_t(x.dim()), 1);
  } else if (x.dim() > 0) {
    out_shape = x.shape();
    if (keepdim) out_shape[std::size_t(s.d)] = 1; else out_shape.erase(out_shape.begin() + s.d);
  }
  Tensors results;
  for (double q : qs) {
    Tensor r = reshape(quantile_of(s, q, skip_nan, how), out_shape);
    results.push_back(r.dtype() == x.dtype() ? r : to(r, x.dtype()));
  }
  return q_is_tensor ? stack(results, 0) : results[0];
}

std::vector<double> q_values(const char* op, const Tensor& q) {
  MG_CHECK(q.defined(), Error, op, ": got an undefined q");
  MG_CHECK(q.dim() <= 1, ShapeError, op, ": q must be 0-d or 1-D, got ", describe(q));
  MG_CHECK(is_floating(q.dtype()), DTypeError, op, ": q must be a floating tensor, got ", describe(q));
  const Tensor host = contiguous(to(q, DType::F64).to(Device::cpu()));  // a strided q view read in order
  return std::vector<double>(host.data<double>(), host.data<double>() + host.numel());
}

Tensor quantile_tensor_q(const char* op, const Tensor& x, const Tensor& q, std::optional<int64_t> dim, bool keepdim,
                         QuantileInterpolation how, bool skip_nan) {
  const std::vector<double> qs = q_values(op, q);
  if (q.dim() == 0) return quantile_impl(op, x, qs, false, dim, keepdim, how, skip_nan);
  if (qs.empty()) {  // no q: an empty leading dim before the shape one q would give
    const Tensor one = quantile_impl(op, x, {0.5}, false, dim, keepdim, how, skip_nan);
    return narrow(unsqueeze(one, 0), 0, 0, 0);
  }
  return quantile_impl(op, x, qs, true, dim, keepdim, how, skip_nan);
}

}  // namespace

Tensor quantile(const Tensor& x, double q, std::optional<int64_t> dim, bool keepdim, QuantileInterpolation how) {
  return quantile_impl("quantile", x, {q}, false, dim, keepdim, how, /*skip_nan=*/false);
}
Tensor quantile(const Tensor& x, const Tensor& q, std::optional<int64_t> dim, bool keepdim, QuantileInterpolation how) {
  return quantile_tensor_q("quantile", x, q, dim, keepdim, how, /*skip_nan=*/false);
}
Tensor nanquantile(const Tensor& x, double q, std::optional<int64_t> dim, bool keepdim, QuantileInterpolation how) {
  return quantile_impl("nanquantile", x, {q}, false, dim, keepdim, how, /*skip_nan=*/true);
}
Tensor nanquantile(const Tensor& x, const Tensor& q, std::optional<int64_t> dim, bool keepdim,
                   QuantileInterpolation how) {
  return quantile_tensor_q("nanquantile", x, q, dim, keepdim, how, /*skip_nan=*/true);
}

}  // namespace mg
