// div with a rounding mode, floor_divide, remainder and fmod against PyTorch 2.15's answers
// (printed by PyTorch on the same inputs): the signs of the results and of zero, infinities and
// NaN, inexact floats (the floor of the exact quotient), f16/bf16, integer dtypes with negative
// operands and the most negative value, the integer zero divisor refused, the gradients; and
// CUDA equal to the CPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "autograd/engine.h"
#include "core/factory.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

constexpr double inf = INFINITY, nan_ = NAN;

// Equal values, NaN where PyTorch gives NaN, and the sign of zero as PyTorch's.
void check_same(const Tensor& got, const std::vector<double>& want) {
  const std::vector<double> g = values(got);
  REQUIRE(g.size() == want.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << ": got " << g[i] << ", want " << want[i]);
    if (std::isnan(want[i])) {
      CHECK(std::isnan(g[i]));
    } else {
      CHECK(g[i] == want[i]);
      CHECK(std::signbit(g[i]) == std::signbit(want[i]));
    }
  }
}

}  // namespace

TEST_CASE("div rounded toward -inf and toward zero, remainder and fmod on floats as PyTorch's",
          "[ops][elementwise][division]") {
  const Tensor a = from_vector<float>({7, -7, 7, -7, 0, -0.f, 5.5f, -5.5f, 1, -1, INFINITY, NAN, 3, 1e30f, 0.3f, -0.f});
  const Tensor b = from_vector<float>({2, 2, -2, -2, 3, 3, INFINITY, INFINITY, 0, 0, 2, 2, NAN, 3, 0.1f, -2});
  check_same(div(a, b, RoundingMode::Floor),
             {3, -4, -4, 3, 0, -0.0, 0, -1, inf, -inf, nan_, nan_, nan_, 3.333333383491554e+29, 3, 0});
  check_same(floor_divide(a, b), values(div(a, b, RoundingMode::Floor)));
  check_same(div(a, b, RoundingMode::Trunc),
             {3, -3, -3, 3, 0, -0.0, 0, -0.0, inf, -inf, inf, nan_, nan_, 3.333333383491554e+29, 3, 0});
  check_same(remainder(a, b), {1, 1, -1, -1, 0, -0.0, 5.5, inf, nan_, nan_, nan_, nan_, nan_, 0, 7.450580596923828e-09, -0.0});
  check_same(a % b, values(remainder(a, b)));
  check_same(fmod(a, b), {1, -1, 1, -1, 0, -0.0, 5.5, -5.5, nan_, nan_, nan_, nan_, nan_, 0, 7.450580596923828e-09, -0.0});
  check_same(div(a, b, RoundingMode::None), values(a / b));
  // scalar divisors take the tensor's dtype; a whole scalar keeps an integer tensor integral
  const Tensor i = from_vector<int64_t>({5, -5});
  check_same(remainder(i, 2.5), {0, -0.0});
  CHECK(remainder(i, 2.5).dtype() == DType::F32);
  check_same(i % 3.0, {2, 1});
  CHECK((i % 3.0).dtype() == DType::I64);
  check_same(floor_divide(from_vector<float>({-7}), full({}, 2.0)), {-4});
  CHECK(remainder(i, from_vector<float>({2.5f})).dtype() == DType::F32);
  check_same(div(i, 2.0, RoundingMode::Floor), {2, -3});
  check_same(div(i, 2.0, RoundingMode::Trunc), {2, -2});
  check_same(floor_divide(i, -2.0), {-3, 2});
  check_same(div(i, 2.0, RoundingMode::None), {2.5, -2.5});
}

TEST_CASE("remainder, fmod and the rounded divisions in f16 and bf16 round PyTorch's way",
          "[ops][elementwise][division]") {
  const Tensor x = from_vector<float>({5.3f, -5.3f, 100.7f, -0.7f});
  const Tensor y = from_vector<float>({1.1f, 1.1f, -3.3f, 0.25f});
  const Tensor h = to(x, DType::F16), hy = to(y, DType::F16);
  check_same(remainder(h, hy), {0.90234375, 0.197265625, -1.63671875, 0.0498046875});
  check_same(fmod(h, hy), {0.90234375, -0.90234375, 1.6640625, -0.2001953125});
  check_same(div(h, hy, RoundingMode::Floor), {4, -5, -31, -3});
  CHECK(remainder(h, hy).dtype() == DType::F16);
  const Tensor g = to(x, DType::BF16), gy = to(y, DType::BF16);
  check_same(remainder(g, gy), {0.90625, 0.1953125, -1.703125, 0.05078125});
  check_same(fmod(g, gy), {0.90625, -0.90625, 1.59375, -0.19921875});
  check_same(div(g, gy, RoundingMode::Floor), {4, -5, -31, -3});
  CHECK(fmod(g, gy).dtype() == DType::BF16);
}

