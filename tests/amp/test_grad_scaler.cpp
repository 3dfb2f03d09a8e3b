// GradScaler as a state machine, transition by transition (DESIGN §8): scale, unscale_ once,
// skip on inf/NaN leaving weights and optimizer state untouched, backoff, growth exactly after
// the interval, hysteresis, min/max clamps, the error after too many skips or at the floor,
// statistics, several optimizers, state-dict round trip, disabled scaler, the scale clamped to its
// bounds at every moment, and the refusal to unscale f16 gradients in place.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "amp/grad_scaler.h"
#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "ops/ops.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

// A parameter whose gradient we set directly (the scaled gradient a backward would produce).
struct Toy {
  Tensor w = ones({4}, {.requires_grad = true});
  optim::SGD opt{Tensors{w}, {.lr = 0.1, .momentum = 0.9}};
  void set_grad(std::vector<float> g) { w.set_grad(from_vector<float>(g, {4})); }
};

constexpr float kInf = std::numeric_limits<float>::infinity();

}  // namespace

TEST_CASE("GradScaler scales the loss and unscales gradients once per iteration", "[amp][scaler]") {
  amp::GradScaler scaler;
  CHECK(scaler.get_scale() == 65536.0);
  const Tensor loss = full({}, 0.5);
  CHECK(scaler.scale(loss).item<float>() == 32768.0f);
  CHECK(scaler.scale(loss).dtype() == DType::F32);

  Toy t;
  t.set_grad({65536, 0, 131072, 1});
  scaler.unscale_(t.opt);
  CHECK(values(t.w.grad()) == std::vector<double>{1, 0, 2, 1.0 / 65536});
  MG_REQUIRE_ERROR(scaler.unscale_(t.opt), "GradScaler::unscale_: already called for this SGD optimizer since the last update()");
  CHECK(scaler.step(t.opt));   // does not unscale again
  CHECK(values(t.w)[0] == Approx(1 - 0.1 * 1));
  MG_REQUIRE_ERROR(scaler.step(t.opt), "GradScaler::step: already called");
  scaler.update();
  CHECK(scaler.iterations() == 1);
  CHECK(scaler.skipped_iterations() == 0);
  MG_REQUIRE_ERROR(scaler.update(), "no optimizer was unscaled or stepped since the last update()");
}

TEST_CASE("an inf/NaN gradient skips the step, leaves weights and state untouched, and backs off", "[amp][scaler]") {
  amp::GradScaler scaler({.init_scale = 1024});
  Toy t;
  t.set_grad({1024, 1024, 1024, 1024});
  scaler.step(t.opt);  // one real step: momentum buffers exist
  scaler.update();
  const auto w_before = values(t.w);
  const auto m_before = values(t.opt.state(t.w)->buffers.at("momentum_buffer"));
  const int64_t steps = t.opt.step_count();

  int64_t callback_iteration = -1;
  double callback_scale = 0;
  scaler.on_skip([&](int64_t it, double s) { callback_iteration = it; callback_scale = s; });
  for (float bad : {kInf, std::nanf("")}) {
    t.set_grad({1, bad, 1, 1});
    CHECK(!scaler.step(t.opt));
    CHECK(scaler.last_stats(t.opt).nonfinite == 1);
    scaler.update();
  }
  CHECK(values(t.w) == w_before);
  CHECK(values(t.opt.state(t.w)->buffers.at("momentum_buffer")) == m_before);
  CHECK(t.opt.step_count() == steps);
  CHECK(scaler.get_scale() == 256.0);  // 1024 -> 512 -> 256
  CHECK(scaler.skipped_iterations() == 2);
  CHECK(scaler.consecutive_skips() == 2);
  CHECK(scaler.last_skip_iteration() == 3);
  CHECK(callback_iteration == 3);
  CHECK(callback_scale == 256.0);
  t.set_grad({1, 1, 1, 1});
  CHECK(scaler.step(t.opt));
  scaler.update();
  CHECK(scaler.consecutive_skips() == 0);
}

