// Mixed-precision numerics that loss scaling exists for, measured exactly on the CPU's bit-exact
// f16: gradient underflow without scaling (predicted value by value from the f32 reference and
// counted by the GradScaler's statistics), overflowing iterations that are skipped and backed off
// from, the exact f16 overflow threshold of a scaled gradient, and the f32 gradient of an f32
// weight used in an f16 matmul.
//
// The one decision a reader must know: the underflow probe uses data whose products are exact in
// f32 (an 11-bit by 9-bit significand), so the f32 reference gradient is exact and the f16
// gradient is exactly that value rounded to f16 — every expected count below is computed, not
// estimated.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <vector>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "amp/unscale.h"
#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "nn/nn.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "optim/sgd.h"
#include "amp/tanh_mlp.h"
#include "test_util.h"

using namespace mg;
using mg::test::Mlp;
using mg::test::values;

namespace {

constexpr double kF16MinNormal = 6.103515625e-05;  // 2^-14

// Host values ±(1 + m / 2^mant_bits) * 2^-e with e uniform in [e_lo, e_hi], drawn from the seeded
// generator: f16-representable by construction (normal, or subnormal with bits >= 2^-24).
std::vector<float> small_values(int64_t n, int mant_bits, int e_lo, int e_hi) {
  const auto m = values(randint(0, int64_t(1) << mant_bits, {n}));
  const auto e = values(randint(e_lo, e_hi + 1, {n}));
  const auto s = values(randint(0, 2, {n}));
  std::vector<float> out(std::size_t(n), 0.0f);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = float((s[i] ? -1.0 : 1.0) * (1.0 + m[i] / double(int64_t(1) << mant_bits)) * std::ldexp(1.0, -int(e[i])));
  return out;
}

struct Counts {
  int64_t zero_where_ref_nonzero = 0;  // lost to underflow
  int64_t f16_subnormal = 0;           // nonzero with |v| < 2^-14
  int64_t ref_nonzero = 0;
};
Counts count(const std::vector<double>& g, const std::vector<double>& ref) {
  Counts c;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (ref[i] != 0) ++c.ref_nonzero;
    if (g[i] == 0 && ref[i] != 0) ++c.zero_where_ref_nonzero;
    if (g[i] != 0 && std::abs(g[i]) < kF16MinNormal) ++c.f16_subnormal;
  }
  return c;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// 6. Underflow without loss scaling, none with it
// ---------------------------------------------------------------------------------------------
TEST_CASE("small gradients underflow in f16 without loss scaling, exactly as predicted, and not with 2^16",
          "[amp][numerics]") {
  // The probe: a linear layer W [64, 64] (no bias) on one input row x [1, 64], loss = sum(y * c)
  // with c [1, 64]. dL/dW[j, k] = c[j] x[k] (the f32 reference, exact: 11 + 9 significant bits).
  //   c = ±(1 + m/1024) 2^-e, e in [12, 14]: f16 normal, so dL/dy = c is exact in f16 (and so is
  //       2^16 c), i.e. the only rounding is the one of the f16 weight gradient;
  //   x = ±(1 + m/256) 2^-e, e in [8, 16]: exact in f16 (subnormal below 2^-14, bits >= 2^-24).
  // |c x| spans [2^-30, 2^-18) ~ [9.3e-10, 3.8e-6]: about a third below 2^-25 (f16 rounds those
  // to 0), all the rest subnormal in f16 (< 2^-14). Scaled by 2^16 they are all >= 2^-14: normal.
  manual_seed(61);
  constexpr int64_t kOut = 64, kIn = 64;
  const Tensor c = from_vector<float>(small_values(kOut, 10, 12, 14), {1, kOut});  // [1, out]
  const Tensor x = from_vector<float>(small_values(kIn, 8, 8, 16), {1, kIn});      // [1, in]
  const Tensor w0 = randn({kOut, kIn}) * 0.1;                                       // [out, in]
  {
    NoGradGuard g;
    REQUIRE(values(x.to(DType::F16)) == values(x));  // the data is exact in f16
    REQUIRE(values(c.to(DType::F16)) == values(c));
  }

  // f32 reference gradient.
  Tensor w_ref = w0.clone().requires_grad_();
  sum(linear(x, w_ref) * c).backward();
  const auto ref = values(w_ref.grad());
  // Predictions: f16(ref) (f16 grad without scaling), f16(2^16 ref) / 2^16 (with scaling).
  Tensor ref_t = w_ref.grad().detach();
  const auto pred_plain = values(ref_t.to(DType::F16));
  const auto pred_scaled = values((ref_t * 65536.0).to(DType::F16).to(DType::F32) / 65536.0);
  const Counts want_plain = count(pred_plain, ref), want_scaled = count(pred_scaled, ref);
  REQUIRE(want_plain.ref_nonzero == kOut * kIn);
  const double n = double(kOut * kIn);

  // Trains one step of the probe under f16 autocast with f32 weights (O1) and returns the f32
  // gradient after the GradScaler's unscale_, and the scaler's statistics.
  auto autocast_run = [&](double init_scale, DType dtype, amp::StepStats* stats) {
    Tensor w = w0.clone().requires_grad_();
    optim::SGD opt(Tensors{w}, {.lr = 0.0});
    amp::GradScaler scaler({.init_scale = init_scale});
    Tensor loss;
    {
      amp::Autocast autocast({.dtype = dtype});
      loss = sum(linear(x, w) * c);  // linear in f16/bf16, the mul and the sum in f32
    }
    scaler.scale(loss).backward();
    REQUIRE(w.grad().dtype() == DType::F32);
    scaler.unscale_(opt);
    *stats = scaler.last_stats(opt);
    REQUIRE(scaler.step(opt));
    scaler.update();
    return values(w.grad());
  };

  SECTION("O1 (f32 weights, f16 autocast): without scaling vs dynamic scaling at 2^16") {
    amp::StepStats s_plain, s_scaled;
    const auto g_plain = autocast_run(1.0, DType::F16, &s_plain);
    const auto g_scaled = autocast_run(65536.0, DType::F16, &s_scaled);
    const Counts plain = count(g_plain, ref), scaled = count(g_scaled, ref);
    std::printf("underflow O1: lost to zero without scaling %lld/%lld = %.4f (predicted %lld, scaler zeros %lld); "
                "with 2^16: %lld = %.4f (scaler zeros %lld, underflowed %lld)\n",
                (long long)plain.zero_where_ref_nonzero, (long long)n, plain.zero_where_ref_nonzero / n,
                (long long)want_plain.zero_where_ref_nonzero, (long long)s_plain.zeros,
                (long long)scaled.zero_where_ref_nonzero, scaled.zero_where_ref_nonzero / n, (long long)s_scaled.zeros,
                (long long)s_scaled.underflowed);
    // Without scaling: exactly the predicted values (f16(ref) value by value), so exactly the
    // predicted count of zeros, seen both by us and by the scaler's statistics.
    CHECK(g_plain == pred_plain);
    CHECK(plain.zero_where_ref_nonzero == want_plain.zero_where_ref_nonzero);
    CHECK(s_plain.zeros == want_plain.zero_where_ref_nonzero);
    CHECK(s_plain.values == kOut * kIn);
    CHECK(s_plain.underflowed == 0);  // the gradient is f32: f16's subnormals are f32 normals
    // The data makes about a third of the gradient underflow: the bound says "many", not "some".
    CHECK(plain.zero_where_ref_nonzero / n > 0.25);
    CHECK(plain.zero_where_ref_nonzero / n < 0.5);
    // And the survivors are f16 subnormals (precision lost too): all of them.
    CHECK(plain.f16_subnormal == kOut * kIn - plain.zero_where_ref_nonzero);
    // With 2^16: every value is an f16 normal while scaled, nothing is lost, and the result is
    // f16(2^16 ref) / 2^16 value by value, within f16's 2^-11 relative rounding of the reference.
    CHECK(g_scaled == pred_scaled);
    CHECK(scaled.zero_where_ref_nonzero == 0);
    CHECK(want_scaled.zero_where_ref_nonzero == 0);
    CHECK(s_scaled.zeros == 0);
    for (std::size_t i = 0; i < ref.size(); ++i) REQUIRE(std::abs(g_scaled[i] - ref[i]) <= std::ldexp(std::abs(ref[i]), -11));
  }

  SECTION("bf16 autocast needs no scaling: f32's exponent range, nothing underflows") {
    amp::StepStats s;
    const auto g = autocast_run(1.0, DType::BF16, &s);
    CHECK(count(g, ref).zero_where_ref_nonzero == 0);
    CHECK(s.zeros == 0);
    // bf16 keeps 8 significant bits (unit roundoff 2^-8) and rounds three times here: c (11
    // bits), x (9 bits) and the gradient, so (1 + 2^-8)^3 - 1 relative.
    const double tol = std::pow(1 + std::ldexp(1.0, -8), 3) - 1;
    for (std::size_t i = 0; i < ref.size(); ++i) REQUIRE(std::abs(g[i] - ref[i]) <= tol * std::abs(ref[i]));
  }

  SECTION("pure f16 model (O3-like f16 weights): the scaler's statistics count zeros and f16 subnormals") {
    // f16 weight and input, f16 gradient: the statistics' 'underflowed' now means f16 subnormal.
    auto run = [&](double init_scale, amp::StepStats* stats) {
      Tensor w = w0.to(DType::F16).requires_grad_();
      optim::SGD opt(Tensors{w}, {.lr = 0.0});
      amp::GradScaler scaler({.init_scale = init_scale});
      Tensor loss = sum(linear(x.to(DType::F16), w).to(DType::F32) * c);
      scaler.scale(loss).backward();
      REQUIRE(w.grad().dtype() == DType::F16);
      // GradScaler refuses to unscale f16 gradients in place (for the reason this section
      // measures); the multi-tensor unscale it would have run shows what that does.
      MG_REQUIRE_ERROR(scaler.unscale_(opt), "attempting to unscale f16 gradients in place");
      *stats = amp::unscale_grads(opt.grads(), 1.0 / init_scale);
      return values(w.grad());
    };
    amp::StepStats s_plain, s_scaled;
    const auto g_plain = run(1.0, &s_plain);
    const auto g_scaled = run(65536.0, &s_scaled);
    std::printf("underflow f16 model: without scaling zeros %lld, subnormal %lld of %lld (predicted %lld, %lld); "
                "with 2^16 before unscaling: zeros %lld, subnormal %lld\n",
                (long long)s_plain.zeros, (long long)s_plain.underflowed, (long long)s_plain.values,
                (long long)want_plain.zero_where_ref_nonzero, (long long)want_plain.f16_subnormal,
                (long long)s_scaled.zeros, (long long)s_scaled.underflowed);
    CHECK(g_plain == pred_plain);
    CHECK(s_plain.zeros == want_plain.zero_where_ref_nonzero);
    CHECK(s_plain.underflowed == want_plain.f16_subnormal);
    CHECK(s_plain.zeros + s_plain.underflowed == kOut * kIn);
    // Scaled, the f16 gradients are all normal before unscaling...
    CHECK(s_scaled.zeros == 0);
    CHECK(s_scaled.underflowed == 0);
    // ...and unscaling them in place in f16 rounds them back into the subnormal range: value by
    // value f16(f16(2^16 ref) / 2^16). This is why f16 weights need f32 master gradients (O2),
    // and why GradScaler (as PyTorch's) refuses to unscale f16 gradients.
    const auto pred_back = values(((ref_t * 65536.0).to(DType::F16).to(DType::F32) / 65536.0).to(DType::F16));
    CHECK(g_scaled == pred_back);
    const Counts back = count(g_scaled, ref);
    std::printf("  after the in-place f16 unscale: lost to zero %lld (unscaled run: %lld)\n",
                (long long)back.zero_where_ref_nonzero, (long long)want_plain.zero_where_ref_nonzero);
    // The count matches the unscaled run's up to double rounding (f16(2^16 v) / 2^16 rounded again
    // differs from f16(v) only within 2^-12 relative of a rounding midpoint): 8 of 4096 is ample.
    CHECK(std::llabs(back.zero_where_ref_nonzero - want_plain.zero_where_ref_nonzero) <= 8);
  }
}

// ---------------------------------------------------------------------------------------------
// 7. Exploding gradients: skipped iterations, exact backoff, recovery, and the error
// ---------------------------------------------------------------------------------------------
TEST_CASE("overflowing iterations are skipped and backed off from exactly - training recovers", "[amp][numerics]") {
  manual_seed(71);
  Mlp net(8, 16, 4);
  Mlp teacher(8, 16, 4);
  const Tensor x_all = randn({64, 8});
  Tensor t_all;
  {
    NoGradGuard g;
    t_all = teacher.forward(x_all);  // a learnable target
  }
  optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9});
  amp::GradScaler scaler({.init_scale = 1024, .growth_interval = 3});
  std::vector<std::pair<int64_t, double>> callbacks;
  scaler.on_skip([&](int64_t it, double s) { callbacks.push_back({it, s}); });

  auto full_loss = [&] {
    NoGradGuard g;
    return mse_loss(net.forward(x_all), t_all).item<double>();
  };
  const double loss_start = full_loss();

  // Bad iterations: 4 and 10 multiply the loss by 1e30 (finite in f32, but its gradient rounds
  // to inf when cast to f16 in the backward); 5 puts an inf into the input (NaN/inf forward).
  enum class Bad { None, HugeLoss, InfInput };
  auto bad_at = [](int it) { return it == 4 || it == 10 ? Bad::HugeLoss : it == 5 ? Bad::InfInput : Bad::None; };
  // The expected scale after each update: x2 after 3 clean iterations, x0.5 at each bad one
  // (growth count reset).
  const std::vector<double> expect = {1024, 1024, 2048, 1024, 512, 512, 512, 1024, 1024, 512, 512, 512, 1024, 1024};
  int64_t steps = 0;
  for (int it = 1; it <= int(expect.size()); ++it) {
    INFO("iteration " << it);
    Tensor x = narrow(x_all, 0, ((it - 1) % 4) * 16, 16).clone(), t = narrow(t_all, 0, ((it - 1) % 4) * 16, 16);
    if (bad_at(it) == Bad::InfInput) x.data<float>()[3] = std::numeric_limits<float>::infinity();
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast autocast({.dtype = DType::F16});
      loss = mse_loss(net.forward(x), t);
      if (bad_at(it) == Bad::HugeLoss) loss = loss * 1e30;
    }
    const Tensor scaled = scaler.scale(loss);
    if (bad_at(it) == Bad::HugeLoss) REQUIRE(std::isfinite(scaled.item<double>()));  // the gradient overflows, not the loss
    scaled.backward();
    const double scale_before = scaler.get_scale();
    // Weights, momentum buffers and per-parameter update counts: what a skip must not touch.
    auto weights_and_state = [&] {
      std::vector<std::vector<double>> v;
      for (const Tensor& p : net.parameters()) {
        v.push_back(values(p));
        if (const optim::ParamState* st = opt.state(p)) {
          v.push_back(values(st->buffers.at("momentum_buffer")));
          v.push_back({double(st->step)});
        }
      }
      return v;
    };
    const std::vector<std::vector<double>> w_before = weights_and_state();
    const bool stepped = scaler.step(opt);
    scaler.update();
    if (bad_at(it) != Bad::None) {
      CHECK(!stepped);
      CHECK(scaler.last_stats(opt).nonfinite > 0);
      CHECK(weights_and_state() == w_before);  // bit-identical
      CHECK(scaler.get_scale() == scale_before * 0.5);  // exactly the backoff factor
      CHECK(scaler.last_skip_iteration() == it);
      REQUIRE(!callbacks.empty());
      CHECK(callbacks.back() == std::pair<int64_t, double>{it, scaler.get_scale()});
    } else {
      CHECK(stepped);
      CHECK(scaler.last_stats(opt).nonfinite == 0);
      ++steps;
    }
    CHECK(opt.step_count() == steps);  // a skipped step does not count
    CHECK(scaler.get_scale() == expect[std::size_t(it - 1)]);
    CHECK(scaler.consecutive_skips() == (it == 5 ? 2 : bad_at(it) != Bad::None ? 1 : 0));
  }
  CHECK(scaler.skipped_iterations() == 3);
  CHECK(callbacks == std::vector<std::pair<int64_t, double>>{{4, 1024}, {5, 512}, {10, 512}});
  CHECK(steps == 11);
  const double loss_end = full_loss();
  std::printf("exploding: loss %.5f -> %.5f over %lld steps, 3 skipped, final scale %g\n", loss_start, loss_end,
              (long long)steps, scaler.get_scale());
  CHECK(loss_end < 0.9 * loss_start);  // training recovered and made progress

  SECTION("persistent inf/NaN gradients raise the consecutive-steps error with its hint") {
    amp::GradScaler s({.max_consecutive_skips = 4});
    const auto w_start = values(net.fc1->weight);
    const int64_t steps_start = opt.step_count();
    std::string message;
    int failed_at = 0;
    for (int it = 1; it <= 6 && message.empty(); ++it) {
      Tensor x = narrow(x_all, 0, 0, 16).clone();
      x.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
      opt.zero_grad();
      Tensor loss;
      {
        amp::Autocast autocast({.dtype = DType::F16});
        loss = mse_loss(net.forward(x), narrow(t_all, 0, 0, 16));
      }
      s.scale(loss).backward();
      CHECK(!s.step(opt));
      message = mg::test::error_of([&] { s.update(); });
      failed_at = it;
    }
    CHECK(failed_at == 4);
    CHECK_THAT(message, Catch::Matchers::Contains(
                            "GradScaler: gradients were inf/NaN for 4 consecutive steps; scale fell to 4096"));
    CHECK_THAT(message, Catch::Matchers::Contains("hint: lower the learning rate, clip gradients, or train in bf16"));
    CHECK(values(net.fc1->weight) == w_start);
    CHECK(opt.step_count() == steps_start);
  }
}

