// nn::init: gains, fans, the statistics of every initialiser on large tensors (tolerances of 5
// standard errors of the sample size, so a missing sqrt, a wrong gain or a fan_in/fan_out swap
// fails), reproducibility from a seeded Generator, one rounding into f16/bf16, and errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/factory.h"
#include "core/generator.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;
namespace init = mg::nn::init;

namespace {

struct Stats {
  double n = 0, mean = 0, std = 0, min = 0, max = 0;
  double frac = 0;  // fraction of the values in [lo, hi]
};

// Sample statistics in f64, and the fraction of values in [lo, hi].
Stats stats_of(const Tensor& t, double lo = 0, double hi = 0) {
  const std::vector<double> v = values(t);
  Stats s;
  s.n = double(v.size());
  double sum = 0, within = 0;
  for (double x : v) sum += x, within += (x >= lo && x <= hi);
  s.mean = sum / s.n;
  double sq = 0;
  for (double x : v) sq += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(sq / (s.n - 1));
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  s.frac = within / s.n;
  return s;
}

// Mean and std of a sample of n values from a distribution with the given mean and std, within
// 5 standard errors: se(mean) = std / sqrt(n), se(std) <= std / sqrt(2n) for distributions with
// kurtosis <= 3 (normal, truncated normal, uniform).
void check_moments(const Stats& s, double mean, double std) {
  INFO("n " << s.n << ": mean " << s.mean << " (want " << mean << "), std " << s.std << " (want " << std << ")");
  CHECK(std::fabs(s.mean - mean) <= 5 * std / std::sqrt(s.n));
  CHECK(std::fabs(s.std - std) <= 5 * std / std::sqrt(2 * s.n));
}

// U(-b, b): every value within the bound (up to the f32 rounding of b) and the extremes close to
// it: P(max |x| < b (1 - 1e-3)) = (1 - 1e-3)^n, negligible for n >= 1e5.
void check_uniform(const Tensor& t, double b) {
  const Stats s = stats_of(t);
  INFO("bound " << b << ": min " << s.min << ", max " << s.max);
  CHECK(s.min >= -b * (1 + 1e-6));
  CHECK(s.max <= b * (1 + 1e-6));
  CHECK(s.min < -b * (1 - 1e-3));
  CHECK(s.max > b * (1 - 1e-3));
  check_moments(s, 0.0, b / std::sqrt(3.0));
}

// Standard normal CDF and density, for truncated-normal moments.
double phi(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI); }
double Phi(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

}  // namespace

TEST_CASE("calculate_gain gives PyTorch's gains", "[nn][init]") {
  using NL = init::Nonlinearity;
  CHECK(init::calculate_gain(NL::Linear) == 1.0);
  CHECK(init::calculate_gain(NL::Conv) == 1.0);
  CHECK(init::calculate_gain(NL::Sigmoid) == 1.0);
  CHECK(init::calculate_gain(NL::Tanh) == Approx(5.0 / 3.0).epsilon(1e-15));
  CHECK(init::calculate_gain(NL::ReLU) == Approx(std::sqrt(2.0)).epsilon(1e-15));
  // default negative slope 0.01: sqrt(2 / 1.0001)
  CHECK(init::calculate_gain(NL::LeakyReLU) == Approx(std::sqrt(2.0 / 1.0001)).epsilon(1e-15));
  CHECK(init::calculate_gain(NL::LeakyReLU, 0.2) == Approx(std::sqrt(2.0 / 1.04)).epsilon(1e-15));
  // a = sqrt(5), PyTorch's default Linear init: sqrt(2 / 6) = 1 / sqrt(3)
  CHECK(init::calculate_gain(NL::LeakyReLU, std::sqrt(5.0)) == Approx(1.0 / std::sqrt(3.0)).epsilon(1e-15));
  CHECK(init::calculate_gain(NL::SELU) == 0.75);
}

