// clip_grad_norm_ and clip_grad_value_: the total norm and the clipped gradients against PyTorch
// 1.13 (tests/data/reference/optim.txt; f64 to 1e-12, f32 to 1e-6), inf/NaN norms returned and
// reported without touching the gradients, f16 gradients scaled in f32 and rounded once, large
// gradients over several chunks, errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "core/factory.h"
#include "optim_test_util.h"

using namespace mg;
using test::bits_equal;

namespace {

Tensors params_with_grads(const Tensors& grads) {
  Tensors ps;
  for (const Tensor& g : grads) {
    Tensor p = zeros(g.shape(), {.dtype = g.dtype()}).requires_grad_();
    p.set_grad(clone(g));
    ps.push_back(p);
  }
  return ps;
}

}  // namespace

TEST_CASE("clip_grad_norm_: total norm and clipped gradients match PyTorch", "[optim]") {
  const test::ReferenceFile f = test::load_reference("optim.txt");
  int cases = 0;
  for (const std::string& c : f.cases()) {
    if (!f.has(c + ".max_norm")) continue;
    ++cases;
    for (DType dt : {DType::F64, DType::F32}) {
      DYNAMIC_SECTION("case " << c << " " << dtype_name(dt)) {
        const double rtol = dt == DType::F64 ? 1e-12 : 1e-6;
        Tensors grads;
        for (int k = 1; k <= 3; ++k) grads.push_back(to(f.tensor("clip.g" + std::to_string(k)), dt));
        Tensors ps = params_with_grads(grads);
        ps.push_back(zeros({2}).requires_grad_());  // no gradient: skipped
        const Tensor total = optim::clip_grad_norm_(ps, f.f64_value(c + ".max_norm"), f.f64_value(c + ".norm_type"));
        CHECK(total.dim() == 0);
        CHECK(total.dtype() == dt);
        const double e0 = test::rel_error(total, {f.f64_value(c + ".total_norm")});
        INFO("total norm " << total.item<double>() << " want " << f.f64_value(c + ".total_norm") << " rel " << e0);
        REQUIRE(e0 <= rtol);
        double worst = e0;
        for (int k = 0; k < 3; ++k) {
          const double e = test::rel_error(ps[k].grad(), test::values(f.tensor(c + ".g" + std::to_string(k + 1))));
          INFO("g" << k + 1 << " rel " << e);
          REQUIRE(e <= rtol);
          worst = std::max(worst, e);
        }
        test::report(c + " (" + dtype_name(dt) + ")", worst);
      }
    }
  }
  CHECK(cases == 5);
}

TEST_CASE("clip_grad_norm_: inf and NaN norms are returned, reported and leave the gradients alone", "[optim]") {
  for (double bad : {double(INFINITY), -double(INFINITY), double(NAN)}) {
    for (double norm_type : {2.0, double(INFINITY), 1.0}) {
      DYNAMIC_SECTION("gradient " << bad << " norm_type " << norm_type) {
        const Tensors ps = params_with_grads({from_vector<float>({3, 4}), from_vector<float>({1, float(bad), 2})});
        const Tensor before = clone(ps[1].grad());
        const Tensor total = optim::clip_grad_norm_(ps, 1.0, norm_type);
        const double n = total.item<double>();
        if (std::isnan(bad)) {
          CHECK(std::isnan(n));
        } else {
          CHECK(n == INFINITY);
        }
        CHECK(test::values(ps[0].grad()) == std::vector<double>{3, 4});  // not scaled by NaN or 0
        CHECK(bits_equal(ps[1].grad(), before));
        const std::string expected = std::string("clip_grad_norm_: the total norm of order ") +
                                     (std::isinf(norm_type) ? "inf" : std::to_string(int(norm_type))) +
                                     " of the gradients is " + (std::isnan(bad) ? "nan" : "inf");
        MG_REQUIRE_ERROR(optim::clip_grad_norm_(ps, 1.0, norm_type, /*error_if_nonfinite=*/true), expected);
        CHECK(test::values(ps[0].grad()) == std::vector<double>{3, 4});
      }
    }
  }
}

TEST_CASE("clip_grad_norm_: f16/bf16 gradients are scaled in f32 and rounded once - f32 total", "[optim]") {
  for (DType low : {DType::F16, DType::BF16}) {
    const Tensor g = to(from_vector<float>({3.0f, -4.0f, 0.1f, 1e-3f}), low);
    const Tensors ps = params_with_grads({g});
    const Tensor total = optim::clip_grad_norm_(ps, 1.0);
    CHECK(total.dtype() == DType::F32);
    // Sum of squares in f32 of the rounded values.
    const std::vector<double> v = test::values(g);
    float sq = 0;
    for (double x : v) sq += float(x) * float(x);
    const float norm = std::sqrt(sq);
    CHECK(total.item<double>() == double(norm));
    const float coef = 1.0f / (norm + 1e-6f);
    std::vector<float> want;
    for (double x : v) want.push_back(float(x) * coef);
    CHECK(bits_equal(ps[0].grad(), to(from_vector<float>(want), low)));
  }
}

