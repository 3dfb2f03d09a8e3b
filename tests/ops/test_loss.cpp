// Softmax family and losses beyond the generic op table: double backward of softmax, log_softmax
// and cross_entropy against differences of the first-order gradient; numerical stability (huge
// logits in f32 and f16); PyTorch semantics (ignore_index, all-ignored mean is NaN, label
// smoothing, pos_weight, batchmean); consistency of the fused ops with their compositions; and the
// error texts.
#include <catch2/catch.hpp>

#include <cmath>
#include <tuple>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "op_cases.h"
#include "ops/loss.h"
#include "test_util.h"

namespace mg::optable {
namespace {

using Catch::Matchers::Contains;

Tensor f64(std::vector<double> v, Shape s) { return from_vector<double>(v, s); }
Tensor labels(std::vector<int64_t> v, Shape s) { return from_vector<int64_t>(v, s); }

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t k = 0; k < a.size(); ++k) s += a[k] * b[k];
  return s;
}

// d(sum(f(x) * cot)) / dx
Tensor first_grad(const std::function<Tensor(const Tensor&)>& f, const Tensor& x, const Tensor& cot, bool create) {
  const Tensor y = f(x);
  return autograd::grad({sum(mul(y, cot))}, {x}, {}, std::nullopt, create)[0];
}

// Checks d/dx <g(x), v> (g = the first gradient, built with create_graph) against central
// differences of <g(x), v>; returns the largest absolute error.
double double_backward_error(const std::function<Tensor(const Tensor&)>& f, std::vector<double> xv, Shape s) {
  Tensor x = f64(xv, s).requires_grad_();
  Tensor y;
  {
    NoGradGuard no_grad;
    y = f(x);
  }
  const Tensor cot = from_vector<double>(randn_values(y.numel(), 11), y.shape());
  const std::vector<double> v = randn_values(x.numel(), 12);
  const Tensor vt = f64(v, s);
  const Tensor g = first_grad(f, x, cot, true);
  const Tensor gg = autograd::grad({sum(mul(g, vt))}, {x})[0];
  const std::vector<double> got = values(gg);
  double worst = 0;
  const double h = 1e-6;
  double* p = x.data<double>();
  for (int64_t k = 0; k < x.numel(); ++k) {
    const double x0 = p[k];
    p[k] = x0 + h;
    const double fp = dot(values(first_grad(f, x, cot, false)), v);
    p[k] = x0 - h;
    const double fm = dot(values(first_grad(f, x, cot, false)), v);
    p[k] = x0;
    worst = std::max(worst, std::fabs((fp - fm) / (2 * h) - got[k]));
  }
  return worst;
}

TEST_CASE("loss: double backward of softmax, log_softmax and cross_entropy", "[loss][grad]") {
  const std::vector<double> xv = randn_values(12, 3);
  const auto sm = [](const Tensor& x) { return softmax(x, 1); };
  const auto lsm = [](const Tensor& x) { return log_softmax(x, 0); };
  const Tensor t = labels({2, -100, 0}, {3});
  const auto ce = [t](const Tensor& x) { return cross_entropy(x, t, Reduction::Mean, -100, 0.1); };
  const Tensor t2 = labels({1, 3, 0}, {3});
  const auto ce_none = [t2](const Tensor& x) { return cross_entropy(x, t2, Reduction::None); };
  CHECK(double_backward_error(sm, xv, {3, 4}) < 1e-6);
  CHECK(double_backward_error(lsm, xv, {3, 4}) < 1e-6);
  CHECK(double_backward_error(ce, xv, {3, 4}) < 1e-6);
  CHECK(double_backward_error(ce_none, xv, {3, 4}) < 1e-6);
}

TEST_CASE("loss: cross_entropy gradient is (softmax - onehot) / N", "[loss][grad]") {
  // logits [[0, 0], [0, log 3]], target [0, 1]: softmax [[1/2, 1/2], [1/4, 3/4]]
  //   grad = [[1/2 - 1, 1/2], [1/4, 3/4 - 1]] / 2 = [[-0.25, 0.25], [0.125, -0.125]]
  Tensor x = f64({0, 0, 0, std::log(3.0)}, {2, 2}).requires_grad_();
  cross_entropy(x, labels({0, 1}, {2})).backward();
  const std::vector<double> g = values(x.grad());
  const std::vector<double> want{-0.25, 0.25, 0.125, -0.125};
  for (int k = 0; k < 4; ++k) CHECK(g[k] == Approx(want[k]).margin(1e-15));
}

