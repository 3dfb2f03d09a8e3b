// Vectorisable f32 exp, tanh, erf and the normal tail, shared by the CPU loops and the CUDA
// kernels (DESIGN §6).
// libm's scalar expf/tanhf/erff stop gcc from vectorising elementwise loops (GELU ran at 4% of
// memory bandwidth); these are branch-free (selects only), so a dense loop becomes SIMD code.
// Accuracy against f64 libm, checked by tests/core/test_fast_math.cpp on every 97th f32 bit
// pattern: exp <= 2 ulp, tanh <= 2 ulp, erf <= 6 ulp (measured about 1, 1.3 and 5.4 ulp; erf's
// worst case is near |x| = 0.5); exp_times (a e^x rounded once) <= 3 ulp, 1 subnormal step for
// subnormal results (measured 2 and 1); the normal tail on [-30, 0]: Phi <= 6 ulp, phi <= 3
// (measured 6 and 3). inf, NaN, overflow and subnormal results behave like libm. f64 always uses libm (the gradient-check
// reference).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "mixgrad/core/half.h"
#include "mixgrad/core/macros.h"

namespace mg::fast {

// a e^x = a 2^n e^r with n = round(x / ln 2), |r| <= ln2 / 2; e^r by the Cephes expf polynomial.
// a is multiplied in before 2^n is applied (as two factors, so overflow (inf) and subnormal results
// come out right), so a * e^x is rounded once even where e^x alone would be subnormal or zero: the
// tails of sigmoid, silu and gelu need that. Accurate for |a| in [2^-30, 2^30] and x <= 88; x below
// -120 gives a signed zero (|a e^x| < 2^-150 there for |a| < 1e6).
MG_HOST_DEVICE float exp_times_f32(float a, float x) {
  const float xc = x > 89.0f ? 89.0f : (x < -120.0f ? -120.0f : x);  // NaN passes through
  float n = std::nearbyint(xc * 1.44269504088896341f);
  n = n == n ? n : 0.0f;
  const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t k = int32_t(n);
  const int32_t k1 = k / 2, k2 = k - k1;  // each in [-87, 64]: 2^k1 and 2^k2 are normal floats
  const float s1 = f32_from_bits(uint32_t(k1 + 127) << 23);
  const float s2 = f32_from_bits(uint32_t(k2 + 127) << 23);
  const float y = (a * p) * s1 * s2;
  return x < -120.0f ? a * 0.0f : y;
}

MG_HOST_DEVICE float exp_f32(float x) { return exp_times_f32(1.0f, x); }

MG_HOST_DEVICE double f64_from_bits(uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  double d;
  std::memcpy(&d, &u, 8);
  return d;
#endif
}

MG_HOST_DEVICE uint64_t f64_bits(double d) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(d));
#else
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
#endif
}

// e^x rounded once to f32 from an f64 evaluation (relative error < 1e-14 before the rounding), so
// the result is the correctly rounded e^x except within 1e-14 of a halfway case: at least as
// accurate as libm's expf (<= 0.502 ulp), and a loop over it vectorizes. For the softmax
// family's e^(x - max), whose accuracy the tests hold against libm.
// x = n ln2 + r, |r| <= ln2 / 2 (n rounded by the 1.5 * 2^52 shift, whose low bits are n; ln2 in
// two parts, so r is exact to ~1e-16); e^r by its Taylor series to r^11 (remainder < 7e-15);
// 2^n built in the f64 exponent (normal for n in [-151, 129]), so p 2^n is exact and the
// conversion to f32 is the only rounding, subnormal results included. Outside [-104, 89] the
// evaluation is meaningless and the result is chosen by bit masks: inf above 89, 0 below -104
// (e^-104 < 2^-150, under half the smallest subnormal); NaN stays NaN. Masks, not selects: with
// selects g++ 12 sinks the evaluation into a branch and the loop no longer vectorizes.
MG_HOST_DEVICE float exp_rounded_f32(float x) {
  const double d = x;
  const double shifted = d * 1.4426950408889634 + 6755399441055744.0;  // + 1.5 * 2^52: rounds to n
  const double n = shifted - 6755399441055744.0;
  const double r = std::fma(-n, 1.9082149292705877e-10, std::fma(-n, 0.693147180369123816490, d));
  double p = 1.0 / 39916800.0;
  p = std::fma(p, r, 1.0 / 3628800.0);
  p = std::fma(p, r, 1.0 / 362880.0);
  p = std::fma(p, r, 1.0 / 40320.0);
  p = std::fma(p, r, 1.0 / 5040.0);
  p = std::fma(p, r, 1.0 / 720.0);
  p = std::fma(p, r, 1.0 / 120.0);
  p = std::fma(p, r, 1.0 / 24.0);
  p = std::fma(p, r, 1.0 / 6.0);
  p = std::fma(p, r, 0.5);
  p = std::fma(p, r, 1.0);
  p = std::fma(p, r, 1.0);
  const double scale = f64_from_bits((f64_bits(shifted) + 1023u) << 52);  // 2^n
  const uint32_t y = f32_bits(float(p * scale));
  const uint32_t u = f32_bits(x);
  const uint32_t over = 0u - uint32_t(u > 0x42b20000u && u <= 0x7f800000u);   // 89 < x <= inf
  const uint32_t under = 0u - uint32_t(u > 0xc2d00000u && u <= 0xff800000u);  // -inf <= x < -104
  return f32_from_bits((y & ~(over | under)) | (over & 0x7f800000u));
}

