// mg::checkpoint (ops/checkpoint.h), both forms: a checkpointed block gives the gradients of the
// same block run plainly, bit for bit — with dropout (the generator's position replayed), under an
// autocast region that has ended before backward (its state replayed), with parameters inside and
// no input requiring grad — and leaves the generator where the forward left it. Then each form's
// own behaviour and errors.
#include <catch2/catch.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/hooks.h"
#include "core/factory.h"
#include "core/generator.h"
#include "nn/linear.h"
#include "nn/models/bert.h"
#include "ops/checkpoint.h"
#include "ops/custom_function.h"
#include "ops/norm.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

struct Block {
  std::shared_ptr<nn::Linear> a = std::make_shared<nn::Linear>(nn::LinearOptions{.in = 8, .out = 16});
  std::shared_ptr<nn::Linear> b = std::make_shared<nn::Linear>(nn::LinearOptions{.in = 16, .out = 8});
  Tensor operator()(const Tensor& x) const { return b->forward(dropout(gelu(a->forward(x)), 0.3)); }
  Tensors params() const {
    Tensors p = a->parameters();
    for (const Tensor& t : b->parameters()) p.push_back(t);
    return p;
  }
};

// loss and parameter gradients of block(x) (checkpointed or not), from seed 3.
struct Result {
  std::vector<double> loss, x_grad;
  std::vector<std::vector<double>> grads;
};
// `after`: a second block after the checkpointed one, its own weights (a weight shared between a
// checkpointed part and a plain part of one autocast region gets its bf16 cast recomputed in
// backward, so its two gradient contributions add in f32 instead of in the cached cast's bf16:
// closer to exact, but other bits, as in PyTorch).
Result run(const Block& block, const Block& after, bool ckpt, bool x_requires_grad, bool autocast,
           CheckpointOptions form = {}) {
  for (const Tensor& p : block.params()) p.set_grad(Tensor());
  for (const Tensor& p : after.params()) p.set_grad(Tensor());
  manual_seed(3);
  const Tensor x = randn({4, 8}).requires_grad_(x_requires_grad);
  Tensor y;
  {
    std::optional<amp::Autocast> region;
    if (autocast) region.emplace(amp::AutocastOptions{.device = DeviceType::CPU, .dtype = DType::BF16});
    const Tensor h = ckpt ? checkpoint([&](const Tensors& in) { return Tensors{block(in[0])}; }, {x}, form)[0] : block(x);
    y = sum(after(h.to(DType::F32)));  // more dropout draws after the checkpointed ones
  }
  y.backward();  // outside the autocast region
  Result r;
  r.loss = values(y);
  if (x_requires_grad) r.x_grad = values(x.grad());
  for (const Tensor& p : block.params()) r.grads.push_back(values(p.grad()));
  for (const Tensor& p : after.params()) r.grads.push_back(values(p.grad()));
  return r;
}

const CheckpointOptions kRecomputing{.reentrant = false}, kReentrant{.reentrant = true};

// x -> 2x whose backward passes no gradient on (a user function that cuts the graph).
struct NoGradBack : Function<NoGradBack> {
  static constexpr const char* name = "no_grad_back";
  static constexpr CastPolicy policy = CastPolicy::Keep;
  static Tensors forward(FunctionCtx&, const Tensors& in) { return {in[0] * 2.0}; }
  static Tensors backward(FunctionCtx&, const Tensors&) { return {Tensor()}; }
};

}  // namespace

TEST_CASE("checkpoint: gradients equal the plain run's bit for bit (dropout, autocast, no input grad)", "[autograd][checkpoint]") {
  manual_seed(1);
  const Block block, after;
  for (const CheckpointOptions form : {kRecomputing, kReentrant}) {
  for (const bool autocast : {false, true}) {
    for (const bool x_grad : {true, false}) {
      INFO("reentrant " << form.reentrant << ", autocast " << autocast << ", x requires grad " << x_grad);
      const Result plain = run(block, after, false, x_grad, autocast);
      const Result ck = run(block, after, true, x_grad, autocast, form);
      CHECK(ck.loss == plain.loss);
      CHECK(ck.x_grad == plain.x_grad);
      REQUIRE(ck.grads.size() == plain.grads.size());
      for (std::size_t i = 0; i < ck.grads.size(); ++i) CHECK(ck.grads[i] == plain.grads[i]);
    }
  }
  }
}