TEST_CASE("growth happens exactly after growth_interval clean iterations, clamped to max_scale", "[amp][scaler]") {
  amp::GradScaler scaler({.init_scale = 8, .growth_interval = 3, .max_scale = 32});
  Toy t;
  const std::vector<double> expect = {8, 8, 16, 16, 16, 32, 32, 32, 32};
  for (double want : expect) {
    t.set_grad({1, 1, 1, 1});
    scaler.step(t.opt);
    scaler.update();
    CHECK(scaler.get_scale() == want);
  }
  // An overflow resets the growth count.
  amp::GradScaler s2({.init_scale = 8, .growth_interval = 2});
  for (float g : {1.0f, kInf, 1.0f, 1.0f}) {
    t.set_grad({g, 1, 1, 1});
    s2.step(t.opt);
    s2.update();
  }
  CHECK(s2.get_scale() == 8.0);  // 8, inf -> 4, 4, 4 -> 8
  s2.update(3.0);  // an explicit scale
  CHECK(s2.get_scale() == 3.0);
}

TEST_CASE("hysteresis tolerates overflows before backing off - min_scale is a floor that errors", "[amp][scaler]") {
  amp::GradScaler scaler({.init_scale = 64, .min_scale = 16, .hysteresis = 2});
  Toy t;
  std::vector<double> scales;
  for (int i = 0; i < 4; ++i) {
    t.set_grad({kInf, 1, 1, 1});
    CHECK(!scaler.step(t.opt));
    scaler.update();
    scales.push_back(scaler.get_scale());
  }
  CHECK(scales == std::vector<double>{64, 32, 32, 16});
  t.set_grad({kInf, 1, 1, 1});
  scaler.step(t.opt);
  scaler.update();  // tolerated by hysteresis at the floor
  t.set_grad({kInf, 1, 1, 1});
  scaler.step(t.opt);
  MG_REQUIRE_ERROR(scaler.update(), "gradients are inf/NaN with the scale already at its floor min_scale = 16");
  // The error closed the iteration (counted as skipped): the scaler and the optimizer go on.
  CHECK(scaler.iterations() == 6);
  CHECK(scaler.skipped_iterations() == 6);
  CHECK(scaler.consecutive_skips() == 6);
  t.set_grad({16, 16, 16, 16});
  CHECK(scaler.step(t.opt));
  CHECK(!t.opt.last_step_skipped());
  scaler.update();
  CHECK(scaler.skipped_iterations() == 6);
  CHECK(scaler.consecutive_skips() == 0);
  CHECK(values(t.w)[0] == Approx(1 - 0.1 * 1));
}

TEST_CASE("a skipped step is reported by the optimizer on the CPU too", "[amp][scaler]") {
  amp::GradScaler scaler({.init_scale = 4});
  Toy t;
  t.set_grad({kInf, 1, 1, 1});
  CHECK(!scaler.step(t.opt));
  CHECK(t.opt.last_step_skipped());
  CHECK(t.opt.step_count() == 0);
  CHECK(values(t.w) == std::vector<double>{1, 1, 1, 1});
  scaler.update();
  t.set_grad({4, 4, 4, 4});
  CHECK(scaler.step(t.opt));
  CHECK(!t.opt.last_step_skipped());
  CHECK(t.opt.step_count() == 1);
}

TEST_CASE("update(new_scale) sets the scale and leaves the growth tracker running, as PyTorch's", "[amp][scaler]") {
  // PyTorch 2.15, GradScaler(init_scale=8, growth_interval=3), update(100.0) at the 2nd of 6 clean
  // iterations: scales after each update [8, 100, 100, 200, 200, 200].
  amp::GradScaler scaler({.init_scale = 8, .growth_interval = 3});
  Toy t;
  std::vector<double> scales;
  for (int i = 0; i < 6; ++i) {
    t.set_grad({1, 1, 1, 1});
    scaler.step(t.opt);
    if (i == 1) {
      scaler.update(100.0);
    } else {
      scaler.update();
    }
    scales.push_back(scaler.get_scale());
  }
  CHECK(scales == std::vector<double>{8, 100, 100, 200, 200, 200});
}

TEST_CASE("a disabled scaler's scale is 1", "[amp][scaler]") {
  const amp::GradScaler scaler({.enabled = false});
  CHECK(scaler.get_scale() == 1.0);
}

TEST_CASE("bounds and factors that are not positive and finite are refused", "[amp][scaler]") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  MG_REQUIRE_ERROR(amp::GradScaler({.max_scale = 0.0}), "GradScaler: max_scale must be positive and finite, got 0");
  MG_REQUIRE_ERROR(amp::GradScaler({.max_scale = -1.0}), "max_scale must be positive and finite");
  MG_REQUIRE_ERROR(amp::GradScaler({.max_scale = nan}), "max_scale must be positive and finite");
  MG_REQUIRE_ERROR(amp::GradScaler({.min_scale = inf}), "min_scale must be positive and finite");
  MG_REQUIRE_ERROR(amp::GradScaler({.growth_factor = inf}), "growth_factor must be > 1 and finite");
  MG_REQUIRE_ERROR(amp::GradScaler({.growth_factor = nan}), "growth_factor must be > 1 and finite");
}

