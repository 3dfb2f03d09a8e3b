// autograd/hooks.h: post-accumulate hooks on leaves and callbacks queued for the end of a
// backward pass (what DistributedDataParallel builds on).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/hooks.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

TEST_CASE("post-accumulate hooks see the accumulated gradient, later layers first", "[autograd]") {
  Tensor a = from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor b = from_vector<double>({3, 4}, {2}).requires_grad_();
  std::vector<std::string> order;
  std::vector<double> seen_a;
  const uint64_t ha = autograd::register_post_accumulate_grad_hook(a, [&](const Tensor& leaf) {
    order.push_back("a");
    seen_a = values(leaf.grad());
  });
  autograd::register_post_accumulate_grad_hook(b, [&](const Tensor&) { order.push_back("b"); });
  // y = sum((a * a) * b + a): a is used twice (its gradient is summed before the hook), b is
  // used after a, so its gradient is ready first. dy/da = 2ab + 1 = [7, 17], dy/db = a^2 = [1, 4].
  const Tensor y = sum((a * a) * b + a);
  y.backward();
  CHECK(order == std::vector<std::string>{"b", "a"});
  CHECK(seen_a == std::vector<double>{7, 17});
  // A second backward accumulates, and the hook sees the sum.
  sum((a * a) * b + a).backward();
  CHECK(seen_a == std::vector<double>{14, 34});
  CHECK(order.size() == 4);
  // Removed: it no longer runs; grad() (which leaves .grad alone) runs none.
  CHECK(autograd::remove_post_accumulate_grad_hook(a, ha));
  CHECK_FALSE(autograd::remove_post_accumulate_grad_hook(a, ha));
  sum(a * b).backward();
  CHECK(order.size() == 5);
  autograd::grad({sum(a * b)}, {a, b});
  CHECK(order.size() == 5);
  CHECK_THROWS_WITH(autograd::register_post_accumulate_grad_hook(a * 2.0, [](const Tensor&) {}),
                    Catch::Contains("register_post_accumulate_grad_hook: expected a leaf tensor that requires grad"));
  // A leaf frozen after its hook was registered: the removal still works and never throws
  // (DistributedDataParallel's destructor removes its hooks; a throw there terminated the process).
  const uint64_t hb = autograd::register_post_accumulate_grad_hook(b, [](const Tensor&) {});
  b.requires_grad_(false);
  CHECK(autograd::remove_post_accumulate_grad_hook(b, hb));
  CHECK_FALSE(autograd::remove_post_accumulate_grad_hook(Tensor(), hb));
  CHECK_FALSE(autograd::remove_post_accumulate_grad_hook(zeros({2}), hb));
}

TEST_CASE("queued callbacks run once after every node of the backward ran", "[autograd]") {
  Tensor a = from_vector<double>({1, 2}, {2}).requires_grad_();
  Tensor b = from_vector<double>({3, 4}, {2}).requires_grad_();
  std::vector<std::string> events;
  bool queued = false;
  // Registering creates the leaves' accumulators, a's first: b's (created later) runs first.
  autograd::register_post_accumulate_grad_hook(a, [&](const Tensor&) { events.push_back("a ready"); });
  autograd::register_post_accumulate_grad_hook(b, [&](const Tensor&) {
    events.push_back("b ready");
    if (queued) return;
    queued = true;
    autograd::queue_callback([&] {
      // Every gradient is in place when it runs, even a's, which came after the queueing.
      events.push_back("end: a.grad " + std::to_string(values(a.grad())[1]));
      autograd::queue_callback([&] { events.push_back("queued by a callback"); });
    });
  });
  CHECK_FALSE(autograd::in_backward());
  sum(a * b).backward();  // d/da = b = [3, 4]
  CHECK(events == std::vector<std::string>{"b ready", "a ready", "end: a.grad 4.000000", "queued by a callback"});
  CHECK_FALSE(autograd::in_backward());
  CHECK_THROWS_WITH(autograd::queue_callback([] {}),
                    Catch::StartsWith("queue_callback: no backward pass is running on this thread"));
}

TEST_CASE("an exception thrown by a queued callback leaves backward", "[autograd]") {
  Tensor a = from_vector<double>({1}, {1}).requires_grad_();
  autograd::register_post_accumulate_grad_hook(a, [](const Tensor&) {
    autograd::queue_callback([] { throw Error("the end callback failed"); });
  });
  CHECK_THROWS_WITH(sum(a * 2.0).backward(), "the end callback failed");
  CHECK(values(a.grad()) == std::vector<double>{2});
  CHECK_FALSE(autograd::in_backward());
}

TEST_CASE("register_hook returns a handle that removes the hook", "[autograd][hooks]") {
  Tensor x = from_vector<double>({1, 2}).requires_grad_();
  Tensor y = x * 3.0;
  int calls = 0;
  HookHandle doubling = y.register_hook([&](const Tensor& g) {
    ++calls;
    return g * 2.0;
  });
  HookHandle on_leaf = x.register_hook([&](const Tensor&) {
    ++calls;
    return Tensor();
  });
  sum(y).backward(Tensor(), /*retain_graph=*/true);
  CHECK(calls == 2);
  CHECK(mg::test::values(x.grad()) == std::vector<double>{6, 6});
  CHECK(doubling.remove());
  CHECK(on_leaf.remove());
  CHECK_FALSE(doubling.remove());  // gone already
  x.set_grad(Tensor());
  sum(y).backward();
  CHECK(calls == 2);
  CHECK(mg::test::values(x.grad()) == std::vector<double>{3, 3});
  // A hook that removes itself while it runs.
  Tensor z = x * 1.0;
  HookHandle once;
  once = z.register_hook([&](const Tensor&) {
    ++calls;
    once.remove();
    return Tensor();
  });
  sum(z).backward(Tensor(), true);
  sum(z).backward();
  CHECK(calls == 3);
  // The handle does not keep the graph alive.
  HookHandle orphan;
  {
    Tensor w = x * 2.0;
    orphan = w.register_hook([](const Tensor&) { return Tensor(); });
  }
  CHECK_FALSE(orphan.remove());
}
