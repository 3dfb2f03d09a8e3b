// The pooling functions built from public ops (ops/lp_pool.h, ops/max_unpool.h, max_pool3d_indices,
// ops/fractional_max_pool.h) on CUDA: the
// CPU's values and gradients (their PyTorch checks are in tests/nn/test_small_layers.cpp).
#include <catch2/catch.hpp>

#include <tuple>

#include "autograd/engine.h"
#include "core/factory.h"
#include "ops/conv.h"
#include "ops/conv3d.h"
#include "ops/fractional_max_pool.h"
#include "ops/lp_pool.h"
#include "ops/max_unpool.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

// unpool(values, indices) of random values at `indices` on device g equals the CPU's, and so does
// the gradient of the values (repeated indices: the last value wins on both).
template <typename Unpool>
void check_unpool_on(Device g, const Tensor& indices, Unpool&& unpool) {
  const Tensor src = randn(indices.shape());
  const Tensor a = src.clone().requires_grad_(), b = src.to(g).requires_grad_();
  const Tensor ua = unpool(a, indices), ub = unpool(b, indices.to(g));
  CHECK(ub.device() == g);
  CHECK(values(ub) == values(ua));
  const Tensor r = randn(ua.shape());
  sum(ua * r).backward();
  sum(ub * r.to(g)).backward();
  CHECK(values(b.grad()) == values(a.grad()));
}

}  // namespace

TEST_CASE("max_unpool2d, max_pool1d_indices and lp_pool2d on CUDA give the CPU's values and gradients",
          "[ops][pool][cuda][gpu]") {
  manual_seed(11);
  const Device g = Device::cuda(0);
  const Tensor x = randn({2, 3, 6, 7});
  // overlapping windows: repeated indices, whose last value must win on the device too
  const Tensor i = max_pool2d_indices(x, {3, 3}, {1, 1});
  CHECK(values(max_pool2d_indices(x.to(g), {3, 3}, {1, 1})) == values(i));
  check_unpool_on(g, i, [](const Tensor& v, const Tensor& idx) { return max_unpool2d(v, idx, {6, 7}); });
  const Tensor s = randn({2, 3, 11});
  CHECK(values(max_pool1d_indices(s.to(g), 3, 2, 1)) == values(max_pool1d_indices(s, 3, 2, 1)));
  const Tensor p = abs(x) + 0.1;
  const Tensor lc = lp_pool2d(p, 1.5, {2, 3}, {1, 2}, true), lg = lp_pool2d(p.to(g), 1.5, {2, 3}, {1, 2}, true);
  const std::vector<double> vc = values(lc), vg = values(lg);
  REQUIRE(vc.size() == vg.size());
  for (std::size_t k = 0; k < vc.size(); ++k) CHECK(vg[k] == Approx(vc[k]).epsilon(1e-5));
}

TEST_CASE("max_pool3d_indices and max_unpool3d on CUDA give the CPU's values and gradients", "[ops][pool][cuda][gpu]") {
  manual_seed(12);
  const Device g = Device::cuda(0);
  const Tensor x = randn({2, 2, 5, 6, 7});
  const std::array<int64_t, 3> k{3, 2, 3}, st{2, 1, 2}, pad{1, 0, 1};  // overlapping windows
  const Tensor i = max_pool3d_indices(x, k, st, pad);
  CHECK(values(max_pool3d_indices(x.to(g), k, st, pad)) == values(i));
  check_unpool_on(g, i, [](const Tensor& v, const Tensor& idx) { return max_unpool3d(v, idx, {5, 6, 7}); });
}

TEST_CASE("fractional_max_pool2d/3d on CUDA give the CPU's windows, values and gradients", "[ops][pool][cuda][gpu]") {
  manual_seed(13);
  const Device g = Device::cuda(0);
  for (const DType dt : {DType::F32, DType::BF16}) {
    INFO(dtype_name(dt));
    const Tensor x = randn({2, 3, 13, 11}).to(dt), u = rand({2, 3, 2});
    const Tensor a = x.clone().requires_grad_(), b = x.to(g).requires_grad_();
    const auto [ya, ia] = fractional_max_pool2d_with_indices(a, {2, 3}, {8, 6}, u);
    const auto [yb, ib] = fractional_max_pool2d_with_indices(b, {2, 3}, {8, 6}, u.to(g));
    CHECK(yb.device() == g);
    CHECK(values(ib) == values(ia));
    CHECK(values(yb) == values(ya));
    const Tensor r = randn(ya.shape()).to(dt);
    sum(ya * r).backward();
    sum(yb * r.to(g)).backward();
    CHECK(values(b.grad()) == values(a.grad()));
  }
  const Tensor v = randn({2, 7, 6, 8}), w = rand({1, 2, 3});
  CHECK(values(fractional_max_pool3d_with_indices(v.to(g), {2, 2, 3}, {5, 4, 5}, w.to(g)).second) ==
        values(fractional_max_pool3d_with_indices(v, {2, 2, 3}, {5, 4, 5}, w).second));
}
