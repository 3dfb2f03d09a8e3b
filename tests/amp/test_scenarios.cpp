// AMP training scenarios with the PyTorch-style API (Autocast + GradScaler), each checked against
// the same computation without loss scaling: clipping after unscale_, gradient accumulation,
// gradient penalty (double backward through a scaled loss), two models / two losses / two
// optimizers with one scaler, and a GAN-like alternating update.
//
// The one fact the exact checks rest on: multiplying by a power of two is exact in binary
// floating point (away from overflow and underflow) and commutes with every rounding, so an f32
// run with a power-of-two scale produces gradients that are exactly scale x the unscaled ones,
// and unscaling (x 1/scale, also exact) gives them back bit for bit. Runs in f16 are compared
// with f32 within tolerances stated at each check.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "nn/nn.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"
#include "amp/tanh_mlp.h"
#include "test_util.h"

using namespace mg;
using mg::test::Mlp;
using mg::test::values;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The gradients of `params` (each as doubles, exact for f32).
std::vector<std::vector<double>> grads_of(const Tensors& params) {
  std::vector<std::vector<double>> out;
  for (const Tensor& p : params) out.push_back(p.grad().defined() ? values(p.grad()) : std::vector<double>{});
  return out;
}
std::vector<std::vector<double>> values_of(const Tensors& ts) {
  std::vector<std::vector<double>> out;
  for (const Tensor& t : ts) out.push_back(values(t));
  return out;
}

// max |a - b| and max |b| over all elements of all tensors.
struct Diff {
  double max_abs = 0, ref_max = 0;
};
Diff diff(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  REQUIRE(a.size() == b.size());
  Diff d;
  for (std::size_t i = 0; i < a.size(); ++i) {
    REQUIRE(a[i].size() == b[i].size());
    for (std::size_t k = 0; k < a[i].size(); ++k) {
      d.max_abs = std::max(d.max_abs, std::abs(a[i][k] - b[i][k]));
      d.ref_max = std::max(d.ref_max, std::abs(b[i][k]));
    }
  }
  return d;
}

// Parameters, per-parameter optimizer state (update count and every buffer) and step count: what
// a skipped step must leave bit-identical.
struct OptSnapshot {
  std::vector<std::vector<double>> params, buffers;
  std::vector<int64_t> steps;
  int64_t step_count = 0;
  bool operator==(const OptSnapshot&) const = default;
};
OptSnapshot snapshot(const optim::Optimizer& opt) {
  OptSnapshot s;
  s.step_count = opt.step_count();
  for (const Tensor& p : opt.parameters()) {
    s.params.push_back(values(p));
    const optim::ParamState* st = opt.state(p);
    s.steps.push_back(st ? st->step : -1);
    if (st) {
      for (const auto& [name, buf] : st->buffers) {
        if (buf.defined()) s.buffers.push_back(values(buf));
      }
    }
  }
  return s;
}

// Writes inf into the first element of p's (contiguous f32) gradient: an overflow confined to
// the parameters of one model.
void inject_inf(const Tensor& p) {
  Tensor g = p.grad();
  REQUIRE(g.defined());
  REQUIRE(g.dtype() == DType::F32);
  REQUIRE(g.is_contiguous());
  g.data<float>()[0] = kInf;
}

