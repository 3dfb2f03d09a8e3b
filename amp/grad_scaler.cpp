#include "mixgrad/amp/grad_scaler.h"

#include <algorithm>
#include <cmath>

#include <cstring>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/multi_tensor_kernels.h"
#include "mixgrad/ops/ops.h"

namespace mg::amp {

namespace {
// Whether any parameter the optimizer steps (or a model tensor behind its f32 masters) holds a
// gradient: a host look at the handles, no device read.
bool has_any_grad(const optim::Optimizer& opt) {
  for (const Tensor& p : opt.parameters()) {
    if (p.grad().defined()) return true;
  }
  for (const optim::MasterPair& m : opt.master_pairs()) {
    if (m.model.grad().defined()) return true;
  }
  return false;
}

// The device state buffer: the fn::LossScaleState's 7 words, then the outcome word.
static_assert(sizeof(fn::LossScaleState) == 7 * sizeof(double), "LossScaleState is 7 plain 8-byte words");
constexpr int64_t kDeviceStateWords = 8;

fn::LossScaleRule rule_of(const GradScalerOptions& o) {
  return {.growth_factor = o.growth_factor,
          .backoff_factor = o.backoff_factor,
          .growth_interval = o.growth_interval,
          .has_min = o.min_scale.has_value(),
          .min_scale = o.min_scale.value_or(0.0),
          .has_max = o.max_scale.has_value(),
          .max_scale = o.max_scale.value_or(0.0),
          .hysteresis = o.hysteresis,
          .max_consecutive_skips = o.max_consecutive_skips,
          .fixed_scale = !o.dynamic};
}
}  // namespace

GradScaler::GradScaler(GradScalerOptions o) : options_(o) {
  check_options();
  rule_ = rule_of(o);
  // Apex: min(max_loss_scale, init_scale); and never below min_scale
  state_.scale = fn::loss_scale_clamp(o.init_scale, rule_);
  state_.hysteresis_left = o.hysteresis;
}

void GradScaler::check_options() const {
  const GradScalerOptions& o = options_;
  MG_CHECK(std::isfinite(o.init_scale) && o.init_scale > 0, Error, "GradScaler: init_scale must be positive and finite, got ",
           o.init_scale);
  MG_CHECK(std::isfinite(o.growth_factor) && o.growth_factor > 1, Error,
           "GradScaler: growth_factor must be > 1 and finite, got ", o.growth_factor);
  MG_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1, Error, "GradScaler: backoff_factor must be in (0, 1), got ",
           o.backoff_factor);
  MG_CHECK(o.growth_interval >= 1, Error, "GradScaler: growth_interval must be >= 1, got ", o.growth_interval);
  MG_CHECK(o.hysteresis >= 1, Error, "GradScaler: hysteresis must be >= 1, got ", o.hysteresis);
  MG_CHECK(o.max_consecutive_skips >= 0, Error, "GradScaler: max_consecutive_skips must be >= 0, got ",
           o.max_consecutive_skips);
  MG_CHECK(!o.min_scale || (std::isfinite(*o.min_scale) && *o.min_scale > 0), Error,
           "GradScaler: min_scale must be positive and finite, got ", *o.min_scale);
  MG_CHECK(!o.max_scale || (std::isfinite(*o.max_scale) && *o.max_scale > 0), Error,
           "GradScaler: max_scale must be positive and finite, got ", *o.max_scale);
  MG_CHECK(!o.min_scale || !o.max_scale || *o.min_scale <= *o.max_scale, Error, "GradScaler: min_scale (",
           *o.min_scale, ") exceeds max_scale (", *o.max_scale, ")");
}

Tensor GradScaler::scale(const Tensor& loss) const {
  MG_CHECK(loss.defined() && is_floating(loss.dtype()), DTypeError, "GradScaler::scale: expected a floating loss, got ",
           loss.defined() ? describe(loss) : "undefined");
  if (!options_.enabled) return loss;
  // A 16-bit loss is scaled in f32, as PyTorch's f32 scale promotes it: an f16 loss of 2 scaled by
  // 65536 is 131072, not inf (its gradient still reaches the f16 graph as the f16 scale).
  const Tensor l = loss.dtype() == DType::F64 ? loss : to(loss, DType::F32);
  if (use_device(l.device())) return l * to(select(device_state_, 0, 0), l.dtype());  // no host read
  return l * state_.scale;
}

