#include "mixgrad/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <numeric>
#include <set>
#include <utility>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/ops/layout.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/optim/master_grad_check.h"

namespace mg::optim {

double ParamGroup::option(const std::string& name) const {
  const auto it = options.find(name);
  MG_CHECK(it != options.end(), Error, "ParamGroup: no option '", name, "'");
  return it->second;
}

Optimizer::Optimizer(std::string name, OptionMap defaults)
    : name_(std::move(name)), defaults_(std::move(defaults)) {}

Optimizer::~Optimizer() {
  if (has_master_weights()) detail::unregister_master_optimizer(this);
}

void Optimizer::init_groups(const std::vector<ParamGroupSpec>& groups) {
  check_options(defaults_);
  check_new_group_options(defaults_);
  int64_t total = 0;
  for (const ParamGroupSpec& g : groups) {
    add_param_group(g.params, g.options);
    total += int64_t(g.params.size());
  }
  MG_CHECK(total > 0, Error, name_, ": got an empty parameter list");
}

void Optimizer::check_new_params(const Tensors& params) const {
  std::set<const TensorImpl*> seen;
  for (std::size_t k = 0; k < params.size(); ++k) {
    const Tensor& p = params[k];
    MG_CHECK(p.defined(), Error, name_, ": parameter ", k, " of the new group is undefined");
    MG_CHECK(p.is_floating_point(), DTypeError, name_, ": can only optimize floating tensors; parameter ",
             k, " of the new group is ", describe(p));
    MG_CHECK(p.is_leaf(), Error, name_, ": can't optimize a non-leaf tensor (parameter ", k,
             " of the new group, ", describe(p), ")\n  hint: optimize the leaf it was computed from, or detach() it");
    MG_CHECK(seen.insert(p.impl()).second, Error, name_, ": parameter ", k,
             " appears more than once in the new group");
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      for (const Tensor& q : groups_[g].params) {
        MG_CHECK(!q.is_same(p), Error, name_, ": parameter ", k, " of the new group (", describe(p),
                 ") is already in group ", g, "; a parameter may belong to one group only");
      }
    }
    // After use_master_weights the groups hold the f32 masters: a model parameter that has one is
    // in a group too.
    for (const MasterPair& m : masters_) {
      MG_CHECK(!m.model.is_same(p), Error, name_, ": parameter ", k, " of the new group (", describe(p),
               ") is already optimized through its f32 master; a parameter may belong to one group only");
    }
  }
}

Tensor Optimizer::make_master(Tensor& p) {
  NoGradGuard no_grad;
  // The master keeps the model's layout (a channels-last weight gets a channels-last master), so
  // the casts between them walk both as flat memory.
  Tensor master = to(p, DType::F32);
  if (!is_dense_layout(master)) master = contiguous(master);
  if (master.is_same(p)) master = clone(master);
  master.requires_grad_(true);
  masters_.push_back({p, master});
  p = master;
  return master;
}

void Optimizer::add_param_group(const Tensors& params, const OptionMap& options) {
  check_new_params(params);
  OptionMap m = defaults_;
  for (const auto& [key, value] : options) {
    if (!defaults_.count(key)) {
      std::string known;
      for (const auto& [k, v] : defaults_) {
        if (!known.empty()) known += ", ";
        known += k;
      }
      MG_THROW(Error, name_, ": unknown option '", key, "' for a parameter group; the options are ", known);
    }
    m[key] = value;
  }
  check_options(m);
  check_new_group_options(m);
  groups_.push_back({params, std::move(m)});
  // A group added after use_master_weights gets f32 masters for its f16/bf16 parameters, as Apex's
  // add_param_group: stepping them in their own dtype would lose the small updates.
  if (has_master_weights()) {
    for (Tensor& p : groups_.back().params) {
      if (p.dtype() == DType::F16 || p.dtype() == DType::BF16) make_master(p);
    }
  }
}

namespace {
// Rethrows an error of an options check ("SGD: lr must be ...") as "<owner>: param group g: lr must be ...".
template <typename F>
void with_group_context(const std::string& owner, const std::string& name, std::size_t g, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    std::string msg = e.what();
    const std::string prefix = name + ": ";
    if (msg.rfind(prefix, 0) == 0) msg = msg.substr(prefix.size());
    MG_THROW(Error, owner, ": param group ", g, ": ", msg);
  }
}
}  // namespace

void Optimizer::step() { gated_step(Tensor()); }

int64_t Optimizer::register_step_post_hook(StepHook hook, bool also_after_error) {
  MG_CHECK(static_cast<bool>(hook), Error, name_, "::register_step_post_hook: the hook is empty");
  MG_CHECK(!graph_capturing_, Error, name_, "::register_step_post_hook: not while a CUDA graph captures the step");
  post_hooks_.push_back({next_hook_handle_, std::move(hook), also_after_error});
  return next_hook_handle_++;
}

void Optimizer::remove_step_post_hook(int64_t handle) {
  const auto it = std::find_if(post_hooks_.begin(), post_hooks_.end(), [&](const auto& h) { return h.handle == handle; });
  MG_CHECK(it != post_hooks_.end(), Error, name_, "::remove_step_post_hook: no hook has handle ", handle,
           " (removed already, or registered on another optimizer)");
  post_hooks_.erase(it);
}

void Optimizer::run_post_hooks() {
  // A copy: a hook may remove itself.
  const auto hooks = post_hooks_;
  for (const PostHook& h : hooks) h.hook(*this);
}

void Optimizer::run_step_or_error_hooks() {
  try {
    run_step();
  } catch (...) {
    const std::exception_ptr error = std::current_exception();
    const auto hooks = post_hooks_;
    for (const PostHook& h : hooks) {
      if (!h.also_after_error) continue;
      try {
        h.hook(*this);
      } catch (...) {  // the update's error is the one to report
      }
    }
    std::rethrow_exception(error);
  }
}

