// mg::checkpoint's recomputing form (the default; ops/checkpoint_recompute.cpp): what the
// reentrant form cannot do — autograd::grad, double backward, nested checkpoints — gives the plain
// run's gradients; the region's activations are really freed after the forward; the
// recomputation runs once per backward however many nodes read it; and a function that saves
// other tensors the second time, or writes in place into what it saved, is a named error.
#include <catch2/catch.hpp>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "autograd/engine.h"
#include "core/factory.h"
#include "core/generator.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "ops/checkpoint.h"
#include "ops/norm.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

struct Net {
  std::shared_ptr<nn::Linear> a = std::make_shared<nn::Linear>(nn::LinearOptions{.in = 6, .out = 12});
  std::shared_ptr<nn::Linear> b = std::make_shared<nn::Linear>(nn::LinearOptions{.in = 12, .out = 6});
  Tensor operator()(const Tensor& x) const { return b->forward(tanh(a->forward(x)) * x.sum({1}, true)); }
  Tensors params() const { return {a->weight, a->bias, b->weight, b->bias}; }
  void clear() const {
    for (const Tensor& p : params()) p.set_grad(Tensor());
  }
};

Tensor call(const Net& net, const Tensor& x, bool ckpt) {
  return ckpt ? checkpoint([&](const Tensors& in) { return Tensors{net(in[0])}; }, {x})[0] : net(x);
}

}  // namespace

TEST_CASE("checkpoint, recomputing form: autograd::grad equals the plain run's and leaves .grad alone",
          "[autograd][checkpoint]") {
  manual_seed(2);
  const Net net;
  const Tensor x = randn({5, 6}).requires_grad_();
  auto grads = [&](bool ckpt) {
    const Tensor h = x * 1.5;  // the checkpoint's input has history
    const Tensors g = autograd::grad({sum(call(net, h, ckpt).pow(2.0))}, {x, net.a->weight});
    return std::vector<std::vector<double>>{values(g[0]), values(g[1])};
  };
  const auto plain = grads(false);
  CHECK(grads(true) == plain);
  CHECK_FALSE(net.a->weight.grad().defined());
}

