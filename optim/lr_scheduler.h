// Learning-rate schedulers, as torch.optim.lr_scheduler: each owns a reference to an optimizer and
// writes the "lr" option of every param group on step(). Call scheduler.step() after
// optimizer.step(), once per iteration (or epoch). Construction performs step 0 (sets the initial
// lrs), as PyTorch does; last_epoch() counts the steps since.
//
// The one decision a reader must know: the schedulers keep nothing in themselves that the
// optimizer's groups can hold. Like PyTorch they record "initial_lr" (and OneCycle its
// "max_lr"/"min_lr"/"max_momentum"/"base_momentum") in the group options, so these travel with
// the optimizer's state dict; the scheduler's own state dict holds last_epoch and the lrs.
//
//   optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9});
//   optim::WarmupCosineLR sched(opt, {.warmup_steps = 100, .total_steps = 10000, .min_lr = 1e-5});
//   for (...) { ...; opt.step(); sched.step(); }
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mixgrad/core/state_dict.h"
#include "mixgrad/optim/optimizer.h"

namespace mg::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances last_epoch by one and writes the new lr into every group.
  void step();
  // The lr of every group as set by the last step().
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  // The initial lr of every group ("initial_lr" when the scheduler was created).
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  const std::string& name() const { return name_; }
  Optimizer& optimizer() const { return optimizer_; }
  // Whether the optimizer applied an update since this scheduler's last step() (a GradScaler or
  // amp overflow skip leaves Optimizer::step_count() unchanged; on CUDA, where the device decides
  // the skip, this reads its counters: one synchronisation per call). Schedules count iterations
  // either way, as PyTorch's do; to count only applied updates, step the scheduler when this is true:
  //   if (sched.optimizer_stepped()) sched.step();
  bool optimizer_stepped() const { return optimizer_.stepped_since(mark_); }

  // strings "scheduler" (the name); ints "last_epoch", "num_groups", "optimizer_steps" (the
  // optimizer's update count at the last step(), so optimizer_stepped() holds across a resume);
  // floats "base_lr.<g>", "last_lr.<g>". The schedule's configuration is not stored: construct the scheduler with the
  // same options, then load. Loading checks the name and the number of groups (nothing is changed
  // on a mismatch) and does not write the groups' lr (the optimizer's state dict restores it).
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);
  // Throws as load_state_dict would (a composite: for every part) and changes nothing.
  void check_state_dict(const StateDict& state) const;

 protected:
  // What a scheduler holding others adds to its state dict, and reads back (SequentialLR).
  virtual void save_children(StateDict&) const {}
  virtual void load_children(const StateDict&) {}
  virtual void check_children(const StateDict&) const {}
  // Records "initial_lr" = "lr" in every group that has none, and the base lrs.
  LRScheduler(Optimizer& optimizer, std::string name);
  // Step 0: called at the end of the most-derived constructor.
  void initial_step();
  // Whether the step running now is a step 0 on the groups' initial lrs (the constructor's, or a
  // SequentialLR's start), PyTorch's _is_initial: MultiplicativeLR leaves the lr alone then.
  bool in_initial_step() const { return initial_step_running_; }
  // Whether a SequentialLR reaching this scheduler's milestone resets the lrs to the initial ones
  // before its step 0 (true: PyTorch's closed-form restart, which for every scheduler with a
  // closed form or one computed from the base lrs is the same). False for the schedulers PyTorch
  // steps from the current lr there (its get_lr at epoch 0): MultiplicativeLR, SWALR.
  virtual bool restarts_from_initial_lr() const { return true; }
  // The lr of every group for last_epoch().
  virtual std::vector<double> compute_lrs() = 0;

  // What restart() does between resetting the lrs and step 0: a chain takes its parts' step 0
  // there, on top of one another (PyTorch's _initial_step of each part).
  virtual void restart_parts() {}

  Optimizer& optimizer_;
  std::vector<double> base_lrs_;

 private:
  friend class SequentialLR;
  friend class ChainedScheduler;
  // Starts the schedule again: every group's lr back to its initial lr, then step 0 (what
  // PyTorch's SequentialLR does to the scheduler it switches to).
  void restart();
  // Step 0 again on the groups' current lrs (a chain's part).
  void rewind() {
    last_epoch_ = -1;
    step();
  }
  std::string name_;
  int64_t last_epoch_ = -1;
  bool initial_step_running_ = false;
  Optimizer::StepMark mark_;  // where the optimizer was at the last step()
  std::vector<double> last_lr_;
};

