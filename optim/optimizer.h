// Optimizer: the base of SGD, Adam, AdamW, LAMB, RMSprop, Adagrad, Adamax, NAdam, RAdam, Adadelta, Rprop,
// ASGD and Adafactor. It owns parameter groups (parameters plus
// per-group options), per-parameter state (an update count and named buffers), a step counter,
// and a state dict keyed by parameter position as PyTorch's.
//
// The one decision a reader must know: a group's options live in a name -> number map
// (ParamGroup::options: "lr", "momentum", "beta1", booleans as 0/1), like PyTorch's param_group
// dicts, so learning-rate schedulers and the state dict read and write them generically. Each
// optimizer has a typed options struct for its constructor, converted to and from that map, and
// checks the map of every group when it is created and at the start of every step().
//
//   optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9});
//   opt.zero_grad();  loss.backward();  opt.step();
//   opt.param_groups()[0].set_lr(0.01);                  // what a scheduler does
//   mg::StateDict s = opt.state_dict();                 // "state.3.exp_avg", "group.0.lr", ...
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "mixgrad/core/error.h"
#include "mixgrad/core/graph_participant.h"
#include "mixgrad/core/multi_tensor_kernels.h"
#include "mixgrad/core/state_dict.h"
#include "mixgrad/core/tensor.h"
#include "mixgrad/optim/master_weights.h"
#include "mixgrad/optim/multi_tensor.h"

namespace mg::optim {

// Group options by name; booleans are 0 or 1.
using OptionMap = std::map<std::string, double>;

struct ParamGroup {
  Tensors params;      // floating leaf tensors (any shape), updated in place
  OptionMap options;   // the optimizer's options; schedulers add "initial_lr", "max_lr", ...

