// Adamax (Kingma & Ba 2015, §7.1: Adam with the infinity norm), as torch.optim.Adamax:
//   g = (maximize ? -grad : grad) + weight_decay * p
//   m = lerp(m, g, 1 - beta1)               ("exp_avg")
//   u = max(beta2 * u, |g| + eps)           ("exp_inf")
//   p -= lr / (1 - beta1^t) * m / u
// State in f32 (f64 for f64 parameters); f16/bf16 parameters updated in f32 and rounded once. On the
// CPU, fused chunk loops (optim/functors.h); on CUDA the fused multi-tensor kernel (the same
// functor; no host read under step_unless_found_inf, and a step CUDA graphs can capture);
// elsewhere the generic path of public ops.
//
//   mg::optim::Adamax opt(net.parameters(), {.lr = 2e-3});
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "mixgrad/optim/two_buffer_optimizer.h"

namespace mg::optim {

struct AdamaxOptions {
  double lr = 2e-3;
  std::pair<double, double> betas = {0.9, 0.999};  // each in [0, 1); group options "beta1", "beta2"
  double eps = 1e-8;
  double weight_decay = 0.0;  // L2, added to the gradient
  bool maximize = false;
  bool multi_tensor = true;   // update a group in one pass over all its tensors (bit-identical)

  template <typename F>
  void for_each(F&& f) {
    f("lr", lr);
    f("beta1", betas.first);
    f("beta2", betas.second);
    f("eps", eps);
    f("weight_decay", weight_decay);
    f("maximize", maximize);
    f("multi_tensor", multi_tensor);
  }
};

class Adamax final : public TwoBufferOptimizer {
 public:
  using Options = AdamaxOptions;
  explicit Adamax(const Tensors& params, AdamaxOptions options = {});
  explicit Adamax(const std::vector<ParamGroupSpec>& groups, AdamaxOptions defaults = {});

 protected:
  void check_options(const OptionMap& options) const override;
  void step_group(ParamGroup& group) override;
  std::vector<std::string> buffer_names() const override { return {"exp_avg", "exp_inf"}; }
  std::vector<std::string> buffers_of_every_step(const OptionMap&) const override { return {"exp_avg", "exp_inf"}; }
  std::vector<std::string> device_option_names() const override { return {"lr", "beta1", "beta2", "eps", "weight_decay"}; }
};

}  // namespace mg::optim