void Optimizer::gated_step(const Tensor& found_inf) {
  skipped_flag_ = Tensor();
  const StepGateDecision gate = gate_ ? gate_(*this) : StepGateDecision();
  last_step_skipped_ = !gate.run;
  if (last_step_skipped_) {
    // The skipped step used up this iteration's master gradients (inf/NaN): the next loss must
    // overwrite them, not add to them, even when only the model's gradients are zeroed.
    master_grads_synced_ = false;
    return;
  }
  Tensor flag = found_inf;
  if (gate.found_inf.defined()) {
    const Tensor& g = gate.found_inf;
    MG_CHECK(g.dtype() == DType::F32 && g.numel() == 1, Error, name_,
             ": the step gate's device flag must be a one-element f32 tensor, got ", describe(g));
    NoGradGuard no_grad;
    flag = flag.defined() ? reshape(maximum(reshape(flag, {1}), reshape(g, {1})), {1}) : g;
  }
  if (!flag.defined()) {
    run_step_or_error_hooks();
    run_post_hooks();
    return;
  }
  const Device dev = flag.device();
  bool fused = !dev.is_cpu() && multi_tensor_kernels(dev.type) != nullptr && has_fused_step();
  for (const ParamGroup& group : groups_) {
    for (const Tensor& p : group.params) fused = fused && p.device() == dev;
  }
  if (!fused) {
    // A path without the device flag: decide on the host.
    if (flag.item<float>() != 0.0f) {
      last_step_skipped_ = true;
      master_grads_synced_ = false;  // as a gate's skip: the next loss overwrites the masters' gradients
      return;
    }
    run_step_or_error_hooks();
    run_post_hooks();
    return;
  }
  found_inf_flag_ = flag;
  try {
    run_step_or_error_hooks();
  } catch (...) {
    found_inf_flag_ = Tensor();
    throw;
  }
  found_inf_flag_ = Tensor();
  skipped_flag_ = clone(flag);  // the flag's owner may clear it (GradScaler::update) before the read
  count_device_skip(flag, dev);
  run_post_hooks();
}

void Optimizer::count_device_skip(const Tensor& flag, Device device) {
  NoGradGuard no_grad;
  if (device_skips_.defined() && device_skips_.device() != device) {
    folded_skips_ += device_skipped() - folded_skips_;  // the old counter, read once and retired
    device_skips_ = Tensor();
    device_skips_read_ = 0;
  }
  if (!device_skips_.defined()) {
    MG_CHECK(!graph_capturing_, InternalError, name_, ": the device skip counter was not made before the CUDA graph capture");
    device_skips_ = zeros({1}, {.dtype = DType::I64, .device = device});
  }
  const Tensor f = reshape(flag, {1});
  device_skips_.add_(to(ne(f, zeros_like(f)), DType::I64));  // small kernels, no host read
  device_skips_stale_ = true;
}

int64_t Optimizer::device_skipped() const {
  if (device_skips_stale_) {
    device_skips_read_ = device_skips_.item<int64_t>();  // the lazy read: one synchronisation
    device_skips_stale_ = false;
  }
  return folded_skips_ + (device_skips_.defined() ? device_skips_read_ : 0);
}

int64_t Optimizer::step_count() const { return step_count_ - device_skipped(); }

Optimizer::StepMark Optimizer::step_mark() const {
  StepMark m{.issued = step_count_, .folded_skips = folded_skips_};
  if (device_skips_.defined()) m.device_skips = clone(device_skips_);  // a device copy: no wait
  return m;
}

int64_t Optimizer::step_count_at(const StepMark& mark) const {
  return mark.issued - mark.folded_skips - (mark.device_skips.defined() ? mark.device_skips.item<int64_t>() : 0);
}

bool Optimizer::stepped_since(const StepMark& mark) const { return step_count() != step_count_at(mark); }

void Optimizer::run_step() {
  if (has_master_weights()) sync_master_grads();
  // Everything that can be wrong is checked before the first parameter changes.
  int64_t index = 0;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    with_group_context(name_, name_, g, [&] { check_options(groups_[g].options); });
    for (const Tensor& p : groups_[g].params) check_param(p, index++);
  }
  ++step_count_;
  model_written_.clear();
  for (ParamGroup& group : groups_) step_group(group);
  if (has_master_weights()) {
    // Model copies a fused device step already wrote in its pass are not copied again.
    std::vector<MasterPair> rest;
    for (const MasterPair& m : masters_) {
      if (std::find(model_written_.begin(), model_written_.end(), m.master.impl()) == model_written_.end()) {
        rest.push_back(m);
      }
    }
    if (!rest.empty()) copy_masters_to_model(rest);
    master_grads_synced_ = false;
  }
}

void Optimizer::step_unless_found_inf(const Tensor& found_inf) {
  MG_CHECK(found_inf.defined() && found_inf.dtype() == DType::F32 && found_inf.numel() == 1, Error, name_,
           "::step_unless_found_inf: expected a one-element f32 flag, got ",
           found_inf.defined() ? describe(found_inf) : "undefined");
  gated_step(found_inf);
}

bool Optimizer::last_step_skipped() const {
  if (skipped_flag_.defined()) {
    last_step_skipped_ = skipped_flag_.item<float>() != 0.0f;  // the lazy read: one synchronisation
    skipped_flag_ = Tensor();
  }
  return last_step_skipped_;
}