TEST_CASE("fan_in_and_fan_out of linear and conv weights", "[nn][init]") {
  // Linear weight [out, in]
  CHECK(init::fan_in_and_fan_out(empty({10, 784})) == std::pair<int64_t, int64_t>{784, 10});
  // Conv weight [out, in, kH, kW]: the receptive field 5 * 7 = 35 multiplies both
  CHECK(init::fan_in_and_fan_out(empty({16, 3, 5, 7})) == std::pair<int64_t, int64_t>{3 * 35, 16 * 35});
  // ConvTranspose weight [in, out/groups, kH, kW]: PyTorch reads dim 1 as fan in as well
  CHECK(init::fan_in_and_fan_out(empty({8, 2, 3, 3})) == std::pair<int64_t, int64_t>{18, 72});
  MG_REQUIRE_ERROR(init::fan_in_and_fan_out(empty({5})),
                   "nn::init: fan in and fan out need a tensor with at least 2 dims, got [5] f32 cpu");
}

TEST_CASE("uniform_ and normal_ have the requested moments and range", "[nn][init]") {
  Generator gen(11);
  const int64_t n = 1 << 18;
  {
    // U(-2, 3): mean 0.5, std 5 / sqrt(12)
    const Stats s = stats_of(init::uniform_(empty({n}), -2.0, 3.0, &gen));
    CHECK(s.min >= -2.0);
    CHECK(s.max < 3.0);
    CHECK(s.min < -2.0 + 5e-3);  // P(min > -2 + 5e-3) = (1 - 1e-3)^n
    CHECK(s.max > 3.0 - 5e-3);
    check_moments(s, 0.5, 5.0 / std::sqrt(12.0));
  }
  {
    // N(1.5, 0.5^2); the fraction within one std (0.6827) tells a normal from a uniform
    const Stats s = stats_of(init::normal_(empty({n}), 1.5, 0.5, &gen), 1.0, 2.0);
    check_moments(s, 1.5, 0.5);
    const double p = std::erf(1.0 / std::sqrt(2.0));
    CHECK(std::fabs(s.frac - p) <= 5 * std::sqrt(p * (1 - p) / s.n));
  }
  {
    const std::vector<double> c = values(init::constant_(empty({3, 2}), 0.25));
    CHECK(c == std::vector<double>(6, 0.25));
    CHECK(values(init::zeros_(ones({4}))) == std::vector<double>(4, 0.0));
    CHECK(values(init::ones_(zeros({4}))) == std::vector<double>(4, 1.0));
  }
}

TEST_CASE("xavier initialisers use gain * sqrt(6 or 2 / (fan_in + fan_out))", "[nn][init]") {
  Generator gen(12);
  // [256, 1024]: fan_in 1024, fan_out 256, sum 1280
  Tensor w = empty({256, 1024});
  init::xavier_uniform_(w, 1.0, &gen);
  check_uniform(w, std::sqrt(6.0 / 1280.0));
  init::xavier_uniform_(w, init::calculate_gain(init::Nonlinearity::Tanh), &gen);
  check_uniform(w, 5.0 / 3.0 * std::sqrt(6.0 / 1280.0));
  init::xavier_normal_(w, 2.0, &gen);
  const Stats s = stats_of(w);
  check_moments(s, 0.0, 2.0 * std::sqrt(2.0 / 1280.0));
  // conv weight [64, 32, 3, 3]: fan_in 288, fan_out 576
  Tensor c = empty({64, 32, 3, 3});
  init::xavier_normal_(c, 1.0, &gen);
  check_moments(stats_of(c), 0.0, std::sqrt(2.0 / (288.0 + 576.0)));
}