TEST_CASE("loss: fused ops agree with their compositions", "[loss]") {
  Generator gen(7);
  const Tensor x = randn({4, 6, 3}, {.dtype = DType::F64}, &gen);
  const Tensor t = labels({0, 5, 2, 1, 1, 3, 4, 4, 0, 2, 5, -100}, {4, 3});
  // cross_entropy = nll_loss(log_softmax), none
  const std::vector<double> a = values(cross_entropy(x, t, Reduction::None));
  const std::vector<double> b = values(nll_loss(log_softmax(x, 1), t, Reduction::None));
  for (std::size_t k = 0; k < a.size(); ++k) CHECK(a[k] == Approx(b[k]).epsilon(1e-12));
  // softmax = exp(log_softmax); rows along dim 1 sum to 1
  const std::vector<double> p = values(softmax(x, 1));
  const std::vector<double> q = values(exp(log_softmax(x, 1)));
  for (std::size_t k = 0; k < p.size(); ++k) CHECK(p[k] == Approx(q[k]).epsilon(1e-12));
  for (double s : values(sum(softmax(x, 1), {1}))) CHECK(s == Approx(1.0).epsilon(1e-12));
  // label smoothing eps: (1 - eps) nll + eps mean_c(-log p_c), mean over the 11 non-ignored targets
  const double eps = 0.25;
  const Tensor lp = log_softmax(x, 1);
  const std::vector<double> smooth = values(neg(mean(lp, {1})));
  const std::vector<double> nll = values(nll_loss(lp, t, Reduction::None));
  const std::vector<int64_t> tv{0, 5, 2, 1, 1, 3, 4, 4, 0, 2, 5, -100};
  double total = 0;
  for (int k = 0; k < 12; ++k) total += tv[k] == -100 ? 0.0 : (1 - eps) * nll[k] + eps * smooth[k];
  CHECK(cross_entropy(x, t, Reduction::Mean, -100, eps).item<double>() == Approx(total / 11).epsilon(1e-12));
}

TEST_CASE("loss: all targets ignored with mean gives NaN, sum gives 0", "[loss]") {
  const Tensor x = f64({1, 2, 3, 4}, {2, 2});
  const Tensor t = labels({-100, -100}, {2});
  CHECK(std::isnan(cross_entropy(x, t).item<double>()));
  CHECK(cross_entropy(x, t, Reduction::Sum).item<double>() == 0.0);
  CHECK(std::isnan(nll_loss(x, t).item<double>()));
}

TEST_CASE("loss: all targets ignored with mean gives zero gradients (first and second order), as PyTorch",
          "[loss][grad]") {
  // 0 / 0 in the backward made every upstream gradient NaN (an MLM batch with nothing masked).
  const Tensor t = labels({-100, -100}, {2});
  Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  CHECK(values(autograd::grad({nll_loss(log_softmax(x, 1), t)}, {x})[0]) == std::vector<double>(6, 0.0));
  CHECK(values(autograd::grad({cross_entropy(x, t)}, {x})[0]) == std::vector<double>(6, 0.0));
  const Tensor g = autograd::grad({cross_entropy(x, t, Reduction::Mean, -100, 0.1)}, {x}, {}, std::nullopt, true)[0];
  CHECK(values(g) == std::vector<double>(6, 0.0));
  CHECK(values(autograd::grad({sum(g * g)}, {x}, {}, std::nullopt, false, /*allow_unused=*/true)[0]) ==
        std::vector<double>(6, 0.0));
}

