// Helpers of the exhaustive f16/bf16 accuracy sweeps (test_unary_sweep.cpp,
// test_activation_backward.cpp): an f64 reference rounded *once* to the 16-bit dtype (f64 -> f32 by
// round-to-odd, then the library's round-to-nearest-even, which together round f64 directly), and
// the ulp distance counted on the ordered bit patterns (subnormals count as ulps; +0 and -0 sit
// together; NaN, infinities and zeros must match exactly).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "core/factory.h"
#include "core/half.h"
#include "ops/ops.h"

namespace mg::test {

// f64 -> f32 rounding toward zero with the inexact bit ORed into the last place ("round to odd").
inline float round_to_odd_f32(double d) {
  if (std::isnan(d)) return float(d);
  float f = float(d);
  if (std::isinf(f) && !std::isinf(d)) f = std::copysign(std::numeric_limits<float>::max(), float(d));
  if (double(f) == d) return f;
  if (std::fabs(double(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  return f32_from_bits(f32_bits(f) | 1u);
}

// The f64 value rounded once to the 16-bit dtype, as bits.
inline uint16_t round_once(double d, DType dt) {
  const float f = round_to_odd_f32(d);
  return dt == DType::F16 ? f32_to_f16_bits(f) : f32_to_bf16_bits(f);
}
inline double from_bits16(uint16_t b, DType dt) { return dt == DType::F16 ? f16_bits_to_f32(b) : bf16_bits_to_f32(b); }

// Ordered position of a bit pattern (negative values below zero, +0 and -0 both at 0).
inline int64_t ordered(uint64_t bits, int width) {
  const uint64_t sign = uint64_t(1) << (width - 1);
  return (bits & sign) ? -int64_t(bits & (sign - 1)) : int64_t(bits);
}

// ulp distance between a result and the rounded reference, both as bit patterns of `width`
// bits; "infinite" (1e9) for a NaN/inf/signed-zero mismatch.
inline int64_t ulp_distance(uint64_t got, uint64_t want, bool got_nan, bool want_nan, bool got_inf, bool want_inf,
                     bool want_zero, int width) {
  constexpr int64_t kMismatch = 1000000000;
  if (want_nan || got_nan) return want_nan && got_nan ? 0 : kMismatch;
  if (want_inf || got_inf || want_zero) return got == want ? 0 : kMismatch;
  const int64_t d = ordered(got, width) - ordered(want, width);
  return d < 0 ? -d : d;
}

// All 65,536 patterns of a 16-bit dtype.
inline Tensor all_patterns(DType dt) {
  std::vector<uint16_t> bits(65536);
  for (uint32_t u = 0; u < 65536; ++u) bits[u] = uint16_t(u);
  Tensor t = empty({65536}, {.dtype = dt});
  std::memcpy(t.data_ptr(), bits.data(), bits.size() * 2);
  return t;
}

// The same values as a strided view (every other element of a [131072] tensor):
// the kernels' non-dense loop.
inline Tensor strided_copy(const Tensor& dense) {
  Tensor wide = zeros({2 * dense.numel()}, {.dtype = dense.dtype()});
  Tensor col = wide.slice(0, 0, 2 * dense.numel(), 2);
  col.copy_(dense);
  return col;
}

struct Worst {
  int64_t ulp = 0;
  double x = 0, got = 0, want = 0;
};

// Max ulp of y (16-bit dtype) against ref over the inputs x.
inline Worst sweep16(const Tensor& x, const Tensor& y, const std::function<double(double)>& ref) {
  const DType dt = x.dtype();
  const Tensor yc = contiguous(y);
  const Tensor xc = contiguous(x);
  const uint16_t* xb = static_cast<const uint16_t*>(xc.data_ptr());
  const uint16_t* yb = static_cast<const uint16_t*>(yc.data_ptr());
  Worst w;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double xv = from_bits16(xb[i], dt);
    const double r = ref(xv);
    const uint16_t want = round_once(r, dt);
    const double wv = from_bits16(want, dt), gv = from_bits16(yb[i], dt);
    const int64_t d = ulp_distance(yb[i], want, std::isnan(gv), std::isnan(wv), std::isinf(gv), std::isinf(wv),
                                   wv == 0.0, 16);
    if (d > w.ulp) w = {d, xv, gv, r};
  }
  return w;
}

}  // namespace mg::test
