// Adagrad (Duchi, Hazan & Singer 2011), as torch.optim.Adagrad:
//   g = (maximize ? -grad : grad) + weight_decay * p
//   sum = sum + g^2                         ("sum", starts at initial_accumulator_value)
//   p -= clr * g / (sqrt(sum) + eps),       clr = lr / (1 + (t - 1) * lr_decay)
// t counts the updates of each parameter (ParamState::step). The sum is kept in f32 (f64 for f64
// parameters); f16/bf16 parameters are updated in f32 and rounded once. On the CPU one fused loop
// per chunk (optim/functors.h); on CUDA the fused multi-tensor kernel (the same functor, clr from
// the device step count; no host read under step_unless_found_inf); elsewhere the device-generic
// path of public ops.
//
//   mg::optim::Adagrad opt(net.parameters(), {.lr = 0.05, .initial_accumulator_value = 0.1});
#pragma once
#include <string>
#include <vector>

#include "mixgrad/optim/optimizer.h"

namespace mg::optim {

struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0.0;                   // clr = lr / (1 + (t - 1) * lr_decay)
  double weight_decay = 0.0;               // L2, added to the gradient
  double initial_accumulator_value = 0.0;  // where "sum" starts, >= 0
  double eps = 1e-10;                      // added to the root
  bool maximize = false;                   // ascend: the gradient is negated first
  bool multi_tensor = true;                // update a group in one pass over all its tensors (bit-identical)

  template <typename F>
  void for_each(F&& f) {
    f("lr", lr);
    f("lr_decay", lr_decay);
    f("weight_decay", weight_decay);
    f("initial_accumulator_value", initial_accumulator_value);
    f("eps", eps);
    f("maximize", maximize);
    f("multi_tensor", multi_tensor);
  }
};

class Adagrad final : public Optimizer {
 public:
  using Options = AdagradOptions;
  explicit Adagrad(const Tensors& params, AdagradOptions options = {});
  explicit Adagrad(const std::vector<ParamGroupSpec>& groups, AdagradOptions defaults = {});

 protected:
  void check_options(const OptionMap& options) const override;
  void step_group(ParamGroup& group) override;
  std::vector<std::string> buffer_names() const override { return {"sum"}; }
  std::vector<std::string> buffers_of_every_step(const OptionMap&) const override { return {"sum"}; }
  bool has_fused_step() const override { return true; }
  std::vector<std::string> device_option_names() const override { return {"lr", "lr_decay", "eps", "weight_decay"}; }
};

}  // namespace mg::optim