const MultiTensorKernels* Optimizer::fused_step_args(const ParamGroup& group, const std::vector<Work>& work,
                                                     MultiTensorStepArgs& args) {
  if (work.empty()) return nullptr;
  const Device dev = work.front().param.device();
  const bool one_device =
      std::all_of(work.begin(), work.end(), [&](const Work& w) { return w.param.device() == dev; });
  if (!one_device) leave_fused_path(work);  // a parameter of the group may have been on it before
  if (!one_device || dev.is_cpu()) return nullptr;
  const MultiTensorKernels* k = multi_tensor_kernels(dev.type);
  if (!k) return nullptr;
  std::unordered_map<const TensorImpl*, Tensor> model_of;
  for (const MasterPair& m : masters_) model_of[m.master.impl()] = m.model;
  for (const Work& w : work) {
    args.params.push_back(w.param);
    args.grads.push_back(w.grad);
    const auto it = model_of.find(w.param.impl());
    // The kernels write an f16 or bf16 model copy (cuda/kernels/multi_tensor.cu); a model moved
    // to another dtype since use_master_weights (Module::to) gets the generic copy afterwards.
    const bool model = it != model_of.end() && same_memory_order(it->second, w.param) &&
                       is_dense_layout(it->second) && it->second.device() == dev &&
                       (it->second.dtype() == DType::F16 || it->second.dtype() == DType::BF16);
    args.model.push_back(model ? it->second : Tensor());
    ParamState& st = *w.state;
    if (!st.device_step.defined()) {
      MG_CHECK(!graph_capturing_, Error, name_, ": parameter ", w.index,
               " has no device step counter yet, and one made inside a CUDA graph capture would restart at every "
               "replay\n  hint: run one eager step() before capturing");
      st.device_step = full({1}, double(st.step), {.dtype = DType::I64, .device = dev});  // a device fill
    }
    args.steps.push_back(st.device_step.data<int64_t>());
  }
  args.found_inf = found_inf_flag_.defined() ? found_inf_flag_.data<float>() : nullptr;
  args.hyper = device_options(std::size_t(&group - groups_.data()), dev);
  return k;
}

Tensor Optimizer::device_option(const ParamGroup& group, const std::string& name) const {
  const std::size_t g = std::size_t(&group - groups_.data());
  const std::vector<std::string> names = device_option_names();
  const auto it = std::find(names.begin(), names.end(), name);
  MG_ASSERT(g < device_options_.size() && device_options_[g].defined() && it != names.end(), name_,
            ": device_option('", name, "') before fused_step_args made the group's device options");
  return narrow(device_options_[g], 0, int64_t(it - names.begin()), 1);
}

void Optimizer::leave_fused_path(const std::vector<Work>& work) {
  const bool any = std::any_of(work.begin(), work.end(), [](const Work& w) {
    return w.state->device_step.defined() || !w.state->device_scalars.empty() || w.state->device_first_step.defined();
  });
  if (!any) return;
  refresh_device_steps();  // the host copies become the truth again
  // A buffer the fused path made whose first update never ran (every step since skipped) holds
  // nothing yet: dropped, so the generic path starts it as its first update, as the CPU path.
  const std::vector<std::string> first_update = buffers_started_by_first_update();
  if (!first_update.empty()) {
    for (const ParamState* fresh : states_before_first_update()) {
      for (const Work& w : work) {
        if (w.state != fresh) continue;
        for (const std::string& name : first_update) w.state->buffers.erase(name);
      }
    }
  }
  for (const Work& w : work) {
    w.state->device_step = Tensor();
    w.state->device_scalars.clear();
    w.state->device_first_step = Tensor();
    w.state->step_on_device = false;
  }
}

const double* Optimizer::device_options(std::size_t g, Device device) {
  const std::vector<std::string> names = device_option_names();
  if (names.empty()) return nullptr;
  if (device_options_.size() < groups_.size()) {
    device_options_.resize(groups_.size());
    device_options_host_.resize(groups_.size());
  }
  std::vector<double> values;
  for (const std::string& n : names) values.push_back(groups_[g].option(n));
  Tensor& t = device_options_[g];
  std::vector<double>& host = device_options_host_[g];
  if (!t.defined() || t.device() != device) {
    MG_CHECK(!graph_capturing_, InternalError, name_, ": the device options of group ", g,
             " were not made before the CUDA graph capture");
    t = empty({int64_t(names.size())}, {.dtype = DType::F64, .device = device});
    host.assign(names.size(), std::nan(""));  // never equal: every value is written below
  }
  if (graph_capturing_) return t.data<double>();  // a write now would be frozen into the graph
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i] == host[i]) continue;
    select(t, 0, int64_t(i)).fill_(values[i]);  // a one-element fill kernel: no host wait
    host[i] = values[i];
  }
  return t.data<double>();
}

std::string Optimizer::graph_signature() const {
  const std::vector<std::string> device_names = device_option_names();
  std::string s;
  for (const ParamGroup& group : groups_) {
    s += "[";
    for (const Tensor& p : group.params) s += str_cat(static_cast<const void*>(p.impl()), ",");
    for (const auto& [key, v] : defaults_) {
      if (std::find(device_names.begin(), device_names.end(), key) == device_names.end()) {
        s += str_cat(key, "=", group.options.at(key), ";");
      }
    }
    s += graph_structure(group);
    s += "]";
  }
  return s;
}