// lr *= gamma every step_size steps (PyTorch's StepLR, chainable form).
struct StepLROptions {
  int64_t step_size = 1;  // > 0
  double gamma = 0.1;
};
class StepLR final : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, StepLROptions options);

 protected:
  std::vector<double> compute_lrs() override;

 private:
  StepLROptions options_;
};

// lr *= gamma at each milestone (a milestone listed k times multiplies by gamma^k), as
// PyTorch's MultiStepLR.
struct MultiStepLROptions {
  std::vector<int64_t> milestones;  // non-decreasing, >= 0
  double gamma = 0.1;
};
class MultiStepLR final : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, MultiStepLROptions options);

 protected:
  std::vector<double> compute_lrs() override;

 private:
  MultiStepLROptions options_;
};

// lr *= gamma every step (PyTorch's ExponentialLR, chainable form).
struct ExponentialLROptions {
  double gamma = 0.9;  // >= 0
};
class ExponentialLR final : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, ExponentialLROptions options);

 protected:
  std::vector<double> compute_lrs() override;

 private:
  ExponentialLROptions options_;
};

// The lr multiplied by a factor going linearly from start_factor to end_factor over total_iters
// steps, then left alone (PyTorch's LinearLR, chainable form: a warmup when start_factor < 1).
struct LinearLROptions {
  double start_factor = 1.0 / 3.0;  // in (0, 1]
  double end_factor = 1.0;          // in [0, 1]
  int64_t total_iters = 5;          // >= 0
};
class LinearLR final : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, LinearLROptions options);

 protected:
  std::vector<double> compute_lrs() override;

 private:
  LinearLROptions options_;
};

// Cosine annealing from the group's lr to eta_min over t_max steps, then back up over the next
// t_max (a period of 2 t_max), as PyTorch's CosineAnnealingLR computes it: in its recursive,
// chainable form, so another scheduler may change the lr in between (the closed form
// eta_min + (base - eta_min) (1 + cos(pi t / t_max)) / 2 when it is alone).
struct CosineAnnealingLROptions {
  int64_t t_max = 1;    // > 0
  double eta_min = 0.0; // >= 0
};
class CosineAnnealingLR final : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, CosineAnnealingLROptions options);

 protected:
  std::vector<double> compute_lrs() override;

 private:
  CosineAnnealingLROptions options_;
};

// lr = initial lr * factor(last_epoch), per group (one function for all groups, or one per
// group), as PyTorch's LambdaLR. The functions are not part of the state dict.
struct LambdaLROptions {
  std::vector<std::function<double(int64_t)>> factors;
};
class LambdaLR final : public LRScheduler {
 public:
  LambdaLR(Optimizer& optimizer, LambdaLROptions options);

 protected:
  std::vector<double> compute_lrs() override;

 private:
  LambdaLROptions options_;
};

// lr *= factor(last_epoch) at every step after step 0, per group (one function for all groups,
// or one per group), as PyTorch's MultiplicativeLR: the chainable cousin of LambdaLR (the factors
// multiply the current lr, not the initial one). Inside a SequentialLR it takes over at its
// milestone from the current lr, multiplied by factor(0), as PyTorch's. The functions are not part
// of the state dict.
struct MultiplicativeLROptions {
  std::vector<std::function<double(int64_t)>> factors;
};
class MultiplicativeLR final : public LRScheduler {
 public:
  MultiplicativeLR(Optimizer& optimizer, MultiplicativeLROptions options);

 protected:
  std::vector<double> compute_lrs() override;
  bool restarts_from_initial_lr() const override { return false; }

 private:
  MultiplicativeLROptions options_;
};