TEST_CASE("loss: logits sharing a large offset keep a small log-probability's digits", "[loss][numerics]") {
  // log_softmax([c, c - 10])[0] = -log1p(e^-10) = -4.5398899e-5 whatever c: computed as
  // (x - max) - log(sum), not x - (max + log(sum)), which rounded at ulp(c) (34% off in f32 at
  // c = 1000, all of it in f64 at c = 1e12).
  // The sum 1 + e^-10 is held in the accumulation type, so log of it keeps ulp(1) / 4.5e-5 of
  // relative error in f32 (PyTorch's f32 gives -4.5418e-5 too). bf16 holds 1000 and 992 (its ulp
  // there is 4), so its gap is 8.
  for (const auto& [dt, c, d, tol] :
       {std::tuple{DType::F64, 1e12, 10.0, 1e-12}, std::tuple{DType::F32, 1000.0, 10.0, 2e-3},
        std::tuple{DType::BF16, 1000.0, 8.0, 1e-2}, std::tuple{DType::F16, 1000.0, 10.0, 5e-3}}) {
    INFO(dtype_name(dt));
    const double small = -std::log1p(std::exp(-d));
    const Tensor x = to(f64({c, c - d}, {1, 2}), dt);
    CHECK(values(log_softmax(x, 1))[0] == Approx(small).epsilon(tol));
    CHECK(values(cross_entropy(x, labels({0}, {1})))[0] == Approx(-small).epsilon(tol));
    CHECK(values(cross_entropy(x, labels({1}, {1})))[0] == Approx(d - small).epsilon(tol));
    // label smoothing 0.1: 0.9 nll + 0.1 (log-sum-exp - mean x) = -small + 0.1 * d / 2
    CHECK(values(cross_entropy(x, labels({0}, {1}), Reduction::Mean, -100, 0.1))[0] ==
          Approx(-small + 0.05 * d).epsilon(tol));
  }
}

TEST_CASE("loss: bce_with_logits with pos_weight has the right second derivative at x = 0", "[loss][grad]") {
  // d/dt = (pw - 1) softplus(-x) - x, so d2/dt dx = -(pw - 1) sigmoid(-x) - 1 = -(pw - 1) / 2 - 1 at 0
  // (the composite log1p(exp(-|x|)) + relu(-x) differentiated to -1 there: abs' and relu' are 0 at 0).
  Tensor x = f64({0.0, 0.7}, {2}).requires_grad_();
  Tensor t = f64({0.3, 0.6}, {2}).requires_grad_();
  const Tensor pw = f64({3.0, 3.0}, {2});
  const Tensor gt = autograd::grad({binary_cross_entropy_with_logits(x, t, pw, Reduction::Sum)}, {t}, {}, std::nullopt,
                                   true)[0];
  const std::vector<double> d2 = values(autograd::grad({sum(gt)}, {x})[0]);
  CHECK(d2[0] == Approx(-(3.0 - 1) * 0.5 - 1).epsilon(1e-12));
  CHECK(d2[1] == Approx(-(3.0 - 1) / (1 + std::exp(0.7)) - 1).epsilon(1e-12));
}

TEST_CASE("loss: huge logits stay finite", "[loss][numerics]") {
  // f32 logits of 1e4: exp(1e4) overflows, the max shift does not. softmax([1e4, 1e4 - 1]) =
  // [1, e^-1] / (1 + e^-1); cross_entropy with target 1 = log(1 + e^-1) + 1.
  const Tensor x = to(f64({1e4, 1e4 - 1, -1e4, 1e4}, {2, 2}), DType::F32);
  const std::vector<double> p = values(softmax(x, 1));
  CHECK(p[0] == Approx(1 / (1 + std::exp(-1.0))).epsilon(1e-6));
  CHECK(p[2] == 0.0);
  CHECK(p[3] == 1.0);
  const std::vector<double> lp = values(log_softmax(x, 1));
  CHECK(lp[2] == Approx(-2e4).epsilon(1e-6));
  CHECK(std::isfinite(lp[2]));
  const Tensor ce = cross_entropy(x, labels({1, 0}, {2}), Reduction::None);
  const std::vector<double> cv = values(ce);
  CHECK(cv[0] == Approx(std::log1p(std::exp(-1.0)) + 1).margin(2e-3));  // f32 ulp at 1e4 is 1e-3
  CHECK(cv[1] == Approx(2e4).epsilon(1e-6));
  // f16 logits near the f16 max (60000): the f32 accumulation keeps them finite
  Tensor h = to(f64({60000, 59968, 0, -60000}, {1, 4}), DType::F16).requires_grad_();
  const Tensor loss = cross_entropy(h, labels({1}, {1}));
  REQUIRE(loss.dtype() == DType::F16);
  CHECK(loss.item<double>() == Approx(32.0).epsilon(1e-3));  // 60000 - 59968 + log(1 + e^-32)
  loss.backward();
  const std::vector<double> g = values(h.grad());
  CHECK(g[0] == Approx(1.0).margin(1e-3));
  CHECK(g[1] == Approx(-1.0).margin(1e-3));
  for (double v : g) CHECK(std::isfinite(v));
  const std::vector<double> hs = values(softmax(to(f64({60000, 60000}, {2}), DType::F16), 0));
  CHECK(hs[0] == 0.5);
  // bce_with_logits on |x| = 1e4 in f32: finite, 0 for the right sign, |x| for the wrong one
  const std::vector<double> b = values(binary_cross_entropy_with_logits(
      to(f64({1e4, -1e4}, {2}), DType::F32), to(f64({1, 1}, {2}), DType::F32), Tensor(), Reduction::None));
  CHECK(b[0] == 0.0);
  CHECK(b[1] == Approx(1e4));
}

