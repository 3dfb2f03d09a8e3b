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
// a row, and clamps to [min_scale, max_scale]. The scale is in [min_scale, max_scale] at every
// moment: init_scale is clamped at construction (Apex starts at min(max_loss_scale, init)), the
// loaded scale in load_state_dict, and every update() (an explicit new_scale too).
// unscale_ refuses f16 gradients of parameters without f32 master weights (PyTorch does too):
// dividing them in place in f16 drops the small values the scale had lifted (amp/unscale.h).
// Disabled (enabled = false): scale() returns the loss, step() just steps — the same training loop
// runs with and without scaling (bf16 needs none).
// On CUDA (a device with fused multi-tensor kernels, core/multi_tensor_kernels.h) the scaler moves
// its state to the device the first time it meets a device loss or optimizer: unscale_ writes a
// device found-inf flag and device statistics, step() hands the flag to the optimizer's fused
// kernels (which change nothing when it is set), update() runs the same transition
// (fn::loss_scale_update) in a one-thread kernel. Nothing in an iteration reads the device; the
// state is read when asked (get_scale, the counters, last_stats, state_dict: one synchronisation
// each time something changed), and the two errors of the state machine (inf/NaN at the min_scale
// floor, too many consecutive skips) and the on_skip callback happen at that read.
// CUDA graphs: a GradScaler is a GraphParticipant (core/graph_participant.h). A captured iteration
// (scale, unscale_, step, update) has only device decisions; before each replay the scaler marks
// its device state changed and re-arms the lazy statistics, so get_scale() and the counters read
// the replayed iterations. Capture needs the state on the device already (one eager iteration)
// and an iteration that ends with update(); update(new_scale) inside a capture reads the device
// (a synchronisation) and is refused.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "mixgrad/amp/unscale.h"
#include "mixgrad/core/state_dict.h"
#include "mixgrad/core/tensor.h"
#include "mixgrad/optim/loss_scale_update.h"
#include "mixgrad/optim/optimizer.h"

namespace mg::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;        // 2^16; clamped to [min_scale, max_scale]
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;     // clean iterations in a row before growing
  std::optional<double> min_scale;    // floor (Apex's min_loss_scale); none: no floor
  std::optional<double> max_scale;    // ceiling (Apex: 2^24); none: no ceiling
  int64_t hysteresis = 1;             // overflowing iterations tolerated before a backoff (DeepSpeed); 1: back off every time
  int64_t max_consecutive_skips = 50; // this many skipped iterations in a row raise an error (0: never)
  bool dynamic = true;                // false: a static scale (Apex's loss_scale = 128): init_scale is
                                      // kept, update() only counts skipped iterations
  bool enabled = true;
};

// What the last unscale of an optimizer found (all gradients of that optimizer).
using StepStats = UnscaleStats;