  double lr() const { return option("lr"); }
  void set_lr(double lr) { options["lr"] = lr; }
  bool has_option(const std::string& name) const { return options.count(name) != 0; }
  // The value of an option; throws mg::Error naming it when the group has none.
  double option(const std::string& name) const;
  void set_option(const std::string& name, double value) { options[name] = value; }
};

// A group handed to a constructor: its parameters and the options that differ from the
// optimizer's defaults, e.g. {.params = head->parameters(), .options = {{"lr", 1e-2}}}.
struct ParamGroupSpec {
  Tensors params;
  OptionMap options = {};
};

// The state of one parameter: how many updates it received and the optimizer's buffers
// ("exp_avg", "momentum_buffer", ...), each with the parameter's shape (Adafactor's factors:
// Optimizer::buffer_shape) in opmath dtype (f32 for f16/bf16/f32 parameters, f64 for f64).
struct ParamState {
  int64_t step = 0;
  std::map<std::string, Tensor> buffers;
  // Per-parameter host scalars (NAdam's mu_product), saved as the floats state.<i>.<name>.
  std::map<std::string, double> scalars;
  // The fused device path (CUDA) counts updates on the device: [1] i64, created from `step` at the
  // first fused update. While `step_on_device` is set it is the truth and `step` is refreshed
  // from it when read (Optimizer::state, state_dict: one synchronisation).
  Tensor device_step;
  bool step_on_device = false;
  // The fused device path's copies of `scalars` ([1] f64 on the device, NAdam's mu_product), made at
  // the parameter's first fused update and updated by its kernels from then on: like device_step
  // the truth while step_on_device is set, read back into `scalars` with it.
  std::map<std::string, Tensor> device_scalars;
  // The fused device path: device_step's value when a buffer that starts as the gradient (SGD's
  // momentum) was created there ([1] i64, a device copy); the kernel's first update of it is the one
  // where device_step still equals this (a skipped step leaves both). Undefined (a buffer loaded,
  // or made on another path): never new. Not saved.
  Tensor device_first_step;
};

// What a step gate decides for one step: run it, skip it, or leave it to a device flag (f32 [1],
// nonzero: skip), decided as step_unless_found_inf's flag is, with no host read where the fused
// device path runs. amp::scale_loss hands its device found-inf flag through this on CUDA.
struct StepGateDecision {
  StepGateDecision(bool run = true) : run(run) {}  // NOLINT: a gate may return a plain bool
  explicit StepGateDecision(Tensor found_inf) : found_inf(std::move(found_inf)) {}
  bool run = true;   // false: skip (found_inf is then ignored)
  Tensor found_inf;  // defined: the device decides
};

// CUDA graphs: an Optimizer is a GraphParticipant (core/graph_participant.h). Its fused device
// kernels read the group's floating options (lr, momentum, betas, eps, weight_decay) from a device
// copy that step() and each replay rewrite when the host value changed (an asynchronous fill, no
// synchronisation), so a scheduler's lr reaches every replay; step counts are device values; the
// host step_count() and the lazy skip flag are redone per replay. Capture is refused (a clear
// error) for a step gate (a host function, run once at the capture), parameters without the fused device
// path, LAMB, and parameters that have a gradient but no state yet (run one eager step first).
class Optimizer : public GraphParticipant {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Checks every group's options, counts the step, and updates every parameter that has a
  // gradient (parameters without one are skipped and keep their state). With master weights the
  // master gradients are synced first and the masters copied back into the model afterwards.
  // A step gate that says no (amp: an overflow) skips it: nothing changes, nothing is counted.
  // A group whose parameters are all on the CPU takes the fused multi-tensor path; a group on one
  // device with fused multi-tensor kernels (CUDA) the optimizer's fused kernel; any other group
  // (several devices, an optimizer without a fused step) the device-generic path of public ops
  // (optim/generic_path.h).
  void step();
  // step() whose skip decision is the device flag `found_inf` (f32 [1], nonzero: skip): groups on
  // a device with fused multi-tensor kernels (CUDA) pass it to the kernels, which change nothing
  // when it is set, and the host never reads it; last_step_skipped() then reads a device copy
  // when asked. If any group cannot take the fused path (CPU tensors, non-contiguous ones, an
  // optimizer without a fused step) the flag is read on the host first (one synchronisation) and
  // the step runs or is skipped as a whole.
  void step_unless_found_inf(const Tensor& found_inf);
  // Clears the gradients (set_to_none: drops them; else zeros them in place); with master
  // weights both the masters' and the model's; and those of set_zero_grad_also's tensors.
  void zero_grad(bool set_to_none = true);
  // Tensors whose gradients zero_grad() clears too, though this optimizer never updates them: a
  // ZeroRedundantOptimizer's shard is given the other ranks' parameters, whose gradients
  // DistributedDataParallel still averages on this rank every step (stale ones would enter the
  // average). Replaces the previous list.
  void set_zero_grad_also(Tensors tensors) { zero_grad_also_ = std::move(tensors); }
  // Adds a group; options not given take the optimizer's defaults. Unknown option names, options
  // out of range and parameters already in a group (or, after use_master_weights, already behind
  // an f32 master) are errors. After use_master_weights the new group's f16/bf16 parameters get
  // f32 masters too (Apex's add_param_group).
  void add_param_group(const Tensors& params, const OptionMap& options = {});

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // The options a new group starts from (the constructor's options struct).
  const OptionMap& defaults() const { return defaults_; }
  // All parameters of all groups, group by group: position i here is "state.i" in the state dict.
  Tensors parameters() const;
  // The gradient of each parameter of parameters() (undefined where there is none); a GradScaler
  // unscales and checks these in place.
  Tensors grads() const;
  // The number of step() calls that updated: a step skipped by a step gate, a host-read flag or a
  // GradScaler is not counted — nor one a device flag skipped (CUDA: GradScaler::step,
  // amp::scale_loss), which is subtracted when asked (one read of a device counter, the first
  // time after such steps).
  int64_t step_count() const;
  // A position in the step sequence, taken with no host read (an LR scheduler's snapshot), and
  // whether an update happened since (one read of device counters after device-decided steps).
  struct StepMark {
    int64_t issued = 0;        // step() calls that ran their kernels
    int64_t folded_skips = 0;  // device-skipped steps of counters already retired
    Tensor device_skips;       // a copy of the device skip counter then (undefined: none yet)
  };
  StepMark step_mark() const;
  bool stepped_since(const StepMark& mark) const;
  // step_count() as it was at `mark` (one read of a device counter after device-decided steps).
  int64_t step_count_at(const StepMark& mark) const;
  // "SGD", "Adam", "AdamW", "LAMB", "RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam", "Adadelta", "Rprop",
  // "ASGD", "Adafactor".
  const std::string& name() const { return name_; }
  // The state of parameter p, or nullptr before its first update.
  const ParamState* state(const Tensor& p) const;
  // Bytes of this optimizer's state: every parameter's buffers and the f32 master weights (what
  // distributed::ZeroRedundantOptimizer divides among the ranks).
  int64_t state_bytes() const;
  // The number of state values (f32; f64 for an f64 parameter) parameter p holds once updated under
  // group options `options`: known before any step, so amp::precision_plan reports the optimizer's
  // memory up front. The sum over buffers_created(options) of each buffer_shape(name, p)'s size.
  int64_t planned_state_values(const Tensor& p, const OptionMap& options) const;
  // The number of buffers parameter p keeps under `options` when each has p's shape, or -1 when
  // some buffer has another shape (Adafactor's factors): the precision plan's "per parameter".
  int64_t planned_buffers_like_parameter(const Tensor& p, const OptionMap& options) const;