void Optimizer::graph_capture_begin() {
  MG_CHECK(!gate_, Error, name_,
           ": cannot be captured into a CUDA graph while it has a step gate (amp::initialize installs one for "
           "amp::scale_loss): the gate decides on the host, once, at the capture"
           "\n  hint: scale with amp::GradScaler, whose skip decision is a device value, and remove the gate: "
           "opt.set_step_gate(nullptr)");
  MG_CHECK(has_fused_step(), Error, name_, ": has no fused device step, so a CUDA graph would freeze its host math");
  MG_CHECK(post_hooks_.empty(), Error, name_, ": cannot be captured into a CUDA graph while it has ", post_hooks_.size(),
           " step post-hook(s) (a ZeroRedundantOptimizer's broadcast is one): a hook is host code, run once at the "
           "capture");
  if (const char* why = graph_capture_refusal()) MG_THROW(Error, name_, ": cannot be captured into a CUDA graph: ", why);
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    with_group_context(name_, name_, g, [&] { check_options(groups_[g].options); });
    const Tensors& params = groups_[g].params;
    const Device dev = params.empty() ? Device::cpu() : params.front().device();
    for (std::size_t i = 0; i < params.size(); ++i) {
      const Tensor& p = params[i];
      MG_CHECK(p.device().is_cuda() && p.device() == dev && multi_tensor_kernels(dev.type) != nullptr, Error, name_,
               ": cannot be captured into a CUDA graph: parameter ", i, " of group ", g, " is ", describe(p),
               "; every parameter of a group must be on one CUDA device (the fused device path)");
      const auto it = state_.find(p.impl());
      // (A parameter without a gradient now and without state, e.g. a frozen one, may stay so: if
      // the captured step gives it a gradient, buffer() and fused_step_args refuse its new state.)
      MG_CHECK(!p.grad().defined() || (it != state_.end() && it->second.device_step.defined()), Error, name_,
               ": cannot be captured into a CUDA graph yet: parameter ", i, " of group ", g,
               " has no optimizer state, and state created during the capture would be re-initialised at every "
               "replay\n  hint: run at least one eager step (warm-up) before capturing");
    }
    if (!params.empty()) device_options(g, dev);  // made and written now, outside the graph
  }
  if (!device_skips_.defined()) {
    // Made now, outside the graph: the captured fused steps count their skips into it.
    const Tensors params = parameters();
    if (!params.empty()) device_skips_ = zeros({1}, {.dtype = DType::I64, .device = params.front().device()});
  }
  graph_step_count_at_begin_ = step_count_;
  // Restored if the capture is abandoned: a step inside it replaces them with tensors of the
  // graph's pool that never ran.
  capture_saved_skipped_flag_ = skipped_flag_;
  capture_saved_last_step_skipped_ = last_step_skipped_;
  graph_capturing_ = true;
  graph_captured_ = false;
}

void Optimizer::graph_capture_end(bool ok) {
  graph_capturing_ = false;
  const int64_t calls = step_count_ - graph_step_count_at_begin_;
  step_count_ = graph_step_count_at_begin_;  // nothing ran during the capture: each replay counts
  if (!ok) {  // abandoned: the state before it, so eager steps go on as if it never began
    skipped_flag_ = capture_saved_skipped_flag_;
    last_step_skipped_ = capture_saved_last_step_skipped_;
    capture_saved_skipped_flag_ = Tensor();
    return;
  }
  capture_saved_skipped_flag_ = Tensor();
  MG_CHECK(calls >= 1, Error, name_, ": the captured step never called step()",
           "\n  hint: capture the whole training step, optimizer step included");
  graph_steps_per_replay_ = calls;
  graph_skipped_flag_ = skipped_flag_;
  skipped_flag_ = Tensor();
  last_step_skipped_ = false;
  graph_signature_ = graph_signature();
  graph_state_generation_ = state_generation_;
  graph_captured_ = true;
}

void Optimizer::graph_replay_check() const {
  MG_CHECK(graph_captured_, Error, name_, ": replaying a CUDA graph this optimizer was not captured into");
  MG_CHECK(graph_signature() == graph_signature_, Error, name_,
           ": the parameter groups or an option the fused kernels take by value (nesterov, amsgrad, ...) changed "
           "since the CUDA graph was captured; the graph would replay the old ones\n  hint: capture again");
  MG_CHECK(state_generation_ == graph_state_generation_, Error, name_,
           ": load_state_dict replaced the optimizer state after the CUDA graph was captured; the graph would "
           "update the old buffers\n  hint: capture again after loading");
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    with_group_context(name_, name_, g, [&] { check_options(groups_[g].options); });
  }
}

void Optimizer::graph_replay_prepare() {
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    if (!groups_[g].params.empty()) device_options(g, groups_[g].params.front().device());
    // The replay writes them, as an eager step would: their new versions tell version-checked
    // readers (autocast's weight cache, saved tensors) that the values changed.
    for (const Tensor& p : groups_[g].params) p.bump_version();
  }
  for (const MasterPair& m : masters_) m.model.bump_version();
  // The replay advances the device step counters (and device scalars): a host copy read since the
  // last replay is stale again.
  for (auto& [impl, st] : state_) {
    if (st.device_step.defined()) st.step_on_device = true;
  }
  step_count_ += graph_steps_per_replay_;
  device_skips_stale_ = device_skips_.defined();  // the replay counts its skips there
  skipped_flag_ = graph_skipped_flag_;  // read lazily by last_step_skipped()
  last_step_skipped_ = false;
}

void Optimizer::finish_fused_step(const std::vector<Work>& work, const MultiTensorKernels* k,
                                  const MultiTensorStepArgs& args) {
  k->count_steps(args.steps, args.found_inf, work.front().param.device());
  for (std::size_t i = 0; i < work.size(); ++i) {
    const Work& w = work[i];
    // Known on the device only (device scalars change with every fused update).
    if (args.found_inf || w.state->step_on_device || graph_capturing_ || !w.state->device_scalars.empty()) {
      w.state->step_on_device = true;
    }
    else w.state->step += 1;
    w.param.bump_version();
    if (args.model[i].defined()) {
      args.model[i].bump_version();
      model_written_.push_back(w.param.impl());
    }
  }
}

