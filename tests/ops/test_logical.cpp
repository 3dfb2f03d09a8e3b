// ops/logical.h against PyTorch 2.15's answers on the same inputs (values printed by PyTorch):
// the logical ops over dtypes and broadcasting, the mask operators and their refusals, isnan /
// isinf / isfinite, nan_to_num (values in f32 and f16, the gradient), all / any over dims and
// empty tensors, isclose / allclose; and CUDA against the CPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "autograd/engine.h"
#include "core/factory.h"
#include "ops/logical.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::V;
using mg::test::values;

namespace {

Tensor f32(std::vector<float> v) { return from_vector<float>(v); }
Tensor mask(std::vector<int> v) {
  std::vector<float> f(v.begin(), v.end());
  return ne(from_vector<float>(f), zeros({int64_t(v.size())}));
}
std::vector<double> bits(const Tensor& t) { return values(to(t, DType::F64)); }

}  // namespace

TEST_CASE("logical ops take any dtype (nonzero and NaN are true) and broadcast, and the operators take masks",
          "[ops][logical]") {
  const Tensor a = f32({0.f, 1.f, NAN, -2.f}), b = f32({0.f, 0.f, 3.f, 5.f});
  CHECK(logical_not(a).dtype() == DType::Bool);
  CHECK(bits(logical_not(a)) == V({1, 0, 0, 0}));
  CHECK(bits(logical_and(a, b)) == V({0, 0, 1, 1}));
  CHECK(bits(logical_or(a, b)) == V({0, 1, 1, 1}));
  CHECK(bits(logical_xor(a, b)) == V({0, 1, 0, 0}));
  // integers and mixed dtypes, broadcast against a column
  const Tensor i = from_vector<int64_t>({0, 7, -1}, {3, 1});
  CHECK(logical_and(i, a).shape() == Shape{3, 4});
  CHECK(bits(logical_and(i, a)) == V({0, 0, 0, 0, 0, 1, 1, 1, 0, 1, 1, 1}));
  const Tensor m = mask({1, 0, 1, 0}), n = mask({1, 1, 0, 0});
  CHECK(bits(~m) == V({0, 1, 0, 1}));
  CHECK(bits(m & n) == V({1, 0, 0, 0}));
  CHECK(bits(m | n) == V({1, 1, 1, 0}));
  CHECK(bits(m ^ n) == V({0, 1, 1, 0}));
  // integers: bitwise (ops/bitwise.h); floats refused
  CHECK(values(~arange(0, 3)) == V({-1, -2, -3}));
  CHECK(values(m & arange(0, 4)) == V({0, 0, 0, 0}));  // 1 & 0, 0 & 1, 1 & 2, 0 & 3
  MG_REQUIRE_ERROR(~a, "bitwise_not: expected an integer or bool tensor, got [4] f32 cpu");
  MG_REQUIRE_ERROR(m & a, "bitwise_and: expected integer or bool tensors, got [4] f32 cpu and [4] f32 cpu");
  MG_REQUIRE_ERROR(logical_not(Tensor()), "logical_not: got an undefined tensor");
  // Subtraction with a mask is refused, as PyTorch's, with the logical op to use instead.
  MG_REQUIRE_ERROR(m - n, "sub: subtraction with a bool tensor is not supported, got [4] bool cpu and [4] bool cpu");
  MG_REQUIRE_ERROR(m - 1.0, "hint: to invert a mask use ~m or logical_not(m)");
  MG_REQUIRE_ERROR(1.0 - m, "sub: subtraction with a bool tensor is not supported");
  Tensor mc = m.clone();
  MG_REQUIRE_ERROR(mc.sub_(n), "sub: subtraction with a bool tensor is not supported");
}