  // ---- fp32 master weights (optim/master_weights.h; amp's O2 turns them on) ----
  // Replaces every f16/bf16 parameter in the groups by an f32 master copy (same position) and
  // links it to the model's tensor (on the parameter's device). Only before the first step, at most once.
  void use_master_weights();
  // Throws the error use_master_weights would (called twice, or after the first step), changing
  // nothing: amp::initialize checks it before it casts the model.
  void check_can_use_master_weights() const;
  bool has_master_weights() const { return !masters_.empty(); }
  const std::vector<MasterPair>& master_pairs() const { return masters_; }
  // Copies the model gradients into the master gradients (×1) unless an unscale already wrote
  // them since the last step; step() calls it. Call it before clipping the masters yourself
  // (clip_grad_norm_ refuses masters whose gradients are not this step's yet).
  void sync_master_grads();
  // Tells the optimizer that the master gradients were written (by a fused unscale) for this step.
  void mark_master_grads_synced() { master_grads_synced_ = true; }
  // Whether the master gradients hold this step's gradients (set by a sync or an unscale, cleared
  // by step(), a skipped step and zero_grad()); amp accumulates several losses into them when set.
  bool master_grads_synced() const { return master_grads_synced_; }

  // ---- step gate (amp's Apex front door skips a step on overflow through it) ----
  // Called at the start of step() and step_unless_found_inf(): its decision (StepGateDecision:
  // run, skip, or let a device flag decide) applies to that step. One gate; an empty function
  // removes it. A gate returning bool still works (true: run).
  using StepGate = std::function<StepGateDecision(Optimizer&)>;
  void set_step_gate(StepGate gate) { gate_ = std::move(gate); }
  bool has_step_gate() const { return static_cast<bool>(gate_); }
  // Whether the last step() call was skipped (by the gate, or by the device flag of
  // step_unless_found_inf, read lazily here: one synchronisation the first time it is asked).
  bool last_step_skipped() const;

  // ---- step post-hooks (PyTorch's register_step_post_hook) ----
  // `hook` runs after every step() / step_unless_found_inf() that ran the update: not after one the
  // host knows was skipped (a gate's no, a host-read flag), but after one a device flag decides
  // (its kernels ran and may have changed nothing). Hooks run in registration order; an exception
  // from one propagates after the update. distributed::ZeroRedundantOptimizer broadcasts each
  // rank's updated shard through one. A step with hooks cannot be captured into a CUDA graph (the
  // hook is host code that would run once, at the capture).
  // With `also_after_error` the hook runs too when the update throws (before the error goes on;
  // the hook's own exception is dropped then, the update's is the one reported): what a hook owes
  // other processes still happens — ZeroRedundantOptimizer's broadcast, which the other ranks
  // would otherwise wait for until their collective timeout.
  using StepHook = std::function<void(Optimizer&)>;
  // Returns a handle for remove_step_post_hook.
  int64_t register_step_post_hook(StepHook hook, bool also_after_error = false);
  // Removes the hook with that handle; an unknown handle is an error.
  void remove_step_post_hook(int64_t handle);

