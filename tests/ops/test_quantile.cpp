// ops/quantile.h against PyTorch 2.15's answers (printed by PyTorch on the same inputs): the five
// interpolations with and without NaN, several q, keepdim, every element, the gradient split by
// the interpolation weight, f16/bf16 through f32, errors; and CUDA equal to the CPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "autograd/engine.h"
#include "core/factory.h"
#include "ops/ops.h"
#include "ops/quantile.h"
#include "test_util.h"

using namespace mg;
using mg::test::V;
using mg::test::values;

namespace {
void check_same(const Tensor& got, const std::vector<double>& want) {
  const std::vector<double> g = values(got);
  REQUIRE(g.size() == want.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i);
    if (std::isnan(want[i])) CHECK(std::isnan(g[i])); else CHECK(g[i] == want[i]);
  }
}
}  // namespace

TEST_CASE("quantile and nanquantile as PyTorch's for every interpolation", "[ops][quantile]") {
  // PyTorch 2.15, x = [[1, 7, 3, 5], [2, nan, 4, 8]] (f64), q = 0.4 along dim 1:
  using I = QuantileInterpolation;
  const Tensor x = from_vector<double>({1, 7, 3, 5, 2, NAN, 4, 8}, {2, 4});
  check_same(quantile(x, 0.4, 1), {3.4000000000000004, NAN});
  check_same(nanquantile(x, 0.4, 1), {3.4000000000000004, 3.6});
  check_same(quantile(x, 0.4, 1, false, I::Lower), {3, NAN});
  check_same(nanquantile(x, 0.4, 1, false, I::Lower), {3, 2});
  check_same(quantile(x, 0.4, 1, false, I::Higher), {5, NAN});
  check_same(nanquantile(x, 0.4, 1, false, I::Higher), {5, 4});
  check_same(quantile(x, 0.4, 1, false, I::Nearest), {3, NAN});
  check_same(nanquantile(x, 0.4, 1, false, I::Nearest), {3, 4});
  check_same(quantile(x, 0.4, 1, false, I::Midpoint), {4, NAN});
  check_same(nanquantile(x, 0.4, 1, false, I::Midpoint), {4, 3});
  // several q over one row: [1, 2.5, 4, 7]; q first in the shape, keepdim
  check_same(quantile(select(x, 0, 0), from_vector<double>({0, 0.25, 0.5, 1})), {1, 2.5, 4, 7});
  CHECK(quantile(x, from_vector<double>({0.25, 0.5}), 1, true).shape() == Shape{2, 2, 1});
  // a strided q view: every other of [0, 9, 0.25, 9, 0.5, 9, 1]
  check_same(quantile(select(x, 0, 0), slice(from_vector<double>({0, 9, 0.25, 9, 0.5, 9, 1}), 0, 0, 7, 2)),
             {1, 2.5, 4, 7});
  // every element: nanquantile 4, quantile NaN; keepdim keeps every dim as 1
  check_same(nanquantile(x, 0.5), {4});
  check_same(quantile(x, 0.5), {NAN});
  CHECK(quantile(x, 0.5).shape() == Shape{});
  CHECK(quantile(x, 0.5, std::nullopt, true).shape() == Shape{1, 1});
  check_same(nanquantile(from_vector<float>({NAN, NAN}), 0.5), {NAN});
  // nearest rounds the rank half to even: ranks 1.5 and 2.5 both pick 2
  const Tensor r = from_vector<float>({0, 1, 2, 3, 4});
  check_same(quantile(r, 0.375, std::nullopt, false, I::Nearest), {2});
  check_same(quantile(r, 0.625, std::nullopt, false, I::Nearest), {2});
}

TEST_CASE("quantile's gradient goes to the two neighbours by weight, f16/bf16 via f32, errors",
          "[ops][quantile][autograd]") {
  // PyTorch 2.15: the gradient of quantile([1, 7, 3, 5], 0.4) is [0, 0, 0.8, 0.2] (up to rounding)
  Tensor a = from_vector<double>({1, 7, 3, 5}).requires_grad_();
  quantile(a, 0.4).backward();
  const std::vector<double> g = values(a.grad());
  CHECK(g[0] == 0);
  CHECK(g[1] == 0);
  CHECK(g[2] == Approx(0.8));
  CHECK(g[3] == Approx(0.2));
  // f16 / bf16: computed in f32, rounded once
  const Tensor h = to(from_vector<float>({1, 7, 3, 5}), DType::F16);
  CHECK(quantile(h, 0.3).dtype() == DType::F16);
  CHECK(values(quantile(h, 0.3)) == values(to(quantile(from_vector<float>({1, 7, 3, 5}), 0.3), DType::F16)));
  // errors, as PyTorch's
  MG_REQUIRE_ERROR(quantile(from_vector<int64_t>({1, 2}), 0.5), "quantile: expected a floating tensor");
  MG_REQUIRE_ERROR(quantile(from_vector<float>({1, 2}), 1.5), "quantile: q must be in [0, 1], got 1.5");
  MG_REQUIRE_ERROR(nanquantile(zeros({0}), 0.5), "nanquantile: the input [0] f32 cpu is empty");
  MG_REQUIRE_ERROR(quantile(zeros({2, 2}), from_vector<float>({0.5f, 0.5f}, {1, 2})), "q must be 0-d or 1-D");
  CHECK(quantile(zeros({3, 4}), zeros({0}), 1).shape() == Shape{0, 3});
}

TEST_CASE("quantile: CUDA gives the CPU's values", "[ops][quantile][cuda][gpu]") {
  manual_seed(10);
  Tensor x = randn({9, 31});
  x = where(gt(rand({9, 31}), full({}, 0.9)), full({}, NAN), x);
  const Device g = Device::cuda(0);
  const Tensor q = from_vector<float>({0.1f, 0.5f, 0.97f});
  check_same(nanquantile(x.to(g), q.to(g), 1), values(nanquantile(x, q, 1)));
  check_same(quantile(x.to(g), 0.3, 0), values(quantile(x, 0.3, 0)));
}
