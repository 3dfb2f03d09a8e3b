// ops/sort.h against PyTorch 2.15's answers (torch.sort(stable=True), argsort, topk, printed by
// PyTorch on the same inputs): ties keep index order both ways, NaN sorts largest, -0 equals +0,
// integer dtypes, other dims, topk both ways; the values' gradient goes back through gather;
// errors; and CUDA equal to the CPU (same indices, bit for bit) on rows with ties and NaN.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "autograd/engine.h"
#include "core/factory.h"
#include "ops/nonzero.h"
#include "ops/ops.h"
#include "ops/sort.h"
#include "test_util.h"

using namespace mg;
using mg::test::V;
using mg::test::values;

TEST_CASE("argsort and sort as PyTorch's stable sort: ties, NaN largest, -0 equal to +0, descending", "[ops][sort]") {
  const Tensor x = from_vector<float>({3.f, NAN, 1.f, 3.f, -0.f, 0.f, NAN, -2.f});
  CHECK(values(argsort(x)) == V({7, 4, 5, 2, 0, 3, 1, 6}));
  CHECK(values(argsort(x, 0, true)) == V({1, 6, 0, 3, 2, 4, 5, 7}));
  for (const DType dt : {DType::F64, DType::F16, DType::BF16}) {
    INFO(dtype_name(dt));
    CHECK(values(argsort(to(x, dt))) == V({7, 4, 5, 2, 0, 3, 1, 6}));
  }
  const auto [v, i] = sort(x, -1, true);
  CHECK(values(i) == V({1, 6, 0, 3, 2, 4, 5, 7}));
  const std::vector<double> sv = values(v);
  CHECK((std::isnan(sv[0]) && std::isnan(sv[1]) && sv[2] == 3 && sv[7] == -2));
  // integers, another dim
  const Tensor m = from_vector<int64_t>({5, 1, 4, 2, 2, 9}, {2, 3});
  CHECK(values(argsort(m, 0)) == V({1, 0, 0, 0, 1, 1}));
  CHECK(values(argsort(m, 1, true)) == V({0, 2, 1, 2, 0, 1}));
  CHECK(values(argsort(to(m, DType::U8), 1)) == values(argsort(m, 1)));
  CHECK(values(argsort(to(m, DType::I32), 0)) == values(argsort(m, 0)));
  // shapes: a 0-d tensor, an empty dim
  CHECK(argsort(full({}, 2.0)).shape() == Shape{});
  CHECK(argsort(zeros({3, 0})).shape() == Shape{3, 0});
  MG_REQUIRE_ERROR(argsort(gt(m, zeros_like(m))), "argsort: expected a numeric tensor, got [2, 3] bool cpu");
  MG_REQUIRE_ERROR(argsort(x, 1), "argsort");
}

TEST_CASE("topk as PyTorch's: largest and smallest, values, indices and the values' gradient", "[ops][sort]") {
  const Tensor x = from_vector<float>({1.f, 5.f, 3.f, 5.f, 0.f, -1.f, 2.f, 8.f}, {2, 4});
  auto [v, i] = topk(x, 2);
  CHECK(values(v) == V({5, 5, 8, 2}));
  CHECK(values(i) == V({1, 3, 3, 2}));
  auto [s, j] = topk(x, 3, -1, false);
  CHECK(values(s) == V({1, 3, 5, -1, 0, 2}));
  // Tied values come in index order (stable); PyTorch leaves topk's tie order unspecified (it
  // gave index 3 before 1 here).
  CHECK(values(j) == V({0, 2, 1, 1, 0, 2}));
  CHECK(topk(x, 0).first.shape() == Shape{2, 0});
  MG_REQUIRE_ERROR(topk(x, 5), "topk: k (5) must be in [0, 4]");
  // d/dx sum(topk values * w): w lands on the chosen elements, 0 elsewhere
  Tensor y = x.clone().requires_grad_();
  sum(topk(y, 2).first * from_vector<float>({10.f, 20.f, 30.f, 40.f}, {2, 2})).backward();
  CHECK(values(y.grad()) == V({0, 10, 0, 20, 0, 0, 40, 30}));
}

TEST_CASE("argsort, sort and topk: CUDA gives the CPU's indices, ties and NaN included", "[ops][sort][cuda][gpu]") {
  manual_seed(4);
  // truncated to a few values so rows have many ties, and NaN in some rows
  Tensor x = to(to(randn({37, 129}) * 3.0, DType::I64), DType::F32) / 2.0;
  x = where(gt(rand({37, 129}), full({}, 0.97)), full({}, NAN), x);
  const Device g = Device::cuda(0);
  for (const DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    INFO(dtype_name(dt));
    const Tensor c = to(x, dt);
    CHECK(values(argsort(c.to(g))) == values(argsort(c)));
    CHECK(values(argsort(c.to(g), 0, true)) == values(argsort(c, 0, true)));
    CHECK(values(topk(c.to(g), 7).second) == values(topk(c, 7).second));
  }
  const Tensor ints = to(x * 4.0, DType::I64);  // NaN became 0 (saturating cast): ties
  CHECK(values(argsort(ints.to(g), 1, true)) == values(argsort(ints, 1, true)));
}

