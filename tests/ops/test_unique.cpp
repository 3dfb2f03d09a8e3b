// ops/unique.h against PyTorch 2.15's answers (printed by PyTorch on the same inputs): sorted
// values, the inverse in x's shape, the counts, each NaN its own value, -0 equal to +0, bool,
// runs (unique_consecutive), empty and 0-d inputs, no gradient; and CUDA equal to the CPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "core/factory.h"
#include "ops/ops.h"
#include "ops/unique.h"
#include "test_util.h"

using namespace mg;
using mg::test::V;
using mg::test::values;

TEST_CASE("unique as PyTorch's: sorted values, inverse, counts, NaN each its own value", "[ops][unique]") {
  // PyTorch 2.15: unique([[3, 1, nan], [1, 3, nan]]) = [1, 3, nan, nan], inverse [[1, 0, 2], [0, 1, 3]],
  // counts [2, 2, 1, 1]
  const Tensor x = from_vector<float>({3, 1, NAN, 1, 3, NAN}, {2, 3});
  const auto [v, inv, cnt] = unique(x, true, true);
  const std::vector<double> got = values(v);
  REQUIRE(got.size() == 4);
  CHECK((got[0] == 1 && got[1] == 3 && std::isnan(got[2]) && std::isnan(got[3])));
  CHECK(inv.shape() == Shape{2, 3});
  CHECK(values(inv) == V({1, 0, 2, 0, 1, 3}));
  CHECK(values(cnt) == V({2, 2, 1, 1}));
  CHECK(cnt.dtype() == DType::I64);
  // without the extras; -0 equals +0 (the sort's first, -0, is kept); integers; bool
  const UniqueResult plain = unique(from_vector<float>({-0.f, 0.f, 2.f}));
  CHECK(values(plain.values) == V({0, 2}));
  CHECK(std::signbit(values(plain.values)[0]));
  CHECK_FALSE(plain.inverse.defined());
  CHECK_FALSE(plain.counts.defined());
  CHECK(values(unique(from_vector<int64_t>({5, -2, 5, 7, -2})).values) == V({-2, 5, 7}));
  const UniqueResult b = unique(gt(from_vector<float>({1, -1, 1}), zeros({})), false, true);
  CHECK(b.values.dtype() == DType::Bool);
  CHECK(values(b.values) == V({0, 1}));
  CHECK(values(b.counts) == V({1, 2}));
  // empty and 0-d (PyTorch: values [5.], inverse 0-d 0)
  const UniqueResult e = unique(zeros({0}), true, true);
  CHECK(e.values.shape() == Shape{0});
  CHECK(e.inverse.shape() == Shape{0});
  CHECK(e.counts.shape() == Shape{0});
  const UniqueResult s = unique(full({}, 5.0), true);
  CHECK(values(s.values) == V({5}));
  CHECK(s.inverse.shape() == Shape{});
  CHECK(values(s.inverse) == V({0}));
  // not differentiable
  const Tensor a = from_vector<float>({1, 2}).requires_grad_();
  CHECK_FALSE(unique(a).values.requires_grad());
}

TEST_CASE("unique_consecutive as PyTorch's: runs of equal neighbours", "[ops][unique]") {
  // PyTorch 2.15: [1, 1, 2, 2, 3, 1, 1, 2] -> [1, 2, 3, 1, 2], inverse [0, 0, 1, 1, 2, 3, 3, 4],
  // counts [2, 2, 1, 2, 1]
  const auto [v, inv, cnt] = unique_consecutive(from_vector<int64_t>({1, 1, 2, 2, 3, 1, 1, 2}), true, true);
  CHECK(values(v) == V({1, 2, 3, 1, 2}));
  CHECK(values(inv) == V({0, 0, 1, 1, 2, 3, 3, 4}));
  CHECK(values(cnt) == V({2, 2, 1, 2, 1}));
  CHECK(values(unique_consecutive(full({4}, 2.0)).values) == V({2}));
}

TEST_CASE("unique: CUDA gives the CPU's values, inverse and counts", "[ops][unique][cuda][gpu]") {
  manual_seed(9);
  const Tensor x = to(randn({13, 17}) * 4.0, DType::I64);
  const Device g = Device::cuda(0);
  for (const DType dt : {DType::I64, DType::F32, DType::BF16}) {
    INFO(dtype_name(dt));
    const Tensor c = to(x, dt);
    const UniqueResult cpu = unique(c, true, true), gpu = unique(c.to(g), true, true);
    CHECK(gpu.values.device() == g);
    CHECK(values(gpu.values) == values(cpu.values));
    CHECK(values(gpu.inverse) == values(cpu.inverse));
    CHECK(values(gpu.counts) == values(cpu.counts));
  }
}