TEST_CASE("checkpoint, recomputing form: double backward equals the plain run's", "[autograd][checkpoint]") {
  manual_seed(3);
  const Net net;
  const Tensor x0 = randn({4, 6});
  auto second_order = [&](bool ckpt) {
    net.clear();
    const Tensor x = x0.clone().requires_grad_();
    const Tensor gx = autograd::grad({sum(call(net, x, ckpt).pow(3.0))}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
    sum(gx * gx).backward();  // through the recomputed activations into every parameter and x
    std::vector<std::vector<double>> r = {values(gx), values(x.grad())};
    for (const Tensor& p : net.params()) r.push_back(values(p.grad()));
    return r;
  };
  const auto plain = second_order(false);
  const auto ck = second_order(true);
  REQUIRE(ck.size() == plain.size());
  for (std::size_t i = 0; i < ck.size(); ++i) CHECK(ck[i] == plain[i]);
}

TEST_CASE("checkpoint, recomputing form: the region's activations are freed after the forward", "[autograd][checkpoint]") {
  const Tensor w = randn({64, 64}).requires_grad_();
  std::vector<std::weak_ptr<Storage>> inner;
  auto fn = [&](const Tensors& in) {
    const Tensor h1 = tanh(matmul(in[0], w));
    const Tensor h2 = tanh(matmul(h1, w));  // tanh saves its output, matmul its inputs
    inner = {h1.impl()->storage, h2.impl()->storage};
    return Tensors{matmul(h2, w).sum({1})};
  };
  const Tensor x = randn({32, 64}).requires_grad_();
  {
    const Tensor y = fn({x})[0];  // plain: the graph keeps both
    CHECK_FALSE(inner[0].expired());
    CHECK_FALSE(inner[1].expired());
  }
  const Tensor y = checkpoint(fn, {x})[0];
  CHECK(inner[0].expired());
  CHECK(inner[1].expired());
  sum(y).backward({}, /*retain_graph=*/true);  // the recomputation's tensors are freed when the pass ends
  CHECK(inner[0].expired());
  CHECK(inner[1].expired());
  x.set_grad(Tensor());
  w.set_grad(Tensor());
  sum(y).backward();
  const Tensor g = x.grad().clone();
  x.set_grad(Tensor());
  w.set_grad(Tensor());
  sum(fn({x})[0]).backward();
  CHECK(values(g) == values(x.grad()));
}

TEST_CASE("checkpoint, recomputing form: nested checkpoints, retain_graph, one recomputation per backward pass",
          "[autograd][checkpoint]") {
  manual_seed(4);
  const Net net;
  const Tensor x0 = randn({3, 6});
  int outer_runs = 0;
  auto run = [&](bool ckpt) {
    net.clear();
    const Tensor x = x0.clone().requires_grad_();
    auto outer = [&](const Tensors& in) {
      ++outer_runs;
      const Tensor h = call(net, in[0], ckpt);  // a checkpoint inside a checkpoint
      return Tensors{call(net, tanh(h), ckpt)};
    };
    const Tensor y = sum(ckpt ? checkpoint(outer, {x})[0] : outer({x})[0]);
    y.backward({}, /*retain_graph=*/true);
    y.backward();  // recomputes again: gradients doubled
    std::vector<std::vector<double>> r = {values(x.grad())};
    for (const Tensor& p : net.params()) r.push_back(values(p.grad()));
    return r;
  };
  const auto plain = run(false);
  outer_runs = 0;
  const auto ck = run(true);
  CHECK(outer_runs == 3);  // the forward and one recomputation per backward pass (as PyTorch)
  REQUIRE(ck.size() == plain.size());
  for (std::size_t i = 0; i < ck.size(); ++i) CHECK(ck[i] == plain[i]);
}

TEST_CASE("checkpoint, recomputing form: a backward inside the checkpointed function (a gradient penalty)",
          "[autograd][checkpoint]") {
  manual_seed(6);
  const Tensor w = randn({6, 6}).requires_grad_();
  const Tensor x0 = randn({4, 6});
  int runs = 0;
  auto fn = [&](const Tensors& in) {
    ++runs;
    const Tensor h = tanh(matmul(in[0], w));
    const Tensor g = autograd::grad({sum(h * h)}, {in[0]}, {}, std::nullopt, /*create_graph=*/true)[0];
    return Tensors{h + g};
  };
  auto grads = [&](bool ckpt) {
    w.set_grad(Tensor());
    const Tensor x = x0.clone().requires_grad_();
    const Tensor y = ckpt ? checkpoint(fn, {x})[0] : fn({x})[0];
    sum(y * y).backward();
    return std::vector<std::vector<double>>{values(y), values(x.grad()), values(w.grad())};
  };
  const auto plain = grads(false);
  runs = 0;
  CHECK(grads(true) == plain);
  CHECK(runs == 2);
}

TEST_CASE("checkpoint, recomputing form: bad use is a named error", "[autograd][checkpoint][errors]") {
  const Tensor x = randn({4, 8}).requires_grad_();
  const Tensor w = randn({8}).requires_grad_();
  // An input modified in place between forward and backward.
  Tensor z = randn({4, 8});
  const Tensor y = checkpoint([&](const Tensors& in) { return Tensors{tanh(in[0] * w)}; }, {z})[0];
  z.add_(1.0);
  MG_REQUIRE_ERROR(sum(y).backward(), "checkpoint (input 0 of the checkpointed function): a tensor saved for backward "
                                      "([4, 8] f32 cpu) was modified by an in-place operation (version 0 -> 1)");
  // The second run saves fewer tensors, or others.
  int runs = 0;
  const Tensor h = x * 1.0;
  const Tensor y2 = checkpoint([&](const Tensors& in) { return Tensors{++runs == 1 ? in[0] * in[0] : exp(in[0])}; }, {h})[0];
  MG_REQUIRE_ERROR(sum(y2).backward(), "checkpoint: the recomputation saved 1 tensors for backward but the first run saved 2");
  runs = 0;
  const Tensor y3 = checkpoint(
      [&](const Tensors& in) { return Tensors{++runs == 1 ? in[0] * in[0] : (sum(in[0]) * sum(in[0])).expand({4, 8})}; },
      {h})[0];
  MG_REQUIRE_ERROR(sum(y3).backward(), "checkpoint: the recomputation saved [] f32 cpu for backward where the first run "
                                       "saved [4, 8] f32 cpu (the 1. saved tensor)");
  // fn writes in place into a tensor after an op saved it: the plain run's backward refuses it,
  // and so does the checkpoint's (the recomputed value would be the written one). in[0] * 2.0
  // saves nothing (the scalar is an attribute of mul_scalar); t * t saves t twice (1., 2.), and
  // the error names the first of them the backward reads.
  auto writes = [&](const Tensors& in) {
    Tensor t = in[0] * 2.0;
    const Tensor out = t * t;
    t.add_(1.0);
    return Tensors{out};
  };
  MG_REQUIRE_ERROR(sum(writes({h})[0]).backward(), "was modified by an in-place operation");
  const Tensor y4 = checkpoint(writes, {h})[0];
  const std::string modified = test::error_of([&] { sum(y4).backward(); });
  CHECK_THAT(modified, Catch::Matchers::StartsWith("checkpoint: a tensor the recomputation saved for backward ([4, 8] f32 "
                                                   "cpu, the "));
  CHECK_THAT(modified, Catch::Matchers::Contains(". saved) was modified by a later in-place operation of the checkpointed "
                                                 "function (version 0 -> 1)"));
}

TEST_CASE("checkpoint: dropout on its own Generator, and draws of other threads in between, are replayed",
          "[autograd][checkpoint]") {
  manual_seed(9);
  const Tensor w = randn({8, 8}).requires_grad_();
  const Tensor x0 = randn({4, 8});
  Generator gen(123);
  auto drop = std::make_shared<nn::Dropout>(nn::DropoutOptions{.p = 0.5, .generator = &gen});
  auto fn = [&](const Tensors& in) {
    const Tensor h = drop->forward(tanh(matmul(in[0], w)));
    // Another thread draws from the default generator between this thread's two draws from it.
    std::thread([] { (void)randn({16}); }).join();
    return Tensors{dropout(h * 2.0, 0.3)};
  };
  auto grads = [&](bool ckpt, CheckpointOptions form) {
    w.set_grad(Tensor());
    gen.set_state(123, 0);
    manual_seed(10);
    const Tensor x = x0.clone().requires_grad_();
    const Tensor y = ckpt ? checkpoint(fn, {x}, form)[0] : fn({x})[0];
    sum(y * y).backward();
    return std::vector<std::vector<double>>{values(x.grad()), values(w.grad())};
  };
  const auto plain = grads(false, {});
  CHECK(grads(true, {.reentrant = false}) == plain);
  CHECK(grads(true, {.reentrant = true}) == plain);
  // The recomputation moved neither generator.
  const Generator::Position after_forward = gen.position();
  const Tensor x = x0.clone().requires_grad_();
  const Tensor y = checkpoint(fn, {x})[0];
  const Generator::Position before_backward = gen.position();
  sum(y).backward();
  CHECK(gen.position().offset == before_backward.offset);
  CHECK(before_backward.offset > after_forward.offset);
}

TEST_CASE("checkpoint, recomputing form: a failed backward pass frees its recomputation, a retry recomputes",
          "[autograd][checkpoint]") {
  const Tensor w = randn({6, 6}).requires_grad_();
  int runs = 0;
  std::weak_ptr<Storage> inner;
  auto fn = [&](const Tensors& in) {
    ++runs;
    const Tensor h = tanh(matmul(in[0], w));
    inner = h.impl()->storage;
    return Tensors{matmul(h, w)};
  };
  const Tensor x = randn({3, 6}).requires_grad_();
  const Tensor h0 = x * 2.0;
  bool fail = true;
  h0.register_hook([&](const Tensor& g) {
    if (fail) throw std::runtime_error("hook failed");
    return g;
  });
  const Tensor y = sum(checkpoint(fn, {h0})[0]);
  CHECK_THROWS_WITH(y.backward({}, /*retain_graph=*/true), "hook failed");
  CHECK(runs == 2);
  CHECK(inner.expired());  // the failed pass's recomputation was freed
  fail = false;
  y.backward();
  CHECK(runs == 3);
  const Tensor g = x.grad().clone();
  x.set_grad(Tensor());
  sum(fn({x * 2.0})[0]).backward();
  CHECK(values(g) == values(x.grad()));
}

TEST_CASE("checkpoint, recomputing form: backward passes on several threads over one retained graph",
          "[autograd][checkpoint]") {
  const Tensor w = randn({16, 16}).requires_grad_();
  auto fn = [&](const Tensors& in) { return Tensors{tanh(matmul(tanh(matmul(in[0], w)), w))}; };
  const Tensor x = randn({8, 16}).requires_grad_();
  const std::vector<double> expected = values(autograd::grad({sum(fn({x * 2.0})[0])}, {x})[0]);
  for (int round = 0; round < 20; ++round) {
    const Tensor s = sum(checkpoint(fn, {x * 2.0})[0]);
    std::vector<double> got[2];
    std::atomic<int> failures{0};
    auto run = [&](int t) {
      try {
        got[t] = values(autograd::grad({s}, {x}, {}, /*retain_graph=*/true)[0]);
      } catch (...) {
        ++failures;
      }
    };
    std::thread a(run, 0), b(run, 1);
    a.join();
    b.join();
    REQUIRE(failures == 0);
    CHECK(got[0] == expected);
    CHECK(got[1] == expected);
  }
}
