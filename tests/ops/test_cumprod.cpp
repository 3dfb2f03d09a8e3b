// cumprod against PyTorch 2.15's answers (printed by PyTorch on the same inputs): values and the
// gradient on lines with one and several zeros, integer widening and wrap-around, bool, f16/bf16
// accumulated in f32 as PyTorch's, other dims, -0; and CUDA equal to the CPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "autograd/engine.h"
#include "core/factory.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::V;
using mg::test::values;

TEST_CASE("cumprod and its gradient as PyTorch's, lines with zeros included", "[ops][cumprod][autograd]") {
  // PyTorch 2.15: y = [[2, 0, 0, 0, 0], [1.5, -3, -1.5, -6, 6]]; the gradient of (y * w).sum()
  // with w = [[1, 2, 3, 4, 5], [1, -1, 2, -2, 3]] is [[1, 22, 0, 0, 0], [21, -15, 54, 7.5, -18]]
  Tensor x = from_vector<double>({2, 0, 3, 0, 5, 1.5, -2, 0.5, 4, -1}, {2, 5}).requires_grad_();
  const Tensor y = cumprod(x, 1);
  CHECK(values(y) == V({2, 0, 0, 0, 0, 1.5, -3, -1.5, -6, 6}));
  sum(y * from_vector<double>({1, 2, 3, 4, 5, 1, -1, 2, -2, 3}, {2, 5})).backward();
  CHECK(values(x.grad()) == V({1, 22, 0, 0, 0, 21, -15, 54, 7.5, -18}));
  // dim 0 is the transposed problem
  Tensor xt = from_vector<double>({2, 1.5, 0, -2, 3, 0.5, 0, 4, 5, -1}, {5, 2}).requires_grad_();
  sum(cumprod(xt, 0) * from_vector<double>({1, 1, 2, -1, 3, 2, 4, -2, 5, 3}, {5, 2})).backward();
  CHECK(values(xt.grad()) == V({1, 21, 22, -15, 0, 54, 0, 7.5, 0, -18}));
  // a zero first, a 0-d input, -0 kept
  Tensor z = from_vector<double>({0, 3, 4}).requires_grad_();
  sum(cumprod(z, 0)).backward();
  CHECK(values(z.grad()) == V({1 + 3 + 12, 0, 0}));
  CHECK(values(cumprod(full({}, 3.0), 0)) == V({3}));
  // NaN and inf: a line of one is a copy (gradient 1); terms after a zero are 0, not NaN
  // (PyTorch 2.15: [1, 1], [1], and [1, nan, 0] for [3, 0, nan])
  Tensor c1 = from_vector<double>({2, NAN}, {2, 1}).requires_grad_();
  sum(cumprod(c1, 1)).backward();
  CHECK(values(c1.grad()) == V({1, 1}));
  Tensor c2 = from_vector<double>({INFINITY}).requires_grad_();
  sum(cumprod(c2, 0)).backward();
  CHECK(values(c2.grad()) == V({1}));
  Tensor c3 = from_vector<double>({3, 0, NAN}).requires_grad_();
  sum(cumprod(c3, 0)).backward();
  const std::vector<double> g3 = values(c3.grad());
  CHECK(g3[0] == 1);
  CHECK(std::isnan(g3[1]));
  CHECK(g3[2] == 0);
  Tensor c4 = from_vector<double>({2, 0, 5, 0, INFINITY}).requires_grad_();
  sum(cumprod(c4, 0)).backward();
  CHECK(values(c4.grad()) == V({1, 2 + 10, 0, 0, 0}));
  CHECK(std::signbit(values(cumprod(from_vector<float>({-0.f, 2.f}), 0))[1]));
}

TEST_CASE("cumprod: integers widen to i64 and wrap, bool gives i64, f16/bf16 accumulate in f32", "[ops][cumprod]") {
  // PyTorch 2.15: cumprod of i32 [300, 300, 300, 300000, 300000] is i64 [..., 2430000000000000000]
  const Tensor i = from_vector<int32_t>({300, 300, 300, 300000, 300000});
  CHECK(cumprod(i, 0).dtype() == DType::I64);
  CHECK(values(cumprod(i, 0)) == V({300, 90000, 27000000, 8100000000000, 2430000000000000000}));
  const Tensor wraps = cumprod(from_vector<int64_t>({int64_t(1) << 62, 4}), 0);
  CHECK(values(wraps)[1] == 0);  // 2^64 mod 2^64
  const Tensor b = gt(from_vector<float>({1, 1, -1}), zeros({}));
  CHECK(cumprod(b, 0).dtype() == DType::I64);
  CHECK(values(cumprod(b, 0)) == V({1, 1, 0}));
  // PyTorch 2.15: 1000 factors of 1 + 2^-10 in f16 give 2.654296875 (f32 accumulation; f16's own
  // would drift), 300 of 1 + 2^-7 in bf16 give 10.3125
  CHECK(values(cumprod(full({1000}, 1.0009765625, {.dtype = DType::F16}), 0))[999] == 2.654296875);
  CHECK(values(cumprod(full({300}, 1.0078125, {.dtype = DType::BF16}), 0))[299] == 10.3125);
  CHECK(cumprod(zeros({3, 0}), 1).shape() == Shape{3, 0});
  MG_REQUIRE_ERROR(cumprod(zeros({2, 3}), 2), "cumprod");
}

TEST_CASE("cumprod: CUDA gives the CPU's bits", "[ops][cumprod][cuda][gpu]") {
  manual_seed(8);
  const Tensor x = where(gt(rand({23, 41}), full({}, 0.95)), zeros({}), randn({23, 41}) * 0.5 + 1.0);
  const Device g = Device::cuda(0);
  for (const DType dt : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32}) {
    INFO(dtype_name(dt));
    const Tensor c = to(x * 2.0, dt);
    CHECK(values(cumprod(c.to(g), 1)) == values(cumprod(c, 1)));
    CHECK(values(cumprod(c.to(g), 0)) == values(cumprod(c, 0)));
  }
  Tensor w = x.to(g).requires_grad_();
  sum(cumprod(w, 1)).backward();
  Tensor wc = x.clone().requires_grad_();
  sum(cumprod(wc, 1)).backward();
  const std::vector<double> got = values(w.grad()), want = values(wc.grad());
  REQUIRE(got.size() == want.size());
  for (std::size_t k = 0; k < got.size(); ++k) CHECK(got[k] == Approx(want[k]).epsilon(1e-5).margin(1e-6));
}