TEST_CASE("loss: reductions and options", "[loss]") {
  // kl_div batchmean = sum / size(0): input log [0.5, 0.5] rows, target [[1, 0], [0.5, 0.5]]
  //   row 0: 1 (log 1 - log 0.5) + 0 = log 2; row 1: 0 -> sum log 2, batchmean log 2 / 2
  const Tensor in = f64({std::log(0.5), std::log(0.5), std::log(0.5), std::log(0.5)}, {2, 2});
  const Tensor tg = f64({1, 0, 0.5, 0.5}, {2, 2});
  CHECK(kl_div(in, tg, Reduction::BatchMean).item<double>() == Approx(std::log(2.0) / 2).epsilon(1e-14));
  CHECK(kl_div(in, tg, Reduction::Mean).item<double>() == Approx(std::log(2.0) / 4).epsilon(1e-14));
  // log_target gives the same values for log-probability targets (t > 0)
  const Tensor tg2 = f64({0.25, 0.75, 0.5, 0.5}, {2, 2});
  CHECK(kl_div(in, log(tg2), Reduction::Sum, true).item<double>() ==
        Approx(kl_div(in, tg2, Reduction::Sum).item<double>()).epsilon(1e-12));
  {  // a NaN or negative target gives NaN, as PyTorch 2.15's [0, nan, nan, 0.1534]; 0 stays 0
    const Tensor x = f64({-1, -1, -1, -1}, {4}).requires_grad_();
    const Tensor t = f64({0, -0.5, NAN, 0.5}, {4}).requires_grad_();
    const Tensor l = kl_div(x, t, Reduction::None);
    const std::vector<double> v = values(l);
    CHECK(v[0] == 0.0);
    CHECK(std::isnan(v[1]));
    CHECK(std::isnan(v[2]));
    CHECK(v[3] == Approx(0.5 * (std::log(0.5) + 1.0)));
    l.sum().backward();
    const std::vector<double> gt = values(t.grad());  // PyTorch: [nan, nan, nan, 1.3069]; 0 at t == 0 here
    CHECK(gt[0] == 0.0);
    CHECK(std::isnan(gt[1]));
    CHECK(std::isnan(gt[2]));
    CHECK(gt[3] == Approx(std::log(0.5) + 2.0));
    const std::vector<double> gx = values(x.grad());  // -t
    CHECK((gx[0] == 0.0 && gx[1] == 0.5 && std::isnan(gx[2]) && gx[3] == -0.5));
  }
  // binary_cross_entropy clamps log at -100: p = 0 with t = 1 gives 100, not inf
  CHECK(binary_cross_entropy(f64({0.0}, {1}), f64({1.0}, {1})).item<double>() == 100.0);
  // smooth_l1 with beta 0 is l1
  const Tensor a = f64({1, -2, 3}, {3}), c = f64({0.5, 0, 3.5}, {3});
  CHECK(smooth_l1_loss(a, c, Reduction::Sum, 0.0).item<double>() == l1_loss(a, c, Reduction::Sum).item<double>());
  // an f16 loss computes in f32 and rounds once: 1000 squares of 10 sum to 100000 > 65504 (inf in
  // f16), while their mean is exactly 100
  const Tensor h1 = full({1000}, 10.0, {.dtype = DType::F16}), h0 = zeros({1000}, {.dtype = DType::F16});
  const Tensor ms = mse_loss(h1, h0, Reduction::Sum);
  CHECK(ms.dtype() == DType::F16);
  CHECK(std::isinf(ms.item<double>()));
  CHECK(mse_loss(h1, h0).item<double>() == 100.0);
}