TEST_CASE("kaiming initialisers use gain / sqrt(fan) with the chosen fan", "[nn][init]") {
  using NL = init::Nonlinearity;
  Generator gen(13);
  // [256, 1024]: fan_in 1024 and fan_out 256 differ by 4x, so a swap doubles or halves the spread.
  Tensor w = empty({256, 1024});
  // defaults: a = 0, fan_in, leaky_relu -> gain sqrt(2), b = sqrt(2) sqrt(3 / 1024)
  init::kaiming_uniform_(w, {}, &gen);
  check_uniform(w, std::sqrt(2.0) * std::sqrt(3.0 / 1024.0));
  init::kaiming_uniform_(w, {.mode = init::FanMode::FanOut, .nonlinearity = NL::ReLU}, &gen);
  check_uniform(w, std::sqrt(2.0) * std::sqrt(3.0 / 256.0));
  // PyTorch's Linear/Conv default: a = sqrt(5) gives U(-1/sqrt(fan_in), 1/sqrt(fan_in))
  init::kaiming_uniform_(w, {.a = std::sqrt(5.0)}, &gen);
  check_uniform(w, 1.0 / 32.0);
  init::kaiming_normal_(w, {.nonlinearity = NL::ReLU}, &gen);
  check_moments(stats_of(w), 0.0, std::sqrt(2.0) / 32.0);
  init::kaiming_normal_(w, {.mode = init::FanMode::FanOut, .nonlinearity = NL::Tanh}, &gen);
  check_moments(stats_of(w), 0.0, 5.0 / 3.0 / 16.0);
  // ResNet's conv init: kaiming_normal_(fan_out, relu) on [64, 32, 3, 3], fan_out = 64 * 9
  Tensor c = empty({64, 32, 3, 3});
  init::kaiming_normal_(c, {.mode = init::FanMode::FanOut, .nonlinearity = NL::ReLU}, &gen);
  check_moments(stats_of(c), 0.0, std::sqrt(2.0 / 576.0));
  // leaky_relu with slope 0.2, fan_in = 32 * 9
  init::kaiming_uniform_(c, {.a = 0.2}, &gen);
  check_uniform(c, std::sqrt(2.0 / 1.04) * std::sqrt(3.0 / 288.0));
}

TEST_CASE("trunc_normal_ stays in its bounds with the truncated normal's moments", "[nn][init]") {
  Generator gen(14);
  const int64_t n = 1 << 18;
  // N(0, 1) on [-a, a]: var = 1 - 2 a phi(a) / (2 Phi(a) - 1)
  for (double a : {2.0, 1.0}) {
    Tensor t = empty({n});
    init::trunc_normal_(t, 0.0, 1.0, -a, a, &gen);
    const Stats s = stats_of(t);
    INFO("bounds +-" << a);
    CHECK(s.min >= -a);
    CHECK(s.max <= a);
    CHECK(s.max > a - 1e-3);  // the density near the bound is not small
    CHECK(s.min < -a + 1e-3);
    check_moments(s, 0.0, std::sqrt(1.0 - 2 * a * phi(a) / (2 * Phi(a) - 1)));
  }
  {
    // BERT: std 0.02 with the default +-2 bounds, effectively untruncated
    const Stats s = stats_of(init::trunc_normal_(empty({n}), 0.0, 0.02, -2.0, 2.0, &gen));
    check_moments(s, 0.0, 0.02);
  }
  {
    // one-sided: N(1, 1) on [1, 10] is a half normal: mean 1 + sqrt(2/pi), std sqrt(1 - 2/pi)
    const Stats s = stats_of(init::trunc_normal_(empty({n}), 1.0, 1.0, 1.0, 10.0, &gen));
    CHECK(s.min >= 1.0);
    check_moments(s, 1.0 + std::sqrt(2.0 / M_PI), std::sqrt(1.0 - 2.0 / M_PI));
  }
}

namespace {
// Mean and std of N(0, 1) restricted to [a, b] by Simpson's rule on exp((m^2 - x^2) / 2), m the
// density's peak in [a, b], so tails far beyond f64's normal CDF (a = 40) integrate without
// underflow. An infinite bound is cut where the density has fallen by e^-200.
std::pair<double, double> truncated_moments(double a, double b) {
  const double m = a > 0 ? a : (b < 0 ? b : 0.0);
  if (std::isinf(b)) b = std::max(a, 0.0) + 20.0;
  if (std::isinf(a)) a = std::min(b, 0.0) - 20.0;
  const int steps = 200000;
  const double h = (b - a) / steps;
  double z = 0, s1 = 0, s2 = 0;  // moments of x - a: no cancellation on a narrow interval far out
  for (int i = 0; i <= steps; ++i) {
    const double x = a + h * i, w = (i == 0 || i == steps) ? 1 : (i % 2 ? 4 : 2);
    const double f = w * std::exp((m * m - x * x) / 2);
    z += f, s1 += f * (h * i), s2 += f * (h * i) * (h * i);
  }
  const double shifted = s1 / z;
  return {a + shifted, std::sqrt(s2 / z - shifted * shifted)};
}
}  // namespace