TEST_CASE("integer rounded division, remainder and fmod as PyTorch's, the most negative value wrapping",
          "[ops][elementwise][division][integer]") {
  constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
  const Tensor a = from_vector<int32_t>({7, -7, 7, -7, 0, kMin, 5});
  const Tensor b = from_vector<int32_t>({2, 2, -2, -2, 3, 3, 7});
  check_same(div(a, b, RoundingMode::Floor), {3, -4, -4, 3, 0, -715827883, 0});
  check_same(div(a, b, RoundingMode::Trunc), {3, -3, -3, 3, 0, -715827882, 0});
  check_same(remainder(a, b), {1, 1, -1, -1, 0, 1, 5});
  check_same(fmod(a, b), {1, -1, 1, -1, 0, -2, 5});
  CHECK(div(a, b, RoundingMode::Floor).dtype() == DType::I32);
  CHECK(remainder(a, b).dtype() == DType::I32);
  // kMin / -1 overflows: it wraps to kMin, as every integer op (PyTorch 2.15's trunc division
  // traps with SIGFPE there; its floor division gives kMin); the remainders are 0
  const Tensor m = from_vector<int32_t>({kMin}), neg1 = from_vector<int32_t>({-1});
  check_same(div(m, neg1, RoundingMode::Trunc), {double(kMin)});
  check_same(div(m, neg1, RoundingMode::Floor), {double(kMin)});
  check_same(remainder(m, neg1), {0});
  check_same(fmod(m, neg1), {0});
  const Tensor big = from_vector<int64_t>({std::numeric_limits<int64_t>::min()});
  CHECK(values(remainder(big, from_vector<int64_t>({-1}))) == std::vector<double>{0});
  // u8
  const Tensor u = to(from_vector<int64_t>({7, 200, 3}), DType::U8), v = to(from_vector<int64_t>({2, 7, 5}), DType::U8);
  check_same(remainder(u, v), {1, 4, 3});
  check_same(div(u, v, RoundingMode::Floor), {3, 28, 0});
  CHECK(remainder(u, v).dtype() == DType::U8);
}

TEST_CASE("an integer zero divisor and bool operands are refused by name", "[ops][elementwise][division][errors]") {
  const Tensor a = from_vector<int64_t>({4, 5, 6});
  const Tensor z = from_vector<int64_t>({1, 0, 2});
  MG_REQUIRE_ERROR(remainder(a, z), "remainder: integer division by zero");
  MG_REQUIRE_ERROR(fmod(a, 0.0), "fmod: integer division by zero");
  MG_REQUIRE_ERROR(div(a, z, RoundingMode::Floor), "div (floor): integer division by zero");
  MG_REQUIRE_ERROR(div(a, z, RoundingMode::Trunc), "div (trunc): integer division by zero");
  MG_REQUIRE_ERROR(a % z, "remainder: integer division by zero");
  MG_REQUIRE_ERROR(floor_divide(a, 0.0), "div (floor): integer division by zero");
  check_same(floor_divide(to(a, DType::F32), 0.0), {inf, inf, inf});
  // -0.0 is no integer: an f32 scalar, so the signs follow it (PyTorch 2.15: [3, -5] / -0.0 is
  // [-inf, inf], and remainder gives NaN rather than the integer error)
  check_same(div(from_vector<int64_t>({3, -5}), -0.0, RoundingMode::None), {-inf, inf});
  check_same(from_vector<int64_t>({3, -5}) * -0.0, {-0.0, 0.0});
  CHECK(std::isnan(values(remainder(from_vector<int64_t>({3}), -0.0))[0]));
  // a float divisor of 0 is fine: inf and NaN
  check_same(remainder(to(a, DType::F32), to(z, DType::F32)), {0, nan_, 0});
  // a zero that divides nothing (an empty broadcast result) is fine, as PyTorch's
  CHECK(div(zeros({0, 3}, {.dtype = DType::I64}), z, RoundingMode::Trunc).shape() == Shape{0, 3});
  // an empty integer divisor has no zero
  CHECK(remainder(zeros({0}, {.dtype = DType::I64}), zeros({0}, {.dtype = DType::I64})).shape() == Shape{0});
  const Tensor t = gt(a, full({}, 4.0));
  MG_REQUIRE_ERROR(remainder(t, t), "remainder: not supported for bool tensors");
  MG_REQUIRE_ERROR(floor_divide(t, t), "div (floor): not supported for bool tensors");
}

