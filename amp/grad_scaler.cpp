#include "mixgrad/amp/grad_scaler.h"

#include <algorithm>
#include <cmath>

#include "mixgrad/ops/ops.h"

namespace mg::amp {

GradScaler::GradScaler(GradScalerOptions o) : options_(o), scale_(o.init_scale), hysteresis_left_(o.hysteresis) {
  check_options();
}

void GradScaler::check_options() const {
  const GradScalerOptions& o = options_;
  MG_CHECK(std::isfinite(o.init_scale) && o.init_scale > 0, Error, "GradScaler: init_scale must be positive and finite, got ",
           o.init_scale);
  MG_CHECK(o.growth_factor > 1, Error, "GradScaler: growth_factor must be > 1, got ", o.growth_factor);
  MG_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1, Error, "GradScaler: backoff_factor must be in (0, 1), got ",
           o.backoff_factor);
  MG_CHECK(o.growth_interval >= 1, Error, "GradScaler: growth_interval must be >= 1, got ", o.growth_interval);
  MG_CHECK(o.hysteresis >= 1, Error, "GradScaler: hysteresis must be >= 1, got ", o.hysteresis);
  MG_CHECK(o.max_consecutive_skips >= 0, Error, "GradScaler: max_consecutive_skips must be >= 0, got ",
           o.max_consecutive_skips);
  MG_CHECK(!o.min_scale || *o.min_scale > 0, Error, "GradScaler: min_scale must be positive, got ", *o.min_scale);
  MG_CHECK(!o.min_scale || !o.max_scale || *o.min_scale <= *o.max_scale, Error, "GradScaler: min_scale (",
           *o.min_scale, ") exceeds max_scale (", *o.max_scale, ")");
}

Tensor GradScaler::scale(const Tensor& loss) const {
  MG_CHECK(loss.defined() && is_floating(loss.dtype()), DTypeError, "GradScaler::scale: expected a floating loss, got ",
           loss.defined() ? describe(loss) : "undefined");
  if (!options_.enabled) return loss;
  return loss * scale_;
}

GradScaler::PerOptimizer& GradScaler::entry(const optim::Optimizer& opt) { return per_optimizer_[&opt]; }

void GradScaler::unscale_(optim::Optimizer& opt) {
  if (!options_.enabled) return;
  PerOptimizer& e = entry(opt);
  MG_CHECK(e.stage == Stage::Ready, Error, "GradScaler::unscale_: already called for this ", opt.name(),
           " optimizer since the last update()",
           "\n  hint: call unscale_ at most once per optimizer per iteration, before step(); update() starts the next");
  // Reciprocal in f64, used in f32 as the kernels do (PyTorch: scale.double().reciprocal().float()).
  e.stats = unscale_optimizer_grads(opt, 1.0 / scale_);
  e.stage = Stage::Unscaled;
  last_stats_[&opt] = e.stats;
}

bool GradScaler::step(optim::Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return true;
  }
  PerOptimizer& e = entry(opt);
  MG_CHECK(e.stage != Stage::Stepped, Error, "GradScaler::step: already called for this ", opt.name(),
           " optimizer since the last update()\n  hint: call update() once per iteration after every step()");
  if (e.stage == Stage::Ready) unscale_(opt);
  e.stage = Stage::Stepped;
  if (e.stats.found_inf()) return false;
  opt.step();
  return true;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!options_.enabled) return;
  bool found_inf = false;
  for (const auto& [opt, e] : per_optimizer_) found_inf |= e.stats.found_inf();
  MG_CHECK(!per_optimizer_.empty() || new_scale, Error,
           "GradScaler::update: no optimizer was unscaled or stepped since the last update()",
           "\n  hint: call scaler.step(optimizer) before scaler.update()");
  advance(found_inf, new_scale);
}

void GradScaler::update_from(bool found_inf, std::optional<double> new_scale) {
  if (!options_.enabled) return;
  MG_CHECK(per_optimizer_.empty(), Error,
           "GradScaler::update_from: optimizers were unscaled or stepped through this scaler; call update() instead");
  advance(found_inf, new_scale);
}