TEST_CASE("loss: error messages name the op and both shapes", "[loss][errors]") {
  const Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK_THROWS_MATCHES(cross_entropy(x, labels({0, 3}, {2})), IndexError,
                       Catch::Matchers::Predicate<std::exception>([](const std::exception& e) {
                         const std::string m = e.what();
                         return m.find("cross_entropy: target 3 is out of range for 3 classes") == 0 &&
                                m.find("[2, 3]") != std::string::npos;
                       }));
  CHECK_THROWS_AS(cross_entropy(x, labels({0, -1}, {2})), IndexError);
  CHECK_THROWS_AS(nll_loss(x, labels({0, 7}, {2})), IndexError);
  CHECK_THROWS_WITH(cross_entropy(x, labels({0, 1, 2}, {3})),
                    Contains("cross_entropy: expected target of shape [2]") && Contains("[3]") &&
                        Contains("[2, 3]"));
  // A floating target is a distribution over classes; one of the labels' shape is named as such.
  CHECK_THROWS_AS(cross_entropy(x, f64({0, 1}, {2})), ShapeError);
  CHECK_THROWS_WITH(cross_entropy(x, f64({0, 1}, {2})),
                    Contains("cross_entropy: a floating target holds class probabilities and must have the input's "
                             "shape [2, 3], got target [2] f64 cpu") &&
                        Contains("hint: it has the shape of class indices: convert them with to(target, DType::I64)"));
  CHECK_THROWS_AS(nll_loss(x, f64({0, 1}, {2})), DTypeError);
  CHECK_THROWS_AS(mse_loss(x, f64({1, 2, 3}, {3})), ShapeError);
  CHECK_THROWS_WITH(mse_loss(x, f64({1, 2, 3}, {3})), Contains("mse_loss: expected input and target of the same shape") &&
                                                           Contains("[2, 3]") && Contains("[3]"));
  CHECK_THROWS_WITH(l1_loss(x, x, Reduction::BatchMean), Contains("l1_loss") && Contains("batchmean"));
  CHECK_THROWS_WITH(binary_cross_entropy_with_logits(x, x, f64({1, 2}, {2})),
                    Contains("binary_cross_entropy_with_logits") && Contains("pos_weight"));
  CHECK_THROWS_WITH(softmax(x, 2), Contains("softmax"));
  CHECK_THROWS_AS(softmax(labels({1, 2}, {2}), 0), DTypeError);
}

TEST_CASE("loss: binary_cross_entropy refuses probabilities outside [0, 1] and lets NaN through", "[loss]") {
  const Tensor t = f64({1, 0, 1}, {3});
  for (DType dt : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
    INFO(dtype_name(dt));
    const std::string above = mg::test::error_of([&] { binary_cross_entropy(to(f64({0.5, 1.5, 0.25}, {3}), dt), t); });
    CHECK(above.find("binary_cross_entropy: the input must be probabilities in [0, 1], got 1.5 at flat position 1 of ") == 0);
    CHECK(above.find("binary_cross_entropy_with_logits") != std::string::npos);  // the hint
    CHECK(mg::test::error_of([&] { binary_cross_entropy(to(f64({0.5, 0.5, -0.25}, {3}), dt), t); })
              .find("got -0.25 at flat position 2") != std::string::npos);
    // the bounds themselves are probabilities (log clamped at -100)
    CHECK(binary_cross_entropy(to(f64({1, 0, 1}, {3}), dt), t, Reduction::Sum).item<double>() == 0.0);
    // NaN is an overflow upstream (a GradScaler skips the step), not a bad probability
    CHECK(std::isnan(binary_cross_entropy(to(f64({0.5, NAN, 0.5}, {3}), dt), t).item<double>()));
  }
  // a strided view is read in its own order
  const Tensor m = f64({0.5, 0.5, 2.0, 0.5}, {2, 2}).t();  // position 1 of the view holds 2.0
  CHECK(mg::test::error_of([&] { binary_cross_entropy(m, f64({1, 1, 1, 1}, {2, 2})); }).find("got 2 at flat position 1") !=
        std::string::npos);
}

}  // namespace
}  // namespace mg::optable
