// RMSprop (Hinton, Coursera lecture 6e; centered: Graves 2013), as torch.optim.RMSprop:
//   g = (maximize ? -grad : grad) + weight_decay * p
//   sq = alpha * sq + (1 - alpha) * g^2                         ("square_avg")
//   ga = lerp(ga, g, 1 - alpha)                                 ("grad_avg", centered only)
//   avg = sqrt(centered ? sq - ga^2 : sq) + eps
//   momentum > 0:  buf = momentum * buf + g / avg;  p -= lr * buf    ("momentum_buffer")
//   otherwise:     p -= lr * g / avg
// State is kept in f32 (f64 for f64 parameters), zero-initialised; f16/bf16 parameters are
// updated in f32 and rounded once. On the CPU one fused loop per chunk (optim/functors.h); on
// CUDA the fused multi-tensor kernel (the same functor; no host read under step_unless_found_inf,
// and a step CUDA graphs can capture); elsewhere the device-generic path of public ops.
//
//   mg::optim::RMSprop opt(net.parameters(), {.lr = 1e-3, .alpha = 0.9, .momentum = 0.9});
#pragma once
#include <string>
#include <vector>

#include "mixgrad/optim/optimizer.h"

namespace mg::optim {

struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;        // smoothing of the squared-gradient average, in [0, 1]
  double eps = 1e-8;          // added to the root, not under it
  double weight_decay = 0.0;  // L2, added to the gradient
  double momentum = 0.0;      // >= 0; > 0 keeps a momentum buffer of g / avg
  bool centered = false;      // divide by the estimated standard deviation (keeps grad_avg)
  bool maximize = false;      // ascend: the gradient is negated first
  bool multi_tensor = true;   // update a group in one pass over all its tensors (bit-identical)

  template <typename F>
  void for_each(F&& f) {
    f("lr", lr);
    f("alpha", alpha);
    f("eps", eps);
    f("weight_decay", weight_decay);
    f("momentum", momentum);
    f("centered", centered);
    f("maximize", maximize);
    f("multi_tensor", multi_tensor);
  }
};

class RMSprop final : public Optimizer {
 public:
  using Options = RMSpropOptions;
  explicit RMSprop(const Tensors& params, RMSpropOptions options = {});
  explicit RMSprop(const std::vector<ParamGroupSpec>& groups, RMSpropOptions defaults = {});

 protected:
  void check_options(const OptionMap& options) const override;
  void step_group(ParamGroup& group) override;
  std::vector<std::string> buffer_names() const override { return {"square_avg", "grad_avg", "momentum_buffer"}; }
  std::vector<std::string> buffers_created(const OptionMap& o) const override {
    std::vector<std::string> names{"square_avg"};
    if (option_or(o, "centered", 0.0) != 0.0) names.push_back("grad_avg");
    if (option_or(o, "momentum", 0.0) > 0.0) names.push_back("momentum_buffer");
    return names;
  }
  std::vector<std::string> buffers_of_every_step(const OptionMap&) const override { return {"square_avg"}; }
  bool has_fused_step() const override { return true; }
  std::vector<std::string> device_option_names() const override {
    return {"lr", "alpha", "eps", "weight_decay", "momentum"};
  }
  // Which buffers the step keeps (centered, momentum > 0): a captured step's kernels use them.
  std::string graph_structure(const ParamGroup& group) const override;
};

}  // namespace mg::optim
