// The vectorisable f32 exp/tanh/erf of core/fast_math.h against f64 libm, in ulps, over a sweep
// of f32 bit patterns, plus their special values.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>

#include "core/fast_math.h"

namespace {

// |got - want| in units of the f32 spacing at want (inf/NaN must match exactly).
double ulp_error(float got, double want) {
  if (std::isnan(want)) return std::isnan(got) ? 0.0 : 1e30;
  const float w = float(want);
  if (std::isinf(w)) return got == w ? 0.0 : 1e30;
  const double spacing = double(std::nextafter(std::fabs(w), INFINITY)) - std::fabs(double(w));
  return std::fabs(double(got) - want) / spacing;
}

template <typename Fast, typename Ref>
double max_ulp(Fast fast, Ref ref) {
  double worst = 0.0;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 997) {
    const float x = mg::f32_from_bits(uint32_t(u));
    if (!std::isfinite(x)) continue;
    worst = std::max(worst, ulp_error(fast(x), ref(double(x))));
  }
  return worst;
}

}  // namespace

TEST_CASE("fast exp, tanh and erf stay within their ulp bounds", "[core][fast_math]") {
  CHECK(max_ulp(mg::fast::exp_f32, [](double x) { return std::exp(x); }) <= 2.0);
  CHECK(max_ulp(mg::fast::tanh_f32, [](double x) { return std::tanh(x); }) <= 2.0);
  CHECK(max_ulp(mg::fast::erf_f32, [](double x) { return std::erf(x); }) <= 6.0);
}

TEST_CASE("fast math special values", "[core][fast_math]") {
  using namespace mg::fast;
  REQUIRE(std::isnan(exp_f32(NAN)));
  REQUIRE(exp_f32(INFINITY) == INFINITY);
  REQUIRE(exp_f32(-INFINITY) == 0.0f);
  REQUIRE(exp_f32(89.0f) == INFINITY);     // e^89 > FLT_MAX
  REQUIRE(exp_f32(88.7f) < INFINITY);       // e^88.7 ~ 3.3e38 < FLT_MAX
  REQUIRE(exp_f32(0.0f) == 1.0f);
  REQUIRE(exp_f32(-100.0f) > 0.0f);         // a subnormal result, not flushed (e^-100 ~ 3.7e-44)
  REQUIRE(std::isnan(tanh_f32(NAN)));
  REQUIRE(tanh_f32(INFINITY) == 1.0f);
  REQUIRE(tanh_f32(-INFINITY) == -1.0f);
  REQUIRE(tanh_f32(-0.0f) == 0.0f);
  REQUIRE(std::signbit(tanh_f32(-0.0f)));
  REQUIRE(std::isnan(erf_f32(NAN)));
  REQUIRE(erf_f32(INFINITY) == 1.0f);
  REQUIRE(erf_f32(-INFINITY) == -1.0f);
  REQUIRE(erf_f32(1e-30f) == Approx(1.1283791671e-30).epsilon(1e-6));  // 2x/sqrt(pi)
}

namespace {

// ulp distance on the ordered f32 bit patterns (subnormal results count in subnormal steps).
int64_t ordered_ulps(float got, float want) {
  auto ord = [](float f) {
    const uint32_t b = mg::f32_bits(f);
    return (b & 0x80000000u) ? -int64_t(b & 0x7fffffffu) : int64_t(b);
  };
  const int64_t d = ord(got) - ord(want);
  return d < 0 ? -d : d;
}

}  // namespace

TEST_CASE("fast exp_times rounds a * e^x once, into the subnormal range too", "[core][fast_math]") {
  using mg::fast::exp_times_f32;
  int64_t worst_normal = 0, worst_tail = 0;
  for (float a : {1.0f, 3.5f, -20.0f, 0.37f, 104.0f}) {
    for (float x = -125.0f; x <= 0.0f; x += 0.0137f) {
      const float want = float(double(a) * std::exp(double(x)));
      const int64_t d = ordered_ulps(exp_times_f32(a, x), want);
      (std::fabs(want) < 1.17549435e-38f ? worst_tail : worst_normal) = std::max(
          std::fabs(want) < 1.17549435e-38f ? worst_tail : worst_normal, d);
    }
  }
  std::printf("fast exp_times: max ulp %lld (normal results), %lld (subnormal results)\n", (long long)worst_normal,
              (long long)worst_tail);
  CHECK(worst_normal <= 3);
  CHECK(worst_tail <= 1);
  CHECK(exp_times_f32(-2.0f, -INFINITY) == 0.0f);
  CHECK(std::signbit(exp_times_f32(-2.0f, -200.0f)));
  CHECK(std::isnan(exp_times_f32(1.0f, NAN)));
  CHECK(exp_times_f32(1.0f, INFINITY) == INFINITY);
}