bool GradScaler::use_device(Device device) const {
  if (device_) {
    MG_CHECK(*device_ == device, DeviceError, "GradScaler: the scaler's state is on ", device_->str(),
             " but this loss or optimizer is on ", device.str(), "\n  hint: use one GradScaler per device");
    return true;
  }
  if (device.is_cpu() || !multi_tensor_kernels(device.type)) return false;
  device_ = device;
  found_inf_ = zeros({1}, {.dtype = DType::F32, .device = device});
  push();
  return true;
}

void GradScaler::push() const {
  Tensor h = zeros({kDeviceStateWords}, {.dtype = DType::F64});
  std::memcpy(h.data_ptr(), &state_, sizeof(state_));  // the outcome word stays 0 (Ok)
  const Tensor d = contiguous(to(h, *device_));          // a host-to-device copy: no wait
  if (device_state_.defined()) {
    // In place: a captured CUDA graph holds this buffer's address (the scale, the unscale kernels,
    // the scale update), so a new scale set between replays must land in it, not in a new block
    // while the old one goes back to the allocator.
    NoGradGuard no_grad;
    device_state_.copy_(d);
  } else {
    device_state_ = d;
  }
  stale_ = false;
}

void GradScaler::pull() const {
  if (!device_ || !stale_) return;
  const Tensor h = contiguous(to(device_state_, Device::cpu()));  // the lazy read: one synchronisation
  const int64_t skipped_before = state_.skipped;
  std::memcpy(&state_, h.data_ptr(), sizeof(state_));
  int32_t outcome = 0;
  std::memcpy(&outcome, static_cast<const char*>(h.data_ptr()) + sizeof(state_), sizeof(outcome));
  stale_ = false;
  if (state_.skipped > skipped_before && on_skip_) on_skip_(state_.last_skip, state_.scale);
  if (outcome != 0) {
    NoGradGuard no_grad;
    select(device_state_, 0, kDeviceStateWords - 1).zero_();  // reported once
    throw_outcome(fn::LossScaleOutcome(outcome));
  }
}

const fn::LossScaleState& GradScaler::host() const {
  pull();
  return state_;
}

void GradScaler::throw_outcome(fn::LossScaleOutcome outcome) const {
  MG_CHECK(outcome != fn::LossScaleOutcome::AtFloor, Error,
           "GradScaler: gradients are inf/NaN with the scale already at its floor min_scale = ",
           options_.min_scale.value_or(0.0), " (iteration ", state_.iterations, ")",
           "\n  hint: lower the learning rate, clip gradients, or train in bf16");
  MG_CHECK(outcome != fn::LossScaleOutcome::TooManySkips, Error, "GradScaler: gradients were inf/NaN for ",
           state_.consecutive_skips, " consecutive steps; scale fell to ", state_.scale,
           "\n  hint: lower the learning rate, clip gradients, or train in bf16");
}

GradScaler::PerOptimizer& GradScaler::entry(const optim::Optimizer& opt) { return per_optimizer_[&opt]; }

