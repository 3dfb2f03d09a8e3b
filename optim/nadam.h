// NAdam (Dozat 2016: Adam with Nesterov momentum), as torch.optim.NAdam with its momentum decay:
//   g = maximize ? -grad : grad;  decoupled ? p *= 1 - lr * weight_decay : g += weight_decay * p
//   mu_t = beta1 (1 - 0.5 * 0.96^(t * momentum_decay))
//   m = lerp(m, g, 1 - beta1)  ("exp_avg");  v = beta2 v + (1 - beta2) g^2  ("exp_avg_sq")
//   d = sqrt(v / (1 - beta2^t)) + eps
//   p -= lr (1 - mu_t) / (1 - prod_{i<=t} mu_i) * g / d + lr mu_{t+1} / (1 - prod_{i<=t+1} mu_i) * m / d
// The product of the mu's is each parameter's scalar state "mu_product" (in double; saved with the
// state dict), as PyTorch's, so a beta1 that a scheduler cycles (OneCycleLR, CyclicLR) multiplies
// each step's mu into it as there. On CUDA the product lives on the device (a [1] f64 per
// parameter, ParamState::device_scalars) and is read back with the step count by state() and
// state_dict() (one synchronisation).
// State in f32 (f64 for f64 parameters); f16/bf16 parameters updated in f32 and rounded once. On the
// CPU, fused chunk loops (optim/functors.h); on CUDA the fused multi-tensor kernel (the same
// functor; no host read under step_unless_found_inf, and a step CUDA graphs can capture);
// elsewhere the generic path of public ops.
//
//   mg::optim::NAdam opt(net.parameters(), {.lr = 2e-3});
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "mixgrad/optim/two_buffer_optimizer.h"

namespace mg::optim {

struct NAdamOptions {
  double lr = 2e-3;
  std::pair<double, double> betas = {0.9, 0.999};  // each in [0, 1); group options "beta1", "beta2"
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum_decay = 4e-3;
  bool decoupled_weight_decay = false;  // true: p *= 1 - lr * weight_decay instead of L2 (NAdamW)
  bool maximize = false;
  bool multi_tensor = true;

  template <typename F>
  void for_each(F&& f) {
    f("lr", lr);
    f("beta1", betas.first);
    f("beta2", betas.second);
    f("eps", eps);
    f("weight_decay", weight_decay);
    f("momentum_decay", momentum_decay);
    f("decoupled_weight_decay", decoupled_weight_decay);
    f("maximize", maximize);
    f("multi_tensor", multi_tensor);
  }
};

class NAdam final : public TwoBufferOptimizer {
 public:
  using Options = NAdamOptions;
  explicit NAdam(const Tensors& params, NAdamOptions options = {});
  explicit NAdam(const std::vector<ParamGroupSpec>& groups, NAdamOptions defaults = {});

 protected:
  void check_options(const OptionMap& options) const override;
  void step_group(ParamGroup& group) override;
  std::vector<std::string> buffer_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  std::vector<std::string> buffers_of_every_step(const OptionMap&) const override { return {"exp_avg", "exp_avg_sq"}; }
  std::vector<std::string> device_option_names() const override { return {"lr", "beta1", "beta2", "eps", "weight_decay", "momentum_decay"}; }
  std::vector<std::string> scalar_names() const override { return {"mu_product"}; }
};

}  // namespace mg::optim
