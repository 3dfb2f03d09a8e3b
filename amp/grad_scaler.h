// GradScaler: dynamic loss scaling (PyTorch's torch.amp.GradScaler, plus Apex's max scale,
// DeepSpeed's hysteresis, step statistics and a refusal to train silently forever on inf/NaN).
//
//   mg::amp::GradScaler scaler;                       // init 2^16, x2 after 2000 clean steps, x0.5 on inf
//   scaler.scale(loss).backward();
//   scaler.unscale_(opt);                             // optional: clip the real gradients
//   mg::optim::clip_grad_norm_(params, 1.0);
//   bool stepped = scaler.step(opt);                  // skipped when a gradient is inf/NaN
//   scaler.update();
//
// State machine per iteration: for each optimizer, unscale_ at most once, then step at most
// once; update() once after all optimizers stepped. update() backs off when any optimizer saw
// inf/NaN (after `hysteresis` such iterations), grows after `growth_interval` clean iterations in
// a row, and clamps to [min_scale, max_scale]. Disabled (enabled = false): scale() returns the loss,
// step() just steps — the same training loop runs with and without scaling (bf16 needs none).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "mixgrad/amp/unscale.h"
#include "mixgrad/core/state_dict.h"
#include "mixgrad/core/tensor.h"
#include "mixgrad/optim/optimizer.h"

namespace mg::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;        // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;     // clean iterations in a row before growing
  std::optional<double> min_scale;    // floor (Apex's min_loss_scale); none: no floor
  std::optional<double> max_scale;    // ceiling (Apex: 2^24); none: no ceiling
  int64_t hysteresis = 1;             // overflowing iterations tolerated before a backoff (DeepSpeed); 1: back off every time
  int64_t max_consecutive_skips = 50; // this many skipped iterations in a row raise an error (0: never)
  bool enabled = true;
};

// What the last unscale of an optimizer found (all gradients of that optimizer).
using StepStats = UnscaleStats;

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (in the loss's dtype; f32 losses stay f32). Disabled: the loss itself.
  Tensor scale(const Tensor& loss) const;
  // Divides the gradients of `opt` by the scale in one pass and records inf/NaN and statistics.
  // Once per optimizer per iteration: a second call before update() is an error.
  void unscale_(optim::Optimizer& opt);
  // Unscales (if not done yet) and calls opt.step() unless a gradient of `opt` was inf/NaN.
  // Returns whether the optimizer stepped. Once per optimizer per iteration.
  bool step(optim::Optimizer& opt);
  // Adjusts the scale from this iteration's outcome (or sets `new_scale`) and resets the
  // per-iteration state. Call once per iteration, after every step().
  void update(std::optional<double> new_scale = std::nullopt);
  // The same transition from an outcome found elsewhere (amp::scale_loss checks the gradients
  // itself); not to be mixed with unscale_/step in one iteration.
  void update_from(bool found_inf, std::optional<double> new_scale = std::nullopt);

  double get_scale() const { return scale_; }
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  // ---- skipped steps are part of the API ----
  int64_t iterations() const { return iterations_; }          // update() calls
  int64_t skipped_iterations() const { return skipped_; }     // iterations with inf/NaN
  int64_t consecutive_skips() const { return consecutive_skips_; }
  std::optional<int64_t> last_skip_iteration() const { return last_skip_; }
  // Called from update() on every skipped iteration with (iteration, new scale).
  void on_skip(std::function<void(int64_t, double)> callback) { on_skip_ = std::move(callback); }
  // Statistics of the last unscale of `opt` in this iteration (or the last one), zeros if none.
  StepStats last_stats(const optim::Optimizer& opt) const;

  // ints "iterations", "growth_tracker", "hysteresis_left", "skipped", "consecutive_skips",
  // "last_skip" (-1: none), "enabled"; floats "scale" and every option.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct PerOptimizer {
    Stage stage = Stage::Ready;
    StepStats stats;
  };
  PerOptimizer& entry(const optim::Optimizer& opt);
  void check_options() const;
  void advance(bool found_inf, std::optional<double> new_scale);

  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t hysteresis_left_;
  int64_t iterations_ = 0, skipped_ = 0, consecutive_skips_ = 0;
  std::optional<int64_t> last_skip_;
  std::map<const optim::Optimizer*, PerOptimizer> per_optimizer_;
  std::map<const optim::Optimizer*, StepStats> last_stats_;
  std::function<void(int64_t, double)> on_skip_;
};

}  // namespace mg::amp