void GradScaler::unscale_(optim::Optimizer& opt) {
  if (!options_.enabled) return;
  check_no_f16_in_place(opt, "GradScaler::unscale_");  // before the iteration records this optimizer
  PerOptimizer& e = entry(opt);
  MG_CHECK(e.stage != Stage::Stepped, Error, "GradScaler::unscale_: called after step() for this ", opt.name(),
           " optimizer in this iteration (step() unscales itself)",
           "\n  hint: call unscale_ before step() (to clip), or not at all; update() starts the next iteration");
  MG_CHECK(e.stage == Stage::Ready, Error, "GradScaler::unscale_: already called for this ", opt.name(),
           " optimizer since the last update()",
           "\n  hint: call unscale_ at most once per optimizer per iteration, before step(); update() starts the next");
  e.checked = has_any_grad(opt);
  const Device device = opt.parameters().front().device();
  if (use_device(device)) {
    // The fused device pass: the flag and the counts stay on the device.
    e.counts = zeros({3}, {.dtype = DType::I64, .device = device});
    e.found_inf = zeros({1}, {.dtype = DType::F32, .device = device});
    int64_t values = 0;
    const bool fused = unscale_optimizer_grads_fused(
        opt, {.scale = device_state_.data<double>(), .found_inf = e.found_inf, .counts = e.counts.data<int64_t>()},
        &values);
    // The fused pass declines only while a non-finite reducer without a device path is installed
    // (DistributedDataParallel's has one: the flag's all-reduce), whose host-side count the
    // sync-free device scaler cannot feed.
    MG_CHECK(fused, NotImplementedError, "GradScaler::unscale_: the scaler on ", device.str(),
             " keeps its found-inf flag on the device, but the installed non-finite reducer can only agree on a "
             "host count",
             "\n  hint: give the reducer a device path (amp::NonfiniteReducer::flag), as DistributedDataParallel's "
             "has");
    e.stats = StepStats{.values = values};
    e.stage = Stage::Unscaled;
    last_stats_[&opt] = {e.stats, e.counts};
    return;
  }
  // Reciprocal in f64, used in f32 as the kernels do (PyTorch: scale.double().reciprocal().float()).
  pull();
  e.stats = unscale_optimizer_grads(opt, 1.0 / state_.scale);
  e.stage = Stage::Unscaled;
  last_stats_[&opt] = {e.stats, Tensor()};
}

bool GradScaler::step(optim::Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return true;
  }
  check_no_f16_in_place(opt, "GradScaler::step");  // before the iteration records this optimizer
  // No gradient at all (checked before the iteration records this optimizer): nothing was checked
  // for inf, so a step would count as a clean iteration (and grow the scale) having learned
  // nothing. PyTorch refuses it ("No inf checks were recorded").
  MG_CHECK(has_any_grad(opt), Error, "GradScaler::step: no parameter of this ", opt.name(),
           " optimizer has a gradient, so there is nothing to check for inf/NaN or to step",
           "\n  hint: check that the loss depends on the optimizer's parameters and that backward ran before step()");
  PerOptimizer& e = entry(opt);
  MG_CHECK(e.stage != Stage::Stepped, Error, "GradScaler::step: already called for this ", opt.name(),
           " optimizer since the last update()\n  hint: call update() once per iteration after every step()");
  if (e.stage == Stage::Ready) unscale_(opt);
  e.stage = Stage::Stepped;
  if (e.found_inf.defined()) {
    opt.step_unless_found_inf(e.found_inf);  // the device decides; opt.last_step_skipped() tells when asked
    return true;
  }
  if (e.stats.found_inf()) {
    // Skipped through the optimizer's own gate, so opt.last_step_skipped() says so, as on CUDA.
    opt.step_unless_found_inf(full({1}, 1.0, {.dtype = DType::F32}));
    return false;
  }
  opt.step();
  return true;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!options_.enabled) return;
  // Checked before anything changes: a refused value leaves the iteration to a correct update().
  MG_CHECK(!new_scale || (std::isfinite(*new_scale) && *new_scale > 0), Error,
           "GradScaler::update: new_scale must be positive and finite, got ", new_scale.value_or(0.0));
  MG_CHECK(!per_optimizer_.empty() || new_scale, Error,
           "GradScaler::update: no optimizer was unscaled or stepped since the last update()",
           "\n  hint: call scaler.step(optimizer) before scaler.update()");
  // unscale_ of an optimizer without gradients checked nothing: an update would count a clean
  // iteration (and grow the scale) having learned nothing. PyTorch: "No inf checks were recorded".
  // Nothing was unscaled either, so the iteration is dropped and the next one starts clean.
  if (!new_scale && std::none_of(per_optimizer_.begin(), per_optimizer_.end(), [](const auto& p) { return p.second.checked; })) {
    per_optimizer_.clear();
    throw Error("GradScaler::update: no inf/NaN check was recorded since the last update(): the optimizers unscaled "
                "had no gradient\n  hint: check that the loss depends on the optimizer's parameters and that "
                "backward ran before unscale_()");
  }
  if (device_) {
    // The iteration's flag: any optimizer's (a device max, no host read).
    NoGradGuard no_grad;
    Tensors flags;
    for (const auto& [opt, e] : per_optimizer_) {
      if (e.found_inf.defined()) flags.push_back(e.found_inf);
    }
    if (flags.size() == 1) found_inf_.copy_(flags.front());
    else if (!flags.empty()) found_inf_.copy_(reshape(amax(cat(flags)), {1}));
    // The iteration's optimizers are consumed: a read below that raises (a deferred device check,
    // cuda/host/device_check_report.h) must not leave them marked as stepped.
    per_optimizer_.clear();
    if (!new_scale) {
      run_device_update();
      return;
    }
    // An explicit new scale: decided on the host (one read), then the state goes back.
    pull();
    const bool found_inf = found_inf_.item<float>() != 0.0f;
    found_inf_.zero_();
    advance(found_inf, new_scale);
    push();
    return;
  }
  bool found_inf = false;
  for (const auto& [opt, e] : per_optimizer_) found_inf |= e.stats.found_inf();
  advance(found_inf, new_scale);
}

