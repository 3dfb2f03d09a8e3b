// ops/unique.h against PyTorch 2.15's answers (printed by PyTorch on the same inputs): sorted
// values, the inverse in x's shape, the counts, each NaN its own value, -0 equal to +0, bool,
// runs (unique_consecutive), empty and 0-d inputs, no gradient; unique_dim's slices (rows,
// columns, a middle dim); and CUDA equal to the CPU.
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

TEST_CASE("unique_dim as PyTorch's unique(x, dim): distinct slices sorted lexicographically", "[ops][unique]") {
  // PyTorch 2.15: unique([[1, 2], [0, 5], [1, 2], [-0, 5], [1, -1], [0, 4]], dim=0) =
  // [[0, 4], [0, 5], [1, -1], [1, 2]], inverse [3, 1, 3, 1, 2, 0], counts [1, 2, 1, 2]; the row
  // [0, 5] first seen as +0 keeps +0; the same in bf16, f16, i32 and u8 (on |x|)
  const Tensor x = from_vector<float>({1, 2, 0, 5, 1, 2, -0.f, 5, 1, -1, 0, 4}, {6, 2});
  const auto [v, inv, cnt] = unique_dim(x, 0, true, true);
  CHECK(v.shape() == Shape{4, 2});
  CHECK(values(v) == V({0, 4, 0, 5, 1, -1, 1, 2}));
  CHECK_FALSE(std::signbit(values(v)[2]));
  CHECK(values(inv) == V({3, 1, 3, 1, 2, 0}));
  CHECK(values(cnt) == V({1, 2, 1, 2}));
  for (const DType dt : {DType::BF16, DType::F16, DType::I32, DType::U8}) {
    INFO(dtype_name(dt));
    const UniqueResult r = unique_dim(to(abs(x), dt), 0, true, true);
    CHECK(r.values.dtype() == dt);
    CHECK(values(r.values) == V({0, 4, 0, 5, 1, 1, 1, 2}));
    CHECK(values(r.inverse) == V({3, 1, 3, 1, 2, 0}));
    CHECK(values(r.counts) == V({1, 2, 1, 2}));
  }
  // columns: unique([[3, 1, 3, 2], [0, 7, 0, 7]], dim=1) = [[1, 2, 3], [7, 7, 0]], inverse
  // [2, 0, 2, 1], counts [1, 1, 2]
  const UniqueResult cols = unique_dim(from_vector<int64_t>({3, 1, 3, 2, 0, 7, 0, 7}, {2, 4}), 1, true, true);
  CHECK(cols.values.shape() == Shape{2, 3});
  CHECK(values(cols.values) == V({1, 2, 3, 7, 7, 0}));
  CHECK(values(cols.inverse) == V({2, 0, 2, 1}));
  CHECK(values(cols.counts) == V({1, 1, 2}));
  // a middle dim of a 3-D tensor, the other dims compared in their order: unique(z, dim=1) of
  // [[[1, 2], [0, 0], [1, 2]], [[5, 5], [1, 1], [5, 5]]] = [[[0, 0], [1, 2]], [[1, 1], [5, 5]]],
  // inverse [1, 0, 1], counts [1, 2]; along dim -1 every slice is distinct and already in order
  const Tensor z = from_vector<int64_t>({1, 2, 0, 0, 1, 2, 5, 5, 1, 1, 5, 5}, {2, 3, 2});
  const UniqueResult mid = unique_dim(z, 1, true, true);
  CHECK(mid.values.shape() == Shape{2, 2, 2});
  CHECK(values(mid.values) == V({0, 0, 1, 2, 1, 1, 5, 5}));
  CHECK(values(mid.inverse) == V({1, 0, 1}));
  CHECK(values(mid.counts) == V({1, 2}));
  CHECK(values(unique_dim(z, -1).values) == values(z));
  // bool rows: [[T, F], [F, T], [T, F]] -> [[F, T], [T, F]], inverse [1, 0, 1], counts [1, 2]
  const UniqueResult b = unique_dim(gt(from_vector<float>({1, 0, 0, 1, 1, 0}, {3, 2}), zeros({})), 0, true, true);
  CHECK(b.values.dtype() == DType::Bool);
  CHECK(values(b.values) == V({0, 1, 1, 0}));
  CHECK(values(b.inverse) == V({1, 0, 1}));
  CHECK(values(b.counts) == V({1, 2}));
  // NaN: a row holding one is distinct from every row and sorts last (NaN the largest), where
  // PyTorch 2.15's comparator breaks on NaN and leaves rows unsorted and equal rows apart
  const Tensor n = from_vector<float>({1, 2, NAN, 0, 0, 5, NAN, 0, -0.f, 5}, {5, 2});
  const UniqueResult rn = unique_dim(n, 0, true, true);
  const std::vector<double> rv = values(rn.values);
  REQUIRE(rv.size() == 8);
  CHECK((rv[0] == 0 && rv[1] == 5 && rv[2] == 1 && rv[3] == 2 && std::isnan(rv[4]) && std::isnan(rv[6])));
  CHECK(values(rn.inverse) == V({1, 2, 0, 3, 0}));
  CHECK(values(rn.counts) == V({2, 1, 1, 1}));
  // runs: unique_consecutive([[1, 2], [1, 2], [3, 4], [1, 2]], dim=0) = [[1, 2], [3, 4], [1, 2]],
  // inverse [0, 0, 1, 2], counts [2, 1, 1]
  const UniqueResult runs =
      unique_dim_consecutive(from_vector<int64_t>({1, 2, 1, 2, 3, 4, 1, 2}, {4, 2}), 0, true, true);
  CHECK(values(runs.values) == V({1, 2, 3, 4, 1, 2}));
  CHECK(values(runs.inverse) == V({0, 0, 1, 2}));
  CHECK(values(runs.counts) == V({2, 1, 1}));
  // empty along dim (PyTorch: values [0, 3], inverse and counts [0]); empty slices and 0-d refused
  const UniqueResult e = unique_dim(zeros({0, 3}), 0, true, true);
  CHECK(e.values.shape() == Shape{0, 3});
  CHECK(e.inverse.shape() == Shape{0});
  CHECK(e.counts.shape() == Shape{0});
  MG_REQUIRE_ERROR(unique_dim(zeros({3, 0}), 0),
                   "unique_dim: the slices of [3, 0] f32 cpu along dim 0 are empty: with nothing to compare there is no distinct slice");
  MG_REQUIRE_ERROR(unique_dim(full({}, 5.0), 0), "unique_dim: a 0-d tensor has no dim 0 to take slices along");
  MG_REQUIRE_ERROR(unique_dim(x, 2), "unique_dim");
  MG_REQUIRE_ERROR(unique_dim(Tensor(), 0), "unique_dim");
  CHECK_FALSE(unique_dim(x.clone().requires_grad_(), 0).values.requires_grad());
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

TEST_CASE("unique_dim: CUDA gives the CPU's slices, inverse and counts", "[ops][unique][cuda][gpu]") {
  manual_seed(10);
  const Tensor x = to(randint(0, 3, {40, 3}), DType::F32);  // 27 possible rows: repeats
  const Device g = Device::cuda(0);
  for (const DType dt : {DType::F32, DType::I64, DType::BF16}) {
    INFO(dtype_name(dt));
    const Tensor c = to(x, dt);
    const UniqueResult cpu = unique_dim(c, 0, true, true), gpu = unique_dim(c.to(g), 0, true, true);
    CHECK(gpu.values.device() == g);
    CHECK(values(gpu.values) == values(cpu.values));
    CHECK(values(gpu.inverse) == values(cpu.inverse));
    CHECK(values(gpu.counts) == values(cpu.counts));
    const UniqueResult cpu_c = unique_dim_consecutive(c, 1, true, true), gpu_c = unique_dim_consecutive(c.to(g), 1, true, true);
    CHECK(values(gpu_c.values) == values(cpu_c.values));
    CHECK(values(gpu_c.counts) == values(cpu_c.counts));
  }
}
