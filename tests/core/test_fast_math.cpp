// The vectorisable f32 exp/tanh/erf of core/fast_math.h against f64 libm, in ulps, over a sweep
// of f32 bit patterns, plus their special values.
#include <catch2/catch.hpp>

#include <cmath>

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