void GradScaler::update_from(bool found_inf, std::optional<double> new_scale) {
  if (!options_.enabled) return;
  MG_CHECK(per_optimizer_.empty(), Error,
           "GradScaler::update_from: optimizers were unscaled or stepped through this scaler; call update() instead");
  pull();
  advance(found_inf, new_scale);
  if (device_) push();
}

Tensor GradScaler::unscale_to_flag(optim::Optimizer& opt, bool accumulate) {
  if (!options_.enabled || !device_) return Tensor();
  Tensors all = opt.parameters();
  for (const optim::MasterPair& m : opt.master_pairs()) all.push_back(m.model);
  for (const Tensor& t : all) {
    if (t.device() != *device_) return Tensor();  // the kernels would read this scaler's state from another device
  }
  const Tensor flag = zeros({1}, {.dtype = DType::F32, .device = *device_});
  const Tensor counts = zeros({3}, {.dtype = DType::I64, .device = *device_});
  int64_t values = 0;
  if (!unscale_optimizer_grads_fused(opt, {.scale = device_state_.data<double>(), .found_inf = flag, .counts = counts.data<int64_t>()},
                                     &values, accumulate)) {
    return Tensor();
  }
  last_stats_[&opt] = {StepStats{.values = values}, counts};
  return flag;
}

void GradScaler::update_from(const Tensor& found_inf) {
  if (!options_.enabled) return;
  MG_CHECK(per_optimizer_.empty(), Error,
           "GradScaler::update_from: optimizers were unscaled or stepped through this scaler; call update() instead");
  MG_CHECK(found_inf.defined() && found_inf.dtype() == DType::F32 && found_inf.numel() == 1, Error,
           "GradScaler::update_from: expected a one-element f32 flag, got ",
           found_inf.defined() ? describe(found_inf) : "undefined");
  MG_CHECK(device_ && found_inf.device() == *device_, DeviceError, "GradScaler::update_from: the flag is on ",
           found_inf.device().str(), " but the scaler's state is ", device_ ? "on " + device_->str() : "on the host",
           "\n  hint: pass a device flag from unscale_to_flag, or update_from(bool)");
  NoGradGuard no_grad;
  found_inf_.copy_(reshape(found_inf, {1}));  // the update kernel clears its flag; the caller's stays
  run_device_update();
}

void GradScaler::run_device_update() {
  const fn::LossScaleRule rule = rule_;
  char* base = static_cast<char*>(device_state_.data_ptr());
  multi_tensor_kernels(device_->type)
      ->scale_update(base, &rule, found_inf_.data<float>(), reinterpret_cast<int32_t*>(base + sizeof(state_)), *device_);
  stale_ = true;
}

// The transition itself is fn::loss_scale_update (optim/loss_scale_update.h), shared with the
// CUDA scaler's one-thread kernel; this turns its outcomes into errors.
void GradScaler::advance(bool found_inf, std::optional<double> new_scale) {
  fn::LossScaleOutcome outcome;
  if (new_scale) {
    ++state_.iterations;  // new_scale was checked by update()
    state_.scale = fn::loss_scale_clamp(*new_scale, rule_);  // the growth tracker runs on, as PyTorch's
    outcome = fn::loss_scale_count(state_, rule_, found_inf);
  } else {
    outcome = fn::loss_scale_update(state_, rule_, found_inf);
  }
  // The iteration is over whatever the outcome: an error below leaves a scaler that can go on.
  per_optimizer_.clear();
  if (found_inf && on_skip_) on_skip_(state_.iterations, state_.scale);
  throw_outcome(outcome);
}