TEST_CASE("fast normal tail: Phi and phi with relative accuracy down to x = -30", "[core][fast_math]") {
  using namespace mg::fast;
  int64_t worst_cdf = 0, worst_pdf = 0;
  for (float x = -30.0f; x <= 0.0f; x += 0.00731f) {
    const NormalTail n = normal_tail_f32(x);
    const float cdf_want = float(0.5 * std::erfc(-double(x) / std::sqrt(2.0)));
    const float pdf_want = float(std::exp(-0.5 * double(x) * double(x)) / std::sqrt(2.0 * M_PI));
    worst_cdf = std::max(worst_cdf, ordered_ulps(exp_times_f32(n.cdf, -n.h), cdf_want));
    worst_pdf = std::max(worst_pdf, ordered_ulps(exp_times_f32(n.pdf, -n.h), pdf_want));
  }
  // (1 + erf(x / sqrt 2) in f32 is exactly 0 below x = -5.9 and loses all digits well before.)
  std::printf("fast normal tail on [-30, 0]: Phi max ulp %lld, phi max ulp %lld\n", (long long)worst_cdf,
              (long long)worst_pdf);
  CHECK(worst_cdf <= 6);
  CHECK(worst_pdf <= 3);
}

TEST_CASE("exp_rounded is e^x rounded once: within 0.5 ulp plus 1e-6, never worse than libm's expf",
          "[core][fast_math]") {
  // Every 7th f32 pattern whose e^x is neither inf nor 0 (|x| < 104), against e^x in long double
  // (64-bit significand: its own error is far below what is measured here). Subnormal results are
  // measured in subnormal steps.
  using mg::fast::exp_rounded_f32;
  double worst = 0.0, worst_libm = 0.0;
  int64_t off_by_one = 0;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 7) {
    const float x = mg::f32_from_bits(uint32_t(u));
    if (!(std::fabs(x) < 104.0f)) continue;
    const long double e = std::exp((long double)x);
    const float nearest = float(e);
    const float up = std::nextafter(nearest, INFINITY);
    const long double spacing = (long double)up - (long double)nearest;
    const float got = exp_rounded_f32(x);
    worst = std::max(worst, double(std::fabs((long double)got - e) / spacing));
    worst_libm = std::max(worst_libm, double(std::fabs((long double)std::exp(x) - e) / spacing));
    off_by_one += got != nearest;
  }
  std::printf("exp_rounded: max error %.9f ulp, %lld results not the nearest float (libm expf: max %.9f ulp)\n",
              worst, (long long)off_by_one, worst_libm);
  CHECK(worst <= 0.500001);
  CHECK(worst <= worst_libm);
  // Special values and the ends of the range.
  CHECK(std::isnan(exp_rounded_f32(NAN)));
  CHECK(exp_rounded_f32(INFINITY) == INFINITY);
  CHECK(exp_rounded_f32(-INFINITY) == 0.0f);
  CHECK(exp_rounded_f32(1e30f) == INFINITY);
  CHECK(exp_rounded_f32(-1e30f) == 0.0f);
  CHECK(exp_rounded_f32(89.0f) == INFINITY);
  for (float v : {88.72283f, 88.72284f, -87.3f, -103.0f, -103.9f, -103.98f}) {  // overflow, subnormals, underflow
    CHECK(exp_rounded_f32(v) == float(std::exp(double(v))));
  }
  CHECK(exp_rounded_f32(88.72283f) < INFINITY);
  CHECK(exp_rounded_f32(0.0f) == 1.0f);
  CHECK(exp_rounded_f32(-0.0f) == 1.0f);
  CHECK(exp_rounded_f32(-103.0f) > 0.0f);  // a subnormal result (1 step of 2^-149), not flushed
  CHECK(exp_rounded_f32(-104.5f) == 0.0f);
}
