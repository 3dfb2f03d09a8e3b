// normalize, pdist (ops/distance.h) and gumbel_softmax (ops/activation_composites.h):
// normalize's values and gradient against the closed form (I - u uᵀ) / ||x|| in f64, p = 1 and
// other dims, the eps clamp (no gradient through the norm below it, as PyTorch's clamp_min), the
// fp32 autocast policy; pdist against PyTorch 2.15 in f64 (tests/data/reference/torch_pdist.json,
// tools/reference/gen_torch_pdist.py); gumbel_softmax's distribution (the Gumbel-max trick) and
// its hard, straight-through form.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "core/factory.h"
#include "ops/activation_composites.h"
#include "ops/distance.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "reference/json_reference.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

TEST_CASE("normalize divides by the clamped p-norm along a dim, with the closed-form gradient", "[ops][normalize]") {
  const Tensor x = from_vector<double>({3, 4, 0, 0, -1, 2}, {3, 2}).requires_grad_();
  const Tensor u = normalize(x);
  const std::vector<double> v = values(u);
  const double s5 = std::sqrt(5.0);
  const std::vector<double> want{0.6, 0.8, 0, 0, -1 / s5, 2 / s5};
  for (std::size_t i = 0; i < v.size(); ++i) CHECK(v[i] == Approx(want[i]).epsilon(1e-15));
  // d sum(r * u) / dx = (r - u (u . r)) / ||x|| per row; the zero row (norm clamped to eps): r / eps
  const Tensor r = from_vector<double>({1, -2, 0.5, 0.25, 3, 1}, {3, 2});
  const Tensor g = autograd::grad({sum(u * r)}, {x})[0];
  const std::vector<double> gv = values(g), rv = values(r);
  const double norms[3] = {5.0, 1e-12, s5};
  for (int row = 0; row < 3; ++row) {
    const double dot = want[2 * row] * rv[2 * row] + want[2 * row + 1] * rv[2 * row + 1];
    for (int k = 0; k < 2; ++k) {
      const double expect = (rv[2 * row + k] - want[2 * row + k] * dot) / norms[row];
      CHECK(gv[2 * row + k] == Approx(expect).epsilon(1e-12));
    }
  }
  // p = 1 along dim 0
  const std::vector<double> l1 = values(normalize(from_vector<double>({1, -3, 2, 1}, {2, 2}), 1.0, 0));
  CHECK(l1 == std::vector<double>({1.0 / 3, -0.75, 2.0 / 3, 0.25}));
  MG_REQUIRE_ERROR(normalize(x, 2.0, 2), "normalize");
}

TEST_CASE("normalize of bf16 is computed in f32 and rounded once, autocast gives f32", "[ops][normalize]") {
  manual_seed(2);
  const Tensor x = randn({4, 8});
  const Tensor xb = x.to(DType::BF16);
  CHECK(values(normalize(xb)) == values(normalize(xb.to(DType::F32)).to(DType::BF16)));
  amp::Autocast ac({.dtype = DType::BF16});
  CHECK(normalize(xb).dtype() == DType::F32);
}

TEST_CASE("pdist equals PyTorch's in f64 for p 2, 1, 3, 0.5, inf and 0, zero distances included", "[ops][normalize]") {
  const nlohmann::json ref = test::load_json_reference("torch_pdist.json");
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    const double p = c["p"].is_string() ? INFINITY : c["p"].get<double>();
    INFO("p " << p);
    const Tensor x = test::json_tensor(c["x"], ref["shape"]).requires_grad_();
    const Tensor d = pdist(x, p);
    CHECK(d.shape() == Shape{10});
    test::check_json_close(d, c["d"]);
    const Tensor g = autograd::grad({sum(d * test::json_tensor(c["r"], nlohmann::json::array({10})))}, {x})[0];
    test::check_json_close(g, c["grad"]);
    ++checked;
  }
  CHECK(checked == 6);
  CHECK(pdist(zeros({1, 3})).shape() == Shape{0});
  MG_REQUIRE_ERROR(pdist(zeros({3})), "pdist: expected x [N, M]");
  MG_REQUIRE_ERROR(pdist(zeros({3, 2}), -1), "pdist: p must be >= 0");
}

TEST_CASE("gumbel_softmax samples softmax(logits) by the Gumbel-max trick, hard is straight-through", "[ops][normalize]") {
  const Tensor logits = from_vector<double>({1.0, 0.0, -1.0, 2.0}, {1, 4});
  const std::vector<double> p = values(softmax(logits, 1));
  manual_seed(17);
  const int64_t draws = 40000;
  const Tensor many = logits.expand({draws, 4}).contiguous();
  const Tensor soft = gumbel_softmax(many, 0.5);
  CHECK(soft.dtype() == DType::F64);
  const std::vector<double> sums = values(sum(soft, {1}));
  for (const double s : sums) REQUIRE(s == Approx(1.0).epsilon(1e-12));
  // the argmax of a sample is class k with probability softmax(logits)[k], whatever tau
  const std::vector<double> counts = values(sum(one_hot(argmax(soft, 1), 4).to(DType::F64), {0}));
  for (int k = 0; k < 4; ++k) CHECK(counts[std::size_t(k)] / double(draws) == Approx(p[std::size_t(k)]).margin(0.01));
  // hard: one-hot forward at the soft sample's argmax (same draws), the soft sample's gradient
  const Tensor x = logits.expand({8, 4}).contiguous().requires_grad_();
  manual_seed(3);
  const Tensor s8 = gumbel_softmax(x, 0.7);
  manual_seed(3);
  const Tensor h8 = gumbel_softmax(x, 0.7, /*hard=*/true);
  CHECK(values(sum(h8, {1})) == std::vector<double>(8, 1.0));
  CHECK(values(argmax(h8, 1)) == values(argmax(s8, 1)));
  const Tensor r = randn({8, 4}, {.dtype = DType::F64});
  const Tensor gs = autograd::grad({sum(s8 * r)}, {x})[0], gh = autograd::grad({sum(h8 * r)}, {x})[0];
  CHECK(values(gh) == values(gs));
  // dim 0, and the refusals
  for (const double s : values(sum(gumbel_softmax(many.slice(0, 0, 3), 1.0, false, 0), {0}))) CHECK(s == Approx(1.0));
  MG_REQUIRE_ERROR(gumbel_softmax(logits, 0.0), "gumbel_softmax: tau must be positive and finite, got 0");
  amp::Autocast ac({.dtype = DType::BF16});
  CHECK(gumbel_softmax(logits.to(DType::BF16)).dtype() == DType::F32);  // softmax's fp32 policy
}