namespace {
// The value of each tensor, [1] tensors of dtype T (int64_t counters, double scalars) on any
// devices, with one read per device.
template <typename T = int64_t>
std::vector<T> read_counters(const Tensors& counters) {
  std::vector<T> out(counters.size());
  std::vector<std::size_t> left(counters.size());
  std::iota(left.begin(), left.end(), std::size_t(0));
  while (!left.empty()) {
    const Device dev = counters[left.front()].device();
    std::vector<std::size_t> here, rest;
    Tensors parts;
    for (std::size_t i : left) {
      if (counters[i].device() == dev) {
        here.push_back(i);
        parts.push_back(counters[i]);
      } else {
        rest.push_back(i);
      }
    }
    const Tensor host = contiguous(cat(parts).to(Device::cpu()));
    const T* v = host.data<T>();
    for (std::size_t k = 0; k < here.size(); ++k) out[here[k]] = v[k];
    left = std::move(rest);
  }
  return out;
}
}  // namespace

void Optimizer::refresh_device_steps() const {
  std::vector<ParamState*> stale;
  Tensors counters;
  for (auto& [impl, st] : state_) {
    if (!st.step_on_device) continue;
    stale.push_back(&st);
    counters.push_back(st.device_step);
  }
  const std::vector<int64_t> steps = read_counters(counters);
  std::vector<std::pair<ParamState*, std::string>> scalar_of;
  Tensors scalars;
  for (std::size_t i = 0; i < stale.size(); ++i) {
    stale[i]->step = steps[i];
    stale[i]->step_on_device = false;
    for (const auto& [name, t] : stale[i]->device_scalars) {
      scalar_of.emplace_back(stale[i], name);
      scalars.push_back(t);
    }
  }
  const std::vector<double> values = read_counters<double>(scalars);
  for (std::size_t i = 0; i < values.size(); ++i) scalar_of[i].first->scalars[scalar_of[i].second] = values[i];
}

std::vector<const ParamState*> Optimizer::states_before_first_update() const {
  std::vector<const ParamState*> made, fresh;
  Tensors firsts;
  for (const auto& [impl, st] : state_) {
    if (!st.device_first_step.defined()) continue;
    made.push_back(&st);
    firsts.push_back(st.device_first_step);
  }
  const std::vector<int64_t> first = read_counters(firsts);
  for (std::size_t i = 0; i < made.size(); ++i) {
    if (first[i] == made[i]->step) fresh.push_back(made[i]);
  }
  return fresh;
}

namespace {
void clear_grad(const Tensor& p, bool set_to_none) {
  const Tensor g = p.grad();
  if (!g.defined()) return;
  if (set_to_none) {
    p.set_grad(Tensor());
  } else if (g.grad_fn()) {
    p.set_grad(zeros_like(g));  // a gradient with history (create_graph): replace, don't mutate
  } else {
    Tensor(g).zero_();
  }
}
}  // namespace

void Optimizer::zero_grad(bool set_to_none) {
  for (const ParamGroup& group : groups_) {
    for (const Tensor& p : group.params) clear_grad(p, set_to_none);
  }
  for (const MasterPair& m : masters_) clear_grad(m.model, set_to_none);
  for (const Tensor& t : zero_grad_also_) clear_grad(t, set_to_none);
  master_grads_synced_ = false;
}

void Optimizer::check_can_use_master_weights() const {
  MG_CHECK(masters_.empty(), Error, name_, ": use_master_weights was already called");
  MG_CHECK(step_count_ == 0 && state_.empty(), Error, name_,
           ": master weights must be set up before the first step (the optimizer already has state)",
           "\n  hint: create the optimizer, then amp::initialize / use_master_weights, then train");
}

void Optimizer::use_master_weights() {
  check_can_use_master_weights();
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    for (Tensor& p : groups_[g].params) {
      if (p.dtype() == DType::F16 || p.dtype() == DType::BF16) make_master(p);
    }
  }
  MG_CHECK(!masters_.empty(), Error, name_, ": use_master_weights found no f16/bf16 parameter to keep an f32 master of",
           "\n  hint: cast the model to f16/bf16 first (amp::initialize at O2 does)");
  detail::register_master_optimizer(this);  // so clipping can refuse gradients the step won't read
}

void Optimizer::sync_master_grads() {
  if (master_grads_synced_) return;
  copy_model_grads_to_masters(masters_);
  master_grads_synced_ = true;
}

Tensors Optimizer::parameters() const {
  Tensors out;
  for (const ParamGroup& group : groups_) out.insert(out.end(), group.params.begin(), group.params.end());
  return out;
}

Tensors Optimizer::grads() const {
  Tensors out;
  for (const ParamGroup& group : groups_) {
    for (const Tensor& p : group.params) out.push_back(p.grad());
  }
  return out;
}

const ParamState* Optimizer::state(const Tensor& p) const {
  if (!p.defined()) return nullptr;
  refresh_device_steps();
  const auto it = state_.find(p.impl());
  return it == state_.end() ? nullptr : &it->second;
}

std::optional<Shape> Optimizer::buffer_shape(const std::string& name, const Tensor& p) const {
  (void)name;
  return p.shape();
}

std::vector<std::string> Optimizer::buffers_created(const OptionMap& options) const {
  (void)options;
  return buffer_names();
}

int64_t Optimizer::planned_state_values(const Tensor& p, const OptionMap& options) const {
  int64_t values = 0;
  for (const std::string& name : buffers_created(options)) {
    if (const std::optional<Shape> shape = buffer_shape(name, p)) values += shape_numel(*shape);
  }
  return values;
}

int64_t Optimizer::planned_buffers_like_parameter(const Tensor& p, const OptionMap& options) const {
  int64_t count = 0;
  for (const std::string& name : buffers_created(options)) {
    const std::optional<Shape> shape = buffer_shape(name, p);
    if (!shape) continue;
    if (*shape != p.shape()) return -1;
    ++count;
  }
  return count;
}