void GradScaler::advance(bool found_inf, std::optional<double> new_scale) {
  const GradScalerOptions& o = options_;
  ++iterations_;
  if (new_scale) {
    MG_CHECK(std::isfinite(*new_scale) && *new_scale > 0, Error, "GradScaler::update: new_scale must be positive and finite, got ",
             *new_scale);
    scale_ = *new_scale;
    growth_tracker_ = 0;
  } else if (found_inf) {
    growth_tracker_ = 0;
    if (hysteresis_left_ > 1) {
      --hysteresis_left_;  // tolerated: skip the step but keep the scale
    } else {
      const bool at_floor = o.min_scale && scale_ <= *o.min_scale;
      MG_CHECK(!at_floor, Error, "GradScaler: gradients are inf/NaN with the scale already at its floor min_scale = ",
               *o.min_scale, " (iteration ", iterations_, ")",
               "\n  hint: lower the learning rate, clip gradients, or train in bf16");
      scale_ *= o.backoff_factor;
      if (o.min_scale) scale_ = std::max(scale_, *o.min_scale);
      hysteresis_left_ = o.hysteresis;
    }
  } else if (++growth_tracker_ >= o.growth_interval) {
    scale_ *= o.growth_factor;
    if (o.max_scale) scale_ = std::min(scale_, *o.max_scale);
    growth_tracker_ = 0;
    hysteresis_left_ = o.hysteresis;
  }
  if (found_inf) {
    ++skipped_;
    ++consecutive_skips_;
    last_skip_ = iterations_;
    if (on_skip_) on_skip_(iterations_, scale_);
  } else {
    consecutive_skips_ = 0;
  }
  per_optimizer_.clear();
  MG_CHECK(o.max_consecutive_skips == 0 || consecutive_skips_ < o.max_consecutive_skips, Error, "GradScaler: gradients were inf/NaN for ",
           consecutive_skips_, " consecutive steps; scale fell to ", scale_,
           "\n  hint: lower the learning rate, clip gradients, or train in bf16");
}

StepStats GradScaler::last_stats(const optim::Optimizer& opt) const {
  const auto it = last_stats_.find(&opt);
  return it == last_stats_.end() ? StepStats{} : it->second;
}

StateDict GradScaler::state_dict() const {
  StateDict s;
  const GradScalerOptions& o = options_;
  s.floats["scale"] = scale_;
  s.floats["growth_factor"] = o.growth_factor;
  s.floats["backoff_factor"] = o.backoff_factor;
  s.ints["growth_interval"] = o.growth_interval;
  s.ints["hysteresis"] = o.hysteresis;
  s.ints["max_consecutive_skips"] = o.max_consecutive_skips;
  s.ints["enabled"] = o.enabled ? 1 : 0;
  if (o.min_scale) s.floats["min_scale"] = *o.min_scale;
  if (o.max_scale) s.floats["max_scale"] = *o.max_scale;
  s.ints["growth_tracker"] = growth_tracker_;
  s.ints["hysteresis_left"] = hysteresis_left_;
  s.ints["iterations"] = iterations_;
  s.ints["skipped"] = skipped_;
  s.ints["consecutive_skips"] = consecutive_skips_;
  s.ints["last_skip"] = last_skip_.value_or(-1);
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
  if (s.floats.count("min_scale")) o.min_scale = s.floats.at("min_scale");
  if (s.floats.count("max_scale")) o.max_scale = s.floats.at("max_scale");
  const int64_t last = s.int_at(who, "last_skip");
  GradScaler loaded(o);  // validates the options before anything changes
  loaded.growth_tracker_ = s.int_at(who, "growth_tracker");
  loaded.hysteresis_left_ = s.int_at(who, "hysteresis_left");
  loaded.iterations_ = s.int_at(who, "iterations");
  loaded.skipped_ = s.int_at(who, "skipped");
  loaded.consecutive_skips_ = s.int_at(who, "consecutive_skips");
  if (last >= 0) loaded.last_skip_ = last;
  MG_CHECK(per_optimizer_.empty(), Error, who, ": called in the middle of an iteration (after unscale_/step, before update())");
  loaded.on_skip_ = std::move(on_skip_);
  *this = std::move(loaded);
}

}  // namespace mg::amp