TEST_CASE("load_state_dict refuses negative or inconsistent counters", "[amp][scaler]") {
  amp::GradScaler scaler({.hysteresis = 2});
  Toy t;
  t.set_grad({kInf, 1, 1, 1});
  scaler.step(t.opt);
  scaler.update();
  const StateDict good = scaler.state_dict();
  auto with = [&](const std::string& key, int64_t v) {
    StateDict s = good;
    s.ints[key] = v;
    return s;
  };
  MG_REQUIRE_ERROR(scaler.load_state_dict(with("growth_tracker", -1)), "the counters must be >= 0");
  MG_REQUIRE_ERROR(scaler.load_state_dict(with("iterations", -3)), "the counters must be >= 0");
  MG_REQUIRE_ERROR(scaler.load_state_dict(with("skipped", 5)), "inconsistent counters: 5 skipped");
  MG_REQUIRE_ERROR(scaler.load_state_dict(with("hysteresis_left", 0)), "hysteresis_left must be in [1, 2], got 0");
  MG_REQUIRE_ERROR(scaler.load_state_dict(with("hysteresis_left", 3)), "hysteresis_left must be in [1, 2], got 3");
  CHECK(scaler.iterations() == 1);  // nothing changed
  scaler.load_state_dict(good);
  CHECK(scaler.skipped_iterations() == 1);
}

TEST_CASE("too many consecutive skips raise an error instead of silently never training", "[amp][scaler]") {
  amp::GradScaler scaler({.max_consecutive_skips = 5});
  Toy t;
  for (int i = 0; i < 4; ++i) {
    t.set_grad({kInf, 1, 1, 1});
    scaler.step(t.opt);
    scaler.update();
  }
  t.set_grad({kInf, 1, 1, 1});
  scaler.step(t.opt);
  MG_REQUIRE_ERROR(scaler.update(), "GradScaler: gradients were inf/NaN for 5 consecutive steps; scale fell to 2048");
  MG_REQUIRE_ERROR(amp::GradScaler({.backoff_factor = 2}), "backoff_factor must be in (0, 1)");
}

TEST_CASE("statistics count zeros, underflowed and non-finite values in one pass", "[amp][scaler]") {
  Tensor h = from_vector<float>({0.f, 1e-6f, 1e-3f, 65504.f, kInf, -0.f}, {6}).to(DType::F16);
  Tensor f = from_vector<float>({1e-40f, 0.f, 2.f}, {3});
  const amp::UnscaleStats s = amp::unscale_grads({h, Tensor(), f}, 0.5);
  CHECK(s.values == 9);
  CHECK(s.zeros == 3);        // 0, -0 (f16) and 0 (f32)
  CHECK(s.underflowed == 2);  // 1e-6 is subnormal in f16; 1e-40 in f32
  CHECK(s.nonfinite == 1);
  CHECK(values(f)[2] == 1.0);
  CHECK(values(h)[3] == 32752.0);
}

TEST_CASE("accumulating into f32 masters rounds the product and the sum separately, as the CUDA kernel",
          "[amp][scaler]") {
  // 1/1000 is not a power of two, so g * inv is inexact and a fused multiply-add would differ.
  const double inv = 1.0 / 1000;
  const float inv32 = float(inv);
  for (DType dt : {DType::BF16, DType::F16, DType::F32}) {
    INFO(dtype_name(dt));
    const Tensor src = randn({4099}, {.dtype = dt});
    const Tensor dst = randn({4099}, {.dtype = DType::F32});
    auto floats = [](const Tensor& t) {  // f32 values, exact through double
      const std::vector<double> v = values(t);
      return std::vector<float>(v.begin(), v.end());
    };
    const std::vector<float> g = floats(src.to(DType::F32)), before = floats(dst);
    amp::unscale_grads_to({src}, {dst}, inv, /*accumulate=*/true);
    const std::vector<float> got = floats(dst);
    int64_t mismatches = 0, fma_differs = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      volatile float product = g[i] * inv32;  // rounded to f32 here, never fused into the add
      const float want = before[i] + product;
      mismatches += std::memcmp(&want, &got[i], sizeof(float)) != 0;
      fma_differs += std::fma(g[i], inv32, before[i]) != want;
    }
    CHECK(mismatches == 0);
    CHECK(fma_differs > 0);  // the data can tell the two apart
  }
}

