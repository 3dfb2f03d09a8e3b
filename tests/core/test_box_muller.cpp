// The bit-specified Box-Muller transform of randn (core/box_muller.h): the accuracy of its log and
// sin/cos of 2 pi u against x86 long double (64-bit significand, so the reference is ~2^-11 ulp of
// a double from the true value), exact values at the quadrant points, and the distribution of
// randn over 2 * 10^6 samples (moments and tails against the normal's exact values, and the same
// tail counts as the glibc transform it replaced).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/box_muller.h"
#include "core/factory.h"
#include "core/philox.h"

using namespace mg;

namespace {

// |got - want| in units of the last place of want (a double).
double ulps(double got, long double want) {
  const double w = double(want);
  const double ulp = std::nextafter(std::abs(w), INFINITY) - std::abs(w);
  return double(std::abs((long double)got - want) / (long double)ulp);
}

}  // namespace

TEST_CASE("box_muller: log_f64 is within 1 ulp for 0 < x <= 1", "[core][rng]") {
  double worst = 0;
  std::vector<double> xs = {1.0, 0.5, 0x1p-53, 1.0 - 0x1p-53, 0.70710678118654752, 0.70710678118654746,
                            1.0 - 0x1p-30, 0.999, 0.25, 1e-10};
  // Philox's u1 grid: 1 - uniform_double, every binade of (2^-53, 1] reached through a shift.
  for (uint64_t b = 0; b < 200000; ++b) {
    const Philox4 r = philox_block(17, 0, b);
    const double u = 1.0 - philox_uniform_double(r.v[0], r.v[1]);
    xs.push_back(u);
    xs.push_back(std::ldexp(u, -int(r.v[2] % 53)));
  }
  for (const double x : xs) {
    const double e = ulps(bm::log_f64(x), logl((long double)x));
    if (x == 1.0) REQUIRE(bm::log_f64(x) == 0.0);
    INFO("x " << x);
    REQUIRE(e <= 1.0);
    worst = std::max(worst, e);
  }
  WARN("log_f64: worst error " << worst << " ulp over " << xs.size() << " arguments");
}

TEST_CASE("box_muller: sin and cos of 2 pi u within 1 ulp + 2^-54", "[core][rng]") {
  const long double two_pi = 6.283185307179586476925286766559005768L;
  double worst = 0;
  for (uint64_t b = 0; b < 200000; ++b) {
    const Philox4 r = philox_block(23, 0, b);
    for (const double u : {philox_uniform_double(r.v[0], r.v[1]), philox_uniform_double(r.v[2], r.v[3])}) {
      const bm::SinCos sc = bm::sincos_2pi_f64(u);
      const long double s = sinl(two_pi * u), c = cosl(two_pi * u);
      // |got - want| <= ulp(want) + 2^-54
      const auto within = [](double got, long double want) {
        const double w = std::abs(double(want));
        return std::abs((long double)got - want) <= (long double)(std::nextafter(w, INFINITY) - w) + 0x1p-54L;
      };
      INFO("u " << u);
      REQUIRE(within(sc.s, s));
      REQUIRE(within(sc.c, c));
      worst = std::max({worst, ulps(sc.s, s) * (std::abs(s) > 0.5L), ulps(sc.c, c) * (std::abs(c) > 0.5L)});
    }
  }
  WARN("sincos_2pi_f64: worst error " << worst << " ulp where |result| > 1/2");
  // The quadrant points are exact: the reduction is done in u.
  CHECK(bm::sincos_2pi_f64(0.0).s == 0.0);
  CHECK(bm::sincos_2pi_f64(0.0).c == 1.0);
  CHECK(bm::sincos_2pi_f64(0.25).s == 1.0);
  CHECK(bm::sincos_2pi_f64(0.25).c == 0.0);
  CHECK(bm::sincos_2pi_f64(0.5).c == -1.0);
  CHECK(bm::sincos_2pi_f64(0.5).s == 0.0);
  CHECK(bm::sincos_2pi_f64(0.75).s == -1.0);
}

TEST_CASE("box_muller: randn's distribution: moments, tails, and the glibc transform's tail counts", "[core][rng]") {
  const int64_t n = 2000000;
  Generator g(31337);
  const Tensor t = randn({n}, {.dtype = DType::F64}, &g);
  const double* z = t.data<double>();
  // Accumulated in double; the sample moments' standard errors are sqrt(k / n) for the k below.
  double m1 = 0, m2 = 0, m3 = 0, m4 = 0, maxabs = 0;
  int64_t tail[4] = {0, 0, 0, 0}, old_tail[4] = {0, 0, 0, 0};
  for (int64_t i = 0; i < n; ++i) {
    const double x = z[i];
    m1 += x;
    m2 += x * x;
    m3 += x * x * x;
    m4 += x * x * x * x;
    maxabs = std::max(maxabs, std::abs(x));
    for (int k = 0; k < 4; ++k) tail[k] += std::abs(x) > double(k + 1);
  }
  // The same stream through the transform randn used before issue 14 (glibc log/cos/sin).
  for (int64_t b = 0; b < n / 2; ++b) {
    const Philox4 r = philox_block(31337, 0, uint64_t(b));
    const double rad = std::sqrt(-2.0 * std::log(1.0 - philox_uniform_double(r.v[0], r.v[1])));
    const double angle = 6.283185307179586 * philox_uniform_double(r.v[2], r.v[3]);
    for (const double x : {rad * std::cos(angle), rad * std::sin(angle)})
      for (int k = 0; k < 4; ++k) old_tail[k] += std::abs(x) > double(k + 1);
  }
  m1 /= double(n);
  m2 /= double(n);
  m3 /= double(n);
  m4 /= double(n);
  const double se = 1.0 / std::sqrt(double(n));
  CHECK(std::abs(m1) < 5 * se);                 // mean 0, variance 1
  CHECK(std::abs(m2 - 1) < 5 * std::sqrt(2.0) * se);  // E z^2 = 1, Var z^2 = 2
  CHECK(std::abs(m3) < 5 * std::sqrt(15.0) * se);     // E z^3 = 0, Var z^3 = 15
  CHECK(std::abs(m4 - 3) < 5 * std::sqrt(96.0) * se); // E z^4 = 3, Var z^4 = 105 - 9 = 96
  for (int k = 0; k < 4; ++k) {
    const double p = std::erfc(double(k + 1) / std::sqrt(2.0));  // P(|z| > k + 1)
    INFO("P(|z| > " << k + 1 << ") = " << p << ", count " << tail[k]);
    CHECK(std::abs(double(tail[k]) - p * double(n)) < 5 * std::sqrt(p * (1 - p) * double(n)) + 1);
    CHECK(tail[k] == old_tail[k]);
  }
  // The largest |z| Philox's 53-bit u1 can give is sqrt(2 * 53 ln 2) = 8.57; 2e6 samples reach ~5.
  CHECK(maxabs > 4.5);
  CHECK(maxabs < 8.58);
}