// Linear warmup from 0 to the group's initial lr over warmup_steps, then half a cosine down to
// min_lr at total_steps, min_lr after (t = last_epoch, base = initial lr):
//   t < W:       base * t / W
//   W <= t < T:  min_lr + (base - min_lr) * (1 + cos(pi * (t - W) / (T - W))) / 2
//   t >= T:      min_lr
struct WarmupCosineLROptions {
  int64_t warmup_steps = 0;  // >= 0
  int64_t total_steps = 0;   // >= warmup_steps, > 0
  double min_lr = 0.0;       // >= 0, the same for every group
};
class WarmupCosineLR final : public LRScheduler {
 public:
  WarmupCosineLR(Optimizer& optimizer, WarmupCosineLROptions options);

 protected:
  std::vector<double> compute_lrs() override;

 private:
  WarmupCosineLROptions options_;
};

// BERT's schedule (Hugging Face's get_linear_schedule_with_warmup): linear warmup from 0, then a
// linear decay to 0 at total_steps:
//   t < W:  base * t / W          t >= W:  base * max(0, (T - t) / (T - W))
struct WarmupLinearLROptions {
  int64_t warmup_steps = 0;  // >= 0
  int64_t total_steps = 0;   // >= warmup_steps, > 0
};
class WarmupLinearLR final : public LRScheduler {
 public:
  WarmupLinearLR(Optimizer& optimizer, WarmupLinearLROptions options);

 protected:
  std::vector<double> compute_lrs() override;

 private:
  WarmupLinearLROptions options_;
};

enum class AnnealStrategy { Cos, Linear };

// The 1cycle policy (Smith & Topin 2018) as PyTorch's OneCycleLR: the lr rises from
// max_lr / div_factor to max_lr over the first pct_start of total_steps, then anneals to
// initial_lr / final_div_factor (three_phase: back to the initial lr first, then down to the
// minimum). With cycle_momentum the group's "momentum" (SGD) or "beta1" (Adam, AdamW, LAMB, Adamax, NAdam, RAdam)
// moves the opposite way between max_momentum and base_momentum; without it they are left alone.
// Stepping past total_steps is an error. Per phase, with pct the fraction of the phase done:
//   cos:    end + (start - end) / 2 * (1 + cos(pi * pct))     linear: start + (end - start) * pct
struct OneCycleLROptions {
  std::vector<double> max_lr;  // one value for all groups, or one per group
  int64_t total_steps = 0;     // > 0 (epochs * steps_per_epoch)
  double pct_start = 0.3;      // in [0, 1]
  AnnealStrategy anneal_strategy = AnnealStrategy::Cos;
  bool cycle_momentum = true;
  std::vector<double> base_momentum = {0.85};  // one value for all groups, or one per group; in [0, 1)
  std::vector<double> max_momentum = {0.95};   // likewise
  double div_factor = 25.0;         // initial lr = max_lr / div_factor
  double final_div_factor = 1e4;    // min lr = initial lr / final_div_factor
  bool three_phase = false;
};
class OneCycleLR final : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, OneCycleLROptions options);

 protected:
  std::vector<double> compute_lrs() override;

 private:
  struct Phase {
    double end_step;
    const char* start_lr;
    const char* end_lr;
    const char* start_momentum;
    const char* end_momentum;
  };
  double anneal(double start, double end, double pct) const;
  // Checks the options (a named error) and returns `optimizer`, before the base constructor runs.
  static Optimizer& checked(Optimizer& optimizer, const OneCycleLROptions& options);

  OneCycleLROptions options_;
  std::vector<Phase> phases_;
  std::string momentum_key_;  // "momentum", "beta1", or empty without cycle_momentum
};

// The lr multiplied by factor for the first total_iters steps, then restored (PyTorch's
// ConstantLR, chainable form: a constant warmup).
struct ConstantLROptions {
  double factor = 1.0 / 3.0;  // in (0, 1]
  int64_t total_iters = 5;    // >= 0
};
class ConstantLR final : public LRScheduler {
 public:
  ConstantLR(Optimizer& optimizer, ConstantLROptions options);

