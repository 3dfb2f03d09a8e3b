#include "mixgrad/amp/initialize.h"

#include <algorithm>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_set>

#include "mixgrad/amp/autocast.h"
#include "mixgrad/amp/unscale.h"
#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/autocast_state.h"
#include "mixgrad/cuda/cuda.h"
#include "mixgrad/nn/normalization.h"
#include "mixgrad/ops/ops.h"

namespace mg::amp {
namespace {

// What amp knows about one optimizer passed to initialize.
struct OptimizerEntry {
  optim::Optimizer* opt = nullptr;
  bool skip_next = false;        // an overflow found on the host: the next step() is skipped
  Tensor skip_flag;              // on a device: the found-inf flag of the losses since the last
                                 // step() (nonzero: skip), decided there with no host read
  int pending_loss_id = -1;      // >= 0: gradients hold delay_unscale'd values scaled for that loss
  Tensors stash;                 // gradients of earlier losses of this step (by parameter position)
};

struct AmpState {
  Properties props;
  DeviceType device = DeviceType::CPU;  // whose autocast state O1 switched on
  std::thread::id thread;                // and on which thread (autocast state is per thread)
  std::vector<std::shared_ptr<nn::Module>> models;
  std::vector<OptimizerEntry> optimizers;
  std::vector<GradScaler> scalers;  // one per loss_id
  DType input_dtype = DType::F32, output_dtype = DType::F32;
  bool cast_inputs = false, cast_outputs = false;
  MemoryFormat input_format = MemoryFormat::Contiguous;  // InitializeOptions::memory_format
  // The optimizers' step gates hold a weak reference to this: once the state is gone (reset,
  // a new initialize) they let every step through, and amp never touches an optimizer that may
  // have been destroyed before it.
  std::shared_ptr<int> alive = std::make_shared<int>(0);
};

std::unique_ptr<AmpState>& state_ptr() {
  static std::unique_ptr<AmpState> state;
  return state;
}

std::function<void(const std::string&)>& log_sink() {
  static std::function<void(const std::string&)> sink = [](const std::string& line) { std::cerr << line << std::flush; };
  return sink;
}

AmpState& state(const char* who) {
  MG_CHECK(state_ptr() != nullptr, Error, who, ": amp::initialize has not been called",
           "\n  hint: call mg::amp::initialize(model, optimizer, {.opt_level = ...}) before training");
  return *state_ptr();
}

OptimizerEntry& entry_of(AmpState& st, const optim::Optimizer* opt, const char* who) {
  for (OptimizerEntry& e : st.optimizers) {
    if (e.opt == opt) return e;
  }
  MG_THROW(Error, who, ": this ", opt->name(), " optimizer was not passed to amp::initialize",
           "\n  hint: pass every optimizer to amp::initialize (a list is accepted), or create it before initialize");
}

GradScaler make_scaler(const Properties& p) {
  GradScalerOptions o;
  if (p.loss_scale.dynamic) {
    o.min_scale = p.min_loss_scale;
    o.max_scale = p.max_loss_scale;
  } else {
    o.init_scale = p.loss_scale.value;  // static: kept; overflowing steps are still skipped and counted
    o.dynamic = false;
  }
  return GradScaler(o);
}

void check_models(const std::vector<std::shared_ptr<nn::Module>>& models) {
  for (std::size_t m = 0; m < models.size(); ++m) {
    MG_CHECK(models[m] != nullptr, Error, "amp::initialize: model ", m, " is null");
    const std::string& type = models[m]->type_name();
    MG_CHECK(type != "DataParallel" && type != "DistributedDataParallel", Error, "amp::initialize: model ", m,
             " is already wrapped in ", type, "\n  hint: call amp::initialize on the bare model, then wrap it for data parallel");
    for (const auto& [name, p] : models[m]->named_parameters()) {
      MG_CHECK(p.dtype() == DType::F32, DTypeError, "amp::initialize: parameter '", name, "' of model ", m, " is ",
               describe(p), "; amp expects an f32 model",
               "\n  hint: do not cast the model yourself (no .to(f16)); initialize casts it as the opt level says");
    }
  }
}

void check_optimizers(const std::vector<std::shared_ptr<nn::Module>>& models,
                      const std::vector<optim::Optimizer*>& optimizers, bool master_weights) {
  std::unordered_set<const TensorImpl*> model_params;
  for (const auto& m : models) {
    for (const Tensor& p : m->parameters()) model_params.insert(p.impl());
  }
  for (std::size_t k = 0; k < optimizers.size(); ++k) {
    optim::Optimizer* opt = optimizers[k];
    MG_CHECK(opt != nullptr, Error, "amp::initialize: optimizer ", k, " is null");
    MG_CHECK(!opt->has_master_weights(), Error, "amp::initialize: optimizer ", k, " (", opt->name(),
             ") already keeps master weights");
    // O2's masters need an optimizer that has not stepped: refused here, before the model is cast.
    if (master_weights) opt->check_can_use_master_weights();
    const Tensors params = opt->parameters();
    for (std::size_t i = 0; i < params.size(); ++i) {
      MG_CHECK(model_params.count(params[i].impl()), Error, "amp::initialize: parameter ", i, " of optimizer ", k, " (",
               opt->name(), ", ", describe(params[i]), ") is not a parameter of the models passed",
               "\n  hint: create the optimizer from model->parameters() of a model you pass to initialize, "
               "and pass all the models it trains");
    }
  }
}

}  // namespace

void set_log_sink(std::function<void(const std::string&)> sink) {
  log_sink() = sink ? std::move(sink) : [](const std::string& line) { std::cerr << line << std::flush; };
}

void initialize_models(const std::vector<std::shared_ptr<nn::Module>>& models,
                       const std::vector<optim::Optimizer*>& optimizers, const InitializeOptions& options) {
  MG_CHECK(!models.empty(), Error, "amp::initialize: no model given");
  const Properties props = resolve_properties(options);  // every override checked before anything changes
  // Inside a region, the region's exit would restore the state it saved: O1 silently off.
  MG_CHECK(!props.enabled || !props.patch_functions || autocast_state(options.device.type).depth == 0, Error,
           "amp::initialize: called inside an Autocast region, whose exit would turn O1's autocast off again",
           "\n  hint: call amp::initialize before any Autocast region");
  check_models(models);
  check_optimizers(models, optimizers, props.enabled && props.master_weights);
  if (options.device.is_cuda()) cuda::check_device(options.device);  // e.g. "cuda:0 is not available: ..."
  if (state_ptr()) {
    if (state_ptr()->props.verbosity >= 1) log_sink()("amp: initialize called again; the previous amp state is replaced\n");
    reset();
  }

  auto st = std::make_unique<AmpState>();
  st->props = props;
  st->device = options.device.type;
  st->thread = std::this_thread::get_id();
  st->models = models;
  st->input_format = options.memory_format;
  // Channels-last weights too (PyTorch's model.to(memory_format=channels_last)): the convolutions
  // then read NHWC activations and weights with no reorder. Before the casts and masters, which
  // keep the layout.
  if (options.memory_format == MemoryFormat::ChannelsLast) {
    for (const auto& m : models) m->to(MemoryFormat::ChannelsLast);
  }
  // Disabled, the loss scalers are PyTorch's GradScaler(enabled=False): scale 1, nothing changes,
  // so amp::loss_scale() and state_dict() work the same with amp on or off.
  for (int i = 0; i < props.num_losses; ++i) {
    st->scalers.push_back(props.enabled ? make_scaler(props) : GradScaler(GradScalerOptions{.enabled = false}));
  }
  if (props.enabled) {
    if (props.verbosity >= 1) log_sink()(props.str());
    if (props.cast_model_type && *props.cast_model_type != DType::F32) {
      const bool keep_bn = props.keep_batchnorm_fp32.value_or(false);
      for (const auto& m : models) {
        m->to(*props.cast_model_type, keep_bn ? [](const nn::Module& x) { return nn::is_batch_norm(x); }
                                              : std::function<bool(const nn::Module&)>{});
      }
      st->cast_inputs = true;
      st->input_dtype = *props.cast_model_type;
    }
    if (props.cast_model_outputs) {
      st->cast_outputs = true;
      st->output_dtype = *props.cast_model_outputs;
    }
    if (props.master_weights) {
      // An optimizer whose parameters all stayed f32 (one for batch norm's, kept f32 at O2) needs
      // no masters, as Apex's empty master groups: it steps its f32 parameters directly.
      for (optim::Optimizer* opt : optimizers) {
        const Tensors params = opt->parameters();
        if (std::any_of(params.begin(), params.end(),
                        [](const Tensor& p) { return p.dtype() == DType::F16 || p.dtype() == DType::BF16; })) {
          opt->use_master_weights();
        }
      }
    }
    if (props.patch_functions) {
      install_autocast();
      AutocastState& a = autocast_state(st->device);
      a.enabled = true;
      a.dtype = props.dtype;
    }
    if (props.verbosity >= 1) {
      // The overflow line of the device path (scale_loss on CUDA), which learns of a skip only
      // when the scaler's state is read; the host path writes its own line at once.
      // A copy of a scaler that outlives the amp state (amp::reset) finds it gone and stays quiet.
      const AmpState* self = st.get();
      for (int i = 0; i < props.num_losses; ++i) {
        st->scalers[std::size_t(i)].on_skip([self, i, alive = std::weak_ptr<int>(st->alive)](int64_t iteration, double scale) {
          if (alive.expired()) return;
          const GradScaler& scaler = self->scalers[std::size_t(i)];
          if (!scaler.on_device()) return;
          std::ostringstream line;
          line << "amp: gradient overflow in iteration " << iteration << " of loss scaler " << i << " ("
               << scaler.skipped_iterations() << " skipped in all): step skipped, "
               << (self->props.loss_scale.dynamic ? "loss scale now " : "static loss scale ") << scale << "\n";
          log_sink()(line.str());
        });
      }
    }
  }
  for (optim::Optimizer* opt : optimizers) {
    st->optimizers.push_back({opt});
    if (!props.enabled) continue;
    opt->set_step_gate([alive = std::weak_ptr<int>(st->alive)](optim::Optimizer& o) -> optim::StepGateDecision {
      if (alive.expired()) return true;  // amp was reset: a plain optimizer again
      OptimizerEntry& e = entry_of(state("optimizer step"), &o, "optimizer step");
      MG_CHECK(e.pending_loss_id < 0, Error, o.name(),
               ".step(): the gradients are still scaled (the last amp::scale_loss used delay_unscale = true)",
               "\n  hint: the last micro-batch's scale_loss must not delay the unscale");
      const bool skip = e.skip_next;
      const Tensor flag = std::move(e.skip_flag);
      e.skip_next = false;
      e.skip_flag = Tensor();
      if (skip) return optim::StepGateDecision(false);
      return flag.defined() ? optim::StepGateDecision(flag) : optim::StepGateDecision(true);
    });
  }
  state_ptr() = std::move(st);
}

bool is_initialized() { return state_ptr() != nullptr; }

const Properties& properties() { return state("amp::properties").props; }

void reset() {
  if (!state_ptr()) return;
  if (state_ptr()->props.patch_functions && state_ptr()->props.enabled) {
    // O1's autocast is the initializing thread's; from here it would stay on there, silently.
    MG_CHECK(state_ptr()->thread == std::this_thread::get_id(), Error,
             "amp::reset: O1 turned autocast on for the thread that called amp::initialize, and this is another "
             "thread, whose reset would leave it on there\n  hint: reset (or initialize again) from the training thread");
    AutocastState& a = autocast_state(state_ptr()->device);
    // Inside a region the region's exit would restore the O1 state it saved: autocast left on.
    MG_CHECK(a.depth == 0, Error, "amp::reset: called inside an Autocast region, whose exit would turn O1's autocast "
             "back on\n  hint: leave the region first");
    a = default_autocast_state(state_ptr()->device);
  }
  clear_weight_cache();
  state_ptr().reset();
}

const DType* forward_input_dtype() {
  const AmpState* st = state_ptr().get();
  return st && st->props.enabled && st->cast_inputs ? &st->input_dtype : nullptr;
}

MemoryFormat forward_input_format() {
  const AmpState* st = state_ptr().get();
  return st ? st->input_format : MemoryFormat::Contiguous;
}

const DType* forward_output_dtype() {
  const AmpState* st = state_ptr().get();
  return st && st->props.enabled && st->cast_outputs ? &st->output_dtype : nullptr;
}

// ---- scale_loss ----

ScaledLoss scale_loss(const Tensor& loss, const std::vector<optim::Optimizer*>& optimizers, ScaleLossOptions options) {
  const char* who = "amp::scale_loss";
  AmpState& st = state(who);
  MG_CHECK(loss.defined() && is_floating(loss.dtype()), DTypeError, who, ": expected a floating loss, got ",
           loss.defined() ? describe(loss) : "undefined");
  MG_CHECK(!optimizers.empty(), Error, who, ": no optimizer given");
  ScaledLoss s;
  s.optimizers_ = optimizers;
  s.options_ = options;
  if (!st.props.enabled) {
    s.scaled_ = loss;
    return s;
  }
  MG_CHECK(options.loss_id >= 0 && options.loss_id < st.props.num_losses, Error, who, ": loss_id ", options.loss_id,
           " is out of range; amp::initialize was given num_losses = ", st.props.num_losses,
           "\n  hint: pass num_losses = <number of losses> to amp::initialize");
  // Every optimizer is checked before any gradient is set aside: a refusal leaves them all as they were.
  for (optim::Optimizer* opt : optimizers) {
    OptimizerEntry& e = entry_of(st, opt, who);
    MG_CHECK(e.pending_loss_id < 0 || e.pending_loss_id == options.loss_id, Error, who, ": loss ", options.loss_id,
             " while the gradients still hold loss ", e.pending_loss_id, "'s delay_unscale'd values",
             "\n  hint: finish an accumulation (a scale_loss without delay_unscale) before switching loss_id");
  }
  for (optim::Optimizer* opt : optimizers) {
    OptimizerEntry& e = entry_of(st, opt, who);
    // Gradients of earlier losses in this step are already unscaled: set them aside, so this loss's
    // scaled gradients arrive alone, and add them back after unscaling (Apex's stash). Masters
    // need none: the unscale accumulates into the master gradients.
    if (e.pending_loss_id < 0) {
      std::unordered_set<const TensorImpl*> masters;
      for (const optim::MasterPair& m : opt->master_pairs()) masters.insert(m.master.impl());
      e.stash.clear();
      for (const Tensor& p : opt->parameters()) {
        e.stash.push_back(masters.count(p.impl()) ? Tensor() : p.grad());
        if (!masters.count(p.impl())) p.set_grad(Tensor());
      }
    }
  }
  GradScaler& scaler = st.scalers[std::size_t(options.loss_id)];
  const bool device_path = scaler.on_device() ? *scaler.device() == loss.device() : scaler.use_device(loss.device());
  if (device_path) {
    // CUDA: the scale stays on the device (no read); finish() unscales and decides there too.
    s.on_device_ = true;
    s.scaled_ = scaler.scale(loss);
    return s;
  }
  s.scale_ = scaler.get_scale();
  // In f32, as Apex's loss.float() * scale and GradScaler::scale: an f16 loss times 65536 would be
  // inf in f16 (every iteration skipped until the scale fell below the loss's headroom).
  const Tensor wide = loss.dtype() == DType::F16 || loss.dtype() == DType::BF16 ? to(loss, DType::F32) : loss;
  s.scaled_ = s.scale_ == 1.0 ? loss : wide * s.scale_;
  return s;
}

void ScaledLoss::backward(bool retain_graph) {
  scaled_.backward(Tensor(), retain_graph);
  finish();
}

void ScaledLoss::finish() {
  const char* who = "amp::ScaledLoss::finish";
  MG_CHECK(!finished_, Error, who, ": already finished (backward() finishes)");
  finished_ = true;
  AmpState& st = state(who);
  // The forward's casts were used by this backward: drop them, as Apex does at the end of its
  // scale_loss (under O1 there is no region whose exit would).
  if (st.props.patch_functions) clear_weight_cache();
  if (!st.props.enabled) return;
  if (options_.delay_unscale) {
    for (optim::Optimizer* opt : optimizers_) entry_of(st, opt, who).pending_loss_id = options_.loss_id;
    return;
  }
  GradScaler& scaler = st.scalers[std::size_t(options_.loss_id)];
  const Properties& p = st.props;
  // The device path (the scaler's state on CUDA): each optimizer's fused unscale writes a device
  // found-inf flag, the loss's flag is their maximum, and the scale update and the optimizers'
  // skip decisions read it there — no host synchronisation. An optimizer that cannot take the
  // fused path is unscaled and checked on the host (one read of the scale and the counts).
  UnscaleStats total;
  Tensor loss_flag;
  bool host_checked = false;
  for (optim::Optimizer* o : optimizers_) {
    optim::Optimizer& opt = *o;
    const bool accumulate = opt.has_master_weights() && opt.master_grads_synced();
    const Tensor flag = on_device_ ? scaler.unscale_to_flag(opt, accumulate) : Tensor();
    NoGradGuard no_grad;
    if (flag.defined()) {
      loss_flag = loss_flag.defined() ? maximum(loss_flag, flag) : flag;
    } else {
      if (on_device_) scale_ = scaler.get_scale();
      total += unscale_optimizer_grads(opt, 1.0 / scale_, accumulate);
      host_checked = true;
    }
    OptimizerEntry& e = entry_of(st, &opt, who);
    const Tensors params = opt.parameters();
    for (std::size_t i = 0; i < params.size() && i < e.stash.size(); ++i) {
      const Tensor& old = e.stash[i];
      if (!old.defined()) continue;
      const Tensor g = params[i].grad();
      params[i].set_grad(g.defined() ? add(g, old) : old);
    }
    // The masters hold this loss's unscaled gradients now; the model's low-precision gradients
    // start empty for the next loss.
    for (const optim::MasterPair& m : opt.master_pairs()) m.model.set_grad(Tensor());
    e.stash.clear();
    e.pending_loss_id = -1;
  }
  if (loss_flag.defined()) {
    // Decided on the device: an overflow of this loss skips every one of its optimizers' next step.
    NoGradGuard no_grad;
    if (total.found_inf()) loss_flag.fill_(1.0);
    for (optim::Optimizer* opt : optimizers_) {
      OptimizerEntry& e = entry_of(st, opt, who);
      e.skip_flag = e.skip_flag.defined() ? maximum(e.skip_flag, loss_flag) : loss_flag;
    }
    overflow_flag_ = loss_flag;
    scaler.update_from(loss_flag);  // the overflow line (verbosity >= 1) comes when the state is read
    return;
  }
  MG_ASSERT(host_checked || optimizers_.empty(), "amp::ScaledLoss::finish: no optimizer was unscaled");
  overflow_ = total.found_inf();
  // The step is gated before the scale update, which throws at the floor (min_loss_scale) or after
  // too many skips: a caller who catches that error must still not step on inf/NaN gradients.
  if (overflow_) {
    for (optim::Optimizer* opt : optimizers_) entry_of(st, opt, who).skip_next = true;
  }
  scaler.update_from(overflow_);
  if (overflow_) {
    if (p.verbosity >= 1 && !scaler.on_device()) {  // else the on_skip line of initialize_models
      std::ostringstream line;
      line << "amp: gradient overflow (" << total.nonfinite << " inf/NaN values); skipping the step, loss scaler "
           << options_.loss_id << (p.loss_scale.dynamic ? " reducing the loss scale to " : " keeping its static scale ")
           << scaler.get_scale() << "\n";
      log_sink()(line.str());
    }
  }
}

bool ScaledLoss::overflow() const {
  if (overflow_flag_.defined()) {
    overflow_ = overflow_flag_.item<float>() != 0.0f;  // the lazy read: one synchronisation
    overflow_flag_ = Tensor();
  }
  return overflow_;
}

Tensors master_params(const optim::Optimizer& optimizer) {
  entry_of(state("amp::master_params"), &optimizer, "amp::master_params");
  return optimizer.parameters();  // with master weights these are the f32 masters
}

double loss_scale(int loss_id) { return loss_scaler(loss_id).get_scale(); }

const GradScaler& loss_scaler(int loss_id) {
  AmpState& st = state("amp::loss_scaler");
  MG_CHECK(loss_id >= 0 && loss_id < int(st.scalers.size()), Error, "amp::loss_scaler: loss_id ", loss_id,
           " is out of range (", st.scalers.size(), " loss scalers)");
  return st.scalers[std::size_t(loss_id)];
}

std::string loss_scaler_state_prefix(int loss_id) { return "loss_scaler." + std::to_string(loss_id) + "."; }

StateDict state_dict() {
  const AmpState& st = state("amp::state_dict");
  StateDict s;
  s.strings["opt_level"] = opt_level_name(st.props.opt_level);
  s.ints["num_losses"] = int64_t(st.scalers.size());
  for (std::size_t i = 0; i < st.scalers.size(); ++i) {
    add_prefixed(s, loss_scaler_state_prefix(int(i)), st.scalers[i].state_dict());
  }
  return s;
}

void load_state_dict(const StateDict& s) {
  const char* who = "amp::load_state_dict";
  AmpState& st = state(who);
  const std::string& level = s.string_at(who, "opt_level");
  MG_CHECK(level == opt_level_name(st.props.opt_level), Error, who, ": the state was saved at opt_level ", level,
           " but amp was initialized at ", opt_level_name(st.props.opt_level),
           "\n  hint: resume with the same --opt-level (the model and optimizer state depend on it)");
  const int64_t n = s.int_at(who, "num_losses");
  MG_CHECK(n == int64_t(st.scalers.size()), Error, who, ": the state has ", n, " loss scalers but amp has ",
           st.scalers.size(), " (num_losses)");
  const LossScaleSetting& want = st.props.loss_scale;
  std::vector<StateDict> parts;
  for (std::size_t i = 0; i < st.scalers.size(); ++i) {
    parts.push_back(prefixed_part(s, loss_scaler_state_prefix(int(i))));
    const StateDict& part = parts.back();
    // Parsed and validated on the host first, by a scaler configured as the real one (an enabled
    // state in a disabled amp, or the reverse, is its error).
    GradScaler(st.props.enabled ? GradScalerOptions{.dynamic = want.dynamic} : GradScalerOptions{.enabled = false})
        .load_state_dict(part);
    // The loss scaling is part of the level's properties, as the opt level is. A disabled amp
    // (enabled = false) keeps disabled scalers whatever the level's loss scale says: only their own
    // check (disabled beside disabled) applies.
    if (st.props.enabled && part.ints.count("dynamic")) {
      const bool dynamic = part.ints.at("dynamic") != 0;
      MG_CHECK(dynamic == want.dynamic, Error, who, ": loss scaler ", i, " was saved with ",
               dynamic ? "a dynamic loss scale" : "a static loss scale", " but amp was initialized with ",
               want.dynamic ? "a dynamic one" : "a static one",
               "\n  hint: resume with the same loss_scale (the checkpoint's scale and skip counts depend on it)");
    }
    if (st.props.enabled && !want.dynamic) {
      const double scale = part.float_at(who, "scale");
      MG_CHECK(scale == want.value, Error, who, ": loss scaler ", i, " was saved with the static loss scale ", scale,
               " but amp was initialized with ", want.value, "\n  hint: resume with the same loss_scale");
    }
  }
  // Every part is valid: now the scalers (whose device state a load writes in place).
  for (std::size_t i = 0; i < st.scalers.size(); ++i) st.scalers[i].load_state_dict(parts[i]);
}

}  // namespace mg::amp
