// Optimizer::register_step_post_hook and set_zero_grad_also: when hooks run (after an update, not
// after a step the host knows was skipped), in which order, and their removal.
#include <catch2/catch.hpp>

#include <vector>

#include "core/factory.h"
#include "optim/optim.h"
#include "test_util.h"

using namespace mg;

TEST_CASE("step post-hooks run after each update in order, not after a skipped step", "[optim][hooks]") {
  Tensor w = full({3}, 1.0).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.5});
  std::vector<std::string> calls;
  double seen = 0;
  const int64_t a = opt.register_step_post_hook([&](optim::Optimizer& o) {
    calls.push_back("a");
    seen = w.data<float>()[0];  // the hook sees the updated parameter
    CHECK(&o == &opt);
  });
  opt.register_step_post_hook([&](optim::Optimizer&) { calls.push_back("b"); });
  (w * 2.0).sum().backward();
  opt.step();
  CHECK(calls == std::vector<std::string>{"a", "b"});
  CHECK(seen == 0.0);  // 1 - 0.5 * 2
  opt.set_step_gate([](optim::Optimizer&) { return false; });
  opt.step();
  CHECK(calls.size() == 2);  // skipped by the gate: no hook
  opt.set_step_gate(nullptr);
  opt.step_unless_found_inf(full({1}, 1.0));  // a CPU flag is read on the host: skipped, no hook
  CHECK(calls.size() == 2);
  opt.remove_step_post_hook(a);
  opt.step();
  CHECK(calls == std::vector<std::string>{"a", "b", "b"});
  MG_REQUIRE_ERROR(opt.remove_step_post_hook(a), "no hook has handle");
  MG_REQUIRE_ERROR(opt.register_step_post_hook(nullptr), "the hook is empty");
}

TEST_CASE("zero_grad also clears set_zero_grad_also's gradients, which step never reads", "[optim][hooks]") {
  Tensor w = full({2}, 1.0).requires_grad_(), other = full({2}, 3.0).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.1});
  opt.set_zero_grad_also({other});
  (w * other).sum().backward();
  opt.step();
  CHECK(other.data<float>()[0] == 3.0f);  // not updated
  opt.zero_grad(/*set_to_none=*/false);
  REQUIRE(other.grad().defined());
  CHECK(other.grad().abs().sum().item<double>() == 0.0);
  opt.zero_grad();
  CHECK_FALSE(other.grad().defined());
  CHECK_FALSE(w.grad().defined());
}

TEST_CASE("a step post-hook registered also_after_error runs after a step that threw, and the step's error is reported",
          "[optim][hooks]") {
  Tensor w = ones({3}).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.1});
  std::vector<int> ran;
  opt.register_step_post_hook([&](optim::Optimizer&) { ran.push_back(1); });
  opt.register_step_post_hook([&](optim::Optimizer&) {
    ran.push_back(2);
    MG_THROW(Error, "the hook's own error");
  }, /*also_after_error=*/true);
  w.set_grad(ones({3}));
  opt.param_groups()[0].options["lr"] = -1.0;  // refused by the step, before any parameter changes
  MG_REQUIRE_ERROR(opt.step(), "SGD: param group 0: lr must be >= 0, got -1");
  CHECK(ran == std::vector<int>{2});  // only the also_after_error hook; its error is dropped
  CHECK(mg::test::values(w) == std::vector<double>{1.0, 1.0, 1.0});
  opt.param_groups()[0].options["lr"] = 0.1;
  ran.clear();
  MG_REQUIRE_ERROR(opt.step(), "the hook's own error");  // after a good update a hook's error propagates
  CHECK(ran == std::vector<int>{1, 2});
}