TEST_CASE("clip_grad_norm_: many chunks, mixed dtypes, no gradients", "[optim]") {
  Generator gen(5);
  const Tensor big = randn({200003}, {}, &gen);
  const Tensor small = randn({7}, {.dtype = DType::F64}, &gen);
  const Tensors ps = params_with_grads({big, small});
  double sq = 0;
  for (double x : test::values(big)) sq += x * x;
  for (double x : test::values(small)) sq += x * x;
  const Tensor total = optim::clip_grad_norm_(ps, 1.0);
  CHECK(total.dtype() == DType::F64);  // an f64 gradient: the total is f64
  CHECK(total.item<double>() == Approx(std::sqrt(sq)).epsilon(1e-6));
  // After clipping, the norm is max_norm (up to the 1e-6 in the coefficient).
  const Tensor again = optim::clip_grad_norm_(ps, 1.0);
  CHECK(again.item<double>() == Approx(1.0).epsilon(1e-5));

  const Tensor none = optim::clip_grad_norm_({zeros({3}).requires_grad_()}, 1.0);
  CHECK(none.item<double>() == 0.0);
  MG_REQUIRE_ERROR(optim::clip_grad_norm_(ps, -1.0), "clip_grad_norm_: max_norm must be >= 0, got -1");
  MG_REQUIRE_ERROR(optim::clip_grad_norm_(ps, 1.0, 0.0), "clip_grad_norm_: norm_type must be > 0 (or INFINITY), got 0");
}

TEST_CASE("clip_grad_value_: clamps each element, NaN stays NaN", "[optim]") {
  const Tensors ps = params_with_grads({from_vector<float>({-3, -0.5, 0, 0.25, 2, NAN}), from_vector<double>({10, -10})});
  Tensor untouched = zeros({1}).requires_grad_();
  Tensors all = ps;
  all.push_back(untouched);
  const uint64_t v = ps[0].grad().version();
  optim::clip_grad_value_(all, 1.0);
  const std::vector<double> g = test::values(ps[0].grad());
  CHECK(g[0] == -1.0);
  CHECK(g[1] == -0.5);
  CHECK(g[2] == 0.0);
  CHECK(g[3] == 0.25);
  CHECK(g[4] == 1.0);
  CHECK(std::isnan(g[5]));
  CHECK(test::values(ps[1].grad()) == std::vector<double>{1, -1});
  CHECK(ps[0].grad().version() > v);
  CHECK(!untouched.grad().defined());
  MG_REQUIRE_ERROR(optim::clip_grad_value_(all, -1.0), "clip_grad_value_: clip_value must be >= 0, got -1");
}

TEST_CASE("clip_grad_norm_: a gradient listed twice is counted and scaled once, the same every run", "[optim]") {
  // Scaled twice, its two entries raced on one memory in the parallel pass (above 32,768 elements).
  Tensor a = zeros({40000}).requires_grad_(true);
  a.set_grad(full({40000}, 1.0));
  const double norm = optim::clip_grad_norm_({a, a}, 1.0).item<double>();
  CHECK(norm == Approx(200.0).epsilon(1e-6));  // sqrt(40000): once
  const std::vector<double> g = test::values(a.grad());
  const double want = double(float(1.0 / (200.0 + 1e-6)));
  int wrong = 0;
  for (double v : g) wrong += std::fabs(v - want) > 1e-6 * want;
  CHECK(wrong == 0);
  optim::clip_grad_value_({a, a}, 1e-6);
  CHECK(test::values(a.grad())[123] == Approx(1e-6).epsilon(1e-6));
}

TEST_CASE("master weights: a model moved to f64 after use_master_weights is copied, not skipped", "[optim]") {
  Tensor w = from_vector<float>({1, 2, 3}).to(DType::F16).requires_grad_(true);
  optim::SGD opt({w}, {.lr = 0.5});
  opt.use_master_weights();
  {
    NoGradGuard no_grad;
    w.set_data(w.to(DType::F64));  // what Module::to(DType::F64) does to the parameter
  }
  w.set_grad(from_vector<double>({2, 2, 2}));
  opt.step();
  CHECK(test::values(w) == std::vector<double>{0, 1, 2});
}
