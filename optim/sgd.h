// SGD with momentum, dampening, Nesterov momentum and L2 weight decay, as torch.optim.SGD:
//   g = (maximize ? -grad : grad) + weight_decay * p
//   buf = g (first step) or momentum * buf + (1 - dampening) * g
//   p -= lr * (nesterov ? g + momentum * buf : buf)          (p -= lr * g without momentum)
// The momentum buffer ("momentum_buffer") is kept in f32 (f64 for f64 parameters); f16/bf16
// parameters are updated in f32 and rounded once.
//
//   mg::optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9, .nesterov = true, .weight_decay = 5e-4});
#pragma once
#include <string>
#include <vector>

#include "mixgrad/optim/optimizer.h"

namespace mg::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;      // >= 0
  double dampening = 0.0;     // applied from the second step on
  bool nesterov = false;      // needs momentum > 0 (where the group is made) and dampening = 0
  double weight_decay = 0.0;  // L2, added to the gradient
  bool maximize = false;      // ascend: the gradient is negated first (torch.optim's maximize)
  bool multi_tensor = true;   // update a group in one pass over all its tensors (bit-identical)

  template <typename F>
  void for_each(F&& f) {
    f("lr", lr);
    f("momentum", momentum);
    f("dampening", dampening);
    f("nesterov", nesterov);
    f("weight_decay", weight_decay);
    f("maximize", maximize);
    f("multi_tensor", multi_tensor);
  }
};

class SGD final : public Optimizer {
 public:
  using Options = SGDOptions;
  explicit SGD(const Tensors& params, SGDOptions options = {});
  // Several groups; each group's options override `defaults`.
  explicit SGD(const std::vector<ParamGroupSpec>& groups, SGDOptions defaults = {});

 protected:
  void check_options(const OptionMap& options) const override;
  void check_new_group_options(const OptionMap& options) const override;
  void step_group(ParamGroup& group) override;
  std::vector<std::string> buffer_names() const override { return {"momentum_buffer"}; }
  std::vector<std::string> buffers_created(const OptionMap& o) const override {
    return option_or(o, "momentum", 0.0) != 0.0 ? buffer_names() : std::vector<std::string>{};
  }
  std::vector<std::string> buffers_started_by_first_update() const override { return {"momentum_buffer"}; }
  bool has_fused_step() const override { return true; }
  std::vector<std::string> device_option_names() const override { return {"lr", "momentum", "dampening", "weight_decay"}; }
  // momentum 0 or not: a captured step with momentum 0 has no buffers to update.
  std::string graph_structure(const ParamGroup& group) const override;
  OptionMap options_added_later() const override { return {{"maximize", 0.0}}; }
};

}  // namespace mg::optim