int64_t Optimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& [impl, st] : state_) {
    for (const auto& [name, b] : st.buffers) bytes += b.numel() * int64_t(b.element_size());
  }
  for (const MasterPair& m : masters_) bytes += m.master.numel() * int64_t(m.master.element_size());
  return bytes;
}

int64_t Optimizer::position_of_group(std::size_t g) const {
  int64_t pos = 0;
  for (std::size_t k = 0; k < g; ++k) pos += int64_t(groups_[k].params.size());
  return pos;
}

void Optimizer::check_param(const Tensor& p, int64_t i) const {
  const Tensor grad = p.grad();
  if (!grad.defined()) return;
  MG_CHECK(is_dense_layout(p), Error, name_, ": parameter ", i, " (", describe(p), ", strides ", p.strides(),
           ") is neither contiguous nor channels-last; the update writes dense parameters",
           "\n  hint: make the parameter itself dense (contiguous() or Module::to(MemoryFormat)), not a view");
  MG_CHECK(grad.dtype() == p.dtype() && grad.shape() == p.shape() && grad.device() == p.device(), Error,
           name_, ": the gradient of parameter ", i, " is ", describe(grad), " but the parameter is ",
           describe(p));
  const auto it = state_.find(p.impl());
  if (it == state_.end()) return;
  const DType dt = p.dtype() == DType::F64 ? DType::F64 : DType::F32;
  for (const auto& [name, b] : it->second.buffers) {
    // Any dense layout: a state laid out unlike its parameter (the model moved to channels-last
    // since) is re-laid by buffer() before use.
    const std::optional<Shape> shape = buffer_shape(name, p);
    MG_CHECK(shape && b.dtype() == dt && b.shape() == *shape && b.device() == p.device() && is_dense_layout(b), Error,
             name_, ": state '", name, "' of parameter ", i, " is ", describe(b), " but parameter ", i, " (",
             describe(p), ") needs ", shape ? shape_str(*shape) + " " + dtype_name(dt) : std::string("no such state"),
             "\n  hint: the parameter changed dtype or shape after the optimizer was created; "
             "create the optimizer after converting the model");
  }
}

std::vector<Optimizer::Work> Optimizer::collect(const ParamGroup& group) {
  const std::size_t g = std::size_t(&group - groups_.data());
  MG_ASSERT(g < groups_.size(), "collect: group is not one of this optimizer's");
  int64_t index = position_of_group(g);
  std::vector<Work> out;
  for (const Tensor& p : group.params) {
    const int64_t i = index++;
    Tensor grad = p.grad();
    if (!grad.defined()) continue;
    check_param(p, i);  // checked by step() already; kept for derived classes calling collect directly
    out.push_back({p, in_layout_of(grad, p), &state_[p.impl()], i});
  }
  return out;
}

Tensor Optimizer::buffer(const Work& w, const std::string& name, bool zero, bool* created) {
  const DType dt = w.param.dtype() == DType::F64 ? DType::F64 : DType::F32;
  auto it = w.state->buffers.find(name);
  if (it == w.state->buffers.end()) {
    // Refused before anything is made: inside a capture the fill would only be recorded (the
    // buffer kept unwritten after an abandoned capture) or replayed (reset at every replay).
    MG_CHECK(!graph_capturing_, Error, name_, ": optimizer state '", name,
             "' would be created inside a CUDA graph capture (an option switched on, or a parameter without state, "
             "since the last eager step); the graph would re-initialise it at every replay"
             "\n  hint: run one eager step() with these options before capturing");
    const std::optional<Shape> shape = buffer_shape(name, w.param);
    MG_ASSERT(shape, "buffer: ", name_, " keeps no state '", name, "' for ", describe(w.param));
    // In the parameter's layout (channels-last weights get channels-last state); a state of
    // another shape (a factored one) is contiguous.
    const bool like_param = *shape == w.param.shape();
    const TensorOptions opts{.dtype = dt, .device = w.param.device(),
                             .memory_format = like_param ? layout_of(w.param) : MemoryFormat::Contiguous};
    Tensor b = empty(*shape, opts);
    MG_ASSERT(!like_param || same_memory_order(b, w.param), "buffer: state '", name, "' laid out unlike its parameter");
    if (zero) b.zero_();
    w.state->buffers.emplace(name, b);
    if (created) *created = true;
    return b;
  }
  Tensor& b = it->second;
  const std::optional<Shape> shape = buffer_shape(name, w.param);
  MG_ASSERT(shape && b.dtype() == dt && b.shape() == *shape && b.device() == w.param.device(), "buffer: state '", name,
            "' was not checked");
  if (*shape == w.param.shape() && !same_memory_order(b, w.param)) {
    // The parameter changed layout since (Module::to(MemoryFormat)): the state follows it.
    MG_CHECK(!graph_capturing_, Error, name_, ": optimizer state '", name,
             "' is laid out unlike its parameter (changed layout since the last eager step) inside a CUDA graph capture",
             "\n  hint: run one eager step() after changing the model's memory format, then capture");
    NoGradGuard no_grad;
    b = in_layout_of(b, w.param);
  }
  if (created) *created = false;
  return b;
}

// ---- state dict ----

