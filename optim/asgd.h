// ASGD (averaged stochastic gradient descent, Polyak & Juditsky 1992), as torch.optim.ASGD: SGD
// with a step eta that decays as lr / (1 + lambd lr t)^alpha and a running (Polyak-Ruppert)
// average "ax" of the iterates that starts averaging after t0 updates:
//   g = (maximize ? -grad : grad) + weight_decay * p
//   p *= 1 - lambd * eta;  p -= eta * g
//   ax = mu != 1 ? ax + (p - ax) * mu : p
//   then eta = lr / (1 + lambd lr t)^alpha,  mu = 1 / max(1, t - t0)
// eta (lr at the parameter's first update) and mu (1 then) are each parameter's scalar state, in
// double (saved as the floats state.<i>.eta / .mu; a state saved without them takes those of its
// step count and the group's options, where PyTorch's load raises a KeyError); PyTorch keeps them
// as tensors of its default dtype, f32 unless set otherwise. "ax" is in f32 (f64 for f64 parameters); f16/bf16 parameters are updated
// in f32 and rounded once. The average is for reading (opt.state(p)->buffers.at("ax")), e.g. to
// evaluate with; the parameters themselves follow plain SGD. On the CPU, fused chunk loops
// (optim/functors.h); on CUDA the fused multi-tensor kernel (the same functor, eta and mu on the
// device like NAdam's mu_product; no host read under step_unless_found_inf, and a step CUDA
// graphs can capture); elsewhere the generic path of public ops.
//
//   mg::optim::ASGD opt(net.parameters(), {.lr = 1e-2, .t0 = 1000});
#pragma once
#include <string>
#include <vector>

#include "mixgrad/optim/optimizer.h"

namespace mg::optim {

struct ASGDOptions {
  double lr = 1e-2;           // >= 0
  double lambd = 1e-4;        // decay term, >= 0
  double alpha = 0.75;        // power of the eta decay, >= 0
  double t0 = 1e6;            // the update after which averaging starts (inf: never)
  double weight_decay = 0.0;  // L2, added to the gradient
  bool maximize = false;      // ascend: the gradient is negated first
  bool multi_tensor = true;   // update a group in one pass over all its tensors (bit-identical)

  template <typename F>
  void for_each(F&& f) {
    f("lr", lr);
    f("lambd", lambd);
    f("alpha", alpha);
    f("t0", t0);
    f("weight_decay", weight_decay);
    f("maximize", maximize);
    f("multi_tensor", multi_tensor);
  }
};

class ASGD final : public Optimizer {
 public:
  using Options = ASGDOptions;
  explicit ASGD(const Tensors& params, ASGDOptions options = {});
  explicit ASGD(const std::vector<ParamGroupSpec>& groups, ASGDOptions defaults = {});

 protected:
  void check_options(const OptionMap& options) const override;
  void step_group(ParamGroup& group) override;
  std::vector<std::string> buffer_names() const override { return {"ax"}; }
  std::vector<std::string> buffers_of_every_step(const OptionMap&) const override { return {"ax"}; }
  std::vector<std::string> scalar_names() const override { return {"eta", "mu"}; }
  bool has_fused_step() const override { return true; }
  std::vector<std::string> device_option_names() const override {
    return {"lr", "lambd", "alpha", "t0", "weight_decay"};
  }
};

}  // namespace mg::optim