// tanh: Cephes' odd polynomial for |x| < 0.625, else 1 - 2 / (e^{2|x|} + 1) with the sign restored.
MG_HOST_DEVICE float tanh_f32(float x) {
  const float ax = std::fabs(x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = x == 0.0f ? x : p * z * x + x;  // keeps the sign of -0
  const float big = 1.0f - 2.0f / (exp_f32(2.0f * ax) + 1.0f);
  const float signed_big = x < 0.0f ? -big : big;
  return ax < 0.625f ? small : (x == x ? signed_big : x);
}

// erf: Taylor series to x^13 for |x| < 0.5 (relative error < 1e-9), else Abramowitz & Stegun
// 7.1.26 (absolute error <= 1.5e-7): erf = 1 - (a1 t + ... + a5 t^5) e^{-x^2}, t = 1 / (1 + p|x|).
MG_HOST_DEVICE float erf_f32(float x) {
  const float ax = std::fabs(x);
  const float z = x * x;
  // 2/sqrt(pi) (x - x^3/3 + x^5/10 - x^7/42 + x^9/216 - x^11/1320 + x^13/9360)
  float s = 1.0f / 9360.0f;
  s = s * z - 1.0f / 1320.0f;
  s = s * z + 1.0f / 216.0f;
  s = s * z - 1.0f / 42.0f;
  s = s * z + 1.0f / 10.0f;
  s = s * z - 1.0f / 3.0f;
  s = s * z + 1.0f;
  const float small = 1.12837916709551257f * x * s;
  const float t = 1.0f / (1.0f + 0.3275911f * ax);
  float q = 1.061405429f;
  q = q * t - 1.453152027f;
  q = q * t + 1.421413741f;
  q = q * t - 0.284496736f;
  q = q * t + 0.254829592f;
  const float big = 1.0f - q * t * exp_f32(-z);
  const float signed_big = x < 0.0f ? -big : big;
  return ax < 0.5f ? small : (x == x ? signed_big : x);
}

// The lower tail of the standard normal for x <= 0, split as Phi(x) = cdf e^-h and
// phi(x) = pdf e^-h with h = x*x/2 rounded: callers fold their factors into cdf/pdf and apply
// e^-h last with exp_times_f32, so results in the far tail round once. The rounding error of x*x
// is recovered exactly with an fma and folded into cdf and pdf, so e^{-x^2/2} has no error from
// its large argument. Phi(x) = erfc(|x| / sqrt 2) / 2 by Numerical Recipes' erfcc (Chebyshev
// fit, relative error < 1.2e-7 for all arguments): erfc(z) = t e^{-z^2 + c(t)}, t = 1 / (1 + z/2).
// No cancellation anywhere (1 + erf(x / sqrt 2) loses all its digits for x < -4).
struct NormalTail {
  float cdf, pdf, h;
};
// c(t) of erfcc: erfc(z) = t e^{-z^2 + c(t)}, t = 1 / (1 + z / 2).
MG_HOST_DEVICE float erfcc_poly_f32(float t) {
  float c = 0.17087277f;
  c = c * t - 0.82215223f;
  c = c * t + 1.48851587f;
  c = c * t - 1.13520398f;
  c = c * t + 0.27886807f;
  c = c * t - 0.18628806f;
  c = c * t + 0.09678418f;
  c = c * t + 0.37409196f;
  c = c * t + 1.00002368f;
  c = c * t - 1.26551223f;
  return c;
}
MG_HOST_DEVICE NormalTail normal_tail_f32(float x) {
  const float xx = x * x;
  const float h = 0.5f * xx;
  const float eh = 0.5f * std::fma(x, x, -xx);  // x^2/2 = h + eh exactly
  const float t = 1.0f / (1.0f + 0.35355339059327376f * std::fabs(x));  // z / 2 = |x| / (2 sqrt 2)
  return {0.5f * t * exp_f32(erfcc_poly_f32(t) - eh), 0.39894228040143267794f * (1.0f - eh), h};
}

// Phi(-|x|) for |x| <= 16 (not NaN) as 2^-65 ts e, so that one more factor still rounds once where
// the product is subnormal: x Phi(x) = ((x ts) e) 2^-65. Phi(-|x|) = t e^{c(t) - x^2/2} / 2 (erfcc
// as above); the exponent is split as n ln2 + r, r = ((-h - n ln2_hi) + c) - (eh + n ln2_lo), with
// x^2/2 = h + eh exactly (fma) and -h - n ln2_hi exact for |n| >= 4 (Sterbenz), so e^{-x^2/2} is
// never rounded on its own and the tail keeps its relative accuracy down to 2^-149. e = e^r by
// the Cephes expf polynomial; ts = t 2^(n + 64) (exact and normal: n in [-188, 1]). Both
// polynomials by Estrin's scheme: GELU's loop is bound by this dependency chain more than by its
// instruction count (measured ~10% faster than Horner; rounding differs in the last bits).
struct NormalCdfScaled {
  float ts, e;
  float t, c;  // t = 1 / (1 + |x| / (2 sqrt 2)) and the erfcc exponent c(t), for gelu's backward
};
MG_HOST_DEVICE NormalCdfScaled normal_cdf_scaled_f32(float x) {
  const float hx = 0.5f * x;
  const float h = hx * x;
  const float eh = std::fma(hx, x, -h);  // x^2/2 = h + eh exactly
  const float t = 1.0f / (1.0f + 0.35355339059327376f * std::fabs(x));
  const float t2 = t * t, t4 = t2 * t2, t8 = t4 * t4;
  const float c03 = std::fma(std::fma(0.09678418f, t, 0.37409196f), t2, std::fma(1.00002368f, t, -1.26551223f));
  const float c47 = std::fma(std::fma(1.48851587f, t, -1.13520398f), t2, std::fma(0.27886807f, t, -0.18628806f));
  const float c = std::fma(std::fma(0.17087277f, t, -0.82215223f), t8, std::fma(c47, t4, c03));  // erfcc_poly_f32(t)
  const float shifted = std::fma(c - h, 1.44269504088896341f, 12582912.0f);  // 1.5 * 2^23 + n
  const float n = shifted - 12582912.0f;
  const float r = (std::fma(-n, 0.693359375f, -h) + c) - std::fma(n, -2.12194440e-4f, eh);
  const float r2 = r * r, r4 = r2 * r2;
  const float q = std::fma(std::fma(1.9875691500e-4f, r, 1.3981999507e-3f), r4,
                           std::fma(std::fma(8.3334519073e-3f, r, 4.1665795894e-2f), r2,
                                    std::fma(1.6666665459e-1f, r, 5.0000001201e-1f)));
  const float scale = f32_from_bits((f32_bits(shifted) - 0x4b400000u + 64u + 127u) << 23);  // 2^(n + 64)
  return {t * scale, std::fma(q, r2, r) + 1.0f, t, c};
}

// e^-c for the erfcc exponent c = c(t) of normal_cdf_scaled_f32 with |x| <= 16 (c in [-1.11, 0]):
// Taylor series about -0.555 to degree 9 (truncation < 1e-9 relative), by Estrin's scheme.
// GELU's backward gets phi(x) / Phi(-|x|) = e^-c / (sqrt(pi/2) t) from it: no second range-reduced exp.
MG_HOST_DEVICE float exp_neg_erfcc_f32(float c) {
  const float d = c + 0.555f, d2 = d * d, d4 = d2 * d2, d8 = d4 * d4;
  const float p01 = std::fma(-1.7419409848f, d, 1.7419409848f);
  const float p23 = std::fma(-2.9032349746e-1f, d, 8.7097049239e-1f);
  const float p45 = std::fma(-1.4516174873e-2f, d, 7.2580874366e-2f);
  const float p67 = std::fma(-3.4562321126e-4f, d, 2.4193624789e-3f);
  const float p89 = std::fma(-4.8003223787e-6f, d, 4.3202901408e-5f);
  return std::fma(p89, d8, std::fma(std::fma(p67, d2, p45), d4, std::fma(p23, d2, p01)));
}

// Dispatch on the compute type: the fast forms for f32, libm for f64 (and anything else).
template <typename T>
MG_HOST_DEVICE T exp(T x) {
  if constexpr (sizeof(T) == 4) {
    return exp_f32(x);
  } else {
    return std::exp(x);
  }
}
// a * e^x rounded once (see exp_times_f32).
template <typename T>
MG_HOST_DEVICE T exp_times(T a, T x) {
  if constexpr (sizeof(T) == 4) {
    return exp_times_f32(a, x);
  } else {
    return a * std::exp(x);
  }
}
// e^x rounded once (see exp_rounded_f32); libm for f64.
template <typename T>
MG_HOST_DEVICE T exp_rounded(T x) {
  if constexpr (sizeof(T) == 4) {
    return exp_rounded_f32(x);
  } else {
    return std::exp(x);
  }
}
template <typename T>
MG_HOST_DEVICE T tanh(T x) {
  if constexpr (sizeof(T) == 4) {
    return tanh_f32(x);
  } else {
    return std::tanh(x);
  }
}
template <typename T>
MG_HOST_DEVICE T erf(T x) {
  if constexpr (sizeof(T) == 4) {
    return erf_f32(x);
  } else {
    return std::erf(x);
  }
}

}  // namespace mg::fast