TEST_CASE("argsort on CUDA: row lengths around the tile and the merge widths give the CPU's indices",
          "[ops][sort][cuda][gpu]") {
  // The CUDA kernel sorts tiles of 32 by rank, then merges runs of 32, 64, ...: lengths just
  // below, at and above those widths leave a last run with no sibling or a short one.
  const Device g = Device::cuda(0);
  manual_seed(9);
  for (const int64_t n : {1, 2, 31, 32, 33, 63, 64, 65, 100, 257, 1000, 4099}) {
    INFO("row length " << n);
    const int64_t rows = n > 1000 ? 2 : 5;
    // few distinct values (ties across runs), signed zeros and NaN
    Tensor x = to(to(randn({rows, n}) * 2.0, DType::I64), DType::F32);
    x = where(gt(rand({rows, n}), full({}, 0.9)), full({}, -0.0), x);
    x = where(gt(rand({rows, n}), full({}, 0.95)), full({}, NAN), x);
    for (const DType dt : {DType::F32, DType::BF16, DType::F64}) {
      INFO(dtype_name(dt));
      const Tensor c = to(x, dt);
      CHECK(values(argsort(c.to(g))) == values(argsort(c)));
      CHECK(values(argsort(c.to(g), -1, true)) == values(argsort(c, -1, true)));
    }
    const Tensor ints = to(randint(0, 7, {rows, n}), DType::I32);
    CHECK(values(argsort(ints.to(g))) == values(argsort(ints)));
    // distinct values: a permutation with no ties
    const Tensor perm = to(argsort(rand({rows, n})), DType::F32);
    CHECK(values(argsort(perm.to(g), -1, true)) == values(argsort(perm, -1, true)));
  }
}

TEST_CASE("kthvalue, median and nanmedian as PyTorch's: NaN largest or skipped, the lower median, keepdim",
          "[ops][sort][median]") {
  // PyTorch 2.15 on the same rows: median values [nan, 4, nan] indices [2, 1, 0]; nanmedian
  // [2, 4, nan] / [3, 1, 2]; kthvalue k = 2: [2, 1, nan] / [3, 3, 2] (its all-NaN row's index is
  // unspecified: ours is the stable order's 1); k = 5: [nan, 6, nan] / [4, 2, 4]
  const Tensor x = from_vector<float>({3, 1, NAN, 2, NAN, 5, 4, 6, 1, 0, NAN, NAN, NAN, NAN, NAN}, {3, 5});
  const auto same = [](const Tensor& got, std::vector<double> want) {
    const std::vector<double> g = values(got);
    REQUIRE(g.size() == want.size());
    for (std::size_t i = 0; i < g.size(); ++i) {
      INFO("element " << i);
      if (std::isnan(want[i])) CHECK(std::isnan(g[i])); else CHECK(g[i] == want[i]);
    }
  };
  auto [mv, mi] = median(x, 1);
  same(mv, {NAN, 4, NAN});
  CHECK(values(mi) == V({2, 1, 0}));
  auto [nv, ni] = nanmedian(x, 1);
  same(nv, {2, 4, NAN});
  CHECK(values(ni) == V({3, 1, 2}));
  auto [kv, ki] = kthvalue(x, 2, 1);
  same(kv, {2, 1, NAN});
  CHECK(values(ki) == V({3, 3, 1}));
  auto [lv, li] = kthvalue(x, 5, -1);
  same(lv, {NAN, 6, NAN});
  CHECK(values(li) == V({4, 2, 4}));
  // keepdim, another dim, integers (PyTorch: median([[1, 5], [3, 2]], 0) = [1, 2] at [0, 1])
  CHECK(median(x, 1, true).first.shape() == Shape{3, 1});
  const Tensor m = from_vector<int64_t>({1, 5, 3, 2}, {2, 2});
  auto [iv, ii] = median(m, 0);
  CHECK(iv.dtype() == DType::I64);
  CHECK(values(iv) == V({1, 2}));
  CHECK(values(ii) == V({0, 1}));
  // every element: the lower median; NaN when one is; nanmedian skips it
  CHECK(values(median(from_vector<float>({4, 1, 3, 2}))) == V({2}));
  CHECK(std::isnan(values(median(x))[0]));
  CHECK(values(nanmedian(x)) == V({2}));
  CHECK(median(x).shape() == Shape{});
  CHECK(std::isnan(values(median(zeros({0})))[0]));
  // 0-d; f16 / bf16 keep their dtype
  CHECK(values(median(full({}, 7.0), 0).first) == V({7}));
  CHECK(median(to(x, DType::BF16), 1).first.dtype() == DType::BF16);
  same(median(to(x, DType::F16), 1).first, {NAN, 4, NAN});
  // errors: k out of range, an empty dim (PyTorch: "Expected reduction dim 1 to have non-zero size")
  MG_REQUIRE_ERROR(kthvalue(x, 6, 1), "kthvalue: k (6) must be in [1, 5]");
  MG_REQUIRE_ERROR(kthvalue(x, 0, 1), "kthvalue: k (0)");
  MG_REQUIRE_ERROR(median(zeros({3, 0}), 1), "median: dim 1 of [3, 0] f32 cpu is empty");
  CHECK(median(zeros({0, 3}), 1).first.shape() == Shape{0});
}

