// Core-op edge cases a differential hunt against PyTorch 2.15 turned up:
// - cumsum's gradient is the reverse cumulative sum computed as such (sum - cumsum + g cancelled:
//   g = [1e8, 1, 1] in f32 gave [1e8, 1, 1], and one inf or NaN spread to every position);
// - pow's gradient for the base is 0 where the exponent is 0 (0 * inf gave NaN at a = 0);
// - maximum / minimum give both inputs the gradient where one is NaN, as PyTorch;
// - clamp with a NaN bound is NaN;
// - expand to a negative size and slice/narrow/chunk bounds near INT64_MAX are refused or right
//   (they made negative shapes or empty results); 0-d tensors take dims -1 and 0 only; eye's m;
// - norm with a negative p over an empty dim is refused (it gave inf);
// - a bool tensor's scalar is an integer (mask + 1.0 looked for a bool add);
// - printing: integers exactly (through f64, INT64_MAX printed as INT64_MIN), and a summarised
//   tensor formats only what it shows.
#include <catch2/catch.hpp>

#include <chrono>
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
const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

Tensor leaf(std::vector<double> v, DType dt = DType::F64) {
  return to(from_vector<double>(v, {int64_t(v.size())}), dt).requires_grad_();
}
std::vector<double> cumsum_grad(const std::vector<double>& g, DType dt) {
  Tensor x = leaf(std::vector<double>(g.size(), 0.0), dt);
  return values(autograd::grad({cumsum(x, 0)}, {x}, {to(from_vector<double>(g, {int64_t(g.size())}), dt)})[0]);
}
}  // namespace

TEST_CASE("cumsum's gradient is the reverse cumulative sum, without cancellation or spread NaN", "[ops][reduce][autograd]") {
  CHECK(cumsum_grad({1e8, 1, 1}, DType::F32) == std::vector<double>{1e8, 2, 1});  // 1e8 + 2 rounds to 1e8 in f32
  CHECK(cumsum_grad({256, 1, 1}, DType::BF16) == std::vector<double>{258, 2, 1});
  const std::vector<double> inf = cumsum_grad({kInf, 1, 1}, DType::F64);
  CHECK(inf[0] == kInf);
  CHECK(inf[1] == 2);
  CHECK(inf[2] == 1);
  const std::vector<double> nan = cumsum_grad({1, kNaN, 1}, DType::F64);
  CHECK(std::isnan(nan[0]));
  CHECK(std::isnan(nan[1]));
  CHECK(nan[2] == 1);
  // Along an inner dim, and double backward: d/dx sum(cumsum(x)^2) = revcumsum(2 cumsum(x)).
  Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  const Tensor g = autograd::grad({sum(cumsum(x, 1) * cumsum(x, 1))}, {x}, {}, std::nullopt, true)[0];
  // rows: cumsum [1, 3, 6] -> 2 * [10, 9, 6]; [4, 9, 15] -> 2 * [28, 24, 15]
  CHECK(values(g) == std::vector<double>{20, 18, 12, 56, 48, 30});
  const Tensor gg = autograd::grad({sum(g)}, {x})[0];  // 2 * sum_j revcumsum(cumsum(1))_i = 2 * [6, 5, 3]
  CHECK(values(gg) == std::vector<double>{12, 10, 6, 12, 10, 6});
}

TEST_CASE("pow's base gradient is 0 where the exponent is 0, also at a zero base", "[ops][elementwise][autograd]") {
  Tensor a = leaf({0, 2, 0});
  const Tensor b = from_vector<double>({0, 0, 2}, {3});
  CHECK(values(autograd::grad({sum(pow(a, b))}, {a})[0]) == std::vector<double>{0, 0, 0});
}

TEST_CASE("maximum and minimum give both inputs the gradient where one is NaN, as PyTorch", "[ops][elementwise][autograd]") {
  for (const bool is_max : {true, false}) {
    INFO((is_max ? "maximum" : "minimum"));
    Tensor a = leaf({kNaN, 1, 2, 3}), b = leaf({1, kNaN, 2, 1});
    const Tensors g = autograd::grad({sum(is_max ? maximum(a, b) : minimum(a, b))}, {a, b});
    // NaN either side: both get 1; a tie: 0.5 each; 3 vs 1: the max's input or the min's gets 1
    CHECK(values(g[0]) == std::vector<double>{1, 1, 0.5, is_max ? 1.0 : 0.0});
    CHECK(values(g[1]) == std::vector<double>{1, 1, 0.5, is_max ? 0.0 : 1.0});
  }
}

TEST_CASE("clamp with a NaN bound is NaN, as PyTorch", "[ops][elementwise]") {
  for (DType dt : {DType::F64, DType::F32, DType::BF16}) {
    INFO(dtype_name(dt));
    const Tensor x = to(from_vector<double>({-1, 0.5, 2}, {3}), dt);
    for (const double v : values(clamp(x, kNaN, 1.0))) CHECK(std::isnan(v));
    for (const double v : values(clamp(x, 0.0, kNaN))) CHECK(std::isnan(v));
  }
}

