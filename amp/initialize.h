// amp::initialize — the Apex-style front door (DESIGN §5), on the same machinery as the
// PyTorch-style Autocast + GradScaler:
//
//   auto [net, opt] = mg::amp::initialize(model, sgd, {.opt_level = "O2", .dtype = "bf16"});
//   for (...) {
//     opt.zero_grad();
//     mg::Tensor out = mg::amp::forward(*net, x);           // O2/O3: x cast to bf16, out back to f32
//     mg::Tensor loss = mg::cross_entropy(out, y);
//     mg::amp::scale_loss(loss, opt).backward();           // scaled backward, unscale into the
//                                                          // f32 master grads, inf/NaN check
//     mg::optim::clip_grad_norm_(mg::amp::master_params(opt), 1.0);
//     opt.step();                                          // skipped after an overflow
//   }
//
// What initialize does, by level (amp/properties.h has the table): O1 turns autocast on for the
// calling thread (the thread that trains; Apex patches functions globally, we switch the
// dispatcher's autocast on ambiently). O2/O3 cast the models to f16/bf16 (batch norm kept f32 when
// keep_batchnorm_fp32), and O2 gives every optimizer f32 master weights (optim/master_weights.h).
// Every optimizer gets a step gate through which scale_loss skips a step after an overflow.
// Refused: dynamic loss scaling on f16 parameters without f32 masters (O3 + loss_scale "dynamic",
// O2 + master_weights false) — their gradients would be unscaled in place in f16 (amp/unscale.h).
// The dynamic scale starts at min(max_loss_scale, 2^16), raised to min_loss_scale (GradScaler).
//
// The amp state is process-wide, as Apex's: one initialize per training setup; amp::reset()
// forgets it (and turns the ambient autocast off). The models and optimizers passed must outlive
// their use through amp (scale_loss, master_params).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixgrad/amp/cast_io.h"
#include "mixgrad/amp/grad_scaler.h"
#include "mixgrad/amp/properties.h"
#include "mixgrad/core/state_dict.h"
#include "mixgrad/nn/module.h"
#include "mixgrad/optim/optimizer.h"