bool all_finite(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// 1. clip_grad_norm_ after unscale_
// ---------------------------------------------------------------------------------------------
TEST_CASE("clipping after unscale_ clips the real gradients: equal to the unscaled f32 run", "[amp][scenario]") {
  const double max_norm = 0.05;  // well below the measured gradient norms (checked), so clipping acts

  // One iteration on model `m` (scaled when `scaler`, under f16 autocast when `f16`); returns the
  // total norm clip_grad_norm_ saw. Gradients stay in .grad after the step.
  auto iteration = [&](Mlp& m, optim::Optimizer& opt, amp::GradScaler* scaler, bool f16, const Tensor& x,
                       const Tensor& t) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast autocast({.dtype = DType::F16, .enabled = f16});
      loss = mse_loss(m.forward(x), t);
    }
    double norm = 0;
    if (scaler) {
      scaler->scale(loss).backward();
      scaler->unscale_(opt);
      norm = optim::clip_grad_norm_(m.parameters(), max_norm).item<double>();
      REQUIRE(scaler->step(opt));
      scaler->update();
    } else {
      loss.backward();
      norm = optim::clip_grad_norm_(m.parameters(), max_norm).item<double>();
      opt.step();
    }
    return norm;
  };

  // init_scale: 2^10 (exact section), 1000 (not a power of two), 2^16 (f16). grad_tol = 0: bit-identical;
  // else the largest gradient difference relative to the largest gradient, weight_tol absolute.
  auto check = [&](double init_scale, bool f16, double grad_tol, double weight_tol) {
    manual_seed(11);
    Mlp a(8, 16, 4), ref(8, 16, 4);
    ref.load_state_dict(a.state_dict());
    optim::SGD opt_a(a.parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::SGD opt_ref(ref.parameters(), {.lr = 0.1, .momentum = 0.9});
    amp::GradScaler scaler({.init_scale = init_scale});
    for (int it = 0; it < 3; ++it) {
      const Tensor x = randn({32, 8}), t = randn({32, 4});
      const double na = iteration(a, opt_a, &scaler, f16, x, t);
      const double nr = iteration(ref, opt_ref, nullptr, false, x, t);
      INFO("iteration " << it << ": norm scaled run " << na << ", f32 run " << nr);
      CHECK(nr > 4 * max_norm);  // clipping is active
      // The clipped gradients have norm max_norm up to the 1e-6 in the divisor and f32 rounding.
      double sq = 0;
      for (const auto& g : grads_of(a.parameters()))
        for (double v : g) sq += v * v;
      // max_norm / (norm + 1e-6) scaling: 1e-6 / norm (< 5e-6) relative, plus f32 rounding of the
      // ~250-value sum (~1e-7): 1e-4 relative leaves margin and still catches a wrong clip.
      CHECK(std::sqrt(sq) == Approx(max_norm).epsilon(1e-4));
      const Diff dg = diff(grads_of(a.parameters()), grads_of(ref.parameters()));
      const Diff dw = diff(values_of(a.parameters()), values_of(ref.parameters()));
      std::printf("clip scale %-6g %s it %d: |norm diff| %.3g, max|dgrad| %.3g (max|g| %.3g), max|dw| %.3g\n",
                  init_scale, f16 ? "f16" : "f32", it, std::abs(na - nr), dg.max_abs, dg.ref_max, dw.max_abs);
      if (grad_tol == 0) {
        CHECK(na == nr);
        CHECK(grads_of(a.parameters()) == grads_of(ref.parameters()));
        CHECK(values_of(a.parameters()) == values_of(ref.parameters()));
      } else {
        CHECK(std::abs(na - nr) <= grad_tol * nr);
        CHECK(dg.max_abs <= grad_tol * dg.ref_max);
        CHECK(dw.max_abs <= weight_tol);
      }
    }
  };

  SECTION("f32, power-of-two scale: bit-identical gradients, norms and weights") { check(1024, false, 0, 0); }
  SECTION("f32, scale 1000: equal to f32 rounding") {
    // x1000 and /1000 make each op of the backward round differently (2^-24 relative each, ~10
    // ops deep): 1e-6 of the largest gradient (16 f32 roundings); the weights (~0.3, ulp 3e-8)
    // within a few ulps, 1e-7. Measured: 8e-8 relative, 1.5e-8.
    check(1000, false, 1e-6, 1e-7);
  }
  SECTION("f16 autocast, scale 2^16: equal to f16 accuracy") {
    // f16 rounds matmul inputs and outputs in forward and backward (unit roundoff 2^-11 = 4.9e-4);
    // we allow 8 such roundings, 4e-3 of the largest gradient (and of the norm); the weights move
    // by lr x clipped gradient (at most 0.1 x 0.05 per step) with momentum over 3 steps, and 4e-3
    // of that is 2e-5. Measured: 3.4e-4 relative, 2e-6.
    check(65536, true, 4e-3, 2e-5);
  }
}