TEST_CASE("several optimizers: each checks its own gradients, one update per iteration", "[amp][scaler]") {
  amp::GradScaler scaler({.init_scale = 4});
  Toy a, b;
  a.set_grad({4, 4, 4, 4});
  b.set_grad({kInf, 4, 4, 4});
  CHECK(scaler.step(a.opt));
  CHECK(!scaler.step(b.opt));
  scaler.update();
  CHECK(scaler.get_scale() == 2.0);  // any overflow backs off
  CHECK(a.opt.step_count() == 1);
  CHECK(b.opt.step_count() == 0);
}

TEST_CASE("step with no gradient is refused, and a refused update(new_scale) changes nothing", "[amp][scaler]") {
  // PyTorch 2.15: "No inf checks were recorded for this optimizer." A step that checked nothing
  // must not count as a clean iteration (it would grow the scale having learned nothing).
  amp::GradScaler scaler({.init_scale = 8, .growth_interval = 1});
  Toy t;
  MG_REQUIRE_ERROR(scaler.step(t.opt), "GradScaler::step: no parameter of this SGD optimizer has a gradient");
  CHECK(t.opt.step_count() == 0);
  MG_REQUIRE_ERROR(scaler.update(), "no optimizer was unscaled or stepped");
  CHECK(scaler.get_scale() == 8.0);
  // update(new_scale) with a bad value: the iteration stays open for a correct update.
  t.set_grad({8, 8, 8, 8});
  CHECK(scaler.step(t.opt));
  MG_REQUIRE_ERROR(scaler.update(-1.0), "new_scale must be positive and finite, got -1");
  CHECK(scaler.iterations() == 0);
  scaler.update();
  CHECK(scaler.iterations() == 1);
  CHECK(scaler.get_scale() == 16.0);
}

TEST_CASE("update() after unscale_ of an optimizer without gradients is refused, as PyTorch's", "[amp][scaler]") {
  // PyTorch 2.15: scaler.unscale_(opt) with no .grad, then update(): "No inf checks were recorded
  // prior to update." Counting it clean would grow the scale having checked nothing.
  amp::GradScaler scaler({.init_scale = 8, .growth_interval = 1});
  Toy t;
  scaler.unscale_(t.opt);
  MG_REQUIRE_ERROR(scaler.update(), "GradScaler::update: no inf/NaN check was recorded since the last update()");
  CHECK(scaler.get_scale() == 8.0);
  CHECK(scaler.iterations() == 0);
  // The refused iteration is dropped: the next one runs as usual.
  t.set_grad({8, 8, 8, 8});
  CHECK(scaler.step(t.opt));
  scaler.update();
  CHECK(scaler.get_scale() == 16.0);
}

TEST_CASE("GradScaler state dict round trip continues identically", "[amp][scaler]") {
  amp::GradScalerOptions o{.init_scale = 16, .growth_interval = 3, .min_scale = 1, .max_scale = 1024, .hysteresis = 2};
  amp::GradScaler a(o);
  Toy t;
  const std::vector<float> pattern = {1, kInf, 1, 1, kInf, kInf, 1, 1, 1, 1};
  for (int i = 0; i < 5; ++i) {
    t.set_grad({pattern[std::size_t(i)], 1, 1, 1});
    a.step(t.opt);
    a.update();
  }
  amp::GradScaler b;
  b.load_state_dict(a.state_dict());
  for (int i = 5; i < 10; ++i) {
    for (amp::GradScaler* s : {&a, &b}) {
      t.set_grad({pattern[std::size_t(i)], 1, 1, 1});
      s->unscale_(t.opt);
      s->update();
    }
    CHECK(a.get_scale() == b.get_scale());
  }
  CHECK(a.state_dict().ints == b.state_dict().ints);
  CHECK(a.state_dict().floats == b.state_dict().floats);
  StateDict bad = a.state_dict();
  bad.floats.erase("scale");
  MG_REQUIRE_ERROR(b.load_state_dict(bad), "state has no float 'scale'");
}