// ---------------------------------------------------------------------------------------------
// 8. Smaller numerics facts
// ---------------------------------------------------------------------------------------------
TEST_CASE("an f32 weight in an f16 matmul gets the f32 cast of the f16 gradient computation", "[amp][numerics]") {
  manual_seed(81);
  const Tensor x = randn({8, 5});                                                // [B, in]
  const Tensor c = randn({8, 3});                                                // [B, out]
  Tensor w = randn({3, 5}).requires_grad_(), b = randn({3}).requires_grad_();  // [out, in], [out]
  Tensor xg = x.clone().requires_grad_();
  {
    amp::Autocast autocast({.dtype = DType::F16});
    const Tensor y = linear(xg, w, b);  // f16 [B, out]
    REQUIRE(y.dtype() == DType::F16);
    sum(y * c).backward();  // mul promotes to f32
  }
  REQUIRE(w.grad().dtype() == DType::F32);
  REQUIRE(b.grad().dtype() == DType::F32);
  REQUIRE(xg.grad().dtype() == DType::F32);
  // By hand, outside autocast: dy = f16(c); dW = f16(dy^T x16) (f32 accumulation, one rounding);
  // db = sum over the batch of dy (f32 accumulation, one rounding); dx = f16(dy W16).
  NoGradGuard g;
  const Tensor dy = c.to(DType::F16);
  CHECK(values(w.grad()) == values(mm(dy.t(), x.to(DType::F16)).to(DType::F32)));
  CHECK(values(b.grad()) == values(sum(dy, {0}).to(DType::F32)));
  CHECK(values(xg.grad()) == values(mm(dy, w.to(DType::F16)).to(DType::F32)));
}