TEST_CASE("median's gradient: to the picked element along a dim, split among ties over every element",
          "[ops][sort][median][autograd]") {
  // PyTorch 2.15: median([1, 2, 2, 2, 3], 0) picks index 2 (ours: the stable order's middle
  // element, 2 too) and the gradient goes there alone; median of every element splits it,
  // [0, 1/3, 1/3, 1/3, 0]
  Tensor t = from_vector<double>({1, 2, 2, 2, 3}).requires_grad_();
  auto [v, i] = median(t, 0);
  CHECK(values(i) == V({2}));
  v.backward();
  CHECK(values(t.grad()) == V({0, 0, 1, 0, 0}));
  Tensor u = from_vector<double>({1, 2, 2, 2, 3}).requires_grad_();
  median(u).backward();
  const std::vector<double> g = values(u.grad());
  CHECK(g[0] == 0);
  CHECK(g[1] == Approx(1.0 / 3));
  CHECK(g[3] == Approx(1.0 / 3));
  CHECK(g[4] == 0);
  // the value is the median's exactly, -0 and infinities included
  Tensor w = from_vector<double>({-INFINITY, -INFINITY, 5}).requires_grad_();
  const Tensor mw = median(w);
  CHECK(values(mw) == V({-INFINITY}));
  mw.backward();
  CHECK(values(w.grad()) == V({0.5, 0.5, 0}));
  Tensor z = from_vector<double>({-0.0, 1}).requires_grad_();
  CHECK(std::signbit(values(median(z))[0]));
  // a NaN median: the gradient split among the NaN elements (PyTorch 2.15: [0, 1, 0] and
  // [0, 0.5, 0.5, 0]; nanmedian of a lone NaN: [1])
  Tensor n1 = from_vector<double>({1, NAN, 2}).requires_grad_();
  median(n1).backward();
  CHECK(values(n1.grad()) == V({0, 1, 0}));
  Tensor n2 = from_vector<double>({2, NAN, NAN, 1}).requires_grad_();
  median(n2).backward();
  CHECK(values(n2.grad()) == V({0, 0.5, 0.5, 0}));
  Tensor n3 = from_vector<double>({NAN}).requires_grad_();
  nanmedian(n3).backward();
  CHECK(values(n3.grad()) == V({1}));
  // an empty tensor's NaN median stays in the graph: an empty gradient, as PyTorch's
  Tensor e = zeros({0}, {.dtype = DType::F64}).requires_grad_();
  const Tensor me = median(e);
  CHECK(std::isnan(values(me)[0]));
  me.backward();
  CHECK(e.grad().shape() == Shape{0});
  // kthvalue's values differentiate through gather
  Tensor k = from_vector<double>({4, 1, 3}, {1, 3}).requires_grad_();
  sum(kthvalue(k, 3, 1).first).backward();
  CHECK(values(k.grad()) == V({1, 0, 0}));
}

TEST_CASE("kthvalue and median: CUDA gives the CPU's values and indices", "[ops][sort][median][cuda][gpu]") {
  manual_seed(6);
  Tensor x = to(to(randn({19, 33}) * 3.0, DType::I64), DType::F32) / 2.0;
  x = where(gt(rand({19, 33}), full({}, 0.9)), full({}, NAN), x);
  const Device g = Device::cuda(0);
  for (const DType dt : {DType::F32, DType::BF16, DType::F64}) {
    INFO(dtype_name(dt));
    const Tensor c = to(x, dt);
    CHECK(values(median(c.to(g), 1).second) == values(median(c, 1).second));
    CHECK(values(nanmedian(c.to(g), 0).second) == values(nanmedian(c, 0).second));
    CHECK(values(kthvalue(c.to(g), 4, 1).second) == values(kthvalue(c, 4, 1).second));
  }
  Tensor w = to(x, DType::F32).to(g).requires_grad_();
  const Tensor m = nanmedian(w);
  CHECK(values(m) == values(nanmedian(x)));
  m.backward();
  CHECK(values(w.grad()) == values(to(eq(x, nanmedian(x)), DType::F32) / values(count_nonzero(eq(x, nanmedian(x))))[0]));
}
