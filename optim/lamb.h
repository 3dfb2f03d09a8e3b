// LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning"), as NVIDIA Apex's FusedLAMB
// computes it: the Adam direction with bias correction, decoupled weight decay added to the
// update, and a per-tensor trust ratio (g: the gradient, negated with maximize):
//   m = beta1 * m + (1 - beta1) * g                    ("exp_avg")
//   v = beta2 * v + (1 - beta2) * g^2                  ("exp_avg_sq")
//   u = (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps) + weight_decay * p
//   p -= lr * ratio * u,   ratio = ||p|| / ||u|| over the whole tensor (1 when either norm is 0)
// Differences from Apex, on purpose: no built-in global gradient-norm clipping (Apex's
// max_grad_norm; call clip_grad_norm_ before step()), and the trust ratio is applied to every
// tensor (the paper; Apex's use_nvlamb=True) — Apex applies it only when weight_decay != 0.
// The norms are accumulated in f32 (f64 for f64 parameters) by the summation rule
// (core/cascade_sum.h: pairwise over leaves of 128, the chunks combined pairwise), so they are
// accurate to O(log n) ulps and independent of the thread count; moments are kept in f32 (f64 for
// f64 parameters).
//
//   mg::optim::LAMB opt(bert.parameters(), {.lr = 1e-3, .weight_decay = 0.01});
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "mixgrad/optim/optimizer.h"

namespace mg::optim {

struct LAMBOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};  // each in [0, 1); group options "beta1", "beta2"
  double eps = 1e-6;
  double weight_decay = 0.01;  // decoupled: added to the update
  bool bias_correction = true;
  bool maximize = false;       // ascend: the gradient is negated first
  bool multi_tensor = true;    // update a group in one pass over all its tensors (bit-identical)

  template <typename F>
  void for_each(F&& f) {
    f("lr", lr);
    f("beta1", betas.first);
    f("beta2", betas.second);
    f("eps", eps);
    f("weight_decay", weight_decay);
    f("bias_correction", bias_correction);
    f("maximize", maximize);
    f("multi_tensor", multi_tensor);
  }
};

class LAMB final : public Optimizer {
 public:
  using Options = LAMBOptions;
  explicit LAMB(const Tensors& params, LAMBOptions options = {});
  explicit LAMB(const std::vector<ParamGroupSpec>& groups, LAMBOptions defaults = {});

 protected:
  void check_options(const OptionMap& options) const override;
  void step_group(ParamGroup& group) override;
  std::vector<std::string> buffer_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  std::vector<std::string> buffers_of_every_step(const OptionMap&) const override { return {"exp_avg", "exp_avg_sq"}; }
  bool has_fused_step() const override { return true; }
  std::vector<std::string> device_option_names() const override { return {"lr", "beta1", "beta2", "eps", "weight_decay"}; }
  OptionMap options_added_later() const override { return {{"maximize", 0.0}}; }
  // Capturable into a CUDA graph: the fused step takes each tensor's trust ratio from stage 1's
  // chunk sums on the device, with no table from the host.
};

}  // namespace mg::optim