TEST_CASE("checkpoint: the recomputation leaves the generator where the forward left it", "[autograd][checkpoint]") {
  const Block block;
  for (const CheckpointOptions form : {kRecomputing, kReentrant}) {
    manual_seed(5);
    const Tensor x = randn({4, 8}).requires_grad_();
    const Tensor y = checkpoint([&](const Tensors& in) { return Tensors{block(in[0])}; }, {x}, form)[0];
    const Generator::Position after_forward = default_generator().position();
    sum(y).backward();
    CHECK(default_generator().position().offset == after_forward.offset);
    CHECK(default_generator().position().seed == after_forward.seed);
  }
  const Tensor x = randn({4, 8}).requires_grad_();
  // Inference: fn just runs.
  NoGradGuard no_grad;
  CHECK_FALSE(checkpoint([&](const Tensors& in) { return Tensors{block(in[0])}; }, {x})[0].requires_grad());
}

TEST_CASE("checkpoint: a generator the function creates itself replays its draws (both forms)",
          "[autograd][checkpoint]") {
  // A seeded local generator lives at another address when backward runs the function again: its
  // draws were looked up by address and the recomputation threw "drew random numbers the first run
  // did not draw". PyTorch 2.15 recomputes such a function (its local generator reseeded alike).
  for (const CheckpointOptions form : {kRecomputing, kReentrant}) {
    manual_seed(8);
    const Tensor x = randn({4, 8}).requires_grad_();
    Tensor mask;
    std::vector<std::unique_ptr<Generator>> made;  // kept alive: each run's generator has its own address
    auto fn = [&](const Tensors& in) {
      made.push_back(std::make_unique<Generator>(123));
      const Tensor m = rand({4, 8}, {}, made.back().get());
      if (!mask.defined()) mask = m;
      // A draw from the default generator beside it keeps its own stream.
      return Tensors{in[0] * m + dropout(in[0], 0.5, true) * 0.0};
    };
    const Tensor y = checkpoint(fn, {x}, form)[0];
    sum(y).backward();
    CHECK(values(x.grad()) == values(mask));
  }
}

TEST_CASE("checkpoint, reentrant form: bad use is a named error", "[autograd][checkpoint][errors]") {
  const Block block;
  const Tensor x = randn({4, 8}).requires_grad_();
  // An input modified in place between forward and backward.
  Tensor z = randn({4, 8});
  const Tensor y = checkpoint([&](const Tensors& in) { return Tensors{block(in[0])}; }, {z}, kReentrant)[0];
  z.add_(1.0);
  MG_REQUIRE_ERROR(sum(y).backward(), "was modified by an in-place operation (version 0 -> 1)");
  // Double backward.
  const Tensor y2 = checkpoint([&](const Tensors& in) { return Tensors{block(in[0]) * in[0]}; }, {x}, kReentrant)[0];
  MG_REQUIRE_ERROR(autograd::grad({sum(y2)}, {x}, {}, std::nullopt, /*create_graph=*/true),
                   "checkpoint: create_graph (double backward) through a checkpointed function is not supported");
  // A function that computes something else the second time.
  int runs = 0;
  const Tensor y3 =
      checkpoint([&](const Tensors& in) { return Tensors{++runs == 1 ? in[0] * 2.0 : sum(in[0])}; }, {x}, kReentrant)[0];
  MG_REQUIRE_ERROR(sum(y3).backward(), "checkpoint: output 0 of the recomputation is [] f32 cpu but was [4, 8] in the first run");
  MG_REQUIRE_ERROR(checkpoint(CheckpointFn(), {x}), "checkpoint: no function given");
}

TEST_CASE("checkpoint: BERT with gradient checkpointing trains with the same gradients (dropout on, padding)",
          "[autograd][checkpoint][nn]") {
  auto grads_of = [](bool ckpt, CheckpointOptions form = {}) {
    manual_seed(7);
    nn::models::BertForMaskedLM mlm(nn::models::BertConfig::tiny(120));
    mlm.bert->set_gradient_checkpointing(ckpt, form);
    mlm.train();
    const Tensor ids = randint(5, 120, {2, 9});
    Tensor mask = ones({2, 9}, {.dtype = DType::I64});
    mask.narrow(1, 6, 3).select(0, 1).fill_(0.0);  // the second row is padded
    const Tensor logits = mlm.forward(ids, Tensor(), mask);  // [2, 9, 120]
    sum(logits * logits).backward();
    std::vector<std::vector<double>> g;
    for (const Tensor& p : mlm.parameters()) g.push_back(values(p.grad()));
    return g;
  };
  const auto plain = grads_of(false);
  for (const CheckpointOptions form : {kRecomputing, kReentrant}) {
    INFO("reentrant " << form.reentrant);
    const auto ck = grads_of(true, form);
    REQUIRE(plain.size() == ck.size());
    for (std::size_t i = 0; i < plain.size(); ++i) CHECK(ck[i] == plain[i]);
  }
}

