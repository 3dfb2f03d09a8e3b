// unbind (ops/ops.h): the slices along a dim equal select()'s, their gradients stack back (unused
// slices give zeros), any dim, and a long sequence's backward goes through one stack.
#include <catch2/catch.hpp>

#include <chrono>

#include "autograd/engine.h"
#include "core/factory.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;

TEST_CASE("unbind: the slices along a dim, gradients stacked back with zeros for unused slices", "[ops][views]") {
  manual_seed(3);
  const Tensor x = randn({3, 4, 5}).requires_grad_();
  for (int64_t dim : {0, 1, 2, -1}) {
    INFO("dim " << dim);
    const Tensors parts = unbind(x, dim);
    const int64_t d = dim < 0 ? dim + 3 : dim;
    REQUIRE(int64_t(parts.size()) == x.size(d));
    for (std::size_t i = 0; i < parts.size(); ++i) {
      CHECK(test::values(parts[i]) == test::values(select(x, d, int64_t(i))));
    }
    // Only the first and last slices are used: the others get zero gradients.
    const Tensor w = randn(parts[0].shape());
    const Tensor g = autograd::grad({sum(parts.front() * w + parts.back() * 2.0)}, {x})[0];
    Tensor want = zeros(x.shape());
    {
      NoGradGuard no_grad;
      select(want, d, 0).add_(w);
      select(want, d, x.size(d) - 1).add_(2.0);
    }
    CHECK(test::values(g) == test::values(want));
  }
  CHECK(unbind(zeros({0, 3})).empty());
  MG_REQUIRE_ERROR(unbind(zeros({})), "unbind: expected a tensor of at least 1 dim");
}

TEST_CASE("unbind: the backward of many slices is one stack (a 4000-step sum differentiates quickly)", "[ops][views]") {
  // With select(), each of the 4000 slices backpropagates into a zero [4000, 256] tensor: 4e9
  // element writes. With unbind the gradients are stacked once.
  const Tensor x = ones({4000, 256}).requires_grad_();
  const auto start = std::chrono::steady_clock::now();
  Tensor total = zeros({256});
  for (const Tensor& row : unbind(x)) total = total + row;
  const Tensor g = autograd::grad({sum(total)}, {x})[0];
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(test::values(sum(g)).at(0) == 4000.0 * 256.0);
  CHECK(seconds < 20.0);  // about 0.1 s here; the select() form writes and adds 4e9 elements
}