StepStats GradScaler::last_stats(const optim::Optimizer& opt) const {
  const auto it = last_stats_.find(&opt);
  if (it == last_stats_.end()) return StepStats{};
  LazyStats& l = it->second;
  if (l.counts.defined()) {
    const Tensor c = contiguous(to(l.counts, Device::cpu()));  // the lazy read: one synchronisation
    const int64_t* v = c.data<int64_t>();
    l.stats.zeros = v[0];
    l.stats.underflowed = v[1];
    l.stats.nonfinite = v[2];
    l.counts = Tensor();
  }
  return l.stats;
}

void GradScaler::graph_capture_begin() {
  graph_captured_ = false;
  graph_refusal_.clear();
  if (!options_.enabled) return;  // scale() and step() are plain pass-throughs
  MG_CHECK(device_.has_value(), Error,
           "GradScaler: cannot be captured into a CUDA graph before its state is on the device"
           "\n  hint: run at least one eager iteration (scale, step, update) on the GPU before capturing");
  MG_CHECK(per_optimizer_.empty(), Error,
           "GradScaler: a CUDA graph capture began in the middle of an iteration (after unscale_/step, before update())",
           "\n  hint: capture whole iterations, from scale() to update()");
  capture_saved_stats_ = last_stats_;
}

void GradScaler::graph_capture_end(bool ok) {
  if (!options_.enabled) return;
  if (!ok) {
    // Abandoned (the step threw): the iteration it began never ran, and its statistics point at
    // graph memory that was never written. Eager iterations go on from the state before it.
    per_optimizer_.clear();
    last_stats_ = capture_saved_stats_;
    capture_saved_stats_.clear();
    return;
  }
  capture_saved_stats_.clear();
  MG_CHECK(per_optimizer_.empty(), Error,
           "GradScaler: the captured step did not end its iteration with update(); every replay would start "
           "from that half-done state\n  hint: call scaler.update() at the end of the captured step");
  graph_stats_ = last_stats_;
  graph_captured_ = true;
}

void GradScaler::graph_replay_check() const {
  MG_CHECK(graph_refusal_.empty(), Error, graph_refusal_);
  if (!options_.enabled) return;
  MG_CHECK(graph_captured_, Error, "GradScaler: replaying a CUDA graph this scaler was not captured into");
  MG_CHECK(per_optimizer_.empty(), Error,
           "GradScaler: a CUDA graph replay began in the middle of an eager iteration (after unscale_/step, before update())");
}

void GradScaler::graph_replay_prepare() {
  if (!options_.enabled) return;
  stale_ = true;  // the replay runs one update on the device state
  last_stats_ = graph_stats_;  // each replay rewrites the captured counts
}

StateDict GradScaler::state_dict() const {
  pull();
  StateDict s;
  const GradScalerOptions& o = options_;
  s.floats["scale"] = state_.scale;
  s.floats["growth_factor"] = o.growth_factor;
  s.floats["backoff_factor"] = o.backoff_factor;
  s.ints["growth_interval"] = o.growth_interval;
  s.ints["hysteresis"] = o.hysteresis;
  s.ints["max_consecutive_skips"] = o.max_consecutive_skips;
  s.ints["enabled"] = o.enabled ? 1 : 0;
  s.ints["dynamic"] = o.dynamic ? 1 : 0;
  if (o.min_scale) s.floats["min_scale"] = *o.min_scale;
  if (o.max_scale) s.floats["max_scale"] = *o.max_scale;
  s.ints["growth_tracker"] = state_.growth_tracker;
  s.ints["hysteresis_left"] = state_.hysteresis_left;
  s.ints["iterations"] = state_.iterations;
  s.ints["skipped"] = state_.skipped;
  s.ints["consecutive_skips"] = state_.consecutive_skips;
  s.ints["last_skip"] = state_.last_skip;
  return s;
}

