// normalize (ops/distance.h, PyTorch's F.normalize): values and the gradient against the closed
// form (I - u uᵀ) / ||x|| in f64, p = 1 and other dims, the eps clamp (no gradient through the
// norm below it, as PyTorch's clamp_min), and the fp32 autocast policy.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "core/factory.h"
#include "ops/distance.h"
#include "ops/ops.h"
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

TEST_CASE("normalize of bf16 is computed in f32 and rounded once; autocast gives f32", "[ops][normalize]") {
  manual_seed(2);
  const Tensor x = randn({4, 8});
  const Tensor xb = x.to(DType::BF16);
  CHECK(values(normalize(xb)) == values(normalize(xb.to(DType::F32)).to(DType::BF16)));
  amp::Autocast ac({.dtype = DType::BF16});
  CHECK(normalize(xb).dtype() == DType::F32);
}
