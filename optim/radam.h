// RAdam (Liu et al. 2020: Adam with the variance of the adaptive learning rate rectified), as
// torch.optim.RAdam:
//   g = maximize ? -grad : grad;  decoupled ? p *= 1 - lr * weight_decay : g += weight_decay * p
//   m = lerp(m, g, 1 - beta1)  ("exp_avg");  v = beta2 v + (1 - beta2) g^2  ("exp_avg_sq")
//   rho_inf = 2 / (1 - beta2) - 1,  rho_t = rho_inf - 2 t beta2^t / (1 - beta2^t)
//   rho_t > 5: p -= lr m / (1 - beta1^t) * sqrt(1 - beta2^t) / (sqrt(v) + eps) * r_t,
//              r_t = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t))
//   else:      p -= lr m / (1 - beta1^t)            (SGD with momentum while the variance is unreliable)
// State in f32 (f64 for f64 parameters); f16/bf16 parameters updated in f32 and rounded once. On the
// CPU, fused chunk loops (optim/functors.h); on CUDA the fused multi-tensor kernel (the same
// functor; no host read under step_unless_found_inf, and a step CUDA graphs can capture);
// elsewhere the generic path of public ops.
//
//   mg::optim::RAdam opt(net.parameters(), {.lr = 1e-3});
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "mixgrad/optim/two_buffer_optimizer.h"

namespace mg::optim {

struct RAdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};  // each in [0, 1); group options "beta1", "beta2"
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;  // true: p *= 1 - lr * weight_decay instead of L2
  bool maximize = false;
  bool multi_tensor = true;

  template <typename F>
  void for_each(F&& f) {
    f("lr", lr);
    f("beta1", betas.first);
    f("beta2", betas.second);
    f("eps", eps);
    f("weight_decay", weight_decay);
    f("decoupled_weight_decay", decoupled_weight_decay);
    f("maximize", maximize);
    f("multi_tensor", multi_tensor);
  }
};

class RAdam final : public TwoBufferOptimizer {
 public:
  using Options = RAdamOptions;
  explicit RAdam(const Tensors& params, RAdamOptions options = {});
  explicit RAdam(const std::vector<ParamGroupSpec>& groups, RAdamOptions defaults = {});

 protected:
  void check_options(const OptionMap& options) const override;
  void step_group(ParamGroup& group) override;
  std::vector<std::string> buffer_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  std::vector<std::string> buffers_of_every_step(const OptionMap&) const override { return {"exp_avg", "exp_avg_sq"}; }
  std::vector<std::string> device_option_names() const override { return {"lr", "beta1", "beta2", "eps", "weight_decay"}; }
};

}  // namespace mg::optim