TEST_CASE("a disabled scaler passes the loss through and always steps", "[amp][scaler]") {
  amp::GradScaler scaler({.enabled = false});
  const Tensor loss = full({}, 3.0);
  CHECK(scaler.scale(loss).is_same(loss));
  Toy t;
  t.set_grad({kInf, 1, 1, 1});
  CHECK(scaler.step(t.opt));
  scaler.update();
  CHECK(t.opt.step_count() == 1);
}

TEST_CASE("the scale is clamped to [min_scale, max_scale] at construction, on load and on every update",
          "[amp][scaler]") {
  Toy t;
  amp::GradScaler big({.init_scale = 1e9, .growth_interval = 1, .max_scale = 1e6});
  CHECK(big.get_scale() == 1e6);
  t.set_grad({1, 1, 1, 1});
  big.step(t.opt);
  big.update();  // a clean iteration with growth_interval 1 would double it: stays at the ceiling
  CHECK(big.get_scale() == 1e6);
  big.update(5e6);  // an explicit scale is clamped too
  CHECK(big.get_scale() == 1e6);

  amp::GradScaler small({.init_scale = 1, .min_scale = 100});
  CHECK(small.get_scale() == 100.0);
  small.update(3.0);
  CHECK(small.get_scale() == 100.0);
  small.update(400.0);  // inside the range: kept exactly
  CHECK(small.get_scale() == 400.0);

  // A state whose scale lies outside its own bounds (written by an older build) is clamped on load.
  StateDict s = amp::GradScaler({.init_scale = 4096, .min_scale = 1, .max_scale = 1e6}).state_dict();
  s.floats["scale"] = 1e9;
  amp::GradScaler loaded;
  loaded.load_state_dict(s);
  CHECK(loaded.get_scale() == 1e6);
  s.floats["scale"] = 0.25;
  loaded.load_state_dict(s);
  CHECK(loaded.get_scale() == 1.0);
  // Without bounds any positive scale is kept.
  CHECK(amp::GradScaler({.init_scale = 1e9}).get_scale() == 1e9);
}

TEST_CASE("unscale_ refuses f16 gradients without f32 masters - bf16 and master weights pass", "[amp][scaler]") {
  Tensor w = ones({4}, {.dtype = DType::F16, .requires_grad = true});
  optim::SGD opt(Tensors{w}, {.lr = 0.1});
  amp::GradScaler scaler({.init_scale = 1024});
  w.set_grad(full({4}, 2048.0, {.dtype = DType::F16}));
  MG_REQUIRE_ERROR(scaler.unscale_(opt), "GradScaler::unscale_: attempting to unscale f16 gradients in place");
  MG_REQUIRE_ERROR(scaler.step(opt), "hint: keep f32 master weights");
  CHECK(values(w.grad()) == std::vector<double>{2048, 2048, 2048, 2048});  // untouched
  CHECK(values(w) == std::vector<double>{1, 1, 1, 1});
  // The refused calls recorded nothing: an update() now has no iteration to close (it would have
  // counted a clean one and could grow the scale with no step taken).
  MG_REQUIRE_ERROR(scaler.update(), "no optimizer was unscaled or stepped since the last update()");
  CHECK(scaler.get_scale() == 1024.0);

  Tensor b = ones({4}, {.dtype = DType::BF16, .requires_grad = true});
  optim::SGD opt_b(Tensors{b}, {.lr = 0.5});
  amp::GradScaler scaler_b({.init_scale = 1024});
  b.set_grad(full({4}, 2048.0, {.dtype = DType::BF16}));
  CHECK(scaler_b.step(opt_b));
  CHECK(values(b) == std::vector<double>{0, 0, 0, 0});  // 1 - 0.5 * 2048 / 1024

  Tensor m = ones({4}, {.dtype = DType::F16, .requires_grad = true});
  optim::SGD opt_m(Tensors{m}, {.lr = 0.5});
  opt_m.use_master_weights();
  amp::GradScaler scaler_m({.init_scale = 65536});
  // A true gradient of 2^-26 is below f16's smallest subnormal 2^-24; scaled by 2^16 it is the f16
  // value 2^-10. Unscaled into the f32 master it is 2^-26 exactly (an in-place f16 unscale: 0).
  m.set_grad(full({4}, std::ldexp(1.0, -10), {.dtype = DType::F16}));
  scaler_m.unscale_(opt_m);
  CHECK(values(opt_m.parameters()[0].grad()) == std::vector<double>(4, std::ldexp(1.0, -26)));
}