TEST_CASE("the gradients: (1, -floor(a / b)) for remainder, (1, -trunc(a / b)) for fmod, 0 for rounded division",
          "[ops][elementwise][division][autograd]") {
  // PyTorch 2.15: remainder(a, b).sum() + 2 fmod(a, b).sum() gives a.grad [3, 3, 3] and
  // b.grad [-12, 13, 10]; div(rounding_mode='floor') gives zeros
  Tensor a = from_vector<double>({5.3, -5.3, 2.5}).requires_grad_();
  Tensor b = from_vector<double>({1.1, 1.1, -0.7}).requires_grad_();
  sum(remainder(a, b) + 2.0 * fmod(a, b)).backward();
  CHECK(values(a.grad()) == std::vector<double>{3, 3, 3});
  CHECK(values(b.grad()) == std::vector<double>{-12, 13, 10});
  Tensor c = from_vector<double>({5.3, -5.3, 2.5}).requires_grad_();
  Tensor d = from_vector<double>({1.1, 1.1, -0.7}).requires_grad_();
  sum(div(c, d, RoundingMode::Floor) + div(c, d, RoundingMode::Trunc)).backward();
  CHECK(values(c.grad()) == std::vector<double>{0, 0, 0});
  CHECK(values(d.grad()) == std::vector<double>{0, 0, 0});
  // a broadcast divisor sums its gradient
  Tensor e = from_vector<double>({5.3, -5.3, 2.5}).requires_grad_();
  Tensor s = full({}, 2.0, {.dtype = DType::F64}).requires_grad_();
  sum(remainder(e, s)).backward();
  CHECK(values(s.grad()) == std::vector<double>{-(2 - 3 + 1)});
}

TEST_CASE("remainder, fmod and the rounded divisions: CUDA gives the CPU's values", "[ops][elementwise][division][cuda][gpu]") {
  manual_seed(11);
  const Tensor a = randn({33, 17}) * 10.0;
  const Tensor b = where(gt(rand({33, 17}), full({}, 0.5)), full({}, -1.0), full({}, 1.0)) * (rand({33, 17}) + 0.25);
  const Device g = Device::cuda(0);
  for (const DType dt : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    INFO(dtype_name(dt));
    const Tensor x = to(a, dt), y = to(b, dt);
    CHECK(values(remainder(x.to(g), y.to(g))) == values(remainder(x, y)));
    CHECK(values(fmod(x.to(g), y.to(g))) == values(fmod(x, y)));
    CHECK(values(div(x.to(g), y.to(g), RoundingMode::Floor)) == values(div(x, y, RoundingMode::Floor)));
    CHECK(values(div(x.to(g), y.to(g), RoundingMode::Trunc)) == values(div(x, y, RoundingMode::Trunc)));
  }
  const Tensor ia = to(a * 10.0, DType::I64), ib = to(b * 7.0, DType::I64);
  const Tensor nz = where(eq(ib, full({}, 0.0, {.dtype = DType::I64})), full({}, 3.0, {.dtype = DType::I64}), ib);
  CHECK(values(remainder(ia.to(g), nz.to(g))) == values(remainder(ia, nz)));
  CHECK(values(div(ia.to(g), nz.to(g), RoundingMode::Floor)) == values(div(ia, nz, RoundingMode::Floor)));
  MG_REQUIRE_ERROR(fmod(ia.to(g), zeros({1}, {.dtype = DType::I64}).to(g)), "fmod: integer division by zero");
}