namespace {
std::string join_positions(int64_t first, int64_t count) {
  std::string s;
  for (int64_t i = 0; i < count; ++i) {
    if (i) s += ',';
    s += std::to_string(first + i);
  }
  return s;
}

// Parses "state.<i>.<rest>" into (i, rest); false when the key does not have that form.
bool parse_state_key(const std::string& key, int64_t* index, std::string* rest) {
  if (key.rfind("state.", 0) != 0) return false;
  const std::size_t dot = key.find('.', 6);
  if (dot == std::string::npos || dot == 6) return false;
  const std::string num = key.substr(6, dot - 6);
  if (!std::all_of(num.begin(), num.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
  *index = std::strtoll(num.c_str(), nullptr, 10);
  *rest = key.substr(dot + 1);
  return true;
}
}  // namespace

StateDict Optimizer::state_dict() const {
  refresh_device_steps();
  const std::vector<std::string> unstarted_names = buffers_started_by_first_update();
  std::vector<const ParamState*> unstarted;
  if (!unstarted_names.empty()) unstarted = states_before_first_update();
  StateDict s;
  s.strings["optimizer"] = name_;
  s.ints["step_count"] = step_count();
  s.ints["num_groups"] = int64_t(groups_.size());
  int64_t index = 0;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const std::string prefix = "group." + std::to_string(g) + ".";
    s.strings[prefix + "params"] = join_positions(index, int64_t(groups_[g].params.size()));
    for (const auto& [key, value] : groups_[g].options) s.floats[prefix + key] = value;
    for (const Tensor& p : groups_[g].params) {
      const ParamState* st = state(p);
      if (st) {
        const std::string sp = "state." + std::to_string(index) + ".";
        s.ints[sp + "step"] = st->step;
        const bool before_first = std::find(unstarted.begin(), unstarted.end(), st) != unstarted.end();
        for (const auto& [name, b] : st->buffers) {
          const bool unstarted_buffer =
              before_first && std::find(unstarted_names.begin(), unstarted_names.end(), name) != unstarted_names.end();
          if (!unstarted_buffer) s.tensors.emplace_back(sp + name, clone(b));
        }
        for (const auto& [name, v] : st->scalars) s.floats[sp + name] = v;
      }
      ++index;
    }
  }
  s.ints["num_params"] = index;
  if (!masters_.empty()) {
    const Tensors params = parameters();
    for (std::size_t i = 0; i < params.size(); ++i) {
      for (const MasterPair& m : masters_) {
        if (m.master.is_same(params[i])) s.tensors.emplace_back("master." + std::to_string(i), clone(m.master));
      }
    }
  }
  return s;
}

void Optimizer::load_state_dict(const StateDict& s) {
  const std::string owner = name_ + ": load_state_dict";
  const std::string& saved_name = s.string_at(owner, "optimizer");
  MG_CHECK(saved_name == name_, Error, owner, ": the state belongs to a ", saved_name, " optimizer, not ", name_);
  const int64_t num_groups = s.int_at(owner, "num_groups");
  MG_CHECK(num_groups == int64_t(groups_.size()), Error, owner, ": the state has ", num_groups,
           " parameter groups but the optimizer has ", groups_.size());
  const Tensors params = parameters();
  const int64_t num_params = s.int_at(owner, "num_params");
  MG_CHECK(num_params == int64_t(params.size()), Error, owner, ": the state has ", num_params,
           " parameters but the optimizer has ", params.size());

  // Group options, checked as the constructor does.
  std::vector<OptionMap> new_options(groups_.size());
  int64_t first = 0;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const std::string prefix = "group." + std::to_string(g) + ".";
    const int64_t n = int64_t(groups_[g].params.size());
    const std::string& saved = s.string_at(owner, prefix + "params");
    const int64_t saved_n = saved.empty() ? 0 : int64_t(std::count(saved.begin(), saved.end(), ',')) + 1;
    MG_CHECK(saved_n == n, Error, owner, ": param group ", g, " has ", n, " parameters but the saved group has ",
             saved_n, " (positions ", saved, ")");
    MG_CHECK(saved == join_positions(first, n), Error, owner, ": param group ", g, " holds parameters ",
             join_positions(first, n), " but the saved group lists ", saved);
    first += n;
    for (const auto& [key, value] : s.floats) {
      if (key.rfind(prefix, 0) == 0) new_options[g][key.substr(prefix.size())] = value;
    }
    for (const auto& [key, value] : options_added_later()) new_options[g].emplace(key, value);
    for (const auto& [key, value] : defaults_) {
      MG_CHECK(new_options[g].count(key), Error, owner, ": saved param group ", g, " has no option '", key, "'");
    }
    with_group_context(owner, name_, g, [&] { check_options(new_options[g]); });
  }
  for (const auto& [key, value] : s.floats) {
    if (key.rfind("state.", 0) == 0) continue;  // per-parameter scalars: below
    MG_CHECK(key.rfind("group.", 0) == 0, Error, owner, ": unexpected float '", key, "'");
    const std::size_t dot = key.find('.', 6);
    // The group number must be all digits ("group.abc.lr" read as group 0 with strtoll).
    const std::string num = dot == std::string::npos ? std::string() : key.substr(6, dot - 6);
    const bool digits = !num.empty() && num.size() <= 18 &&
                        std::all_of(num.begin(), num.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    const int64_t g = digits ? std::strtoll(num.c_str(), nullptr, 10) : -1;
    MG_CHECK(g >= 0 && g < num_groups, Error, owner, ": unexpected float '", key, "' (the state has ", num_groups,
             " groups)");
  }

  // Per-parameter state: buffers copied into the state dtype, shapes checked.
  const std::vector<std::string> names = buffer_names();
  std::unordered_map<const TensorImpl*, ParamState> new_state;
  std::set<int64_t> with_step;
  for (const auto& [key, value] : s.ints) {
    int64_t i = -1;
    std::string rest;
    if (!parse_state_key(key, &i, &rest)) continue;
    MG_CHECK(rest == "step", Error, owner, ": unexpected integer '", key, "'");
    MG_CHECK(i < num_params, Error, owner, ": state for parameter ", i, " but the optimizer has ", num_params,
             " parameters");
    MG_CHECK(value >= 0, Error, owner, ": '", key, "' must be >= 0, got ", value);
    new_state[params[i].impl()].step = value;
    with_step.insert(i);
  }
  const std::vector<std::string> scalars = scalar_names();
  for (const auto& [key, value] : s.floats) {
    int64_t i = -1;
    std::string name;
    if (!parse_state_key(key, &i, &name)) continue;
    MG_CHECK(i < num_params && std::find(scalars.begin(), scalars.end(), name) != scalars.end(), Error, owner,
             ": unexpected float '", key, "'");
    MG_CHECK(with_step.count(i), Error, owner, ": '", key, "' has no 'state.", i, ".step'");
    MG_CHECK(std::isfinite(value), Error, owner, ": '", key, "' must be finite, got ", value);
    new_state[params[std::size_t(i)].impl()].scalars[name] = value;
  }
  std::unordered_map<const TensorImpl*, Tensor> new_masters;  // master -> saved value
  for (const auto& [key, t] : s.tensors) {
    if (key.rfind("master.", 0) == 0) {
      const std::string num = key.substr(7);
      const bool numeric = !num.empty() && std::all_of(num.begin(), num.end(), [](char c) { return c >= '0' && c <= '9'; });
      const int64_t i = numeric ? std::strtoll(num.c_str(), nullptr, 10) : -1;
      MG_CHECK(numeric && i < num_params, Error, owner, ": unexpected tensor '", key, "'");
      const Tensor& p = params[std::size_t(i)];
      const bool is_master = std::any_of(masters_.begin(), masters_.end(), [&](const MasterPair& m) { return m.master.is_same(p); });
      MG_CHECK(is_master, Error, owner, ": the state holds an f32 master weight for parameter ", i,
               " but this optimizer keeps none for it (", describe(p), ")",
               "\n  hint: set up the same precision as when saving (amp::initialize with the same opt_level) before loading");
      MG_CHECK(t.defined() && t.shape() == p.shape() && t.dtype() == DType::F32, Error, owner, ": '", key, "' is ",
               t.defined() ? describe(t) : "undefined", " but master ", i, " is ", describe(p));
      new_masters[p.impl()] = t;
      continue;
    }
    int64_t i = -1;
    std::string name;
    MG_CHECK(parse_state_key(key, &i, &name), Error, owner, ": unexpected tensor '", key, "'");
    MG_CHECK(i < num_params, Error, owner, ": state for parameter ", i, " but the optimizer has ", num_params,
             " parameters");
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      std::string known;
      for (const std::string& n : names) {
        if (!known.empty()) known += ", ";
        known += n;
      }
      MG_THROW(Error, owner, ": unknown state tensor '", key, "'; ", name_, " keeps ", known);
    }
    MG_CHECK(with_step.count(i), Error, owner, ": '", key, "' has no 'state.", i, ".step'");
    const Tensor& p = params[i];
    const std::optional<Shape> shape = buffer_shape(name, p);
    MG_CHECK(shape, Error, owner, ": unexpected tensor '", key, "': ", name_, " keeps no '", name, "' for parameter ", i,
             " (", describe(p), ")");
    MG_CHECK(t.defined() && t.shape() == *shape, ShapeError, owner, ": '", key, "' is ", describe(t),
             " but parameter ", i, " (", describe(p), ") needs ", shape_str(*shape));
    MG_CHECK(t.is_floating_point(), DTypeError, owner, ": '", key, "' is ", describe(t), "; expected a floating tensor");
    const DType dt = p.dtype() == DType::F64 ? DType::F64 : DType::F32;
    Tensor c = to(to(t, p.device()), dt);
    if (*shape == p.shape()) c = c.is_same(t) ? clone(t, layout_of(p)) : in_layout_of(c, p);
    else c = c.is_same(t) ? clone(t, MemoryFormat::Contiguous) : c.contiguous();
    new_state[p.impl()].buffers[name] = c;
  }