TEST_CASE("a NonfiniteReducer's count decides the CPU unscale, and its device path leaves the CPU alone", "[amp][scaler]") {
  // A reducer standing in for another process that found an inf: the clean local gradients skip.
  amp::NonfiniteReducer other_found_inf;
  int64_t seen = -1;
  other_found_inf.count = [&](int64_t local) {
    seen = local;
    return local + 1;
  };
  const amp::NonfiniteReducer previous = amp::set_nonfinite_reducer(other_found_inf);
  CHECK_FALSE(previous);
  CHECK(bool(amp::nonfinite_reducer().count));
  {
    amp::GradScaler scaler({.init_scale = 8});
    Toy t;
    t.set_grad({8, 8, 8, 8});
    CHECK_FALSE(scaler.step(t.opt));
    CHECK(seen == 0);
    CHECK(scaler.last_stats(t.opt).nonfinite == 1);
    scaler.update();
    CHECK(scaler.get_scale() == 4.0);
    CHECK(values(t.w) == std::vector<double>{1, 1, 1, 1});
  }
  // A reducer with only a device path: the CPU's host count is the local one.
  amp::NonfiniteReducer device_only;
  int calls = 0;
  device_only.flag = [&](Tensor) { ++calls; };
  CHECK(bool(device_only));
  amp::set_nonfinite_reducer(device_only);
  {
    amp::GradScaler scaler({.init_scale = 8});
    Toy t;
    t.set_grad({8, 8, 8, 8});
    CHECK(scaler.step(t.opt));
    CHECK(calls == 0);
  }
  CHECK(bool(amp::set_nonfinite_reducer({}).flag));  // returns the one it replaces
  CHECK_FALSE(amp::nonfinite_reducer());
}

TEST_CASE("a static scaler (dynamic = false) keeps its scale, counts skips and saves the setting", "[amp][scaler]") {
  amp::GradScaler scaler({.init_scale = 128, .growth_interval = 2, .max_consecutive_skips = 4, .dynamic = false});
  Toy t;
  for (const float g : {1.0f, kInf, 1.0f, 1.0f, 1.0f}) {  // an overflow, then more clean steps than growth_interval
    t.set_grad({g, 1, 1, 1});
    CHECK(scaler.step(t.opt) == (g == 1.0f));
    scaler.update();
    CHECK(scaler.get_scale() == 128.0);
  }
  CHECK(scaler.iterations() == 5);
  CHECK(scaler.skipped_iterations() == 1);
  CHECK(scaler.last_skip_iteration() == 2);
  const StateDict s = scaler.state_dict();
  CHECK(s.ints.at("dynamic") == 0);
  // A state saved before the key existed keeps the loading scaler's own setting.
  StateDict old = s;
  old.ints.erase("dynamic");
  amp::GradScaler stays_static({.dynamic = false}), stays_dynamic;
  stays_static.load_state_dict(old);
  stays_dynamic.load_state_dict(old);
  CHECK(!stays_static.options().dynamic);
  CHECK(stays_dynamic.options().dynamic);
  amp::GradScaler loaded;  // dynamic by default, static after loading s
  loaded.load_state_dict(s);
  CHECK(!loaded.options().dynamic);
  // Too many skips in a row are still an error: a static scale never recovers by itself.
  for (int i = 0; i < 3; ++i) {
    t.set_grad({kInf, 1, 1, 1});
    scaler.step(t.opt);
    scaler.update();
  }
  t.set_grad({kInf, 1, 1, 1});
  scaler.step(t.opt);
  MG_REQUIRE_ERROR(scaler.update(), "gradients were inf/NaN for 4 consecutive steps; scale fell to 128");
}

TEST_CASE("the device pieces of amp::scale_loss decline on the CPU: no flag, and update_from(flag) refuses",
          "[amp][scaler]") {
  amp::GradScaler scaler;
  Toy t;
  t.set_grad({1, 1, 1, 1});
  CHECK(!scaler.use_device(Device::cpu()));
  CHECK(!scaler.on_device());
  CHECK(!scaler.unscale_to_flag(t.opt, false).defined());
  CHECK(values(t.w.grad()) == std::vector<double>{1, 1, 1, 1});  // nothing unscaled
  MG_REQUIRE_ERROR(scaler.update_from(zeros({1})), "GradScaler::update_from: the flag is on cpu but the scaler's state is on the host");
  MG_REQUIRE_ERROR(scaler.update_from(zeros({2})), "expected a one-element f32 flag");
  CHECK(scaler.iterations() == 0);
}

