// Elementwise math written once (DESIGN §6): named functors templated on the compute type
// ("opmath": float for f16/bf16 storage, double for f64), compiled by g++ for the CPU loops in
// ops/cpu/ and by nvcc for the CUDA grid-stride kernels. The f64 gradient checks therefore test
// the exact formulas the GPU runs.
#pragma once
#include <cmath>
#include <limits>
#include <type_traits>

#include "mixgrad/core/fast_math.h"
#include "mixgrad/core/macros.h"

namespace mg::fn {

// ---- casts ----
// The value conversion of to(dtype) and copy_ on both devices. C++ leaves a floating value outside
// an integer type's range (and NaN) undefined, and the two compilers differ (x86's cvttss2si gives
// INT_MIN, and u8(-3.7) = 253; CUDA's cvt saturates, NaN -> 0). Defined here as CUDA's: NaN -> 0,
// out of range -> the nearest representable end; everything else is static_cast.
template <typename D, typename S>
MG_HOST_DEVICE D cast_value(S x) {
  if constexpr (std::is_integral_v<D> && !std::is_same_v<D, bool> && std::is_floating_point_v<S>) {
    if (!(x == x)) return D(0);
    constexpr D lo = std::numeric_limits<D>::lowest(), hi = std::numeric_limits<D>::max();
    if (x <= S(lo)) return lo;
    if (x >= S(hi)) return hi;  // i32/i64 max round up to 2^31 / 2^63 in f32: at or above is out of range
    return static_cast<D>(x);
  } else {
    return static_cast<D>(x);
  }
}

// ---- integer wrap-around ----
// Integer arithmetic wraps (two's complement, modulo 2^bits) as PyTorch's; in C++ a signed
// overflow is undefined behaviour, so integers go through their unsigned type (u8 is promoted to
// int, which cannot overflow, and narrowed back modulo 256). Floating types use plain arithmetic.
template <typename T>
inline constexpr bool kWrapsInUnsigned = std::is_integral_v<T> && !std::is_same_v<T, bool>;
template <typename T> MG_HOST_DEVICE T wrapping_add(T a, T b) {
  if constexpr (kWrapsInUnsigned<T>) return T(std::make_unsigned_t<T>(a) + std::make_unsigned_t<T>(b));
  else return a + b;
}
template <typename T> MG_HOST_DEVICE T wrapping_sub(T a, T b) {
  if constexpr (kWrapsInUnsigned<T>) return T(std::make_unsigned_t<T>(a) - std::make_unsigned_t<T>(b));
  else return a - b;
}
template <typename T> MG_HOST_DEVICE T wrapping_mul(T a, T b) {
  if constexpr (kWrapsInUnsigned<T>) return T(std::make_unsigned_t<T>(a) * std::make_unsigned_t<T>(b));
  else return a * b;
}
template <typename T> MG_HOST_DEVICE T wrapping_neg(T x) {
  if constexpr (kWrapsInUnsigned<T>) return T(std::make_unsigned_t<T>(0) - std::make_unsigned_t<T>(x));
  else return -x;
}

// ---- sorting (argsort, ops/sort.h) ----
// Whether element (a, at index ia) comes before (b, ib) in argsort's order: ascending or
// descending by value, NaN the largest, equal values by index (a stable total order). K is the
// widened key: int64_t for integers, float for f32/f16/bf16, double for f64.
template <typename K>
MG_HOST_DEVICE bool sorts_before(K a, int64_t ia, K b, int64_t ib, bool descending) {
  const bool a_nan = !(a == a), b_nan = !(b == b);
  if (a_nan || b_nan) {
    if (a_nan && b_nan) return ia < ib;
    return descending ? a_nan : b_nan;  // NaN last ascending, first descending
  }
  if (a == b) return ia < ib;  // -0 == +0 too
  return descending ? b < a : a < b;
}
template <typename T>
using sort_key_t = std::conditional_t<std::is_integral_v<T>, int64_t, std::conditional_t<std::is_same_v<T, double>, double, float>>;

// ---- unary ----
// -INT_MIN is INT_MIN, as PyTorch's.
struct Neg {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return wrapping_neg(x); }
};
// |-0| = +0, as fabs; NaN stays NaN; |INT_MIN| is INT_MIN, as PyTorch's.
struct Abs {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return x;
    else return x < T(0) ? wrapping_neg(x) : (x == T(0) ? T(0) : x);
  }
};
struct Sign {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return x > T(0) ? T(1) : T(0);
    else return x > T(0) ? T(1) : (x < T(0) ? T(-1) : (x == T(0) ? T(0) : x));  // NaN stays NaN
  }
};
// Rounding to integral values: floor, ceil, trunc, and round half to even (rint in the default
// rounding mode, as PyTorch's round); integers are unchanged; NaN and infinities stay.
struct Floor {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) return x; else return std::floor(x);
  }
};
struct Ceil {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) return x; else return std::ceil(x);
  }
};
struct Trunc {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) return x; else return std::trunc(x);
  }
};
struct Round {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) return x; else return std::rint(x);
  }
};
// exp, tanh and erf use mg::fast (vectorisable) for f32 and libm for f64.
struct Exp {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return fast::exp(x); }
};
struct Log {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return std::log(x); }
};
struct Log1p {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return std::log1p(x); }
};
struct Expm1 {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return std::expm1(x); }
};
struct Sqrt {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return std::sqrt(x); }
};
struct Rsqrt {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return T(1) / std::sqrt(x); }
};
struct Reciprocal {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return T(1) / x; }
};
struct Sin {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return std::sin(x); }
};
struct Cos {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return std::cos(x); }
};
struct Tanh {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return fast::tanh(x); }
};
// 1 / (1 + e^-x) for x >= 0 and e^x / (1 + e^x) below, so nothing overflows and small values keep
// their relative accuracy; both sides are computed and selected (vectorisable).
struct Sigmoid {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    const T e = fast::exp(x < T(0) ? x : -x);  // e^{-|x|}
    const T r = T(1) / (T(1) + e);
    return x >= T(0) ? r : (x == x ? e * r : x);
  }
};
// NaN and -0 pass through (relu(-0) = -0), as PyTorch's.
struct Relu {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return x < T(0) ? T(0) : x; }
};
// relu's backward from its output y: +0 where y <= 0, else the gradient — so a NaN y passes the
// gradient, as PyTorch's threshold_backward does (where(y <= 0, 0, g)). A select, so exact in
// every dtype.
struct ReluBackward {
  template <typename T> MG_HOST_DEVICE T operator()(T g, T y) const { return y <= T(0) ? T(0) : g; }
};

