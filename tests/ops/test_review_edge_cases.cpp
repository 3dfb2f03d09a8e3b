// Edge cases a differential hunt against PyTorch turned up (all silent wrong results before):
// - var / std of a line holding NaN or ±inf is NaN (a line of at most one 128-element leaf gave 0:
//   std::max(0, NaN) is 0); batch norm's running variance after such a batch likewise;
// - clamp on integer tensors: bounds compared in the integer type (an i64 beyond 2^53 passed a
//   bound it exceeded), and a fractional bound makes an f32 result as `x op v` does (it was
//   truncated toward zero, so clamp_min(0, 2.5) gave 2 < 2.5); clamp_ refuses that in place;
// - the gradient of amax / amin over a slice whose result is NaN is NaN there, as PyTorch's (it was
//   a silent 0 that a GradScaler could not see);
// - chunk of an empty dim gives `chunks` empty pieces, as PyTorch (it gave one).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "core/factory.h"
#include "ops/norm.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

TEST_CASE("var and std of a line with a NaN or an infinity are NaN, short lines and long", "[ops][reduce]") {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  for (const DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
    INFO(dtype_name(dt));
    for (const double bad : {nan, inf, -inf}) {
      for (const int64_t n : {2, 7, 128, 129, 1000}) {
        INFO("n " << n << ", value " << bad);
        std::vector<double> v(std::size_t(n), 1.5);
        v[std::size_t(n / 2)] = bad;
        const Tensor x = from_vector(v, {n}).to(dt);
        CHECK(std::isnan(values(var(x))[0]));
        CHECK(std::isnan(values(x.std())[0]));
        CHECK(std::isnan(values(var(x, {}, 0.0))[0]));
      }
    }
    // Per row and per column (a transposed line), the clean ones unchanged.
    const Tensor m = from_vector(std::vector<double>{1, nan, 1, 2, 3, 4}, {2, 3}).to(dt);
    const std::vector<double> rows = values(var(m, {1}));
    CHECK(std::isnan(rows[0]));
    CHECK(rows[1] == 1.0);
    const std::vector<double> cols = values(var(m.t().contiguous().t(), {1}, 1.0, true));
    CHECK(std::isnan(cols[0]));
    CHECK(cols[1] == 1.0);
    // A constant line is still exactly 0 (the clamp against rounding stays).
    CHECK(values(var(full({100}, 0.1, {.dtype = dt})))[0] == 0.0);
  }
}

TEST_CASE("batch norm's running variance after a batch holding a NaN is NaN, as PyTorch's", "[ops][norm]") {
  Tensor x = ones({4, 2, 3, 3});
  x.select(0, 1).select(0, 0).select(0, 0).select(0, 0).fill_(std::nan(""));  // channel 0 only
  const Tensor rm = zeros({2}), rv = ones({2});
  (void)batch_norm(x, Tensor(), Tensor(), rm, rv, /*training=*/true);
  const std::vector<double> v = values(rv);
  CHECK(std::isnan(v[0]));
  CHECK(v[1] == Approx(0.9));  // channel 1: variance 0, momentum 0.1
}

TEST_CASE("clamp on integer tensors: exact bounds beyond 2^53, fractional bounds give f32", "[ops][elementwise]") {
  const int64_t big = (int64_t(1) << 53) + 1;
  const Tensor x = from_vector(std::vector<int64_t>{big, -big, 5}, {3});
  const Tensor c = clamp(x, -double(big - 1), double(big - 1));
  REQUIRE(c.dtype() == DType::I64);
  CHECK(c.data<int64_t>()[0] == big - 1);
  CHECK(c.data<int64_t>()[1] == -(big - 1));
  CHECK(c.data<int64_t>()[2] == 5);
  // Beyond the dtype, bounds saturate (unchanged); whole bounds keep the dtype.
  const Tensor i = from_vector(std::vector<int32_t>{-7, 0, 7}, {3});
  CHECK(clamp(i, -1e20, 1e20).dtype() == DType::I32);
  CHECK(values(clamp(i, -3, 3)) == std::vector<double>{-3, 0, 3});
  CHECK(values(clamp_min(i, -3)) == std::vector<double>{-3, 0, 7});
  // A fractional (or NaN) bound: an f32 result, as PyTorch.
  const Tensor f = clamp_min(i, 2.5);
  REQUIRE(f.dtype() == DType::F32);
  CHECK(values(f) == std::vector<double>{2.5, 2.5, 7});
  CHECK(values(clamp_max(i, -2.5)) == std::vector<double>{-7, -2.5, -2.5});
  // A NaN bound: f32, and NaN everywhere, as on floating tensors and in PyTorch (not a bound of 0).
  const Tensor n = clamp_min(i, std::nan(""));
  CHECK(n.dtype() == DType::F32);
  for (const double v : values(n)) CHECK(std::isnan(v));
  Tensor j = i.clone();
  MG_REQUIRE_ERROR(j.clamp_(2.5, 3), "clamp_: the result is f32");
  CHECK(values(j) == values(i));  // untouched
  j.clamp_(-3, 3);
  CHECK(values(j) == std::vector<double>{-3, 0, 3});
}

TEST_CASE("amax and amin gradients are NaN over a slice whose result is NaN", "[ops][reduce][autograd]") {
  const double nan = std::nan("");
  for (const bool is_max : {true, false}) {
    INFO((is_max ? "amax" : "amin"));
    Tensor x = from_vector(std::vector<double>{1, nan, 3, 4, 9, 9}, {2, 3}).to(DType::F32).requires_grad_();
    const Tensor y = is_max ? amax(x, {1}) : amin(x, {1});
    sum(y).backward();
    const std::vector<double> g = values(x.grad());
    CHECK(std::isnan(g[0]));
    CHECK(std::isnan(g[1]));
    CHECK(std::isnan(g[2]));
    // The clean row: ties split evenly (amax 9, 9) or the one minimum (amin 4).
    if (is_max) {
      CHECK(g[3] == 0.0);
      CHECK(g[4] == 0.5);
      CHECK(g[5] == 0.5);
    } else {
      CHECK(g[3] == 1.0);
      CHECK(g[4] == 0.0);
      CHECK(g[5] == 0.0);
    }
  }
}

TEST_CASE("chunk of an empty dim gives the requested number of empty pieces", "[ops][indexing]") {
  const Tensor x = zeros({0, 4});
  const Tensors pieces = chunk(x, 3, 0);
  REQUIRE(pieces.size() == 3);
  for (const Tensor& p : pieces) CHECK(p.shape() == Shape{0, 4});
  CHECK_FALSE(pieces[0].is_same(pieces[1]));
  CHECK(chunk(zeros({5}), 3, 0).size() == 3);  // 2, 2, 1
  CHECK(chunk(zeros({2}), 3, 0).size() == 2);  // fewer pieces than asked, as PyTorch
}