TEST_CASE("checkpoint on CUDA: gradients equal the plain run's (dropout replayed on the device)", "[autograd][checkpoint][cuda][gpu]") {
  const Device gpu = Device::cuda(0);
  auto grads_of = [&](bool ckpt, CheckpointOptions form = {}) {
    manual_seed(11);
    auto a = std::make_shared<nn::Linear>(nn::LinearOptions{.in = 8, .out = 32});
    a->to(gpu);
    const Tensor x = randn({16, 8}).to(gpu).requires_grad_();
    auto f = [&](const Tensors& in) { return Tensors{dropout(gelu(a->forward(in[0])), 0.4)}; };
    const Tensor y = ckpt ? checkpoint(f, {x}, form)[0] : f({x})[0];
    sum(y * y).backward();
    std::vector<std::vector<double>> g = {values(x.grad())};
    for (const Tensor& p : a->parameters()) g.push_back(values(p.grad()));
    return g;
  };
  CHECK(grads_of(true, kRecomputing) == grads_of(false));
  CHECK(grads_of(true, kReentrant) == grads_of(false));
}

TEST_CASE("checkpoint, reentrant form: a callback queued inside the recomputation's backward runs when the whole "
          "backward ends", "[autograd][checkpoint]") {
  // DistributedDataParallel queues its reduction from the first gradient hook; when that hook fires
  // inside a checkpoint's nested backward, the reduction must still wait for the rest of the pass.
  const Tensor w0 = randn({4}).requires_grad_(), w1 = randn({4}).requires_grad_();
  bool w0_ready_at_callback = false, called = false;
  autograd::register_post_accumulate_grad_hook(w1, [&](const Tensor&) {
    autograd::queue_callback([&] {
      called = true;
      w0_ready_at_callback = w0.grad().defined();  // w0's gradient comes after the checkpoint node
    });
  });
  const Tensor h = randn({4}) * w0;
  const Tensor y = checkpoint([&](const Tensors& in) { return Tensors{in[0] * w1}; }, {h}, kReentrant)[0];
  sum(y).backward();
  CHECK(called);
  CHECK(w0_ready_at_callback);
}

TEST_CASE("checkpoint, reentrant form: review findings - aliases, grad(), nested passes' callbacks",
          "[autograd][checkpoint]") {
  // An output that is an input returned as is shares its memory: writing into it in place would
  // bypass the recomputation (a wrong gradient), so it is refused, as PyTorch's reentrant form does.
  const Tensor x = randn({3}).requires_grad_();
  const Tensor h = x * 1.0;
  Tensor same = checkpoint([](const Tensors& in) { return Tensors{in[0]}; }, {h}, kReentrant)[0];
  MG_REQUIRE_ERROR(same.mul_(2.0), "shares memory with an input of the custom function (or checkpoint)");
  Tensor view = checkpoint([](const Tensors& in) { return Tensors{in[0].narrow(0, 0, 2)}; }, {h}, kReentrant)[0];
  MG_REQUIRE_ERROR(view.mul_(2.0), "shares memory with an input");

  // autograd::grad must not write .grad: refused instead of filling the parameters' gradients.
  const Tensor w = randn({3}).requires_grad_();
  const Tensor y = checkpoint([&](const Tensors& in) { return Tensors{in[0] * w}; }, {x}, kReentrant)[0];
  MG_REQUIRE_ERROR(autograd::grad({sum(y)}, {x}), "checkpoint: autograd::grad through a checkpointed function is not supported");
  CHECK_FALSE(w.grad().defined());

  // A hook inside the recomputation's backward that runs its own autograd::grad: a callback queued
  // in that inner pass runs when the inner pass ends (only the checkpoint's own nested backward
  // joins the outer pass).
  std::vector<std::string> order;
  autograd::register_post_accumulate_grad_hook(w, [&](const Tensor&) {
    EnableGradGuard grad_on;  // hooks run with grad mode off
    const Tensor u = randn({3}).requires_grad_();
    u.register_hook([&](const Tensor& g) {
      autograd::queue_callback([&] { order.push_back("inner-cb"); });
      return g;
    });
    autograd::grad({(u * 2.0).sum()}, {u});
    order.push_back("after-inner-grad");
  });
  const Tensor y2 = checkpoint([&](const Tensors& in) { return Tensors{in[0] * w}; }, {x}, kReentrant)[0];
  sum(y2).backward();
  CHECK(order == std::vector<std::string>{"inner-cb", "after-inner-grad"});
}