// GELU, erf form: x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)). Written through the normal tail
// (fast::normal_cdf_scaled_f32) instead: 1 + erf(..) cancels for x < -3.8 (f16 results were up to
// 2 ulp off, bf16 results 0 instead of -7.4e-8 at x = -5.56). For x >= 0, Phi(x) = 1 - Phi(-x)
// (>= 1/2, no cancellation). |x| is clamped to 16 inside (Phi is 0 or 1 in f32 beyond), so x^2 never
// overflows. f64: 0.5 x erfc(-x / sqrt 2) by libm.
//   d/dx = Phi(x) + x phi(x), phi(x) = e^{-x^2/2} / sqrt(2 pi)    (GeluErfBackward)
struct GeluErf {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    if constexpr (sizeof(T) == 4) {
      // Beyond |x| = 16, x Phi(x) rounds to -0 and Phi(-x) to 0, so x is clamped there; NaN goes in
      // as -16 and comes out of x (1 - y); x - x makes -inf give NaN (-inf * 0, as the formula).
      const float xc = x > 16.0f ? 16.0f : (x >= -16.0f ? x : -16.0f);
      const fast::NormalCdfScaled n = fast::normal_cdf_scaled_f32(xc);  // Phi(-|x|) = 2^-65 n.ts n.e
      const float y = ((x < 0.0f ? xc * n.ts : n.ts) * n.e) * 2.7105054312137611e-20f;  // x Phi(x) or Phi(-x)
      return x < 0.0f ? y - (x - x) : x * (1.0f - y);
    } else {
      return T(0.5) * x * std::erfc(-x * T(0.70710678118654752440));
    }
  }
};
// g * (Phi(x) + x phi(x)), through the same normal tail as the forward (one range-reduced exp,
// no cancellation in the negative tail). With P = Phi(-|x|) = 2^-65 ts e (normal_cdf_scaled_f32)
// and Mills' ratio M = P / phi(x) = sqrt(pi/2) t e^c (erfcc: P = t e^{c - x^2/2} / 2):
//   x < 0:  d = P + x phi = P (1 - q),        q = |x| / M = sqrt(2/pi) |x| (1 / t) e^-c
//   x >= 0: d = 1 - P + x phi = 1 - P (1 - q)
// q uses the same 1 / t and c as P, so P q = |x| phi exactly up to rounding (erfcc's own error
// cancels there); e^-c is a short polynomial (c is bounded). P (1 - q) is formed scaled by 2^65 and
// unscaled last, so a subnormal tail rounds once. |x| is clamped to 16 (d is 0 or 1 in f32 beyond,
// and the negative tail's sign is kept: -0); ±inf and NaN give NaN (inf * 0, as the formula).
// f64: libm.
struct GeluErfBackward {
  template <typename T> MG_HOST_DEVICE T operator()(T g, T x) const {
    if constexpr (sizeof(T) == 4) {
      const float xc = x > 16.0f ? 16.0f : (x >= -16.0f ? x : -16.0f);
      const fast::NormalCdfScaled n = fast::normal_cdf_scaled_f32(xc);
      const float ax = std::fabs(xc);
      const float q = (0.79788456080286535588f * ax) * (1.0f + 0.35355339059327376f * ax) * fast::exp_neg_erfcc_f32(n.c);
      const float y = ((n.ts * n.e) * (1.0f - q)) * 2.7105054312137611e-20f;  // P (1 - q), 2^-65 applied last
      const float d = x < 0.0f ? y : 1.0f - y;
      return g * (x - x == 0.0f ? d : x - x);
    } else {
      const T d = T(0.5) * std::erfc(-x * T(0.70710678118654752440)) +
                  x * std::exp(T(-0.5) * x * x) * T(0.39894228040143267794);
      return g * d;
    }
  }
};