TEST_CASE("with master weights, a parameter without a gradient this step is skipped, not stepped with the last one",
          "[amp][scaler]") {
  // PyTorch (f32 or bf16, grad None at the 2nd step): p = 1 - 0.1 = 0.9 after two steps.
  for (const bool through_scaler : {false, true}) {
    INFO((through_scaler ? "GradScaler" : "plain step"));
    Tensor p = full({2}, 1.0, {.dtype = DType::BF16, .requires_grad = true});
    Tensor q = full({2}, 1.0, {.dtype = DType::BF16, .requires_grad = true});
    optim::SGD opt(Tensors{p, q}, {.lr = 0.1});
    opt.use_master_weights();
    amp::GradScaler scaler({.init_scale = 2});
    auto step = [&] {
      if (!through_scaler) return opt.step();
      scaler.step(opt);
      scaler.update();
    };
    const double g = through_scaler ? 2.0 : 1.0;  // the scaled gradient the backward would give
    p.set_grad(full({2}, g, {.dtype = DType::BF16}));
    q.set_grad(full({2}, g, {.dtype = DType::BF16}));
    step();
    p.set_grad(Tensor());  // the model's gradients cleared, and p got none this time
    q.set_grad(full({2}, g, {.dtype = DType::BF16}));
    step();
    const double once = values(to(full({1}, 0.9), DType::BF16))[0];  // one update of 1 by 0.1, rounded
    CHECK(values(p) == std::vector<double>{once, once});
    CHECK(values(q)[0] == Approx(0.8).epsilon(0.004));                  // two
  }
}

TEST_CASE("GradScaler: a 16-bit loss is scaled in f32, a disabled scaler's state is refused, unscale_ after step is named",
          "[amp][scaler]") {
  amp::GradScaler scaler;  // 65536
  const Tensor l16 = full({}, 2.0).to(DType::F16);
  const Tensor scaled = scaler.scale(l16);
  CHECK(scaled.dtype() == DType::F32);  // as PyTorch's f32 scale promotes it
  CHECK(scaled.item<double>() == 131072.0);
  CHECK(scaler.scale(full({}, 2.0).to(DType::F64)).dtype() == DType::F64);
  // An enabled scaler does not take a disabled one's state (it would switch loss scaling off).
  amp::GradScaler off(amp::GradScalerOptions{.enabled = false});
  MG_REQUIRE_ERROR(scaler.load_state_dict(off.state_dict()),
                   "GradScaler::load_state_dict: the state was saved by a disabled GradScaler but this one is enabled");
  MG_REQUIRE_ERROR(off.load_state_dict(scaler.state_dict()),
                   "GradScaler::load_state_dict: the state was saved by an enabled GradScaler but this one is disabled");
  CHECK(scaler.is_enabled());
  // unscale_ after step() in one iteration names what happened.
  const Tensor w = ones({2}).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.1});
  scaler.scale(sum(w * 3.0)).backward();
  scaler.step(opt);
  MG_REQUIRE_ERROR(scaler.unscale_(opt), "GradScaler::unscale_: called after step() for this SGD optimizer in this iteration");
  scaler.update();
}

TEST_CASE("pushed non-finite reducers: the newest still pushed is active, removed in any order", "[amp][scaler]") {
  const auto counting = [](int64_t answer) {
    amp::NonfiniteReducer r;
    r.count = [answer](int64_t) { return answer; };
    return r;
  };
  const amp::NonfiniteReducer base = amp::set_nonfinite_reducer(counting(1));
  const int64_t a = amp::push_nonfinite_reducer(counting(2));
  const int64_t b = amp::push_nonfinite_reducer(counting(3));
  CHECK(amp::nonfinite_reducer().count(0) == 3);
  amp::remove_nonfinite_reducer(a);  // the older owner goes first: the newer stays active
  CHECK(amp::nonfinite_reducer().count(0) == 3);
  amp::remove_nonfinite_reducer(b);
  CHECK(amp::nonfinite_reducer().count(0) == 1);  // the base one again, never a removed one
  MG_REQUIRE_ERROR(amp::remove_nonfinite_reducer(b), "no reducer has handle");
  amp::set_nonfinite_reducer(base);
}
