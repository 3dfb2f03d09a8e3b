#include "mixgrad/ops/logical.h"

#include <cmath>
#include <limits>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/error.h"
#include "mixgrad/ops/arg_checks.h"
#include "mixgrad/ops/bitwise.h"
#include "mixgrad/ops/ops.h"

namespace mg {
namespace {

// The truth of each element: x itself for bool, x != 0 otherwise (NaN is true, as in C and PyTorch).
Tensor truth(const Tensor& x) { return x.dtype() == DType::Bool ? x : ne(x, scalar_like(0.0, x)); }

// A bool tensor of x's shape and device filled with `value` (the tests' answer for integer dtypes).
Tensor constant_mask(const Tensor& x, bool value) {
  return full(x.shape(), value ? 1.0 : 0.0, {.dtype = DType::Bool, .device = x.device()});
}

// The largest finite value of a floating dtype.
double largest(DType t) {
  switch (t) {
    case DType::F16: return 65504.0;
    case DType::BF16: return 0x1.fep127;
    case DType::F32: return double(std::numeric_limits<float>::max());
    default: return std::numeric_limits<double>::max();
  }
}

}  // namespace

Tensor logical_not(const Tensor& x) {
  check_defined("logical_not", x);
  return eq(x, scalar_like(0.0, x));
}
Tensor logical_and(const Tensor& a, const Tensor& b) {
  check_defined("logical_and", a);
  check_defined("logical_and", b);
  return mul(truth(a), truth(b));  // bool * bool is and
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  check_defined("logical_or", a);
  check_defined("logical_or", b);
  return add(truth(a), truth(b));  // bool + bool is or
}
Tensor logical_xor(const Tensor& a, const Tensor& b) {
  check_defined("logical_xor", a);
  check_defined("logical_xor", b);
  return ne(truth(a), truth(b));
}

// The bitwise ops (ops/bitwise.h): logical on bool masks, bitwise on integers, refused for floats
// (for truth values of any dtype: logical_and/or/xor/not).
Tensor operator~(const Tensor& m) { return bitwise_not(m); }
Tensor operator&(const Tensor& a, const Tensor& b) { return bitwise_and(a, b); }
Tensor operator|(const Tensor& a, const Tensor& b) { return bitwise_or(a, b); }
Tensor operator^(const Tensor& a, const Tensor& b) { return bitwise_xor(a, b); }

Tensor isnan(const Tensor& x) {
  check_defined("isnan", x);
  return x.is_floating_point() ? ne(x, x) : constant_mask(x, false);
}
Tensor isinf(const Tensor& x) {
  check_defined("isinf", x);
  return x.is_floating_point() ? eq(abs(x), scalar_like(INFINITY, x)) : constant_mask(x, false);
}
Tensor isposinf(const Tensor& x) {
  check_defined("isposinf", x);
  return x.is_floating_point() ? eq(x, scalar_like(INFINITY, x)) : constant_mask(x, false);
}
Tensor isneginf(const Tensor& x) {
  check_defined("isneginf", x);
  return x.is_floating_point() ? eq(x, scalar_like(-INFINITY, x)) : constant_mask(x, false);
}
Tensor isfinite(const Tensor& x) {
  check_defined("isfinite", x);
  if (!x.is_floating_point()) return constant_mask(x, true);
  return lt(abs(x), scalar_like(INFINITY, x));  // NaN < inf is false
}

Tensor nan_to_num(const Tensor& x, double nan, std::optional<double> posinf, std::optional<double> neginf) {
  check_defined("nan_to_num", x);
  if (!x.is_floating_point()) return x.clone();
  const double big = largest(x.dtype());
  const double hi = posinf.value_or(big), lo = neginf.value_or(-big);
  for (const double v : {nan, hi, lo}) {
    MG_CHECK(std::isnan(v) || std::fabs(v) <= big || std::isinf(v), Error, "nan_to_num: replacement ", v,
             " cannot be converted to ", dtype_name(x.dtype()), " without overflow");
  }
  Tensor y = where(isnan(x), scalar_like(nan, x), x);
  y = where(isposinf(x), scalar_like(hi, x), y);
  return where(isneginf(x), scalar_like(lo, x), y);
}

Tensor all(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  check_defined("all", x);
  const Tensor false_count = sum(to(logical_not(x), DType::I64), dims, keepdim);
  return eq(false_count, scalar_like(0.0, false_count));
}
Tensor any(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  check_defined("any", x);
  const Tensor true_count = sum(to(truth(x), DType::I64), dims, keepdim);
  return ne(true_count, scalar_like(0.0, true_count));
}

Tensor isclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  check_defined("isclose", a);
  check_defined("isclose", b);
  MG_CHECK(rtol >= 0.0 && atol >= 0.0, Error, "isclose: rtol and atol must be >= 0, got rtol ", rtol, ", atol ", atol);
  NoGradGuard no_grad;  // a bool answer: record nothing for a and b
  const DType t = promote_types(a.dtype(), b.dtype());
  const Tensor x = a.dtype() == t ? a : to(a, t), y = b.dtype() == t ? b : to(b, t);
  const Tensor same = eq(x, y);  // exact, and equal infinities
  if (!is_floating(t)) return same;
  Tensor close = logical_or(same, le(abs(x - y), abs(y) * rtol + atol));
  if (equal_nan) close = logical_or(close, logical_and(isnan(x), isnan(y)));
  return close;
}
bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  return all(isclose(a, b, rtol, atol, equal_nan)).to(Device::cpu()).item<bool>();
}

}  // namespace mg