// e = e^{-|v|} for v of either sign, as big = e 2^64 (a normal float for |v| <= 120; 0 beyond,
// where e < 2^-173 and a product with any factor below 2^23 rounds to 0 anyway): a product p e
// that is subnormal is then computed as unscale(p big) = (p big) 2^-64 and rounds once. One exp
// (fast::exp_times scales inside). f64: a plain exp, the 2^64 factors cancel exactly.
struct ExpNegAbs {
  template <typename T> MG_HOST_DEVICE static T big(T v) {
    return fast::exp_times(T(18446744073709551616.0), v < T(0) ? v : -v);
  }
  template <typename T> MG_HOST_DEVICE static T unscale(T p) { return p * T(5.42101086242752217e-20); }  // 2^-64
};

// GELU, tanh form: 0.5 x (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3). Computed as
// x sigmoid(2u) (the same number: 0.5 (1 + tanh u) = 1 / (1 + e^{-2u})), which has no
// cancellation for u < 0: x e r with e = e^{2u}, r = 1 / (1 + e) (ExpNegAbs), one exp as before.
//   d/dx = s + x s (1 - s) 2 du/dx, s = sigmoid(2u), du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
//        = s + 2 sqrt(2/pi) x e r^2 (1 + 0.134145 x^2),  e = e^{-2|u|}, r = 1 / (1 + e)
struct GeluTanh {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    const T u = T(0.79788456080286535588) * x * (T(1) + T(0.044715) * x * x);
    const T big = ExpNegAbs::big(T(2) * u);  // e^{-2|u|} 2^64
    const T r = T(1) / (T(1) + ExpNegAbs::unscale(big));
    return u >= T(0) ? x * r : ExpNegAbs::unscale(x * r * big);
  }
};
// g * d/dx above. x is clamped to ±20 inside (e = 0 beyond, and x^3 would overflow); ±inf give NaN.
struct GeluTanhBackward {
  template <typename T> MG_HOST_DEVICE T operator()(T g, T x) const {
    const T xc = x > T(20) ? T(20) : (x < T(-20) ? T(-20) : x);
    const T u = T(0.79788456080286535588) * xc * (T(1) + T(0.044715) * xc * xc);
    const T big = ExpNegAbs::big(T(2) * u);
    const T r = T(1) / (T(1) + ExpNegAbs::unscale(big));
    const T slope = T(2 * 0.79788456080286535588) * xc * r * r * (T(1) + T(0.134145) * xc * xc);
    const T d = u >= T(0) ? r + ExpNegAbs::unscale(slope * big) : ExpNegAbs::unscale((r + slope) * big);
    return g * (x - x == T(0) ? d : x - x);
  }
};