TEST_CASE("a scaled f16 gradient is skipped exactly when it rounds to inf (65520), not before", "[amp][numerics]") {
  // w [1, 1] f32 under f16 autocast, y = linear(1, w) in f16, loss = y * k in f32: the f16
  // gradient of y is f16(scale * k). f16's largest finite value is 65504; values from 65520 (the
  // midpoint to the next binade) round to inf.
  auto step_with = [](double k) {
    Tensor w = ones({1, 1}).requires_grad_();
    optim::SGD opt(Tensors{w}, {.lr = 1e-6});
    amp::GradScaler scaler({.init_scale = 1024});
    Tensor loss;
    {
      amp::Autocast autocast({.dtype = DType::F16});
      loss = sum(linear(ones({1, 1}), w) * k);
    }
    scaler.scale(loss).backward();
    const bool stepped = scaler.step(opt);
    const double g = values(w.grad())[0];
    scaler.update();
    return std::pair<bool, double>{stepped, g};
  };
  const auto [ok_below, g_below] = step_with(65519.0 / 1024);  // 65519 rounds down to 65504
  CHECK(ok_below);
  CHECK(g_below == 65504.0 / 1024);
  const auto [ok_at, g_at] = step_with(65520.0 / 1024);  // rounds to inf: skipped
  CHECK(!ok_at);
  CHECK(std::isinf(g_at));
}

TEST_CASE("power-of-two scales in the safe range give bit-identical f16 autocast gradients", "[amp][numerics]") {
  // No value of this small model's backward is near f16's limits at 2^6 or 2^12, and scaling by
  // a power of two commutes with every rounding: the unscaled gradients must not depend on it.
  auto grads_with = [](double scale) {
    manual_seed(82);
    Mlp net(8, 16, 4);
    const Tensor x = randn({16, 8}), t = randn({16, 4});
    optim::SGD opt(net.parameters(), {.lr = 0.0});
    amp::GradScaler scaler({.init_scale = scale});
    Tensor loss;
    {
      amp::Autocast autocast({.dtype = DType::F16});
      loss = mse_loss(net.forward(x), t);
    }
    scaler.scale(loss).backward();
    REQUIRE(scaler.step(opt));
    std::vector<std::vector<double>> g;
    for (const Tensor& p : net.parameters()) g.push_back(values(p.grad()));
    return g;
  };
  const auto g6 = grads_with(64), g12 = grads_with(4096);
  CHECK(g6 == g12);
  // A non-power-of-two scale rounds differently (checks that the comparison can tell).
  const auto g1000 = grads_with(1000);
  CHECK(g1000 != g12);
}
