// The training loop of docs/optim.md (a small MLP fitting y = |x|^2 with AdamW, a warmup + cosine
// schedule and gradient clipping): the loss falls, the schedule ends at min_lr, and the state
// dicts of the optimizer and the scheduler hold what a checkpoint needs.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "autograd/engine.h"
#include "core/factory.h"
#include "nn/nn.h"
#include "ops/loss.h"
#include "optim_test_util.h"

using namespace mg;
namespace nn = mg::nn;

TEST_CASE("optim: the docs training loop lowers the loss", "[optim]") {
  manual_seed(0);
  auto net = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::UnaryModule>>{
      nn::make<nn::Linear>({.in = 2, .out = 32}), nn::make<nn::GELU>(), nn::make<nn::Linear>({.in = 32, .out = 1})});
  const Tensor x = randn({256, 2});              // [B, 2]
  const Tensor y = sum(x * x, {1}, true);        // [B, 1]

  optim::AdamW opt(net->parameters(), {.lr = 1e-2, .weight_decay = 0.01});
  optim::WarmupCosineLR sched(opt, {.warmup_steps = 10, .total_steps = 200, .min_lr = 1e-4});
  double first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    const Tensor loss = mse_loss(net->forward(x), y);
    opt.zero_grad();
    loss.backward();
    const Tensor norm = optim::clip_grad_norm_(opt.parameters(), 1.0);
    REQUIRE(std::isfinite(norm.item<double>()));
    opt.step();
    sched.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  INFO("loss " << first << " -> " << last);
  CHECK(last < 0.1 * first);
  CHECK(opt.step_count() == 200);
  CHECK(sched.get_last_lr()[0] == Approx(1e-4));
  const StateDict s = opt.state_dict();
  CHECK(s.tensors.size() == 8);  // 4 parameters x (exp_avg, exp_avg_sq)
  CHECK(s.floats.at("group.0.initial_lr") == 1e-2);
  CHECK(sched.state_dict().ints.at("last_epoch") == 200);
}