// ---------------------------------------------------------------------------------------------
// 2. Gradient accumulation over 4 micro-batches
// ---------------------------------------------------------------------------------------------
TEST_CASE("gradient accumulation over 4 scaled micro-batches equals one big batch", "[amp][scenario]") {
  constexpr int64_t kBatch = 32, kMicro = 4, kMicroBatch = kBatch / kMicro;
  auto check = [&](bool f16, double grad_tol, double weight_tol) {
    manual_seed(12);
    Mlp acc(8, 16, 4), big(8, 16, 4);
    big.load_state_dict(acc.state_dict());
    optim::SGD opt_acc(acc.parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::SGD opt_big(big.parameters(), {.lr = 0.1, .momentum = 0.9});
    amp::GradScaler scaler({.init_scale = 4096});
    amp::GradScaler scaler_big({.init_scale = 4096});
    for (int it = 0; it < 3; ++it) {
      const Tensor x = randn({kBatch, 8}), t = randn({kBatch, 4});
      // Micro-batches: each loss is its micro-batch mean / 4, so the sum is the big-batch mean.
      opt_acc.zero_grad();
      for (int64_t k = 0; k < kMicro; ++k) {
        Tensor loss;
        {
          amp::Autocast autocast({.dtype = DType::F16, .enabled = f16});
          loss = mse_loss(acc.forward(narrow(x, 0, k * kMicroBatch, kMicroBatch)),
                          narrow(t, 0, k * kMicroBatch, kMicroBatch)) / double(kMicro);
        }
        scaler.scale(loss).backward();
      }
      REQUIRE(scaler.step(opt_acc));
      scaler.update();
      // One big batch: scaled too under f16 (the same loop), unscaled f32 otherwise.
      opt_big.zero_grad();
      Tensor loss;
      {
        amp::Autocast autocast({.dtype = DType::F16, .enabled = f16});
        loss = mse_loss(big.forward(x), t);
      }
      if (f16) {
        scaler_big.scale(loss).backward();
        REQUIRE(scaler_big.step(opt_big));
        scaler_big.update();
      } else {
        loss.backward();
        opt_big.step();
      }
      const Diff dg = diff(grads_of(acc.parameters()), grads_of(big.parameters()));
      const Diff dw = diff(values_of(acc.parameters()), values_of(big.parameters()));
      std::printf("accumulation %s it %d: max|dgrad| %.3g (max|g| %.3g), max|dw| %.3g\n", f16 ? "f16" : "f32", it,
                  dg.max_abs, dg.ref_max, dw.max_abs);
      CHECK(dg.max_abs <= grad_tol * dg.ref_max);
      CHECK(dw.max_abs <= weight_tol);
      CHECK(dg.ref_max > 1e-2);  // the comparison is not of vanishing gradients
    }
    CHECK(scaler.iterations() == 3);  // one update per accumulated step, not per micro-batch
    CHECK(opt_acc.step_count() == 3);
    CHECK(scaler.skipped_iterations() == 0);
  };
  SECTION("f32, power-of-two scale") {
    // Only the summation order differs (x^T dy over 32 rows at once vs 4 x 8 rows, then added):
    // 32 f32 additions, at most 32 x 2^-24 = 2e-6 of the summed magnitudes, in practice a few
    // ulps: 1e-6 of the largest gradient; weights (~0.3, ulp 3e-8) within 1e-7. Measured: 7.5e-8
    // relative, 1.5e-8.
    check(false, 1e-6, 1e-7);
  }
  SECTION("f16 autocast, both scaled") {
    // Each micro-batch rounds its f16 matmul outputs (2^-11 = 4.9e-4 relative) before the f32
    // accumulation in .grad, the big batch once: we allow 8 f16 roundings, 4e-3 of the largest
    // gradient (|g| <= 0.2). The weights move lr (0.1) x gradient with momentum (factors
    // 1 + 1.9 + 2.71 over 3 steps): at worst 4e-3 x 0.2 x 0.1 x 5.6 = 4.5e-4 if every error had
    // the same sign; they do not, and we allow 1e-4. Measured: 4e-4 relative, 1.3e-5.
    check(true, 4e-3, 1e-4);
  }
}

// ---------------------------------------------------------------------------------------------
// 3. Gradient penalty under scaling (PyTorch's AMP example)
// ---------------------------------------------------------------------------------------------
TEST_CASE("gradient penalty through a scaled loss equals the unscaled f32 computation", "[amp][scenario]") {
  // One iteration: loss + sum_p ||dloss/dp||^2, the inner gradients taken with create_graph from
  // the scaled loss and unscaled by hand (as PyTorch's example), then the scaled backward.
  auto iteration = [](Mlp& m, optim::Optimizer& opt, amp::GradScaler* scaler, bool f16, const Tensor& x,
                      const Tensor& t) {
    opt.zero_grad();
    const Tensors params = m.parameters();
    Tensor loss;
    {
      amp::Autocast autocast({.dtype = DType::F16, .enabled = f16});
      loss = mse_loss(m.forward(x), t);
    }
    Tensors g;
    if (scaler) {
      const Tensors scaled = autograd::grad({scaler->scale(loss)}, params, {}, std::nullopt, /*create_graph=*/true);
      const double inv_scale = 1.0 / scaler->get_scale();
      for (const Tensor& s : scaled) g.push_back(s * inv_scale);
    } else {
      g = autograd::grad({loss}, params, {}, std::nullopt, /*create_graph=*/true);
    }
    Tensor penalty;
    {
      amp::Autocast autocast({.dtype = DType::F16, .enabled = f16});
      for (const Tensor& gi : g) penalty = penalty.defined() ? penalty + sum(gi * gi) : sum(gi * gi);
      loss = loss + penalty;
    }
    if (scaler) {
      scaler->scale(loss).backward();
      REQUIRE(scaler->step(opt));
      scaler->update();
    } else {
      loss.backward();
      opt.step();
    }
    return penalty.item<double>();
  };

  auto check = [&](bool f16, double grad_tol, double weight_tol) {
    manual_seed(13);
    Mlp a(6, 12, 3), ref(6, 12, 3);
    ref.load_state_dict(a.state_dict());
    optim::SGD opt_a(a.parameters(), {.lr = 0.05});
    optim::SGD opt_ref(ref.parameters(), {.lr = 0.05});
    // Not 2^16 under f16: the weight gradient of loss + penalty reaches 1.2 in the second
    // iteration, and its f16 matmul output 2^16 x 1.2 overflows f16 (65504): that step is skipped
    // (measured), which is dynamic scaling working, but not the comparison this test makes.
    amp::GradScaler scaler({.init_scale = f16 ? 1024.0 : 256.0});
    for (int it = 0; it < 3; ++it) {
      const Tensor x = randn({16, 6}), t = randn({16, 3});
      const double pa = iteration(a, opt_a, &scaler, f16, x, t);
      const double pr = iteration(ref, opt_ref, nullptr, false, x, t);
      // A second step with the penalty's gradient alone would differ: make sure it matters.
      CHECK(pr > 1e-2);
      const Diff dg = diff(grads_of(a.parameters()), grads_of(ref.parameters()));
      const Diff dw = diff(values_of(a.parameters()), values_of(ref.parameters()));
      std::printf("penalty %s it %d: penalty %.6g vs %.6g, max|dgrad| %.3g (max|g| %.3g), max|dw| %.3g\n",
                  f16 ? "f16" : "f32", it, pa, pr, dg.max_abs, dg.ref_max, dw.max_abs);
      if (grad_tol == 0) {
        CHECK(pa == pr);
        CHECK(grads_of(a.parameters()) == grads_of(ref.parameters()));
        CHECK(values_of(a.parameters()) == values_of(ref.parameters()));
      } else {
        CHECK(std::abs(pa - pr) <= grad_tol * pr);
        CHECK(dg.max_abs <= grad_tol * dg.ref_max);
        CHECK(dw.max_abs <= weight_tol);
      }
    }
  };
  SECTION("f32, power-of-two scale: bit-identical") { check(false, 0, 0); }
  SECTION("f16 autocast, scale 2^10") {
    // The first and second backward run their matmuls in f16 (2^-11 = 4.9e-4 relative per
    // rounding) and the penalty squares first-backward gradients: we allow 16 roundings, 8e-3 of
    // the largest gradient (and of the penalty); weights move lr (0.05) x gradient (<= 1.3) per
    // step, 8e-3 of that over 3 steps is 1.6e-3, we allow 5e-4.
    check(true, 8e-3, 5e-4);
  }
}

// ---------------------------------------------------------------------------------------------
// 4. Two models, two losses, two optimizers, one scaler
// ---------------------------------------------------------------------------------------------
TEST_CASE("two models, two losses, two optimizers, one scaler: each optimizer checks its own gradients",
          "[amp][scenario]") {
  // f16 = false: f32 with a power-of-two scale, compared bit for bit with the unscaled f32 run.
  // f16 = true: the forward under f16 autocast (PyTorch's example), compared within tolerances.
  auto run = [](bool f16) {
    manual_seed(14);
    Mlp m0(8, 16, 4), m1(8, 16, 4), r0(8, 16, 4), r1(8, 16, 4);
    r0.load_state_dict(m0.state_dict());
    r1.load_state_dict(m1.state_dict());
    // SGD with momentum: its state (momentum buffers, per-parameter update counts) must survive
    // a skip, and its update is linear in the gradient, so f16 differences stay bounded (Adam's
    // lr x m / sqrt(v) turns an f16 error on a near-zero gradient element into a full lr step).
    const optim::SGDOptions o{.lr = 0.05, .momentum = 0.9};
    optim::SGD opt0(m0.parameters(), o), opt1(m1.parameters(), o), ref0(r0.parameters(), o), ref1(r1.parameters(), o);
    amp::GradScaler scaler({.init_scale = 1024});  // a power of two: f32 results are exact

    // Which models get an inf written into one gradient element after the backward.
    struct Plan {
      bool inf0, inf1;
    };
    const std::vector<Plan> plan = {{false, false}, {false, false}, {false, true}, {true, true}, {false, false}};
    const std::vector<double> expect_scale = {1024, 1024, 512, 256, 256};  // one backoff per bad iteration
    for (std::size_t it = 0; it < plan.size(); ++it) {
      INFO("iteration " << it + 1 << (f16 ? " (f16)" : " (f32)"));
      const Tensor x = randn({16, 8}), t = randn({16, 4});
      // Scaled run: the PyTorch example's loop, each loss mixing both models' outputs.
      opt0.zero_grad();
      opt1.zero_grad();
      Tensor loss0, loss1;
      {
        amp::Autocast autocast({.dtype = DType::F16, .enabled = f16});
        const Tensor out0 = m0.forward(x), out1 = m1.forward(x);
        loss0 = mse_loss(out0 * 2.0 + out1 * 3.0, t);
        loss1 = mse_loss(out0 * 3.0 - out1 * 5.0, t);
      }
      scaler.scale(loss0).backward(Tensor(), /*retain_graph=*/true);
      scaler.scale(loss1).backward();
      if (plan[it].inf0) inject_inf(m0.fc2->weight);
      if (plan[it].inf1) inject_inf(m1.fc1->weight);
      const OptSnapshot before0 = snapshot(opt0), before1 = snapshot(opt1);
      scaler.unscale_(opt0);  // optional, as in the example
      const bool stepped0 = scaler.step(opt0);
      const bool stepped1 = scaler.step(opt1);
      scaler.update();
      CHECK(stepped0 == !plan[it].inf0);
      CHECK(stepped1 == !plan[it].inf1);
      CHECK(scaler.last_stats(opt0).nonfinite == (plan[it].inf0 ? 1 : 0));
      CHECK(scaler.last_stats(opt1).nonfinite == (plan[it].inf1 ? 1 : 0));
      // A skipped optimizer keeps weights, state and step count bit-identical.
      if (!stepped0) CHECK(snapshot(opt0) == before0);
      if (!stepped1) CHECK(snapshot(opt1) == before1);
      CHECK(scaler.get_scale() == expect_scale[it]);

      // Unscaled f32 reference, stepping the optimizers that stepped above.
      ref0.zero_grad();
      ref1.zero_grad();
      {
        const Tensor out0 = r0.forward(x), out1 = r1.forward(x);
        mse_loss(out0 * 2.0 + out1 * 3.0, t).backward(Tensor(), true);
        mse_loss(out0 * 3.0 - out1 * 5.0, t).backward();
      }
      auto compare = [&](Mlp& m, Mlp& r, const optim::Optimizer& o, const optim::Optimizer& ro, bool stepped) {
        const OptSnapshot a = snapshot(o), b = snapshot(ro);
        CHECK(a.step_count == b.step_count);
        CHECK(a.steps == b.steps);
        if (!f16) {
          // Power-of-two scale: unscaled gradients, weights and Adam state are bit-identical.
          if (stepped) CHECK(grads_of(m.parameters()) == grads_of(r.parameters()));
          CHECK(a == b);
          return;
        }
        // f16 autocast: matmuls round to f16 (2^-11 = 4.9e-4 relative); we allow 8 such roundings,
        // 4e-3 of the largest gradient, and the same on the momentum buffers (sums of gradients).
        // The weights move lr (0.05) x buffer; with buffers <= 4 and 4e-3 relative error that is
        // 8e-4 per step at worst, over 4-5 steps ~4e-3; errors do not all align, we allow 1e-3
        // (measured: 1.8e-4; momentum 1.1e-3 relative).
        if (stepped) {
          const Diff dg = diff(grads_of(m.parameters()), grads_of(r.parameters()));
          CHECK(dg.max_abs <= 4e-3 * dg.ref_max);
        }
        const Diff dw = diff(a.params, b.params), db = diff(a.buffers, b.buffers);
        CHECK(dw.max_abs <= 1e-3);
        CHECK(db.max_abs <= 4e-3 * db.ref_max);
        std::printf("two models f16 it %zu: max|dw| %.3g, max|dmomentum| %.3g of %.3g\n", it + 1, dw.max_abs,
                    db.max_abs, db.ref_max);
      };
      if (stepped0) ref0.step();
      if (stepped1) ref1.step();
      compare(m0, r0, opt0, ref0, stepped0);
      compare(m1, r1, opt1, ref1, stepped1);
    }
    CHECK(opt0.step_count() == 4);
    CHECK(opt1.step_count() == 3);
    CHECK(scaler.skipped_iterations() == 2);
    CHECK(scaler.last_skip_iteration() == 4);
    CHECK(scaler.consecutive_skips() == 0);
  };
  SECTION("f32, power-of-two scale: bit-identical to the unscaled run") { run(false); }
  SECTION("f16 autocast: close to the unscaled f32 run") { run(true); }
}

// ---------------------------------------------------------------------------------------------
// 5. GAN-like alternating updates
// ---------------------------------------------------------------------------------------------
// One GradScaler shared by the discriminator and the generator, update() once per iteration after
// both steps. Why one: PyTorch's AMP examples use one scaler for all the models, losses and
// optimizers of an iteration, and our GradScaler keeps its inf/NaN record per optimizer (each
// step() checks only that optimizer's gradients) while update() backs off at most once per
// iteration; two scalers would each back off on their own overflows and drift apart, for no gain
// here. (Apex's one-scaler-per-loss, DESIGN §5, is the Apex front door.)
namespace {

struct GanResult {
  std::vector<double> loss_d, loss_g, scales;
  std::vector<bool> stepped_d, stepped_g;
  std::vector<std::vector<double>> g0, d0, g, d;  // parameters before and after training
  std::optional<OptSnapshot> d_before_inject, d_after_inject;
  int64_t steps_d = 0, steps_g = 0, skipped = 0;
};

GanResult run_gan(bool amp_on, int inject_iteration) {
  constexpr int64_t kB = 32;
  manual_seed(15);
  Mlp gen(4, 16, 2), disc(2, 16, 1);
  optim::Adam opt_g(gen.parameters(), {.lr = 2e-3, .betas = {0.5, 0.999}});
  optim::Adam opt_d(disc.parameters(), {.lr = 2e-3, .betas = {0.5, 0.999}});
  amp::GradScaler scaler({.init_scale = 4096, .growth_interval = 5, .enabled = amp_on});
  const Tensor center = from_vector<float>({2.0f, -1.0f}, {1, 2});
  const Tensor real_label = ones({kB, 1}), fake_label = zeros({kB, 1});
  GanResult r;
  r.g0 = values_of(gen.parameters());
  r.d0 = values_of(disc.parameters());
  for (int it = 1; it <= 20; ++it) {
    const Tensor real = randn({kB, 2}) * 0.5 + center;  // [B, 2]
    const Tensor z = randn({kB, 4});                    // [B, 4]
    // Discriminator step on real and (detached) fake samples.
    Tensor loss_d;
    {
      amp::Autocast autocast({.dtype = DType::F16, .enabled = amp_on});
      const Tensor fake = gen.forward(z).detach();
      loss_d = binary_cross_entropy_with_logits(disc.forward(real), real_label) +
               binary_cross_entropy_with_logits(disc.forward(fake), fake_label);
    }
    opt_d.zero_grad();
    scaler.scale(loss_d).backward();
    if (it == inject_iteration) {
      inject_inf(disc.fc1->weight);
      r.d_before_inject = snapshot(opt_d);
    }
    r.stepped_d.push_back(scaler.step(opt_d));
    if (it == inject_iteration) r.d_after_inject = snapshot(opt_d);
    // Generator step: make the discriminator call the fakes real.
    Tensor loss_g;
    {
      amp::Autocast autocast({.dtype = DType::F16, .enabled = amp_on});
      loss_g = binary_cross_entropy_with_logits(disc.forward(gen.forward(z)), real_label);
    }
    opt_g.zero_grad();
    scaler.scale(loss_g).backward();
    r.stepped_g.push_back(scaler.step(opt_g));
    scaler.update();
    r.loss_d.push_back(loss_d.item<double>());
    r.loss_g.push_back(loss_g.item<double>());
    r.scales.push_back(scaler.get_scale());
  }
  r.g = values_of(gen.parameters());
  r.d = values_of(disc.parameters());
  r.steps_d = opt_d.step_count();
  r.steps_g = opt_g.step_count();
  r.skipped = scaler.skipped_iterations();
  return r;
}

}  // namespace

TEST_CASE("GAN-like alternating updates under f16 autocast with one shared GradScaler", "[amp][scenario]") {
  const GanResult amp16 = run_gan(true, -1);
  const GanResult f32 = run_gan(false, -1);
  CHECK(all_finite(amp16.loss_d));
  CHECK(all_finite(amp16.loss_g));
  CHECK(amp16.skipped == 0);
  CHECK(amp16.steps_d == 20);
  CHECK(amp16.steps_g == 20);
  // Both models change (Adam moves every weight by about lr per step).
  CHECK(diff(amp16.g, amp16.g0).max_abs > 1e-2);
  CHECK(diff(amp16.d, amp16.d0).max_abs > 1e-2);
  // Scale: x2 after every 5 clean iterations: 4096 -> 8192 at 5, ..., 65536 at 20.
  std::vector<double> expect;
  double s = 4096;
  for (int it = 1; it <= 20; ++it) expect.push_back(s *= (it % 5 == 0 ? 2 : 1));
  CHECK(amp16.scales == expect);
  // The f16 run follows the f32 run step for step. Adam's update is about lr x sign(g) early on,
  // so an f16 gradient error (~2^-11 relative) changes an update by ~lr x 1e-3, 20 steps ~4e-5;
  // one near-zero gradient element changing sign would move a weight by up to ~lr (2e-3) at
  // once. We allow half of that, 1e-3: the runs agree without any flipped update.
  const Diff dg = diff(amp16.g, f32.g), dd = diff(amp16.d, f32.d);
  double dloss = 0;
  for (std::size_t i = 0; i < 20; ++i)
    dloss = std::max({dloss, std::abs(amp16.loss_d[i] - f32.loss_d[i]), std::abs(amp16.loss_g[i] - f32.loss_g[i])});
  std::printf("GAN f16 vs f32 after 20 iterations: generator max|dw| %.3g, discriminator max|dw| %.3g, "
              "max|dloss| %.3g; final loss_d %.4f vs %.4f, loss_g %.4f vs %.4f\n",
              dg.max_abs, dd.max_abs, dloss, amp16.loss_d.back(), f32.loss_d.back(), amp16.loss_g.back(),
              f32.loss_g.back());
  CHECK(dg.max_abs < 1e-3);
  CHECK(dd.max_abs < 1e-3);
  // Losses: the f16 forward rounds activations and logits (2^-11 = 4.9e-4 relative) on losses of
  // 0.6-1.4 plus the weight differences above: 5e-3 absolute (10 f16 roundings of a loss ~1).
  CHECK(dloss < 5e-3);

  SECTION("an inf in the discriminator's gradients skips only the discriminator's step") {
    const GanResult inj = run_gan(true, 8);
    CHECK(all_finite(inj.loss_d));
    CHECK(all_finite(inj.loss_g));
    for (int i = 0; i < 20; ++i) {
      CHECK(inj.stepped_d[std::size_t(i)] == (i + 1 != 8));
      CHECK(inj.stepped_g[std::size_t(i)]);
    }
    REQUIRE(inj.d_before_inject.has_value());
    CHECK(*inj.d_before_inject == *inj.d_after_inject);  // weights, Adam state and step count untouched
    CHECK(inj.steps_d == 19);
    CHECK(inj.steps_g == 20);
    CHECK(inj.skipped == 1);
    // 4096, x2 at 5 -> 8192, backoff at 8 -> 4096 (growth count reset), x2 at 13 and 18 -> 16384.
    std::vector<double> want;
    double sc = 4096;
    int clean = 0;
    for (int it = 1; it <= 20; ++it) {
      if (it == 8) {
        sc *= 0.5;
        clean = 0;
      } else if (++clean == 5) {
        sc *= 2;
        clean = 0;
      }
      want.push_back(sc);
    }
    CHECK(inj.scales == want);
    CHECK(inj.scales.back() == 16384.0);
  }
}