  // Layout (position i counts parameters over all groups, as parameters()):
  //   strings "optimizer"            the optimizer's name
  //   ints    "step_count", "num_groups", "num_params"
  //   strings "group.<g>.params"     the positions of group g's parameters, "0,1,2"
  //   floats  "group.<g>.<option>"   every option of group g (lr, initial_lr, momentum, ...)
  //   ints    "state.<i>.step"       updates applied to parameter i (absent: no state yet)
  //   tensors "state.<i>.<buffer>"   copies of its buffers (exp_avg, exp_avg_sq, ...)
  //   tensors "master.<i>"           the f32 master of parameter i (master weights only)
  StateDict state_dict() const;
  // Restores group options, per-parameter state and the step count. Checks the optimizer name,
  // the number of groups and of parameters per group, every option (by the same rules as the
  // constructor), buffer names and shapes; buffers are copied and converted to the state dtype.
  // A mismatch throws an mg::Error naming it, and nothing is changed. With master weights the
  // masters are restored exactly (or, from a state saved without them, re-made from the model:
  // load the model first); a state with masters needs an optimizer with master weights. The
  // state tensors are new ones, so a CUDA graph captured before is refused at its next replay
  // (capture again after loading).
  void load_state_dict(const StateDict& state);

  // ---- GraphParticipant (see the note above the class) ----
  void graph_capture_begin() override;
  void graph_capture_end(bool ok) override;
  void graph_replay_check() const override;
  void graph_replay_prepare() override;

 protected:
  Optimizer(std::string name, OptionMap defaults);
  // Checks the defaults and adds the constructor's groups (at least one parameter in all);
  // called from the most-derived constructor, where check_options is the final one.
  void init_groups(const std::vector<ParamGroupSpec>& groups);

  // Throws an mg::Error naming the optimizer and the option when an option is out of range.
  virtual void check_options(const OptionMap& options) const = 0;
  // Checks that apply only where a group is made (the constructor, add_param_group), not at every
  // step or load: PyTorch checks some options in __init__ alone (SGD's nesterov needs momentum > 0,
  // and a scheduler may then cycle momentum down to 0: a plain step). Default: none.
  virtual void check_new_group_options(const OptionMap& options) const { (void)options; }
  // Updates the parameters of one group (its options already checked).
  virtual void step_group(ParamGroup& group) = 0;
  // The buffer names this optimizer keeps in ParamState::buffers.
  virtual std::vector<std::string> buffer_names() const = 0;
  // The shape of buffer `name` (one of buffer_names()) for parameter p, or nullopt when p keeps no
  // such buffer. Default: p's shape. buffer(), the step's checks and load_state_dict hold every
  // buffer to it (Adafactor keeps a matrix's second moments as a row and a column).
  virtual std::optional<Shape> buffer_shape(const std::string& name, const Tensor& p) const;
  // The buffers a step creates under group options `options` (SGD's momentum_buffer only with
  // momentum): planned_state_values counts these. Default: buffer_names().
  virtual std::vector<std::string> buffers_created(const OptionMap& options) const;
  // The buffers every parameter that took a step under group options `options` has (Adam's
  // moments); load_state_dict refuses a state without them instead of starting them at zero under
  // the saved step count.
  virtual std::vector<std::string> buffers_of_every_step(const OptionMap& options) const {
    (void)options;
    return {};
  }
  // The buffers that start as the first update's value (SGD's momentum: the gradient), whose
  // creation on the fused device path ParamState::device_first_step records. Until that update
  // runs (every step since was skipped) state_dict leaves them out, so a loaded state starts
  // them at its first update too, as the CPU path, which makes none on a skipped step.
  virtual std::vector<std::string> buffers_started_by_first_update() const { return {}; }
  // The names of the per-parameter scalars it keeps (ParamState::scalars); load_state_dict refuses others.
  virtual std::vector<std::string> scalar_names() const { return {}; }
  // Options this optimizer gained after states were first saved, with the value that reproduces
  // the old behaviour (e.g. {"maximize", 0}): load_state_dict takes it where a saved group lacks one,
  // as PyTorch's __setstate__ setdefault does.
  virtual OptionMap options_added_later() const { return {}; }
  // Whether step_group runs fused device kernels (fused_step_args) where a device has them.
  virtual bool has_fused_step() const { return false; }
  // The options the fused kernels read from device memory, in MultiTensorStepArgs::hyper order.
  virtual std::vector<std::string> device_option_names() const { return {}; }
  // Why this optimizer's fused step cannot be captured into a CUDA graph, or nullptr.
  virtual const char* graph_capture_refusal() const { return nullptr; }
  // What of a group's options decides which kernels and buffers a captured step uses, beyond the
  // options taken by value (part of the graph signature: a change demands a new capture).
  virtual std::string graph_structure(const ParamGroup&) const { return ""; }
  // Whether a CUDA graph is capturing this optimizer's step now.
  bool graph_capturing() const { return graph_capturing_; }