TEST_CASE("isnan, isinf, isfinite and nan_to_num as PyTorch's", "[ops][logical]") {
  const Tensor a = f32({0.f, 1.f, NAN, -2.f, INFINITY, -INFINITY});
  CHECK(bits(isnan(a)) == V({0, 0, 1, 0, 0, 0}));
  CHECK(bits(isinf(a)) == V({0, 0, 0, 0, 1, 1}));
  CHECK(bits(isposinf(a)) == V({0, 0, 0, 0, 1, 0}));
  CHECK(bits(isneginf(a)) == V({0, 0, 0, 0, 0, 1}));
  CHECK(bits(isfinite(a)) == V({1, 1, 0, 1, 0, 0}));
  CHECK(bits(isfinite(to(a, DType::BF16))) == V({1, 1, 0, 1, 0, 0}));
  CHECK(bits(isnan(arange(0, 3))) == V({0, 0, 0}));
  CHECK(bits(isfinite(arange(0, 3))) == V({1, 1, 1}));
  // nan_to_num: the dtype's largest finite values by default (PyTorch: 3.4028234663852886e+38, 65504)
  CHECK(bits(nan_to_num(a)) == V({0, 1, 0, -2, 3.4028234663852886e+38, -3.4028234663852886e+38}));
  const Tensor h = nan_to_num(to(a, DType::F16));
  CHECK(h.dtype() == DType::F16);
  CHECK(bits(h) == V({0, 1, 0, -2, 65504, -65504}));
  CHECK(bits(nan_to_num(a, 1.0, 2.0, -3.0)) == V({0, 1, 1, -2, 2, -3}));
  MG_REQUIRE_ERROR(nan_to_num(to(a, DType::F16), 1e6), "nan_to_num: replacement 1e+06 cannot be converted to f16");
  // The gradient flows where the input was finite.
  Tensor x = a.clone().requires_grad_();
  sum(nan_to_num(x) * 3.0).backward();
  CHECK(bits(x.grad()) == V({3, 3, 0, 3, 0, 0}));
}

TEST_CASE("all and any over every element, over dims, and over nothing", "[ops][logical]") {
  const Tensor b = reshape(f32({1.f, 0.f, NAN, 2.f}), {2, 2});
  CHECK(all(b).shape() == Shape{});
  CHECK(all(b).item<bool>() == false);
  CHECK(bits(all(b, {1})) == V({0, 1}));
  CHECK(bits(any(b, {0})) == V({1, 1}));
  CHECK(any(b, {0}, true).shape() == Shape{1, 2});
  CHECK(all(zeros({0})).item<bool>() == true);
  CHECK(any(zeros({0})).item<bool>() == false);
  CHECK(all(mask({1, 1, 1})).item<bool>());
  CHECK(any(arange(0, 1)).item<bool>() == false);
}

TEST_CASE("isclose and allclose as PyTorch's: tolerances, infinities, NaN, integers", "[ops][logical]") {
  const Tensor u = f32({1.f, 2.f, INFINITY, NAN, 1e-9f}), v = f32({1.00001f, 2.1f, INFINITY, NAN, 0.f});
  CHECK(bits(isclose(u, v)) == V({0, 0, 1, 0, 1}));
  CHECK(bits(isclose(u, v, 1e-5, 1e-8, true)) == V({0, 0, 1, 1, 1}));
  CHECK(bits(isclose(u, v, 0.1)) == V({1, 1, 1, 0, 1}));
  CHECK(bits(isclose(from_vector<int64_t>({1, 2}), from_vector<int64_t>({1, 3}))) == V({1, 0}));
  CHECK(allclose(f32({1.f, 2.f}), f32({1.f, 2.000001f})));
  CHECK_FALSE(allclose(f32({1.f, NAN}), f32({1.f, NAN})));
  CHECK(allclose(f32({1.f, NAN}), f32({1.f, NAN}), 1e-5, 1e-8, true));
  CHECK(isclose(f32({1.f}), f32({1.f, 2.f, 1.f})).shape() == Shape{3});  // broadcast
  MG_REQUIRE_ERROR(isclose(u, v, -1.0), "isclose: rtol and atol must be >= 0");
}

TEST_CASE("logical ops, the tests, nan_to_num, all/any and isclose: CUDA equals the CPU", "[ops][logical][cuda][gpu]") {
  const Tensor a = f32({0.f, 1.f, NAN, -2.f, INFINITY, -INFINITY, 3.f, 0.f}), b = f32({0.f, 0.f, 3.f, 5.f, 1.f, 2.f, 3.f, NAN});
  const Device g = Device::cuda(0);
  const Tensor ag = a.to(g), bg = b.to(g);
  CHECK(bits(logical_and(ag, bg)) == bits(logical_and(a, b)));
  CHECK(bits(logical_or(ag, bg)) == bits(logical_or(a, b)));
  CHECK(bits(logical_xor(ag, bg)) == bits(logical_xor(a, b)));
  CHECK(bits(~isnan(ag) & isfinite(bg)) == bits(~isnan(a) & isfinite(b)));
  CHECK(bits(nan_to_num(to(ag, DType::BF16))) == bits(nan_to_num(to(a, DType::BF16))));
  CHECK(bits(all(reshape(ag, {2, 4}), {1})) == bits(all(reshape(a, {2, 4}), {1})));
  CHECK(bits(any(reshape(bg, {4, 2}), {0})) == bits(any(reshape(b, {4, 2}), {0})));
  CHECK(bits(isclose(ag, bg, 0.5, 0.0, true)) == bits(isclose(a, b, 0.5, 0.0, true)));
  CHECK(allclose(ag, ag, 0.0, 0.0, true));
}