void GradScaler::load_state_dict(const StateDict& s) {
  const char* who = "GradScaler::load_state_dict";
  GradScalerOptions o;
  o.init_scale = s.float_at(who, "scale");
  o.growth_factor = s.float_at(who, "growth_factor");
  o.backoff_factor = s.float_at(who, "backoff_factor");
  o.growth_interval = s.int_at(who, "growth_interval");
  o.hysteresis = s.int_at(who, "hysteresis");
  o.max_consecutive_skips = s.int_at(who, "max_consecutive_skips");
  o.enabled = s.int_at(who, "enabled") != 0;
  // A disabled scaler's state in an enabled one (a bf16 run's checkpoint resumed in f16) would turn
  // loss scaling off without a word; PyTorch refuses it too. The other way round likewise.
  MG_CHECK(o.enabled == options_.enabled, Error, who, ": the state was saved by ",
           o.enabled ? "an enabled" : "a disabled", " GradScaler but this one is ", options_.enabled ? "enabled" : "disabled",
           "\n  hint: construct the scaler with .enabled = ", o.enabled ? "true" : "false",
           " to resume that state, or do not load it (a bf16 run needs no loss scaling; an f16 run does)");
  o.dynamic = s.ints.count("dynamic") ? s.ints.at("dynamic") != 0 : options_.dynamic;
  if (s.floats.count("min_scale")) o.min_scale = s.floats.at("min_scale");
  if (s.floats.count("max_scale")) o.max_scale = s.floats.at("max_scale");
  const int64_t last = s.int_at(who, "last_skip");
  GradScaler loaded(o);  // validates the options before anything changes; clamps the scale
  loaded.state_.growth_tracker = s.int_at(who, "growth_tracker");
  loaded.state_.hysteresis_left = s.int_at(who, "hysteresis_left");
  loaded.state_.iterations = s.int_at(who, "iterations");
  loaded.state_.skipped = s.int_at(who, "skipped");
  loaded.state_.consecutive_skips = s.int_at(who, "consecutive_skips");
  loaded.state_.last_skip = last >= 0 ? last : -1;
  const fn::LossScaleState& ls = loaded.state_;
  MG_CHECK(ls.growth_tracker >= 0 && ls.iterations >= 0 && ls.skipped >= 0 && ls.consecutive_skips >= 0, Error, who,
           ": the counters must be >= 0, got growth_tracker ", ls.growth_tracker, ", iterations ", ls.iterations,
           ", skipped ", ls.skipped, ", consecutive_skips ", ls.consecutive_skips);
  MG_CHECK(ls.skipped <= ls.iterations && ls.consecutive_skips <= ls.skipped && ls.last_skip <= ls.iterations, Error, who,
           ": inconsistent counters: ", ls.skipped, " skipped and ", ls.consecutive_skips, " consecutive skips (the last at ",
           ls.last_skip, ") in ", ls.iterations, " iterations");
  MG_CHECK(ls.hysteresis_left >= 1 && ls.hysteresis_left <= o.hysteresis, Error, who, ": hysteresis_left must be in [1, ",
           o.hysteresis, "], got ", ls.hysteresis_left);
  MG_CHECK(per_optimizer_.empty(), Error, who, ": called in the middle of an iteration (after unscale_/step, before update())");
  loaded.on_skip_ = std::move(on_skip_);
  // A captured CUDA graph holds the device buffers' addresses and the update rule by value: the
  // loaded state goes into the same buffers (in place, no wait), and a graph whose rule changed
  // may not replay (its kernels would apply the old one, or read buffers a disabled scaler freed).
  if (!graph_refusal_.empty()) {
    loaded.graph_refusal_ = graph_refusal_;  // refused until captured again
  } else if (graph_captured_) {
    if (loaded.options_.enabled && loaded.rule_ == rule_) {
      loaded.graph_captured_ = true;
      loaded.graph_stats_ = graph_stats_;
    } else {
      loaded.graph_refusal_ =
          "GradScaler: load_state_dict changed its options (enabled, dynamic, growth_factor, backoff_factor, "
          "growth_interval, hysteresis, min/max_scale, max_consecutive_skips) after the CUDA graph was captured; "
          "the graph would replay the old ones\n  hint: capture again after loading";
    }
  }
  if (device_ && loaded.options_.enabled) {
    loaded.device_ = device_;
    loaded.device_state_ = device_state_;
    loaded.found_inf_ = found_inf_;
    loaded.push();
  }
  *this = std::move(loaded);
}

}  // namespace mg::amp