TEST_CASE("shape arguments near the int64 limits are refused or handled without overflow", "[ops][views]") {
  const Tensor col = zeros({3, 1});
  MG_REQUIRE_ERROR(col.expand({3, -2}), "expand: the target size -2 of dim 1 is negative");
  MG_REQUIRE_ERROR(zeros({1}).expand({-5}), "expand: the target size -5 of dim 0 is negative");
  CHECK(col.expand({3, -1}).shape() == Shape{3, 1});
  const Tensor v = arange(0, 5);
  CHECK(v.slice(0, 3, INT64_MAX, INT64_MAX - 5).shape() == Shape{1});
  CHECK(values(v.slice(0, 1, INT64_MAX, 3)) == std::vector<double>{1, 4});
  CHECK(v.slice(0, 4, 2).shape() == Shape{0});
  MG_REQUIRE_ERROR(v.narrow(0, 2, INT64_MAX), "narrow: start 2 and length 9223372036854775807 are out of bounds");
  CHECK(chunk(v, INT64_MAX, 0).size() == 5);  // pieces of one
  MG_REQUIRE_ERROR(eye(3, -7), "eye: m must be >= 0 (or -1: m = n), got -7");
  CHECK(eye(2, -1).shape() == Shape{2, 2});
  // A 0-d tensor takes dims -1 and 0 only, as PyTorch.
  const Tensor s = full({}, 2.0);
  CHECK(squeeze(s, -1).dim() == 0);
  CHECK(transpose(s, 0, -1).dim() == 0);
  CHECK(flatten(s, 0, 0).shape() == Shape{1});
  CHECK_THROWS_AS(squeeze(s, 3), IndexError);
  CHECK_THROWS_AS(transpose(s, 0, 1), IndexError);
  CHECK_THROWS_AS(flatten(s, 0, 3), IndexError);
}

TEST_CASE("norm with a negative p over an empty dim is refused, as PyTorch", "[ops][reduce]") {
  CHECK_THROWS(norm(zeros({0, 3}), -1.0));
  CHECK(values(norm(zeros({2, 3}), -1.0, {1})) == std::vector<double>{0, 0});  // not empty: fine
}

TEST_CASE("a bool tensor's scalar is an integer, as PyTorch's int scalar", "[ops][elementwise]") {
  const Tensor mask = from_vector<double>({1, 0}, {2}).to(DType::Bool);
  const Tensor plus = mask + 1.0;
  CHECK(plus.dtype() == DType::I64);
  CHECK(values(plus) == std::vector<double>{2, 1});
  CHECK((mask + 0.0).dtype() == DType::I64);
  CHECK((mask * 1.0).dtype() == DType::I64);
  CHECK((mask * 2.5).dtype() == DType::F32);
  CHECK(values(mask * 2.5) == std::vector<double>{2.5, 0});
}

TEST_CASE("integers print exactly, and a summarised tensor formats only what it shows", "[ops][print]") {
  const Tensor i = from_vector<int64_t>({INT64_MAX, INT64_MIN, 9007199254740993}, {3});
  const std::string s = i.str();
  CHECK(s.find("9223372036854775807") != std::string::npos);
  CHECK(s.find("-9223372036854775808") != std::string::npos);
  CHECK(s.find("9007199254740993") != std::string::npos);
  CHECK(from_vector<double>({1, 0}, {2}).to(DType::Bool).str().find("[ true, false]") != std::string::npos);
  CHECK(arange(0, 2000).str().find("[   0,    1,    2, ..., 1997, 1998, 1999]") != std::string::npos);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string big = zeros({10'000'000}).str();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(big.find("...") != std::string::npos);
  CHECK(seconds < 0.5);  // formatting 10^7 elements to find the width took 3.7 s
}

TEST_CASE("copy_ of a tensor that requires grad into an integer view leaves the integer base without history",
          "[ops][autograd]") {
  // PyTorch 2.15: B[0:2].copy_(p) with p requiring grad leaves an i64 B with requires_grad False.
  Tensor b = zeros({4}, {.dtype = DType::I64});
  const Tensor p = ones({2}).requires_grad_();
  b.narrow(0, 0, 2).copy_(p);
  CHECK_FALSE(b.requires_grad());
  CHECK(b.grad_fn() == nullptr);
  CHECK(test::values(b) == std::vector<double>{1, 1, 0, 0});
  b.requires_grad_(false);  // still a leaf
}

TEST_CASE("an undefined tensor's autograd queries are errors, not crashes", "[core]") {
  MG_REQUIRE_ERROR(Tensor().is_leaf(), "undefined");
  MG_REQUIRE_ERROR(Tensor().requires_grad_(false), "undefined");
  MG_REQUIRE_ERROR(Tensor().set_data(zeros({1})), "undefined");
}