 protected:
  std::vector<double> compute_lrs() override;

 private:
  ConstantLROptions options_;
};

// Cosine annealing with warm restarts (SGDR, PyTorch's CosineAnnealingWarmRestarts): within a
// cycle of T_i steps, lr = eta_min + (base - eta_min) (1 + cos(pi T_cur / T_i)) / 2; at the end of
// a cycle T_cur returns to 0 and T_i is multiplied by t_mult (T_0 = t_0). T_cur and T_i follow
// from last_epoch, so the state dict needs nothing more.
struct CosineAnnealingWarmRestartsOptions {
  int64_t t_0 = 1;       // > 0, steps in the first cycle
  int64_t t_mult = 1;    // >= 1
  double eta_min = 0.0;  // >= 0
};
class CosineAnnealingWarmRestarts final : public LRScheduler {
 public:
  CosineAnnealingWarmRestarts(Optimizer& optimizer, CosineAnnealingWarmRestartsOptions options);

 protected:
  std::vector<double> compute_lrs() override;

 private:
  CosineAnnealingWarmRestartsOptions options_;
};

// The lr multiplied by ((1 - t / total_iters) / (1 - (t - 1) / total_iters))^power at step t,
// so it follows base * (1 - t / total_iters)^power down to 0 at total_iters, then is left alone
// (PyTorch's PolynomialLR, chainable form).
struct PolynomialLROptions {
  int64_t total_iters = 5;  // > 0
  double power = 1.0;       // >= 0
};
class PolynomialLR final : public LRScheduler {
 public:
  PolynomialLR(Optimizer& optimizer, PolynomialLROptions options);

 protected:
  std::vector<double> compute_lrs() override;

 private:
  PolynomialLROptions options_;
};

// The cyclical learning rate policy (Smith 2017, "Cyclical Learning Rates for Training Neural
// Networks"), as PyTorch's CyclicLR: the lr goes from base_lr up to max_lr over step_size_up steps
// and back down over step_size_down, cycle after cycle; the cycle's amplitude is scaled by
//   Triangular: 1     Triangular2: 1 / 2^(cycle - 1)     ExpRange: gamma^t (t: steps so far)
// or by a custom scale_fn of the cycle number (ScaleMode::Cycle) or of t (ScaleMode::Iterations).
// With cycle_momentum the group's "momentum" (SGD, RMSprop) or "beta1" (Adam, AdamW, LAMB, Adamax, NAdam, RAdam) moves
// the opposite way, from max_momentum down to base_momentum and back. The constructor sets every
// group's lr to its base_lr (and the momentum to max_momentum); base_lrs() are these base lrs.
// Per step t, with T = step_size_up + step_size_down:
//   cycle = floor(1 + t / T),  x = 1 + t / T - cycle,  f = x <= up / T ? x / (up / T) : (x - 1) / (up / T - 1)
//   lr = base_lr + (max_lr - base_lr) * f * scale,     momentum = max_m - (max_m - base_m) * f * scale
//
//   optim::CyclicLR sched(opt, {.base_lr = {1e-3}, .max_lr = {1e-2}, .step_size_up = 2000});
enum class CyclicMode { Triangular, Triangular2, ExpRange };
enum class ScaleMode { Cycle, Iterations };
struct CyclicLROptions {
  std::vector<double> base_lr;    // one value for all groups, or one per group; >= 0
  std::vector<double> max_lr;     // likewise
  int64_t step_size_up = 2000;    // > 0
  int64_t step_size_down = -1;    // >= 0; -1: the same as step_size_up
  CyclicMode mode = CyclicMode::Triangular;
  double gamma = 1.0;             // ExpRange's factor per step, > 0
  std::function<double(double)> scale_fn;  // set: replaces mode's scaling
  ScaleMode scale_mode = ScaleMode::Cycle;  // what scale_fn takes (mode's own: Cycle, ExpRange: Iterations)
  bool cycle_momentum = true;
  std::vector<double> base_momentum = {0.8};  // one value for all groups, or one per group; in [0, 1)
  std::vector<double> max_momentum = {0.9};   // likewise
};
class CyclicLR final : public LRScheduler {
 public:
  CyclicLR(Optimizer& optimizer, CyclicLROptions options);