  // A parameter of a group that has a gradient, ready for an update.
  struct Work {
    Tensor param;      // contiguous, on any device (the fused path: the CPU)
    Tensor grad;       // contiguous, same shape and dtype as param
    ParamState* state; // created on first use
    int64_t index;     // position in parameters()
  };
  // The parameters of `group` with a gradient, with their state (created on first use).
  std::vector<Work> collect(const ParamGroup& group);
  // The buffer `name` of w's state: created (zero-filled when `zero`, else uninitialised; then
  // `created` is set) or the existing one (checked by step() against the parameter).
  Tensor buffer(const Work& w, const std::string& name, bool zero, bool* created = nullptr);
  // The opmath dtype of w's state and generic-path math: f64 for an f64 parameter, else f32.
  static DType opmath_dtype(const Work& w) { return w.param.dtype() == DType::F64 ? DType::F64 : DType::F32; }
  // The multi-tensor slot of w (param and grad pointers; state pointers left null).
  static TensorSlot slot_of(const Work& w) {
    return {w.param.dtype(), w.param.numel(), w.param.data_ptr(), w.grad.data_ptr(), {}};
  }
  // The fused device path (core/multi_tensor_kernels.h): the device's kernels when every
  // parameter of `work` is on one device that has them, else nullptr. Fills args' params, grads,
  // model copies (the f16/bf16 model tensor of a master, written in the same pass), device step
  // counters and the found-inf flag of step_unless_found_inf; the optimizer adds its state lists.
  const MultiTensorKernels* fused_step_args(const ParamGroup& group, const std::vector<Work>& work,
                                           MultiTensorStepArgs& args);
  // For a fused device step written with public ops (Muon's): the device copy of option `name` of
  // `group` (one of device_option_names()) as a [1] f64 tensor, which every CUDA graph replay
  // reads, and the found-inf flag of step_unless_found_inf (f32 [1], nonzero: change nothing;
  // undefined when the step has none). Valid after fused_step_args, during step_group.
  Tensor device_option(const ParamGroup& group, const std::string& name) const;
  const Tensor& device_found_inf() const { return found_inf_flag_; }
  // After the optimizer's fused kernel: counts the step on the device, keeps the host count in
  // step where no flag can skip it, bumps versions and marks the model copies as written.
  void finish_fused_step(const std::vector<Work>& work, const MultiTensorKernels* k, const MultiTensorStepArgs& args);

 private:
  void check_new_params(const Tensors& params) const;
  // Replaces the f16/bf16 group parameter `p` by a new f32 master of it (recorded in masters_).
  Tensor make_master(Tensor& p);
  // Throws when parameter p (position i) has a gradient but cannot be updated: not contiguous, a
  // gradient of another dtype/shape/device, or state buffers of another dtype/shape/device.
  void check_param(const Tensor& p, int64_t i) const;
  int64_t position_of_group(std::size_t g) const;

  // A group that took the fused device path before and cannot now (its parameters with gradients
  // span devices this step): the host state is read back and the device copies dropped, so the
  // generic path continues from the true counts and scalars and a later fused step remakes them
  // from the host values. One synchronisation, only when device copies exist.
  void leave_fused_path(const std::vector<Work>& work);
  // Reads every device step counter that is ahead of its host copy, and the device scalars of those
  // states (one synchronisation per device and dtype).
  void refresh_device_steps() const;
  // The states whose device_first_step still equals their step count (refreshed): a buffer the
  // fused path made has had no update yet. One read per device.
  std::vector<const ParamState*> states_before_first_update() const;
  // The device copy of group g's device_option_names() on `device`, rewritten (asynchronously)
  // where the host values changed, except during a capture. Created when missing.
  const double* device_options(std::size_t g, Device device);
  // What a captured graph baked in: the parameters and the options read by value.
  std::string graph_signature() const;