// x * sigmoid(x); for x < 0, x e^x / (1 + e^x), the subnormal tail rounded once (ExpNegAbs).
struct Silu {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    const T big = ExpNegAbs::big(x);  // e^{-|x|} 2^64
    const T r = T(1) / (T(1) + ExpNegAbs::unscale(big));
    return x >= T(0) ? x * r : (x == x ? ExpNegAbs::unscale(x * r * big) : x);
  }
};
// ---- fused backward ops (ops/activation_backward_ops.def): (g, x) -> g * f'(x) from the input ----
// The rules built from public ops rounded every intermediate in f16/bf16 and read the saved output
// where it had already rounded to its limit: 1 - y^2 is 0 once tanh x rounds to ±1 (4,086 ulp off
// in f16, 15,230 in bf16), y (1 - y) likewise (3,066 / 15,100), and silu's composite cancels near
// the zero of its derivative (893 / 14,879 ulp). With g = 1 these are all within 1 ulp for every
// f16/bf16 pattern (tests/ops/test_activation_backward.cpp); f'(x) is rounded to opmath before g
// multiplies in.

// sigmoid'(x) = e / (1 + e)^2 = sigmoid(x) sigmoid(-x), e = e^{-|x|}: positive terms only, and as
// ((e 2^64) r) r 2^-64 (ExpNegAbs) the far tail rounds once. ±inf give 0, NaN gives NaN.
struct SigmoidBackward {
  template <typename T> MG_HOST_DEVICE T operator()(T g, T x) const {
    const T big = ExpNegAbs::big(x);  // e^{-|x|} 2^64
    const T r = T(1) / (T(1) + ExpNegAbs::unscale(big));
    return g * ExpNegAbs::unscale(big * r * r);
  }
};
// tanh'(x) = 1 - tanh^2 x = 4 e / (1 + e)^2, e = e^{-2|x|}: sigmoid's derivative at 2x, times 4.
struct TanhBackward {
  template <typename T> MG_HOST_DEVICE T operator()(T g, T x) const {
    const T big = ExpNegAbs::big(T(2) * x);  // e^{-2|x|} 2^64
    const T r = T(1) / (T(1) + ExpNegAbs::unscale(big));
    return g * ExpNegAbs::unscale(T(4) * big * r * r);
  }
};
// silu'(x) = sigmoid(x) (1 + x sigmoid(-x)). With e = e^{-|x|}, r = 1 / (1 + e):
//   x >= 0: r (1 + x e r)              (positive terms)
//   x <  0: e r (1 + x r) = e r^2 (s), s = (1 + x) + e
// 1 + x r = (1 + e + x) / (1 + e): written with s, the derivative's zero (x = -1.2785) is a
// cancellation between 1 + x, exact there (Sterbenz), and e alone, so only e's few ulp of error are
// left in the difference (r's and the product's are not). ±inf give NaN (inf * 0, as the formula).
struct SiluBackward {
  template <typename T> MG_HOST_DEVICE T operator()(T g, T x) const {
    const T big = ExpNegAbs::big(x);  // e^{-|x|} 2^64
    const T e = ExpNegAbs::unscale(big);
    const T r = T(1) / (T(1) + e);
    const T pos = r * (T(1) + ExpNegAbs::unscale(x * big * r));
    const T neg = ExpNegAbs::unscale(big * r * r * ((T(1) + x) + e));
    return g * (x >= T(0) ? pos : neg);
  }
};
// erf'(x) = 2 / sqrt(pi) e^{-x^2}. f32: x^2 = h + l exactly (an fma) and e^{-x^2} = e^{-h} (1 - l),
// the factor multiplied in before the exponent is applied (exp_times_f32), so a subnormal result
// rounds once and the rounding of x^2 (multiplied by x^2 in the exponent) never shows. |x| is
// clamped to 11 (e^{-121} is 0 in f32); ±inf give 0, NaN gives NaN. f64: libm.
struct ErfBackward {
  template <typename T> MG_HOST_DEVICE T operator()(T g, T x) const {
    if constexpr (sizeof(T) == 4) {
      const float xc = x > 11.0f ? 11.0f : (x >= -11.0f ? x : -11.0f);
      const float h = xc * xc;
      const float l = std::fma(xc, xc, -h);
      const float d = fast::exp_times_f32(1.12837916709551257390f * (1.0f - l), -h);
      return g * (x == x ? d : x);
    } else {
      return g * (T(1.12837916709551257390) * std::exp(-x * x));
    }
  }
};

