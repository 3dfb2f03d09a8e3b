// ops/rearrange.h against PyTorch 2.15's answers on the same inputs (values printed by PyTorch):
// flip, roll (dims, negative shifts, flattened), repeat and tile (new leading dims), tril / triu
// with diagonals and batches; their gradients (each sends the gradient back to the element it
// moved); errors; and CUDA against the CPU.
#include <catch2/catch.hpp>

#include <vector>

#include "autograd/engine.h"
#include "core/factory.h"
#include "ops/ops.h"
#include "ops/rearrange.h"
#include "test_util.h"

using namespace mg;
using mg::test::V;
using mg::test::values;

namespace {

Tensor grid() { return reshape(arange(0, 12, 1, {.dtype = DType::F32}), {3, 4}); }

}  // namespace

TEST_CASE("flip, roll, repeat and tile as PyTorch's", "[ops][rearrange]") {
  const Tensor x = grid();
  CHECK(values(flip(x, {0, 1})) == V({11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}));
  CHECK(values(flip(x, {-1})) == V({3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8}));
  CHECK(values(roll(x, {1, -1}, {0, 1})) == V({9, 10, 11, 8, 1, 2, 3, 0, 5, 6, 7, 4}));
  CHECK(values(roll(x, {5})) == V({7, 8, 9, 10, 11, 0, 1, 2, 3, 4, 5, 6}));
  CHECK(values(roll(x, {-13}, {1})) == values(roll(x, {-1}, {1})));
  const Tensor corner = narrow(narrow(x, 0, 0, 2), 1, 0, 2);  // [[0, 1], [4, 5]], a strided view
  const Tensor r = repeat(corner, {2, 1, 3});
  CHECK(r.shape() == Shape{2, 2, 6});
  CHECK(values(r) == V({0, 1, 0, 1, 0, 1, 4, 5, 4, 5, 4, 5, 0, 1, 0, 1, 0, 1, 4, 5, 4, 5, 4, 5}));
  CHECK(values(tile(corner, {2})) == V({0, 1, 0, 1, 4, 5, 4, 5}));
  CHECK(repeat(corner, {0, 1}).shape() == Shape{0, 2});
  // a copy, never the input itself
  const Tensor same = flip(x, {});
  CHECK_FALSE(same.is_same(x));
  CHECK(values(same) == values(x));
  MG_REQUIRE_ERROR(repeat(corner, {2}), "repeat: 1 repeats for [2, 2] f32 cpu");
  MG_REQUIRE_ERROR(roll(x, {1, 2}), "roll: without dims it takes one shift");
  MG_REQUIRE_ERROR(roll(x, {1}, {0, 1}), "roll: 1 shifts for 2 dims");
  MG_REQUIRE_ERROR(flip(x, {0, -2}), "flip: dim -2 appears twice");
}

TEST_CASE("tril and triu as PyTorch's, over batches, bool masks included", "[ops][rearrange]") {
  const Tensor x = grid();
  CHECK(values(tril(x, -1)) == V({0, 0, 0, 0, 4, 0, 0, 0, 8, 9, 0, 0}));
  CHECK(values(triu(x, 1)) == V({0, 1, 2, 3, 0, 0, 6, 7, 0, 0, 0, 11}));
  CHECK(values(tril(x, 2)) == V({0, 1, 2, 0, 4, 5, 6, 7, 8, 9, 10, 11}));
  const Tensor causal = tril(ones({3, 3}, {.dtype = DType::Bool}));
  CHECK(causal.dtype() == DType::Bool);
  CHECK(values(causal) == V({1, 0, 0, 1, 1, 0, 1, 1, 1}));
  const Tensor batch = stack({x, x * 2.0}, 0);
  CHECK(values(narrow(triu(batch), 0, 1, 1)) == values(triu(x * 2.0)));
  MG_REQUIRE_ERROR(tril(arange(0, 3)), "tril: expected a matrix or a batch of them");
}

TEST_CASE("flip, roll, repeat, tril: each gradient goes back to the element it moved", "[ops][rearrange]") {
  const Tensor w = reshape(arange(1, 13, 1, {.dtype = DType::F64}), {3, 4});  // distinct weights per output
  const auto grad_of = [&](auto f) {
    Tensor x = reshape(arange(0, 12, 1, {.dtype = DType::F64}), {3, 4}).requires_grad_();
    sum(f(x) * w).backward();
    return values(x.grad());
  };
  // d/dx of sum(f(x) * w) is w moved back by the inverse rearrangement.
  CHECK(grad_of([](const Tensor& x) { return flip(x, {1}); }) == values(flip(w, {1})));
  CHECK(grad_of([](const Tensor& x) { return roll(x, {1, 2}, {0, 1}); }) == values(roll(w, {-1, -2}, {0, 1})));
  CHECK(grad_of([](const Tensor& x) { return tril(x); }) == values(tril(w)));
  Tensor y = arange(0, 4, 1, {.dtype = DType::F64}).requires_grad_();
  sum(repeat(y, {3})).backward();
  CHECK(values(y.grad()) == V({3, 3, 3, 3}));
}

TEST_CASE("flip, roll, repeat, tile, tril, triu: CUDA equals the CPU", "[ops][rearrange][cuda][gpu]") {
  const Tensor x = randn({5, 7, 9});
  const Tensor g = x.to(Device::cuda(0));
  CHECK(values(flip(g, {0, 2})) == values(flip(x, {0, 2})));
  CHECK(values(roll(g, {3, -4}, {1, 2})) == values(roll(x, {3, -4}, {1, 2})));
  CHECK(values(roll(g, {11})) == values(roll(x, {11})));
  CHECK(values(repeat(g, {2, 1, 1, 3})) == values(repeat(x, {2, 1, 1, 3})));
  CHECK(values(tile(g, {2})) == values(tile(x, {2})));
  CHECK(values(tril(g, -2)) == values(tril(x, -2)));
  CHECK(values(triu(to(g, DType::BF16), 3)) == values(triu(to(x, DType::BF16), 3)));
}