  std::vector<std::size_t> group_of;  // parameter position -> its group
  for (std::size_t g = 0; g < groups_.size(); ++g) group_of.insert(group_of.end(), groups_[g].params.size(), g);
  for (const int64_t i : with_step) {
    const ParamState& st = new_state[params[std::size_t(i)].impl()];
    if (st.step == 0) continue;
    for (const std::string& name : buffers_of_every_step(new_options[group_of[std::size_t(i)]])) {
      if (!buffer_shape(name, params[std::size_t(i)])) continue;  // not kept for this parameter
      MG_CHECK(st.buffers.count(name), Error, owner, ": 'state.", i, ".", name, "' is missing; parameter ", i,
               " took ", st.step, " steps, and ", name_, " keeps '", name, "' for every parameter that did",
               "\n  hint: load the whole state dict the optimizer saved");
    }
  }

  const int64_t step_count = s.int_at(owner, "step_count");
  MG_CHECK(step_count >= 0, Error, owner, ": 'step_count' must be >= 0, got ", step_count);

  // Nothing above changed the optimizer; commit.
  for (std::size_t g = 0; g < groups_.size(); ++g) groups_[g].options = std::move(new_options[g]);
  state_ = std::move(new_state);
  ++state_generation_;
  step_count_ = step_count;
  folded_skips_ = 0;
  if (device_skips_.defined()) {
    NoGradGuard no_grad;
    device_skips_.zero_();  // in place: a captured graph holds its address
    device_skips_read_ = 0;
    device_skips_stale_ = false;
  }
  NoGradGuard no_grad;
  for (const MasterPair& m : masters_) {
    const auto it = new_masters.find(m.master.impl());
    // Saved without masters (e.g. at O1): start them from the (already loaded) model.
    Tensor(m.master).copy_(it != new_masters.end() ? it->second : m.model);
  }
  master_grads_synced_ = false;
}

}  // namespace mg::optim