// reciprocal'(x) = -1 / x^2 = -r^2 with r = 1 / x in opmath (the output rounded to f16 and squared
// there was 2 ulp off). ±0 give -inf, ±inf give -0.
struct ReciprocalBackward {
  template <typename T> MG_HOST_DEVICE T operator()(T g, T x) const {
    const T r = T(1) / x;
    return g * -(r * r);
  }
};
// rsqrt'(x) = -x^{-3/2} / 2 = (-r / 2) r r with r = 1 / sqrt(x) in opmath (from the rounded output:
// 3 ulp); the halving first, so a result just below the overflow threshold does not overflow on the
// way. -0 gives +inf (r = -inf, as the rule from the output and PyTorch), +inf gives -0.
struct RsqrtBackward {
  template <typename T> MG_HOST_DEVICE T operator()(T g, T x) const {
    const T r = T(1) / std::sqrt(x);
    return g * ((T(-0.5) * r) * r * r);
  }
};

// log(1 + e^(beta x)) / beta, and x itself once beta x > threshold (as PyTorch).
struct Softplus {
  double beta, threshold;
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    const T bx = T(beta) * x;
    return bx > T(threshold) ? x : std::log1p(std::exp(bx)) / T(beta);
  }
};
// g * softplus'(x) = g * sigmoid(beta x), or g where beta x > threshold (the forward's linear
// side); beta x in opmath, as the forward, so f16/bf16 take the forward's branch and round once.
struct SoftplusBackward {
  double beta, threshold;
  template <typename T> MG_HOST_DEVICE T operator()(T g, T x) const {
    const T bx = T(beta) * x;
    return bx > T(threshold) ? g : g * Sigmoid{}(bx);
  }
};
// ---- the piecewise activations (PyTorch's formulas; NaN propagates through the forward) ----
// x where x > 0, else x * slope.
struct LeakyRelu {
  double slope;
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return x > T(0) ? x : x * T(slope); }
};
// g where x > 0, else g * slope (a NaN x takes the slope side, as PyTorch's leaky_relu_backward).
struct LeakyReluBackward {
  double slope;
  template <typename T> MG_HOST_DEVICE T operator()(T g, T x) const { return x > T(0) ? g : g * T(slope); }
};
// The ELU family (PyTorch's elu with alpha, scale and input_scale): scale x for x > 0, else
// scale alpha (e^{input_scale x} - 1) by expm1 (no cancellation near 0). ELU: scale = input_scale
// = 1; SELU: fixed alpha and scale; CELU: input_scale = 1 / alpha.
struct Elu {
  double alpha, scale, input_scale;
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    return x <= T(0) ? std::expm1(x * T(input_scale)) * T(alpha * scale) : x * T(scale);
  }
};
// g scale for x > 0, else g (scale alpha input_scale) e^{input_scale x}, from the input (PyTorch
// can take the output, which has rounded to -alpha scale in the tail).
struct EluBackward {
  double alpha, scale, input_scale;
  template <typename T> MG_HOST_DEVICE T operator()(T g, T x) const {
    return x <= T(0) ? g * fast::exp_times(T(alpha * scale * input_scale), x * T(input_scale)) : g * T(scale);
  }
};
// x relu6(x + 3) / 6, and relu6(x + 3) / 6, in PyTorch's order of operations; NaN stays NaN.
// hardswish is x itself from x = 3 on (PyTorch's x * 6 / 6 overflows to inf beyond 5.7e37 in f32,
// and can be an ulp off below).
struct Hardswish {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    const T c = x + T(3);
    const T r = c > T(0) ? c : (c == c ? T(0) : c);
    return x >= T(3) ? x : x * r / T(6);
  }
};
struct Hardsigmoid {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    const T c = x + T(3);
    const T r = c > T(6) ? T(6) : (c > T(0) ? c : (c == c ? T(0) : c));
    return r / T(6);
  }
};
// 0 up to -3, g (x / 3 + 1/2) below 3, g from 3 on (a NaN x passes g), as PyTorch.
// The middle is (2x + 3) / 6: 2x is exact and so is 2x + 3 near the zero at x = -1.5, where
// PyTorch's x / 3 + 1/2 cancels (2,700 f32 ulp off there). The kinks as PyTorch 2.15: 0 at -3, g at 3.
struct HardswishBackward {
  template <typename T> MG_HOST_DEVICE T operator()(T g, T x) const {
    return x <= T(-3) ? T(0) : (x < T(3) ? g * ((x + x + T(3)) / T(6)) : g);
  }
};
// g / 6 strictly inside (-3, 3), else 0 (NaN too), as PyTorch.
struct HardsigmoidBackward {
  template <typename T> MG_HOST_DEVICE T operator()(T g, T x) const {
    return (x > T(-3) && x < T(3)) ? g * (T(1) / T(6)) : T(0);
  }
};
// Mish, x tanh(softplus(x)), through e^{-|x|} only (one exp, no cancellation on either side):
//   x < 0,  e = e^x:     tanh(log(1 + e)) = e (2 + e) / q,        q = (1 + e)^2 + 1
//   x >= 0, u = e^{-x}:  tanh(log(1 + e^x)) = (1 + 2u) / D = 1 - 2u^2 / D,  D = (1 + u)^2 + u^2
// In the negative tail e comes scaled by 2^64 (ExpNegAbs) and x e (2 + e) / q is unscaled last, so
// a subnormal result rounds once (log1p and tanh of the composite round e^x twice and cancel).
// x is clamped inside to [low, 1e4]: below `low` the result is -0 in the type, above 1e4 u is 0
// (and inf * 0 is avoided). So ±inf give the limits, inf and -0 (PyTorch's formula: NaN at -inf).
template <typename T>
MG_HOST_DEVICE T mish_clamp(T x) {
  constexpr T low = sizeof(T) == 4 ? T(-160) : T(-1000);  // x e^x is below the smallest subnormal
  return x > T(1e4) ? T(1e4) : (x < low ? low : x);      // NaN passes through
}
struct Mish {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    const T xc = mish_clamp(x);
    const T big = ExpNegAbs::big(xc);  // e^{-|x|} 2^64
    const T s = ExpNegAbs::unscale(big);
    const T q = (T(1) + s) * (T(1) + s) + T(1);
    const T neg = ExpNegAbs::unscale(xc * big * (T(2) + s) / q);
    const T pos = x * (T(1) - T(2) * s * s / ((T(1) + s) * (T(1) + s) + s * s));
    return xc < T(0) ? neg : pos;
  }
};
// mish'(x) = t + x sigmoid(x) (1 - t^2), t = tanh(softplus(x)). With e, q, u, D as above:
//   x < 0:  e b / q^2,  b = 4 (1 + x) + e (6 + 4 x) + 4 e^2 + e^3
//   x >= 0: (1 + 4u + (6 + 4x) u^2 + 4 (1 + x) u^3) / D^2
//           = 1 + ((4x - 2) u^2 + (4x - 4) u^3 - 4 u^4) / D^2   (the small part alone rounds)
// The derivative's zero (x = -1.1924) is a cancellation between 4 (1 + x), exact there (Sterbenz),
// and the terms in e: only e's few ulp of error are left in the difference (silu's device); the
// tail is scaled by 2^64 as the forward. ±inf give the limits 1 and -0 (PyTorch's formula: NaN).
struct MishBackward {
  template <typename T> MG_HOST_DEVICE T operator()(T g, T x) const {
    const T xc = mish_clamp(x);
    const T big = ExpNegAbs::big(xc);  // e^{-|x|} 2^64
    const T s = ExpNegAbs::unscale(big);
    const T q = (T(1) + s) * (T(1) + s) + T(1);
    const T b = T(4) * (T(1) + xc) + s * (T(6) + T(4) * xc) + T(4) * s * s + s * s * s;
    const T neg = ExpNegAbs::unscale(big * (b / (q * q)));
    const T dd = (T(1) + s) * (T(1) + s) + s * s;
    const T pos = T(1) + ((T(4) * xc - T(2)) * s * s + (T(4) * xc - T(4)) * s * s * s - T(4) * s * s * s * s) / (dd * dd);
    return g * (xc < T(0) ? neg : pos);
  }
};