TEST_CASE("trunc_normal_ samples bounds that hold almost none of the mass, exactly", "[nn][init]") {
  // PyTorch's inverse-CDF method returns the bound itself for [5, 6] and beyond; these come from
  // Robert's proposals. Each case: every value inside, and the moments of the truncated normal.
  Generator gen(31);
  const int64_t n = 1 << 16;
  struct Case {
    double mean, std, low, high;
  };
  const double inf = std::numeric_limits<double>::infinity();
  for (const Case& c : {Case{0, 1, 5, 6}, Case{0, 1, 8, inf}, Case{0, 1, -inf, -40}, Case{3, 2, 13, 14},
                        Case{0, 1, -0.1, 0.15}, Case{0, 1, 1, 3}, Case{0, 1, 2.99, 2.990001}, Case{0, 1, -38, -37.5}}) {
    INFO("N(" << c.mean << ", " << c.std << "^2) on [" << c.low << ", " << c.high << "]");
    const Tensor t = init::trunc_normal_(empty({n}, {.dtype = DType::F64}), c.mean, c.std, c.low, c.high, &gen);
    const Stats s = stats_of(t);
    CHECK(s.min >= c.low);
    CHECK(s.max <= c.high);
    const auto [mean, std] = truncated_moments((c.low - c.mean) / c.std, (c.high - c.mean) / c.std);
    check_moments(s, c.mean + c.std * mean, c.std * std);
  }
  // f16 and bf16: sampled in f64, rounded once, inside the bounds
  for (DType dt : {DType::F16, DType::BF16}) {
    Generator ga(4), gb(4);
    const Tensor low = init::trunc_normal_(empty({512}, {.dtype = dt}), 0.0, 1.0, 6.0, 7.0, &ga);
    const Tensor ref = init::trunc_normal_(empty({512}, {.dtype = DType::F64}), 0.0, 1.0, 6.0, 7.0, &gb);
    CHECK(values(low) == values(to(ref, dt)));
  }
}

TEST_CASE("initialisers are reproducible from a seeded generator and record no history", "[nn][init]") {
  auto draw = [](uint64_t seed) {
    Generator gen(seed);
    Tensor w = empty({64, 32});
    init::kaiming_uniform_(w, {}, &gen);
    init::normal_(w, 0.0, 1.0, &gen);  // advances the same stream
    return values(w);
  };
  CHECK(draw(5) == draw(5));
  CHECK(draw(5) != draw(6));
  // successive draws from one generator differ
  Generator gen(7);
  const std::vector<double> a = values(init::normal_(empty({100}), 0.0, 1.0, &gen));
  const std::vector<double> b = values(init::normal_(empty({100}), 0.0, 1.0, &gen));
  CHECK(a != b);
  // trunc_normal_ too
  Generator g1(8), g2(8);
  CHECK(values(init::trunc_normal_(empty({1000}), 0, 1, -1, 1, &g1)) ==
        values(init::trunc_normal_(empty({1000}), 0, 1, -1, 1, &g2)));
  // the default generator: layers built after the same manual_seed are identical
  manual_seed(123);
  nn::Linear l1({.in = 8, .out = 4});
  manual_seed(123);
  nn::Linear l2({.in = 8, .out = 4});
  CHECK(values(l1.weight) == values(l2.weight));
  CHECK(values(l1.bias) == values(l2.bias));
  // a parameter stays a leaf that requires grad and gets no grad_fn
  CHECK(l1.weight.requires_grad());
  CHECK(l1.weight.is_leaf());
  init::xavier_uniform_(l1.weight);
  CHECK(l1.weight.is_leaf());
  CHECK(l1.weight.grad_fn() == nullptr);
}

