// Adadelta (Zeiler 2012), as torch.optim.Adadelta:
//   g = (maximize ? -grad : grad) + weight_decay * p
//   sq = rho sq + (1 - rho) g^2                       ("square_avg")
//   delta = sqrt(acc + eps) / sqrt(sq + eps) * g
//   acc = rho acc + (1 - rho) delta^2                 ("acc_delta")
//   p -= lr * delta
// State in f32 (f64 for f64 parameters); f16/bf16 parameters updated in f32 and rounded once. On the
// CPU, fused chunk loops (optim/functors.h); on CUDA the fused multi-tensor kernel (the same
// functor; no host read under step_unless_found_inf, and a step CUDA graphs can capture);
// elsewhere the generic path of public ops.
//
//   mg::optim::Adadelta opt(net.parameters(), {.lr = 1.0});
#pragma once
#include <string>
#include <vector>

#include "mixgrad/optim/two_buffer_optimizer.h"

namespace mg::optim {

struct AdadeltaOptions {
  double lr = 1.0;
  double rho = 0.9;        // in [0, 1]
  double eps = 1e-6;
  double weight_decay = 0.0;
  bool maximize = false;
  bool multi_tensor = true;

  template <typename F>
  void for_each(F&& f) {
    f("lr", lr);
    f("rho", rho);
    f("eps", eps);
    f("weight_decay", weight_decay);
    f("maximize", maximize);
    f("multi_tensor", multi_tensor);
  }
};

class Adadelta final : public TwoBufferOptimizer {
 public:
  using Options = AdadeltaOptions;
  explicit Adadelta(const Tensors& params, AdadeltaOptions options = {});
  explicit Adadelta(const std::vector<ParamGroupSpec>& groups, AdadeltaOptions defaults = {});

 protected:
  void check_options(const OptionMap& options) const override;
  void step_group(ParamGroup& group) override;
  std::vector<std::string> buffer_names() const override { return {"square_avg", "acc_delta"}; }
  std::vector<std::string> buffers_of_every_step(const OptionMap&) const override { return {"square_avg", "acc_delta"}; }
  std::vector<std::string> device_option_names() const override { return {"lr", "rho", "eps", "weight_decay"}; }
};

}  // namespace mg::optim