struct Erf {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return fast::erf(x); }
};
// x * s and x / s with s in the compute type (f32 for f16/bf16), rounded once: a scalar is not
// rounded to the tensor's 16-bit dtype first (70000 is inf in f16, 1e-8 is 0), as PyTorch reads a
// wrapped number in opmath for mul and div.
struct MulScalar {
  double s;
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return x * T(s); }
};
struct DivScalar {
  double s;
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return x / T(s); }
};
// Integers take a whole exponent in [0, 2^63) (ops/elementwise.cpp's pow sees to it): squaring,
// wrapping as PyTorch's integer pow (0 ** 0 is 1).
struct PowScalar {
  double exponent;
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) {
      T result = T(1), base = x;
      for (unsigned long long e = static_cast<unsigned long long>(exponent); e != 0; e >>= 1) {
        if (e & 1) result = wrapping_mul(result, base);
        base = wrapping_mul(base, base);
      }
      return result;
    } else {
      if (exponent == 2.0) return x * x;
      if (exponent == 1.0) return x;
      return std::pow(x, T(exponent));
    }
  }
};
// min/max given as doubles; NaN propagates. min > max gives max everywhere, as PyTorch's
// min(max(x, min), max).
// Integer tensors: the bounds are whole (clamp promotes to f32 otherwise, ops/elementwise.cpp) and
// are compared in the integer type, saturated (cast_value): clamp(x_i32, 1e20, 2e20) is INT_MAX, and
// an i64 beyond 2^53 is not rounded to a double first (which let 2^53 + 1 pass a bound of 2^53).
struct Clamp {
  double lo, hi;
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const T l = cast_value<T>(lo), h = cast_value<T>(hi);
      const T low = x < l ? l : x;
      return low > h ? h : low;
    } else {
      if (!(x == x)) return x;
      if (!(lo == lo)) return cast_value<T>(lo);  // a NaN bound makes every result NaN, as PyTorch's
      if (!(hi == hi)) return cast_value<T>(hi);
      if (double(x) > hi || lo > hi) return cast_value<T>(hi);
      if (double(x) < lo) return cast_value<T>(lo);
      return x;
    }
  }
};

