// ops/sort.h against PyTorch 2.15's answers (torch.sort(stable=True), argsort, topk, printed by
// PyTorch on the same inputs): ties keep index order both ways, NaN sorts largest, -0 equals +0,
// integer dtypes, other dims, topk both ways; the values' gradient goes back through gather;
// errors; and CUDA equal to the CPU (same indices, bit for bit) on rows with ties and NaN.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "autograd/engine.h"
#include "core/factory.h"
#include "ops/ops.h"
#include "ops/sort.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

std::vector<double> V(std::initializer_list<double> v) { return v; }

}  // namespace

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
