// Rprop (resilient backpropagation, Riedmiller & Braun 1993), as torch.optim.Rprop: each element
// moves by its own step size against the sign of its gradient, the step size growing by etaplus
// while the gradient keeps its sign and shrinking by etaminus when it flips:
//   g = maximize ? -grad : grad;  s = sign(g * prev)
//   step_size = clamp(step_size * (s > 0 ? etaplus : s < 0 ? etaminus : 1), step_size_min, step_size_max)
//   s < 0: g = 0  (no move this step, and none counted as a flip the next)
//   p -= sign(g) * step_size;  prev = g
// State: "prev" (zero at first) and "step_size" (the group's lr at the parameter's first update), in f32 (f64 for f64 parameters);
// f16/bf16 parameters are updated in f32 and rounded once. A NaN gradient element leaves its
// parameter and step size unchanged (ATen's sign of NaN is 0), as PyTorch's. Full-batch by design:
// with noisy minibatch gradients the signs flip at random. On the CPU, fused chunk loops
// (optim/functors.h); on CUDA the fused multi-tensor kernel (the same functor; no host read under
// step_unless_found_inf, and a step CUDA graphs can capture); elsewhere the generic path of public ops.
//
//   mg::optim::Rprop opt(net.parameters(), {.lr = 1e-2, .etas = {0.5, 1.2}});
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "mixgrad/optim/optimizer.h"

namespace mg::optim {

struct RpropOptions {
  double lr = 1e-2;                                     // every step size's first value, >= 0
  std::pair<double, double> etas = {0.5, 1.2};          // (etaminus, etaplus): 0 < etaminus < 1 < etaplus
  std::pair<double, double> step_sizes = {1e-6, 50.0};  // (min, max): 0 <= min <= max
  bool maximize = false;                                // ascend: the gradient is negated first
  bool multi_tensor = true;                             // update a group in one pass over all its tensors (bit-identical)

  template <typename F>
  void for_each(F&& f) {
    f("lr", lr);
    f("etaminus", etas.first);
    f("etaplus", etas.second);
    f("step_size_min", step_sizes.first);
    f("step_size_max", step_sizes.second);
    f("maximize", maximize);
    f("multi_tensor", multi_tensor);
  }
};

class Rprop final : public Optimizer {
 public:
  using Options = RpropOptions;
  explicit Rprop(const Tensors& params, RpropOptions options = {});
  explicit Rprop(const std::vector<ParamGroupSpec>& groups, RpropOptions defaults = {});

 protected:
  void check_options(const OptionMap& options) const override;
  void step_group(ParamGroup& group) override;
  std::vector<std::string> buffer_names() const override { return {"prev", "step_size"}; }
  std::vector<std::string> buffers_of_every_step(const OptionMap&) const override { return {"prev", "step_size"}; }
  bool has_fused_step() const override { return true; }
  // lr only seeds the step sizes at a parameter's first update (the kernel reads it then), and a
  // scheduler may change it between CUDA graph replays.
  std::vector<std::string> device_option_names() const override {
    return {"lr", "etaminus", "etaplus", "step_size_min", "step_size_max"};
  }
};

}  // namespace mg::optim