namespace mg::amp {

// The untyped core of every initialize overload: validates the models and optimizers, resolves
// the options (printing them at verbosity >= 1), casts the models, sets up master weights, loss
// scalers, step gates and (O1) autocast. Models and optimizers are changed in place.
void initialize_models(const std::vector<std::shared_ptr<nn::Module>>& models,
                       const std::vector<optim::Optimizer*>& optimizers, const InitializeOptions& options);

// One model and one optimizer; returns them (the same objects, changed in place), so
//   auto [net, opt] = amp::initialize(net0, sgd, {...});
template <typename M, typename O>
  requires std::is_base_of_v<nn::Module, M> && std::is_base_of_v<optim::Optimizer, O>
std::pair<std::shared_ptr<M>, O&> initialize(std::shared_ptr<M> model, O& optimizer, const InitializeOptions& options = {}) {
  initialize_models({model}, {&optimizer}, options);
  return {std::move(model), optimizer};
}
// Lists of models and optimizers (Apex: several models/optimizers with num_losses); the same lists back.
template <typename M>
  requires std::is_base_of_v<nn::Module, M>
std::pair<std::vector<std::shared_ptr<M>>, std::vector<optim::Optimizer*>> initialize(
    std::vector<std::shared_ptr<M>> models, std::vector<optim::Optimizer*> optimizers, const InitializeOptions& options = {}) {
  initialize_models({models.begin(), models.end()}, optimizers, options);
  return {std::move(models), std::move(optimizers)};
}
// Models only (inference at a level: the cast, no optimizer or loss scaling).
template <typename M>
  requires std::is_base_of_v<nn::Module, M>
std::shared_ptr<M> initialize(std::shared_ptr<M> model, const InitializeOptions& options = {}) {
  initialize_models({model}, {}, options);
  return model;
}

// Whether initialize ran (and reset did not since).
bool is_initialized();
// The resolved properties; throws when not initialized.
const Properties& properties();
// Forgets the amp state: the optimizers' step gates stop gating (they never touch amp again, so
// an optimizer may be destroyed before or after reset) and the ambient (O1) autocast is turned
// off. The models stay cast and the optimizers keep their master weights. At O1, only from the
// thread that called initialize (its autocast state is that thread's); elsewhere an Error.
void reset();

// ---- forward with the level's input/output casts ----
// Calls model(args...) (or model.forward(args...)) with the floating tensors in args cast to the
// model's dtype (O2/O3) and the result cast to cast_model_outputs (f32 by default at O2/O3) —
// Apex's patched forward. Without a cast level (O0, O1, not initialized) it is a plain call. With
// memory_format = ChannelsLast, 4-D floating tensor arguments are also made NHWC.
const DType* forward_input_dtype();   // null: no input cast (reads the amp state)
const DType* forward_output_dtype();  // null: no output cast
MemoryFormat forward_input_format();  // InitializeOptions::memory_format (Contiguous when not initialized)
namespace detail {
// A 4-D floating tensor laid out in `f` (ChannelsLast only; anything else passes unchanged).
template <typename T>
T with_input_format(const T& v, MemoryFormat f) {
  if constexpr (std::is_same_v<T, Tensor>) {
    if (f == MemoryFormat::ChannelsLast && v.defined() && v.dim() == 4 && v.is_floating_point()) {
      return v.to(MemoryFormat::ChannelsLast);
    }
  }
  return v;
}
// model(a...) or model.forward(a...). A function template, not a generic lambda: clang 14
// instantiates both branches of the lambda's if constexpr.
template <typename Model, typename... A>
auto forward_call(Model& model, const A&... a) {
  if constexpr (std::is_invocable_v<Model&, const A&...>) return model(a...);
  else return model.forward(a...);
}
}  // namespace detail
template <typename Model, typename... Args>
auto forward(Model& model, const Args&... args) {
  const DType* in = forward_input_dtype();
  const MemoryFormat f = forward_input_format();
  auto out = in ? detail::forward_call(model, detail::with_input_format(cast_floating(args, *in), f)...)
                : detail::forward_call(model, detail::with_input_format(args, f)...);
  const DType* out_dtype = forward_output_dtype();
  return out_dtype ? cast_floating(out, *out_dtype) : out;
}

// ---- scale_loss ----
struct ScaleLossOptions {
  int loss_id = 0;             // which loss scaler (0 .. num_losses - 1)
  bool delay_unscale = false;  // leave the gradients scaled (accumulating micro-batches); the
                               // last micro-batch's scale_loss must not delay, and step() before
                               // that is an error
};

// loss × the loss scaler's scale, for the optimizers' parameters. backward() (or, after a manual
// autograd::grad, finish()) unscales the gradients — into the f32 master gradients at O2 — checks
// them for inf/NaN in the same pass, and updates that loss's scaler; after an overflow the next
// step() of each of these optimizers is skipped and (verbosity >= 1) a line says so.
// On CUDA (a loss on a device with fused multi-tensor kernels) none of this reads the device:
// the scale, the inf/NaN flag, the scale update and the skip decision stay there (Apex reads its
// overflow flag every step), so an amp training step issues no host synchronisation. The overflow
// line then comes when the scaler's state is next read (amp::loss_scale(), loss_scaler(),
// state_dict()), naming the skipped step; overflow() reads the flag when asked.
class ScaledLoss {
 public:
  const Tensor& value() const { return scaled_; }
  void backward(bool retain_graph = false);
  void finish();
  // Whether this loss's gradients were inf/NaN (after backward()/finish(); on CUDA one read).
  bool overflow() const;

 private:
  friend ScaledLoss scale_loss(const Tensor&, const std::vector<optim::Optimizer*>&, ScaleLossOptions);
  Tensor scaled_;
  std::vector<optim::Optimizer*> optimizers_;
  ScaleLossOptions options_;
  double scale_ = 1.0;             // the host path's scale
  bool on_device_ = false;         // the scaler's state is on the loss's device (CUDA)
  bool finished_ = false;
  mutable bool overflow_ = false;
  mutable Tensor overflow_flag_;   // the device path's flag, until overflow() reads it
};
ScaledLoss scale_loss(const Tensor& loss, const std::vector<optim::Optimizer*>& optimizers, ScaleLossOptions options = {});
inline ScaledLoss scale_loss(const Tensor& loss, optim::Optimizer& optimizer, ScaleLossOptions options = {}) {
  return scale_loss(loss, std::vector<optim::Optimizer*>{&optimizer}, options);
}

// The tensors the optimizer steps on (the f32 masters at O2, else the parameters) — clip these.
Tensors master_params(const optim::Optimizer& optimizer);

// ---- loss scalers ----
double loss_scale(int loss_id = 0);
// The scaler of a loss (dynamic or static; a static one never changes its scale but still skips
// steps whose gradients are inf/NaN, rather than writing NaN into the weights).
const GradScaler& loss_scaler(int loss_id = 0);

// All loss scalers: ints "num_losses", "loss_scaler.<i>.<key>"/floats likewise (GradScaler's keys),
// strings "opt_level". A checkpoint stores it beside the model and optimizer.
StateDict state_dict();
// "loss_scaler.<loss_id>.": the prefix of one scaler's keys in state_dict().
std::string loss_scaler_state_prefix(int loss_id);
// Restores the scalers; the number of losses and the opt level must match.
void load_state_dict(const StateDict& state);

// Where amp's messages go (the properties at initialize, overflow skips): stderr by default;
// a training program with a progress bar routes them through its own printer.
void set_log_sink(std::function<void(const std::string&)> sink);

}  // namespace mg::amp