class GradScaler : public GraphParticipant {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale, in f32 for an f16/bf16 loss (as PyTorch's f32 scale promotes it), in f64 for an
  // f64 one. Disabled: the loss itself.
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

  // ---- the pieces amp::scale_loss (the Apex front door) builds its sync-free device path from ----
  // Moves the state to `device` when that device has fused multi-tensor kernels (CUDA; once, as
  // scale() does); true when the state is there. Always false on the CPU.
  bool use_device(Device device) const;
  // The fused device unscale of `opt`'s gradients with this scaler's device scale (into the f32
  // master gradients with master weights, adding to them when `accumulate`). Returns the device
  // found-inf flag ([1] f32) and keeps the counts for last_stats(opt), with no host read; returns
  // an undefined tensor, doing nothing, when the state is not on a device, a parameter of `opt` is
  // on another device, or `opt` cannot take the fused path (amp then unscales on the host).
  // Outside unscale_/step's iteration bookkeeping.
  Tensor unscale_to_flag(optim::Optimizer& opt, bool accumulate);
  // update_from with the outcome as a device flag (nonzero: inf/NaN): the one-thread update
  // kernel, no host read. The state must be on the flag's device.
  void update_from(const Tensor& found_inf);

  // The loss scale; 1 for a disabled scaler (as PyTorch's), whose scale() passes the loss through.
  double get_scale() const { return options_.enabled ? host().scale : 1.0; }
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  // ---- skipped steps are part of the API ----
  int64_t iterations() const { return host().iterations; }         // update() calls
  int64_t skipped_iterations() const { return host().skipped; }    // iterations with inf/NaN
  int64_t consecutive_skips() const { return host().consecutive_skips; }
  std::optional<int64_t> last_skip_iteration() const {
    return host().last_skip < 0 ? std::nullopt : std::optional<int64_t>(host().last_skip);
  }
  // Whether the state lives on a device (see the top of this file) and which.
  bool on_device() const { return device_.has_value(); }
  std::optional<Device> device() const { return device_; }
  // Called from update() on every skipped iteration with (iteration, new scale).
  void on_skip(std::function<void(int64_t, double)> callback) { on_skip_ = std::move(callback); }
  // Statistics of the last unscale of `opt` in this iteration (or the last one), zeros if none.
  StepStats last_stats(const optim::Optimizer& opt) const;

  // ints "iterations", "growth_tracker", "hysteresis_left", "skipped", "consecutive_skips",
  // "last_skip" (-1: none), "enabled", "dynamic"; floats "scale" and every option. A state without
  // "dynamic" (saved before it existed) keeps this scaler's setting.
  StateDict state_dict() const;
  // Replaces options and state (validated first: on an error nothing changes). On the device the
  // loaded state is written into the same device buffer, so a captured CUDA graph replays on from
  // it; a graph captured with other options (growth factor, interval, bounds, enabled) is refused
  // from its next replay on, until captured again.
  void load_state_dict(const StateDict& state);

  // ---- GraphParticipant (see the note at the top) ----
  void graph_capture_begin() override;
  void graph_capture_end(bool ok) override;
  void graph_replay_check() const override;
  void graph_replay_prepare() override;

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct PerOptimizer {
    Stage stage = Stage::Ready;
    StepStats stats;     // host statistics (CPU), or only `values` on the device
    Tensor counts;       // on the device: [3] i64 {zeros, underflowed, nonfinite}
    Tensor found_inf;    // on the device: [1] f32, this optimizer's flag
    bool checked = false;  // some gradient was checked for inf/NaN (unscale_ of no gradient checks none)
  };
  // Statistics that may still be on the device.
  struct LazyStats {
    StepStats stats;
    Tensor counts;  // defined until read
  };
  PerOptimizer& entry(const optim::Optimizer& opt);
  void check_options() const;
  void advance(bool found_inf, std::optional<double> new_scale);
  // The one-thread update kernel on found_inf_ (which it clears); the state is read lazily.
  void run_device_update();
  // Copies the host state to the device (state_ -> device_state_).
  void push() const;
  // The state, read from the device first when it changed there (throws the deferred errors).
  const fn::LossScaleState& host() const;
  void pull() const;
  // Turns a non-Ok outcome into the scaler's error.
  void throw_outcome(fn::LossScaleOutcome outcome) const;

  GradScalerOptions options_;
  fn::LossScaleRule rule_;    // options_ as the shared transition reads them
  mutable fn::LossScaleState state_;  // scale, growth tracker, hysteresis and skip counters (host copy)
  std::map<const optim::Optimizer*, PerOptimizer> per_optimizer_;
  mutable std::map<const optim::Optimizer*, LazyStats> last_stats_;
  // ---- device mode ----
  // (mutable: scale() is const and may be the first to meet the device)
  mutable std::optional<Device> device_;
  mutable Tensor device_state_;  // [8] f64: an fn::LossScaleState (scale first), then the i32
                                 // fn::LossScaleOutcome of the updates since the last read
  mutable Tensor found_inf_;     // [1] f32: the iteration's flag (any optimizer's), cleared by update
  mutable bool stale_ = false;   // the device state changed since the last read
  std::function<void(int64_t, double)> on_skip_;
  // ---- CUDA graphs ----
  bool graph_captured_ = false;
  std::map<const optim::Optimizer*, LazyStats> graph_stats_;  // the captured iteration's device counts
  std::map<const optim::Optimizer*, LazyStats> capture_saved_stats_;  // last_stats_ at capture_begin (abandon)
  std::string graph_refusal_;  // why a captured graph can no longer replay (load_state_dict), or ""
};

}  // namespace mg::amp