TEST_CASE("in-place writes into a zero-element expanded tensor are no-ops, as PyTorch", "[ops]") {
  Tensor x = zeros({1, 0}).expand({3, 0});
  x.add_(1.0);
  CHECK(x.shape() == Shape{3, 0});
  MG_REQUIRE_ERROR(zeros({1, 2}).expand({3, 2}).add_(1.0), "share one memory location");  // still refused with elements
}

TEST_CASE("zeros/ones/full take memory_format, the ordered factories refuse it", "[core]") {
  const Tensor z = zeros({2, 3, 4, 5}, {.memory_format = MemoryFormat::ChannelsLast});
  CHECK(z.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK_FALSE(z.is_contiguous());
  CHECK(test::values(z) == std::vector<double>(120, 0.0));
  CHECK(full({2, 3, 4, 5}, 7.0, {.memory_format = MemoryFormat::ChannelsLast}).is_contiguous(MemoryFormat::ChannelsLast));
  MG_REQUIRE_ERROR(zeros({3}, {.memory_format = MemoryFormat::ChannelsLast}), "4-D");
  MG_REQUIRE_ERROR(zeros({3}, {.memory_format = MemoryFormat::Preserve}), "Preserve needs an input");
  MG_REQUIRE_ERROR(randn({2, 3, 4, 5}, {.memory_format = MemoryFormat::ChannelsLast}), "make contiguous tensors");
  MG_REQUIRE_ERROR(from_vector<float>({1, 2}, {2}, {.memory_format = MemoryFormat::ChannelsLast}),
                   "from_buffer: the data is in row-major order");
}

TEST_CASE("linspace into an integer dtype truncates its ends first, as PyTorch", "[core]") {
  CHECK(test::values(linspace(0.5, 3.7, 3, {.dtype = DType::I64})) == std::vector<double>{0, 1, 3});  // torch 2.15
  CHECK(test::values(linspace(-2.5, 2.5, 5, {.dtype = DType::I32})) == std::vector<double>{-2, -1, 0, 1, 2});
  MG_REQUIRE_ERROR(arange(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), 1,
                          {.dtype = DType::I64}),
                   "has more elements than a tensor can hold");
}

TEST_CASE("views with huge steps and sizes: no signed overflow, clear errors", "[ops][views]") {
  // A step near INT64_MAX on a 2-D tensor: one row, and the stride is left alone.
  const Tensor x = arange(0, 25, 1, {.dtype = DType::F32}).reshape({5, 5});
  const Tensor s = x.slice(0, 3, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max() - 5);
  CHECK(s.shape() == Shape{1, 5});
  CHECK(test::values(s) == std::vector<double>{15, 16, 17, 18, 19});
  Tensor xg = x.detach().requires_grad_();
  const Tensor g = autograd::grad({sum(xg.slice(0, 3, 100, std::numeric_limits<int64_t>::max() - 5))}, {xg}, {}, true,
                                  /*create_graph=*/true)[0];
  CHECK(sum(g).item<double>() == 5.0);
  // Empty tensors with huge other sizes: a 0 makes them empty; without one, the product is an error.
  CHECK(zeros({0}).reshape({int64_t(1) << 62, 4, 0}).shape() == Shape{int64_t(1) << 62, 4, 0});
  MG_REQUIRE_ERROR(zeros({0}).reshape({int64_t(1) << 62, 4, -1}), "has more than 2^63 - 1 elements");
  const Tensor e = zeros({0, int64_t(1) << 32, int64_t(1) << 32});  // 0 elements
  MG_REQUIRE_ERROR(e.flatten(1), "merge into more than 2^63 - 1 elements");
  CHECK(zeros({3, 0, int64_t(1) << 40}).flatten(1).shape() == Shape{3, 0});
}

TEST_CASE("a view op that changes nothing still returns a new view", "[ops][views][autograd]") {
  // PyTorch 2.15: x.squeeze() is not x; a hook on it sees only what flows through it.
  const Tensor w = from_vector<double>({1, 2, 3}).requires_grad_();
  const Tensor x = w * 1.0;
  const Tensor y = x.squeeze(0);
  CHECK_FALSE(y.is_same(x));
  CHECK_FALSE(x.squeeze().is_same(x));
  CHECK_FALSE(x.t().is_same(x));
  const Tensor s = sum(w) * 1.0;
  CHECK_FALSE(s.transpose(0, -1).is_same(s));
  int seen = 0;
  y.register_hook([&](const Tensor& g) {
    seen += int(g.numel());
    CHECK(test::values(g) == std::vector<double>{2, 2, 2});
    return Tensor();
  });
  sum(y * 2.0 + x).backward();
  CHECK(seen == 3);
  CHECK(test::values(w.grad()) == std::vector<double>{3, 3, 3});
}