  std::string name_;
  OptionMap defaults_;
  std::vector<ParamGroup> groups_;
  mutable std::unordered_map<const TensorImpl*, ParamState> state_;  // mutable: refresh_device_steps
  int64_t step_count_ = 0;  // step() calls that ran their kernels (host-decided skips excluded)
  // Steps a device flag skipped (their kernels ran and changed nothing): a [1] i64 counter on the
  // device, read lazily by step_count(); retired counters (another device) folded into an int.
  mutable Tensor device_skips_;
  mutable int64_t device_skips_read_ = 0;   // its value at the last read
  mutable bool device_skips_stale_ = false;  // it may have changed since
  int64_t folded_skips_ = 0;
  // Adds the flag (nonzero: skipped) to the device counter, creating it on `device` first.
  void count_device_skip(const Tensor& flag, Device device);
  // The device-skipped steps so far (reads the counter when stale).
  int64_t device_skipped() const;
  std::vector<MasterPair> masters_;
  bool master_grads_synced_ = false;
  StepGate gate_;
  Tensors zero_grad_also_;  // set_zero_grad_also
  struct PostHook {
    int64_t handle;
    StepHook hook;
    bool also_after_error;
  };
  std::vector<PostHook> post_hooks_;  // in registration order
  int64_t next_hook_handle_ = 0;
  mutable bool last_step_skipped_ = false;
  // step() and step_unless_found_inf(): the gate's decision, then the flag's (undefined: none).
  void gated_step(const Tensor& found_inf);
  void run_post_hooks();
  // The step itself, after every skip decision.
  void run_step();
  // run_step; when it throws, the post-hooks registered also_after_error, then the error again.
  void run_step_or_error_hooks();
  Tensor found_inf_flag_;                  // during step_unless_found_inf: the device flag (f32 [1])
  mutable Tensor skipped_flag_;            // [1] f32 device copy of that flag, until read
  std::vector<const TensorImpl*> model_written_;  // masters whose model copy a fused step wrote
  // ---- CUDA graphs ----
  std::vector<Tensor> device_options_;                // per group: [k] f64 on the group's device
  std::vector<std::vector<double>> device_options_host_;  // per group: the values written there
  bool graph_capturing_ = false;
  int64_t graph_step_count_at_begin_ = 0;
  Tensor capture_saved_skipped_flag_;           // skipped_flag_ and last_step_skipped_ at capture_begin
  bool capture_saved_last_step_skipped_ = false;
  bool graph_captured_ = false;
  int64_t graph_steps_per_replay_ = 0;  // step() calls the captured step made
  Tensor graph_skipped_flag_;           // the captured step's skip flag (rewritten by each replay)
  std::string graph_signature_;
  // Bumped by load_state_dict, which replaces the state tensors (buffers, device step counts) whose
  // addresses a captured graph holds; a graph captured at another generation may not replay.
  int64_t state_generation_ = 0;
  int64_t graph_state_generation_ = 0;
};

// The option `name` of a map, or `fallback` when it has none.
inline double option_or(const OptionMap& m, const std::string& name, double fallback) {
  const auto it = m.find(name);
  return it == m.end() ? fallback : it->second;
}

// ---- typed options <-> OptionMap ----
// An options struct lists its fields once with a member template
//   template <typename F> void for_each(F&& f) { f("lr", lr); f("nesterov", nesterov); ... }
// over double and bool fields; these helpers convert with it.
template <typename Options>
OptionMap options_to_map(Options o) {
  OptionMap m;
  o.for_each([&](const char* name, auto& v) { m[name] = double(v); });
  return m;
}
// The typed options of a group; a missing option throws naming `owner`.
template <typename Options>
Options options_from_map(const OptionMap& m, const std::string& owner) {
  Options o;
  o.for_each([&](const char* name, auto& v) {
    const auto it = m.find(name);
    MG_CHECK(it != m.end(), Error, owner, ": the group has no option '", name, "'");
    v = static_cast<std::remove_reference_t<decltype(v)>>(it->second);
  });
  return o;
}
// Checks that every boolean option of the map is 0 or 1.
template <typename Options>
void check_bool_options(const OptionMap& m, const std::string& owner) {
  Options o;
  o.for_each([&](const char* name, auto& v) {
    if constexpr (std::is_same_v<std::remove_reference_t<decltype(v)>, bool>) {
      const auto it = m.find(name);
      MG_CHECK(it == m.end() || it->second == 0.0 || it->second == 1.0, Error, owner, ": option '",
               name, "' is a boolean (0 or 1), got ", it->second);
    }
  });
}

}  // namespace mg::optim