TEST_CASE("initialisers draw in f32 (f64 for f64) and round once into the tensor's dtype", "[nn][init]") {
  // f16/bf16: exactly the f32 draw rounded once
  for (DType dt : {DType::BF16, DType::F16}) {
    INFO(dtype_name(dt));
    {
      Generator ga(21), gb(21);
      Tensor low = empty({4096}, {.dtype = dt});
      Tensor ref = empty({4096});
      init::uniform_(low, -0.3, 0.7, &ga);
      init::uniform_(ref, -0.3, 0.7, &gb);
      CHECK(low.dtype() == dt);
      CHECK(values(low) == values(to(ref, dt)));
    }
    {
      Generator ga(22), gb(22);
      Tensor low = empty({64, 64}, {.dtype = dt});
      Tensor ref = empty({64, 64});
      init::kaiming_normal_(low, {}, &ga);
      init::kaiming_normal_(ref, {}, &gb);
      CHECK(values(low) == values(to(ref, dt)));
    }
    {
      // trunc_normal_ samples in f64 and rounds once
      Generator ga(23), gb(23);
      Tensor low = empty({4096}, {.dtype = dt});
      Tensor ref = empty({4096}, {.dtype = DType::F64});
      init::trunc_normal_(low, 0.0, 0.02, -0.04, 0.04, &ga);
      init::trunc_normal_(ref, 0.0, 0.02, -0.04, 0.04, &gb);
      CHECK(values(low) == values(to(ref, dt)));
    }
  }
  // f64: the same draw computed in double: close to the f32 result but not f32 values
  Generator ga(24), gb(24);
  Tensor d = empty({4096}, {.dtype = DType::F64});
  Tensor f = empty({4096});
  init::normal_(d, 0.1, 0.3, &ga);
  init::normal_(f, 0.1, 0.3, &gb);
  const std::vector<double> dv = values(d), fv = values(f);
  int64_t not_f32 = 0;
  for (std::size_t i = 0; i < dv.size(); ++i) {
    REQUIRE(std::fabs(dv[i] - fv[i]) <= 1e-6 * (1 + std::fabs(dv[i])));
    not_f32 += double(float(dv[i])) != dv[i];
  }
  CHECK(not_f32 > 4000);
}

TEST_CASE("initialiser errors name the function and the tensor", "[nn][init][errors]") {
  MG_REQUIRE_ERROR(init::xavier_uniform_(empty({5})),
                   "nn::init::xavier_uniform_: fan in and fan out need a tensor with at least 2 dims, got [5] f32 cpu");
  MG_REQUIRE_ERROR(init::xavier_normal_(empty({5})), "nn::init::xavier_normal_: fan in and fan out need");
  MG_REQUIRE_ERROR(init::kaiming_normal_(empty({5})), "nn::init::kaiming_normal_: fan in and fan out need");
  MG_REQUIRE_ERROR(init::kaiming_uniform_(zeros({4, 4}, {.dtype = DType::I64})),
                   "nn::init::kaiming_uniform_: expected a floating tensor, got [4, 4] i64 cpu");
  MG_REQUIRE_ERROR(init::normal_(zeros({3}, {.dtype = DType::I32})),
                   "nn::init::normal_: expected a floating tensor, got [3] i32 cpu");
  MG_REQUIRE_ERROR(init::uniform_(zeros({3}, {.dtype = DType::Bool})), "nn::init::uniform_: expected a floating tensor");
  MG_REQUIRE_ERROR(init::constant_(zeros({3}, {.dtype = DType::I64}), 1.0), "nn::init::constant_: expected a floating");
  MG_REQUIRE_ERROR(init::uniform_(empty({3}), 1.0, 0.0), "nn::init::uniform_: low (1) must not exceed high (0)");
  MG_REQUIRE_ERROR(init::normal_(empty({3}), 0.0, -1.0), "nn::init::normal_: std must be non-negative, got -1");
  MG_REQUIRE_ERROR(init::trunc_normal_(empty({3}), 0.0, 1.0, 1.0, -1.0), "nn::init::trunc_normal_: bounds [1, -1] must satisfy low < high");
  MG_REQUIRE_ERROR(init::trunc_normal_(empty({3}), 0.0, 0.0, 1.0, 2.0), "with std 0 every value is the mean (0)");
  MG_REQUIRE_ERROR(init::trunc_normal_(empty({3}), 0.0, 1.0, std::nan(""), 2.0), "the bounds not NaN");
  MG_REQUIRE_ERROR(init::trunc_normal_(empty({3}), 0.0, -1.0), "std (-1) must be non-negative");
  // std 0 is the constant mean
  CHECK(values(init::trunc_normal_(empty({3}), 0.5, 0.0, 0.0, 1.0)) == std::vector<double>(3, 0.5));
}