 protected:
  std::vector<double> compute_lrs() override;

 private:
  double scale(double cycle, double t) const;
  // Sets every group's lr to its base lr and returns the optimizer: run before the base
  // constructor, so "initial_lr" is the base lr, as PyTorch's.
  static Optimizer& start_at_base_lrs(Optimizer& optimizer, const CyclicLROptions& options);

  CyclicLROptions options_;
  std::vector<double> max_lrs_;  // per group
  std::vector<double> base_momenta_, max_momenta_;  // per group (cycle_momentum)
  std::string momentum_key_;     // "momentum", "beta1", or empty without cycle_momentum
};

// A scheduler made of others on its optimizer (ChainedScheduler, SequentialLR): it owns them (at
// least one, none null, all built on that optimizer), and its state dict holds each one's under
// "schedulers.<i>.", every part checked before any is loaded.
class CompositeScheduler : public LRScheduler {
 public:
  const std::vector<std::unique_ptr<LRScheduler>>& schedulers() const { return schedulers_; }

 protected:
  CompositeScheduler(Optimizer& optimizer, std::string name, std::vector<std::unique_ptr<LRScheduler>> schedulers);
  void save_children(StateDict& s) const override;
  void load_children(const StateDict& s) override;
  void check_children(const StateDict& s) const override;

  std::vector<std::unique_ptr<LRScheduler>> schedulers_;

 private:
  // Each child's part of the state, found and naming that child's kind.
  std::vector<StateDict> child_parts(const StateDict& s) const;
};

// Steps several schedulers of one optimizer together, in order, on every step() (PyTorch's
// ChainedScheduler): each multiplies or sets the lr the one before left, so chainable schedules
// compose (e.g. ConstantLR's warmup factor on top of ExponentialLR's decay). Construction
// changes nothing more (each scheduler already took its step 0 when it was built). The state
// dict holds each scheduler's under "schedulers.<i>.".
//
//   std::vector<std::unique_ptr<optim::LRScheduler>> parts;
//   parts.push_back(std::make_unique<optim::ConstantLR>(opt, optim::ConstantLROptions{.factor = 0.1, .total_iters = 2}));
//   parts.push_back(std::make_unique<optim::ExponentialLR>(opt, optim::ExponentialLROptions{.gamma = 0.9}));
//   optim::ChainedScheduler sched(opt, std::move(parts));
class ChainedScheduler final : public CompositeScheduler {
 public:
  ChainedScheduler(Optimizer& optimizer, std::vector<std::unique_ptr<LRScheduler>> schedulers);

 protected:
  std::vector<double> compute_lrs() override;
  void restart_parts() override;  // inside a SequentialLR: every part's step 0 again, in order
};

// Runs schedulers one after another (PyTorch's SequentialLR): schedulers[i] drives the lr from
// milestones[i - 1] on (milestones strictly increasing, one fewer than the schedulers). At its
// milestone a scheduler starts again from step 0 at the groups' initial lrs; in between, only the
// active one steps. All must be built on `optimizer` (each constructor's own step 0 is undone).
// The state dict holds each scheduler's under "schedulers.<i>.", so a resume continues all of them.
//
//   std::vector<std::unique_ptr<optim::LRScheduler>> parts;
//   parts.push_back(std::make_unique<optim::LinearLR>(opt, optim::LinearLROptions{.start_factor = 0.1, .total_iters = 100}));
//   parts.push_back(std::make_unique<optim::CosineAnnealingLR>(opt, optim::CosineAnnealingLROptions{.t_max = 900}));
//   optim::SequentialLR sched(opt, std::move(parts), {100});   // warmup, then cosine
class SequentialLR final : public CompositeScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::unique_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);

 protected:
  std::vector<double> compute_lrs() override;

 private:
  std::vector<int64_t> milestones_;
};

}  // namespace mg::optim