TEST_CASE("checkpoint: a region inside the function that names no dtype inherits the forward's, also in backward",
          "[autograd][checkpoint]") {
  // f16 outside, an f32 island around the checkpoint, and a plain Autocast inside fn: it inherits
  // f16 in the forward, and must again in the recomputation (at depth 0 in backward, where a fresh
  // region would take the CPU's default, bf16).
  manual_seed(8);
  const Tensor w = randn({8, 8}).requires_grad_();
  const Tensor x0 = randn({4, 8});
  auto fn = [&](const Tensors& in) {
    amp::Autocast inner(amp::AutocastOptions{.device = DeviceType::CPU});
    return Tensors{tanh(matmul(in[0], w)).to(DType::F32)};
  };
  auto grad_of = [&](bool ckpt, CheckpointOptions form) {
    w.set_grad(Tensor());
    Tensor y;
    {
      amp::Autocast outer({.device = DeviceType::CPU, .dtype = DType::F16});
      amp::Autocast off({.device = DeviceType::CPU, .enabled = false});
      const Tensor x = x0 * 1.0;
      y = sum(ckpt ? checkpoint(fn, {x}, form)[0] : fn({x})[0]);
    }
    y.backward();
    return values(w.grad());
  };
  const auto plain = grad_of(false, {});
  CHECK(grad_of(true, kRecomputing) == plain);
  CHECK(grad_of(true, kReentrant) == plain);
}

TEST_CASE("checkpoint: the recomputation outside any autocast region leaves no cached casts", "[autograd][checkpoint]") {
  const Block block;
  for (const CheckpointOptions form : {kRecomputing, kReentrant}) {
    const Tensor x = randn({4, 8}).requires_grad_();
    Tensor y;
    {
      amp::Autocast region({.device = DeviceType::CPU, .dtype = DType::BF16});
      y = checkpoint([&](const Tensors& in) { return Tensors{block(in[0])}; }, {x}, form)[0];
    }
    REQUIRE(amp::weight_cache_size() == 0);  // the region's exit cleared its casts
    sum(y.to(DType::F32)).backward();          // the recomputation casts the weights again
    CHECK(amp::weight_cache_size() == 0);
  }
}

TEST_CASE("checkpoint, reentrant form: outputs without a gradient make no zeros, and a released function is a named error",
          "[autograd][checkpoint]") {
  const Block block;
  // The only consumer passes no gradient back: nothing is recomputed and the parameters inside
  // keep no .grad, as in the plain run (zeros would let weight decay and momentum touch them).
  int runs = 0;
  const Tensor x = randn({4, 8});
  const auto fn = [&](const Tensors& in) {
    ++runs;
    return Tensors{block(in[0])};
  };
  for (const CheckpointOptions& form : {kReentrant, kRecomputing}) {
    runs = 0;
    const Tensor h = checkpoint(fn, {x}, form)[0];
    const Tensor w = randn({4, 8}).requires_grad_();
    sum(NoGradBack::apply({h})[0] + w).backward();
    CHECK(w.grad().defined());
    for (const Tensor& p : block.params()) CHECK(!p.grad().defined());
    CHECK(runs == 1);  // the forward only
  }
  // Two outputs, only the second used: the nested backward is seeded by that one alone.
  const Tensor x2 = randn({4, 8}).requires_grad_();
  const Tensors two = checkpoint([&](const Tensors& in) { return Tensors{block(in[0]), in[0] * 3.0}; }, {x2}, kReentrant);
  sum(two[1]).backward();
  CHECK(values(x2.grad()) == std::vector<double>(32, 3.0));
  // A second backward through a function with no saved input (it reads only parameters).
  const Tensor y = checkpoint([&](const Tensors&) { return Tensors{block(ones({2, 8}))}; }, {}, kReentrant)[0];
  sum(y).backward();
  MG_REQUIRE_ERROR(sum(y).backward(), "checkpoint: tried to backward through the graph a second time");
}
