// ops/nonzero.h against PyTorch 2.15's answers (printed by PyTorch on the same inputs): NaN counts
// as nonzero and -0 as zero, 0-d and empty inputs, integer and bool inputs, masked_select with a
// broadcast mask and its gradient, count_nonzero over dims, errors; and CUDA equal to the CPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "autograd/engine.h"
#include "core/factory.h"
#include "ops/logical.h"
#include "ops/nonzero.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::V;
using mg::test::values;

TEST_CASE("nonzero and argwhere as PyTorch's: row-major coordinates, NaN nonzero, -0 zero", "[ops][nonzero]") {
  const Tensor x = from_vector<float>({0.f, NAN, -0.f, 2.f, 0.f, -1.f}, {2, 3});
  const Tensor n = nonzero(x);
  CHECK(n.dtype() == DType::I64);
  CHECK(n.shape() == Shape{3, 2});
  CHECK(values(n) == V({0, 1, 1, 0, 1, 2}));
  CHECK(values(argwhere(x)) == values(n));
  for (const DType dt : {DType::F64, DType::F16, DType::BF16}) {
    INFO(dtype_name(dt));
    CHECK(values(nonzero(to(x, dt))) == values(n));
  }
  // integers, bool, another rank, a transposed view (logical order, not storage order)
  CHECK(values(nonzero(from_vector<int64_t>({0, 7, 0, -3}))) == V({1, 3}));
  CHECK(values(nonzero(gt(x, full({}, 0.0)))) == V({1, 0}));
  const Tensor t = transpose(from_vector<float>({0, 1, 2, 0, 0, 3}, {2, 3}), 0, 1);  // [[0,0],[1,0],[2,3]]
  CHECK(values(nonzero(t)) == V({1, 0, 2, 0, 2, 1}));
  const Tensor c = nonzero(from_vector<float>({0, 0, 5, 0, 0, 0, 0, 1}, {2, 2, 2}));
  CHECK(c.shape() == Shape{2, 3});
  CHECK(values(c) == V({0, 1, 0, 1, 1, 1}));
  // 0-d and empty, as PyTorch's shapes: [1, 0], [0, 0], [0, 3]
  CHECK(nonzero(full({}, 3.0)).shape() == Shape{1, 0});
  CHECK(nonzero(full({}, 0.0)).shape() == Shape{0, 0});
  CHECK(nonzero(zeros({2, 0, 3})).shape() == Shape{0, 3});
  CHECK(nonzero(zeros({4, 5})).shape() == Shape{0, 2});
}

TEST_CASE("masked_select as PyTorch's: a broadcast mask, row-major order, the gradient to the selected elements",
          "[ops][nonzero][autograd]") {
  // PyTorch 2.15: a = arange(6).reshape(2, 3), m = [True, False, True]: [0, 2, 3, 5]; the gradient
  // of (y * [1, 2, 3, 4]).sum() is [[1, 0, 2], [3, 0, 4]]
  Tensor a = reshape(arange(0, 6, 1, {.dtype = DType::F64}), {2, 3}).requires_grad_();
  const Tensor m = gt(from_vector<float>({1, 0, 1}), zeros({}));
  const Tensor y = masked_select(a, m);
  CHECK(values(y) == V({0, 2, 3, 5}));
  sum(y * from_vector<double>({1, 2, 3, 4})).backward();
  CHECK(values(a.grad()) == V({1, 0, 2, 3, 0, 4}));
  // the mask broadcasts x too: [3] against [2, 1] gives the rows of [2, 3] where the mask is set
  const Tensor m2 = gt(from_vector<float>({1, 0}, {2, 1}), zeros({}));
  CHECK(values(masked_select(from_vector<float>({1, 2, 3}), m2)) == V({1, 2, 3}));
  // dtypes kept; nothing selected
  const Tensor h = to(from_vector<float>({1.5f, -2.f, 3.f}), DType::BF16);
  CHECK(masked_select(h, m).dtype() == DType::BF16);
  CHECK(values(masked_select(h, m)) == V({1.5, 3}));
  CHECK(masked_select(h, m & ~m).shape() == Shape{0});
}

TEST_CASE("count_nonzero over every dim and over some", "[ops][nonzero]") {
  const Tensor x = from_vector<float>({0.f, NAN, -0.f, 2.f, 0.f, -1.f}, {2, 3});
  CHECK(count_nonzero(x).dtype() == DType::I64);
  CHECK(values(count_nonzero(x)) == V({3}));
  CHECK(values(count_nonzero(x, {1})) == V({1, 2}));
  CHECK(values(count_nonzero(x, {0})) == V({1, 1, 1}));
  CHECK(values(count_nonzero(from_vector<int64_t>({1, 0, 0, 0}, {2, 2}), {0, 1})) == V({1}));
}

TEST_CASE("nonzero and masked_select refuse what PyTorch refuses, by name", "[ops][nonzero][errors]") {
  const Tensor a = zeros({2, 3});
  MG_REQUIRE_ERROR(masked_select(a, from_vector<int64_t>({1, 0, 1})),
                   "masked_select: expected a bool mask, got [3] i64 cpu");
  MG_REQUIRE_ERROR(masked_select(a, gt(zeros({4}), zeros({}))), "masked_select");
  MG_REQUIRE_ERROR(nonzero(Tensor()), "nonzero: got an undefined tensor");
}

TEST_CASE("nonzero and masked_select: CUDA gives the CPU's values", "[ops][nonzero][cuda][gpu]") {
  manual_seed(5);
  const Tensor x = where(gt(rand({37, 5, 29}), full({}, 0.7)), randn({37, 5, 29}), zeros({}));
  const Device g = Device::cuda(0);
  for (const DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64}) {
    INFO(dtype_name(dt));
    const Tensor c = to(x * 3.0, dt);
    const Tensor got = nonzero(c.to(g));
    CHECK(got.device() == g);
    CHECK(got.shape() == nonzero(c).shape());
    CHECK(values(got) == values(nonzero(c)));
  }
  const Tensor mask = gt(x, zeros({}));
  Tensor w = randn({37, 5, 29}).to(g).requires_grad_();
  const Tensor y = masked_select(w, mask.to(g));
  CHECK(values(y) == values(masked_select(w.detach().to(Device::cpu()), mask)));
  sum(y).backward();
  CHECK(values(w.grad()) == values(to(mask, DType::F32)));
  CHECK(nonzero(zeros({3, 4}).to(g)).shape() == Shape{0, 2});
}