// ---- binary ----
// Integers wrap (wrapping_add); bool's a + b is a logical or.
struct Add {
  double alpha;
  template <typename T> MG_HOST_DEVICE T operator()(T a, T b) const {
    return alpha == 1.0 ? wrapping_add(a, b) : wrapping_add(a, wrapping_mul(T(alpha), b));
  }
};
struct Sub {
  double alpha;
  template <typename T> MG_HOST_DEVICE T operator()(T a, T b) const {
    return alpha == 1.0 ? wrapping_sub(a, b) : wrapping_sub(a, wrapping_mul(T(alpha), b));
  }
};
struct Mul {
  template <typename T> MG_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (sizeof(T) == 1 && T(2) == T(1)) {
      return a && b;  // bool: logical and
    } else {
      return wrapping_mul(a, b);
    }
  }
};
struct Div {
  template <typename T> MG_HOST_DEVICE T operator()(T a, T b) const { return a / b; }
};
// Integers by squaring, wrapping in the dtype's width like the other integer ops (std::pow goes
// through double: 3^39 came out 11 too small, and an out-of-range result was undefined);
// negative exponents as PyTorch's: 1 for base 1, +-1 for base -1, 0 otherwise. bool: a || !b.
struct Pow {
  template <typename T> MG_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) {
      return a || !b;
    } else if constexpr (std::is_integral_v<T>) {
      if constexpr (std::is_signed_v<T>) {
        if (b < 0) {
          if (a == 1) return T(1);
          if (a == -1) return (b & 1) ? T(-1) : T(1);
          return T(0);
        }
      }
      // At least 32-bit unsigned, so that no product is promoted to a signed int and overflows;
      // the result modulo 2^32 (or 2^64) is the result modulo 2^bits of T.
      using U = std::conditional_t<(sizeof(T) < 4), unsigned, std::make_unsigned_t<T>>;
      U base = U(a), result = 1, e = U(b);
      while (e != 0) {
        if (e & 1u) result *= base;
        base *= base;
        e >>= 1;
      }
      return T(result);
    } else {
      return std::pow(a, b);
    }
  }
};
// Division rounded toward zero and toward -inf, and the remainders that go with them, as
// PyTorch's div(rounding_mode), remainder (the divisor's sign) and fmod (the dividend's sign).
// Integers: C++'s two undefined cases are defined here. A zero divisor gives 0 (the public
// functions refuse it on the host before any kernel runs: PyTorch raises there), and the most
// negative value divided by -1 wraps, as every integer op.
template <typename T> MG_HOST_DEVICE T int_div_trunc(T a, T b) {
  if (b == T(0)) return T(0);
  if constexpr (std::is_signed_v<T>) {
    if (b == T(-1)) return wrapping_sub(T(0), a);
  }
  return T(a / b);
}
template <typename T> MG_HOST_DEVICE T int_fmod(T a, T b) {
  if (b == T(0)) return T(0);
  if constexpr (std::is_signed_v<T>) {
    if (b == T(-1)) return T(0);
  }
  return T(a % b);
}
struct DivTrunc {
  template <typename T> MG_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) return int_div_trunc(a, b); else return std::trunc(a / b);
  }
};
// Floats: the quotient from the exact fmod, (a - fmod(a, b)) / b, is within a rounding of an
// integer; stepping it down where the remainder's sign differs from b's and then rounding to the
// nearest integer gives the floor of the true quotient where floor(a / b) would round a / b up
// across an integer first (CPython's float floor division does the same). A zero quotient keeps
// the sign of a / b; b = 0 gives a / b (inf or NaN).
struct DivFloor {
  template <typename T> MG_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      const T q = int_div_trunc(a, b);
      if constexpr (std::is_signed_v<T>) {
        if (int_fmod(a, b) != T(0) && ((a < T(0)) != (b < T(0)))) return T(q - T(1));
      }
      return q;
    } else {
      if (b == T(0)) return a / b;
      const T r = std::fmod(a, b);
      T q = (a - r) / b;
      if (r != T(0) && ((b < T(0)) != (r < T(0)))) q -= T(1);
      if (q == T(0)) return std::copysign(T(0), a / b);
      T f = std::floor(q);
      if (q - f > T(0.5)) f += T(1);
      return f;
    }
  }
};
struct Fmod {
  template <typename T> MG_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) return int_fmod(a, b); else return std::fmod(a, b);
  }
};
// fmod moved onto the divisor's side: a - b floor(a / b).
struct Remainder {
  template <typename T> MG_HOST_DEVICE T operator()(T a, T b) const {
    const T r = Fmod{}(a, b);
    if constexpr (std::is_integral_v<T> && !std::is_signed_v<T>) {
      return r;
    } else {
      if (r != T(0) && ((r < T(0)) != (b < T(0)))) return T(r + b);
      return r;
    }
  }
};
// Bitwise ops on integers and bool (bool's not is logical). Shifts as PyTorch's: a shift count
// outside [0, bits) gives 0 to the left and the sign fill to the right (-1 for a negative signed
// value, else 0), where C++ leaves them undefined; a left shift wraps, through the unsigned type.
struct BitAnd {
  template <typename T> MG_HOST_DEVICE T operator()(T a, T b) const { return T(a & b); }
};
struct BitOr {
  template <typename T> MG_HOST_DEVICE T operator()(T a, T b) const { return T(a | b); }
};
struct BitXor {
  template <typename T> MG_HOST_DEVICE T operator()(T a, T b) const { return T(a ^ b); }
};
struct BitNot {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>) return !x; else return T(~x);
  }
};
template <typename T> MG_HOST_DEVICE bool shift_in_range(T b) {
  if constexpr (std::is_signed_v<T>) {
    if (b < T(0)) return false;
  }
  return b < T(sizeof(T) * 8);
}
struct ShiftLeft {
  template <typename T> MG_HOST_DEVICE T operator()(T a, T b) const {
    if (!shift_in_range(b)) return T(0);
    using U = std::make_unsigned_t<T>;
    return T(U(U(a) << unsigned(b)));
  }
};
struct ShiftRight {
  template <typename T> MG_HOST_DEVICE T operator()(T a, T b) const {
    if (!shift_in_range(b)) {
      if constexpr (std::is_signed_v<T>) return a < T(0) ? T(-1) : T(0); else return T(0);
    }
    return T(a >> unsigned(b));  // arithmetic for signed values (C++20)
  }
};
// NaN propagates from either side (as torch.maximum).
// A tie (+0 against -0 included) returns a, as PyTorch's.
struct Maximum {
  template <typename T> MG_HOST_DEVICE T operator()(T a, T b) const {
    if (!(a == a)) return a;
    if (!(b == b)) return b;
    return a < b ? b : a;
  }
};
struct Minimum {
  template <typename T> MG_HOST_DEVICE T operator()(T a, T b) const {
    if (!(a == a)) return a;
    if (!(b == b)) return b;
    return b < a ? b : a;
  }
};
struct Eq {
  template <typename T> MG_HOST_DEVICE bool operator()(T a, T b) const { return a == b; }
};
struct Ne {
  template <typename T> MG_HOST_DEVICE bool operator()(T a, T b) const { return a != b; }
};
struct Lt {
  template <typename T> MG_HOST_DEVICE bool operator()(T a, T b) const { return a < b; }
};
struct Le {
  template <typename T> MG_HOST_DEVICE bool operator()(T a, T b) const { return a <= b; }
};
struct Gt {
  template <typename T> MG_HOST_DEVICE bool operator()(T a, T b) const { return a > b; }
};
struct Ge {
  template <typename T> MG_HOST_DEVICE bool operator()(T a, T b) const { return a >= b; }
};

}  // namespace mg::fn
