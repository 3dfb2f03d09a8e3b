// Adafactor (Shazeer & Stern 2018, "Adafactor: Adaptive Learning Rates with Sublinear Memory
// Cost"), as torch.optim.Adafactor: Adam's second moment without its memory. For a parameter of
// two or more dimensions the second moment of each [n, m] matrix (the last two dimensions) is kept
// factored, as the mean of g^2 over each row ("row_var", [..., n, 1]) and over each column
// ("col_var", [..., 1, m]): n + m values instead of n m, and no first moment. At step t
// (g: the gradient, negated with maximize):
//   w = t^beta2_decay                  (1 - beta2_t; 1 at the first step)
//   rho = min(lr, 1 / sqrt(t));   alpha = max(eps2, RMS(p)) * rho        (RMS before the decay)
//   p *= 1 - lr * weight_decay
//   matrices: R = lerp(R, mean(g^2 over each row), w);  C = lerp(C, mean(g^2 over each column), w)
//             V = R C / max(mean(R over the rows), eps1)                (the outer product)
//   vectors:  V = lerp(V, g^2, w)      ("variance", the parameter's shape; also 0-d parameters)
//   u = g / sqrt(max(V, eps1^2));   p -= alpha / max(1, RMS(u) / d) * u
// As PyTorch's, which differs from the paper on purpose: lr caps the relative step size rho and
// scales the (decoupled) weight decay, and eps1 guards the variance estimate, not the factors.
// eps1 defaults to the machine epsilon of the parameter's dtype (PyTorch's eps=(None, ...)): 2^-23
// for f32 (and for an O2 master), 2^-7 for a bf16 parameter — each parameter its own, where
// PyTorch 2.15 keeps the first parameter's value for the rest of its group (a group mixing bf16
// and f32 parameters steps its f32 ones with bf16's floor there).
//
// Precision: the state and the arithmetic are f32 (f64 for f64 parameters) whatever the parameter's
// dtype, and an f16/bf16 parameter is rounded once; the means and norms are the sum op's
// reductions (the summation rule of docs/numerics.md). PyTorch keeps the state and computes in the
// parameter's dtype (bf16 moments for a bf16 model). No value is read on the host: alpha and the
// clipping divisor stay on the device (PyTorch reads both per parameter per step).
//
// Paths: a contiguous CPU parameter takes the fused CPU step (optim/adafactor_cpu.h: four passes,
// no temporary of the parameter's size, 6x faster than the ops on BERT-mini's parameters); a group
// on one CUDA device the fused kernels (cuda/kernels/adafactor.cu: the step's scalars from the
// device step count, the found-inf flag read on the device, so no host read under
// step_unless_found_inf and a step CUDA graphs can capture); every other one (channels-last CPU
// weights, a group spanning devices) the generic path of public ops (optim/generic_path.h). There
// is no multi_tensor option: each parameter is its own passes.
//
//   mg::optim::Adafactor opt(bert->parameters(), {.lr = 1e-2, .weight_decay = 0.01});
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "mixgrad/optim/optimizer.h"

namespace mg::optim {

struct AdafactorOptions {
  // The value of eps1 that means "the machine epsilon of the parameter's dtype" (PyTorch's None).
  static constexpr double kDtypeEpsilon = -1.0;

  double lr = 1e-2;             // caps the relative step size rho and scales the weight decay; >= 0
  double beta2_decay = -0.8;    // 1 - beta2_t = t^beta2_decay; <= 0
  double eps1 = kDtypeEpsilon;  // the variance estimate's floor (squared for V); >= 0, or kDtypeEpsilon
  double eps2 = 1e-3;           // the parameter RMS's floor in alpha; >= 0
  double d = 1.0;               // the update clipping threshold on RMS(u); >= 1
  double weight_decay = 0.0;    // decoupled: p *= 1 - lr * weight_decay; >= 0
  bool maximize = false;        // ascend: the gradient is negated first

  template <typename F>
  void for_each(F&& f) {
    f("lr", lr);
    f("beta2_decay", beta2_decay);
    f("eps1", eps1);
    f("eps2", eps2);
    f("d", d);
    f("weight_decay", weight_decay);
    f("maximize", maximize);
  }
};

class Adafactor final : public Optimizer {
 public:
  using Options = AdafactorOptions;
  explicit Adafactor(const Tensors& params, AdafactorOptions options = {});
  explicit Adafactor(const std::vector<ParamGroupSpec>& groups, AdafactorOptions defaults = {});

 protected:
  void check_options(const OptionMap& options) const override;
  void step_group(ParamGroup& group) override;
  std::vector<std::string> buffer_names() const override { return {"row_var", "col_var", "variance"}; }
  // row_var [..., n, 1] and col_var [..., 1, m] for a parameter of two or more dimensions,
  // variance (the parameter's shape) for a vector or a 0-d parameter.
  std::optional<Shape> buffer_shape(const std::string& name, const Tensor& p) const override;
  std::vector<std::string> buffers_of_every_step(const OptionMap&) const override { return buffer_names(); }
  bool has_fused_step() const override { return true; }
  std::vector<std::string> device_option_names() const override {
    return {"lr", "beta2_decay", "eps1", "eps2", "d", "weight_decay"};
  }
};

}  // namespace mg::optim
