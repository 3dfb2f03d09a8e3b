// Weight averaging, as torch.optim.swa_utils: AveragedModel keeps a running average of a model's
// weights — stochastic weight averaging (SWA: the plain mean of every update) or an exponential
// moving average (EMA) — and update_bn recomputes batch-norm statistics for averaged weights.
// (SWALR, the learning-rate schedule of SWA, is in optim/lr_scheduler.h.)
//
// C++ cannot deep-copy a module, so the averaged copy is a second instance of the same
// architecture, built by the caller; the constructor copies the model's state into it, which is
// what PyTorch's deepcopy gives:
//
//   auto net = std::make_shared<Net>();
//   nn::AveragedModel<Net> ema(std::make_shared<Net>(), *net,
//                              {.averaging = nn::Averaging::Exponential, .decay = 0.999});
//   for (...) { ...; opt.step(); ema.update_parameters(*net); }
//   Tensor y = (*ema.module())(x);                       // evaluate with the averaged weights
//
// Mixed precision: the average is computed in f32 (f64 for f64 tensors) and rounded once to the
// averaged copy's dtype, whatever the model's dtype. At O2 the model holds bf16/f16 copies of the
// optimizer's f32 masters: average the masters with amp::update_averaged(avg, *net, opt)
// (amp/update_averaged.h) instead of update_parameters(*net). Keep the averaged copy in f32 when the model
// trains in f16/bf16 (O3): a bf16 EMA with decay 0.999 stops moving once (1 - decay) times the
// distance to the model falls under half a bf16 ulp of the average (about 0.4% of it), while an
// f32 one follows. The copy may also live on another device (the model's tensors are moved
// to it).
#pragma once
#include <functional>
#include <memory>
#include <utility>

#include "mixgrad/nn/module.h"

namespace mg::nn {

enum class Averaging {
  Equal,        // SWA: the mean of every update so far (avg += (model - avg) / (n + 1))
  Exponential,  // EMA: avg = decay * avg + (1 - decay) * model
};

struct AveragedModelOptions {
  Averaging averaging = Averaging::Equal;
  double decay = 0.999;      // Exponential only, in [0, 1]
  // Average the buffers too (batch-norm statistics; integer ones in f64, truncated as PyTorch's);
  // false: every update copies the model's buffers (then run update_bn for SWA weights).
  bool use_buffers = false;
  // Replaces `averaging`: the new average of one tensor from (average, model tensor, number of
  // updates averaged so far, >= 1), PyTorch's avg_fn. The model tensor is on the average's device
  // in its own dtype; the result is converted to the average's dtype.
  std::function<Tensor(const Tensor& average, const Tensor& model, int64_t n_averaged)> average;
};

// The non-template body of AveragedModel<M>: a module with the buffer "n_averaged" (i64, 0-d) and
// the averaged copy as child "module", so its state dict has PyTorch's AveragedModel keys
// ("n_averaged", "module.<name>").
class AveragedModelBase : public Module {
 public:
  // Folds the model's current weights into the average: the first update copies them; later
  // ones average every parameter (and, with use_buffers, every buffer), then copy the buffers
  // when use_buffers is false. The model must have the averaged copy's parameter and buffer
  // names and shapes (an mg::Error names the first difference; nothing is changed then). A
  // custom average that throws or returns another shape also changes nothing (every result is
  // made before any is written). Runs without recording a graph.
  void update_parameters(const Module& model);
  // The same, averaging source(p) in place of each model parameter p where it returns a defined
  // tensor (same shape, floating): amp::update_averaged passes the optimizer's f32 master of each
  // f16/bf16 parameter at O2, so the average is of the weights the optimizer keeps, not of their
  // rounded copies. Every replacement is checked before anything changes.
  void update_parameters(const Module& model, const std::function<Tensor(const Tensor&)>& source);
  // The number of update_parameters calls (a loaded state dict's count after a load).
  int64_t n_averaged() const;
  const AveragedModelOptions& options() const { return options_; }

 protected:
  AveragedModelBase(std::shared_ptr<Module> averaged, const Module& model, AveragedModelOptions options);
  std::string extra_repr() const override;

 private:
  // Throws unless `model` has the averaged copy's parameter (and buffer) names and shapes.
  void check_same_structure(const Module& model) const;
  std::shared_ptr<Module> averaged_;
  AveragedModelOptions options_;
  Tensor n_averaged_;
  // A host copy of n_averaged_ and the buffer's version when it was taken: the count is read
  // back from the buffer (one synchronisation on a GPU) only after a load or a move replaced it.
  mutable int64_t n_host_ = 0;
  mutable uint64_t n_version_ = 0;
};

// An averaged copy of a model of type M (any Module): module() gives it typed, to call.
template <typename M>
class AveragedModel final : public AveragedModelBase {
 public:
  // `averaged`: a separate instance with the model's architecture (parameters and buffers of the
  // same names and shapes; any dtype and device); it starts as a copy of `model`'s state.
  AveragedModel(std::shared_ptr<M> averaged, const Module& model, AveragedModelOptions options = {})
      : AveragedModelBase(averaged, model, std::move(options)), module_(std::move(averaged)) {}
  const std::shared_ptr<M>& module() const { return module_; }

 private:
  std::shared_ptr<M> module_;
};

// Recomputes the running statistics of every BatchNorm (1d/2d/3d, synchronised ones included) in
// `model` from the batches that `run_batches` feeds through it, as torch.optim.swa_utils.update_bn:
// each layer's statistics are reset and, with momentum set to a cumulative average, take the
// plain mean over the batches; `run_batches` calls the model on each batch, e.g.
//   nn::update_bn(*swa.module(), [&] { loader.start_epoch(0); while (auto b = loader.next()) (*swa.module())(b->input); });
// The model runs in training mode with grad mode off. Afterwards every module's mode and every
// momentum are restored (also when run_batches throws). A model without batch norm returns
// without calling run_batches. InstanceNorm's statistics are left alone, as PyTorch's.
void update_bn(Module& model, const std::function<void()>& run_batches);

}  // namespace mg::nn
