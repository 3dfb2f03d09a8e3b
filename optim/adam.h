// Adam (Kingma & Ba 2015) and AdamW (Loshchilov & Hutter 2019, decoupled weight decay), both with
// amsgrad and maximize, as torch.optim.Adam / AdamW:
//   g = maximize ? -grad : grad
//   Adam:  g += weight_decay * p                       AdamW: p *= 1 - lr * weight_decay
//   (Adam with decoupled_weight_decay = true is AdamW, as in PyTorch 2.6+)
//   m = beta1 * m + (1 - beta1) * g                    ("exp_avg")
//   v = beta2 * v + (1 - beta2) * g^2                  ("exp_avg_sq")
//   vmax = max(vmax, v)                                ("max_exp_avg_sq", amsgrad only)
//   p -= lr / (1 - beta1^t) * m / (sqrt(amsgrad ? vmax : v) / sqrt(1 - beta2^t) + eps)
// t counts the updates of each parameter (ParamState::step). Moments are kept in f32 (f64 for
// f64 parameters); f16/bf16 parameters are updated in f32 and rounded once.
//
//   mg::optim::AdamW opt(net.parameters(), {.lr = 1e-3, .betas = {0.9, 0.98}, .weight_decay = 0.01});
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "mixgrad/optim/optimizer.h"

namespace mg::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};  // each in [0, 1); group options "beta1", "beta2"
  double eps = 1e-8;
  double weight_decay = 0.0;  // L2, added to the gradient (decoupled: as AdamW's)
  bool amsgrad = false;
  bool decoupled_weight_decay = false;  // true: AdamW's p *= 1 - lr * weight_decay instead of L2
  bool maximize = false;      // ascend: the gradient is negated first (torch.optim's maximize)
  bool multi_tensor = true;   // update a group in one pass over all its tensors (bit-identical)

  template <typename F>
  void for_each(F&& f) {
    f("lr", lr);
    f("beta1", betas.first);
    f("beta2", betas.second);
    f("eps", eps);
    f("weight_decay", weight_decay);
    f("amsgrad", amsgrad);
    f("decoupled_weight_decay", decoupled_weight_decay);
    f("maximize", maximize);
    f("multi_tensor", multi_tensor);
  }
};

// As AdamOptions; weight decay is decoupled (p *= 1 - lr * weight_decay) and defaults to 1e-2.
struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
  bool maximize = false;
  bool multi_tensor = true;

  template <typename F>
  void for_each(F&& f) {
    f("lr", lr);
    f("beta1", betas.first);
    f("beta2", betas.second);
    f("eps", eps);
    f("weight_decay", weight_decay);
    f("amsgrad", amsgrad);
    f("maximize", maximize);
    f("multi_tensor", multi_tensor);
  }
};

// The buffers Adam and AdamW create: the moments, and max_exp_avg_sq with amsgrad.
inline std::vector<std::string> adam_buffers_created(const OptionMap& o) {
  if (option_or(o, "amsgrad", 0.0) != 0.0) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

// One Adam/AdamW update of several tensors outside an Adam object (Muon's use_muon = 0 groups):
// the math above, with the decay of options.decoupled_weight_decay, on the CPU's fused
// multi-tensor loop, or on the device-generic path of public ops when any tensor is elsewhere.
// Adam and AdamW step their groups through it where their fused device kernel does not run.
struct AdamUpdateTensor {
  Tensor param;           // dense, any floating dtype; updated in place (f16/bf16 rounded once)
  Tensor grad;            // param's shape, dtype, device and layout
  Tensor exp_avg;         // opmath (f32; f64 for f64 params), param's shape and layout
  Tensor exp_avg_sq;      // likewise
  Tensor max_exp_avg_sq;  // likewise with amsgrad; else undefined
  int64_t* step;          // the tensor's update count: incremented, then t of the bias corrections
};
void adam_update(const std::vector<AdamUpdateTensor>& tensors, const AdamOptions& options);

class Adam final : public Optimizer {
 public:
  using Options = AdamOptions;
  explicit Adam(const Tensors& params, AdamOptions options = {});
  explicit Adam(const std::vector<ParamGroupSpec>& groups, AdamOptions defaults = {});

 protected:
  void check_options(const OptionMap& options) const override;
  void step_group(ParamGroup& group) override;
  std::vector<std::string> buffer_names() const override { return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}; }
  std::vector<std::string> buffers_of_every_step(const OptionMap&) const override { return {"exp_avg", "exp_avg_sq"}; }
  std::vector<std::string> buffers_created(const OptionMap& o) const override { return adam_buffers_created(o); }
  bool has_fused_step() const override { return true; }
  std::vector<std::string> device_option_names() const override { return {"lr", "beta1", "beta2", "eps", "weight_decay"}; }
  OptionMap options_added_later() const override;
};

class AdamW final : public Optimizer {
 public:
  using Options = AdamWOptions;
  explicit AdamW(const Tensors& params, AdamWOptions options = {});
  explicit AdamW(const std::vector<ParamGroupSpec>& groups, AdamWOptions defaults = {});

 protected:
  void check_options(const OptionMap& options) const override;
  void step_group(ParamGroup& group) override;
  std::vector<std::string> buffer_names() const override { return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}; }
  std::vector<std::string> buffers_of_every_step(const OptionMap&) const override { return {"exp_avg", "exp_avg_sq"}; }
  std::vector<std::string> buffers_created(const OptionMap& o) const override { return adam_buffers_created(o); }
  bool has_fused_step() const override { return true; }
  std::vector<std::string> device_option_names() const override { return {"lr", "beta1", "beta2", "eps", "weight_decay"}; }
  OptionMap options_added_later() const override;
};

}  // namespace mg::optim
