// Muon (Jordan et al. 2024, "Muon: An optimizer for hidden layers in neural networks"), as
// torch.optim.Muon (PyTorch 2.15): momentum whose update is orthogonalised. For a 2-D parameter p
// (an [A, B] matrix: fan-out x fan-in) with gradient g:
//   buf = lerp(buf, g, 1 - momentum)                          ("momentum_buffer")
//   u = nesterov ? lerp(g, buf, momentum) : buf
//   O = NS_k(u): X = u / max(||u||_F, eps), transposed when A > B (so X X^T is the smaller Gram
//       matrix), then k times  G = X X^T;  X = a X + (b G + c G G) X   (a quintic Newton–Schulz
//       iteration, coefficients (a, b, c): X's singular values go to about 1, its singular vectors stay)
//   p *= 1 - lr * weight_decay;   p -= lr * adjust(A, B) * O
// adjust: sqrt(max(1, A / B)) (kOriginal, the default: Keller Jordan's), 0.2 sqrt(max(A, B))
// (kMatchRmsAdamW, Moonshot's: AdamW's lr and weight decay carry over), sqrt(A / B)
// (kSpectralUnclamped, Bernstein's).
//
// Muon is for matrices: in a Muon group (the default) the constructor and the step refuse a
// parameter that is not 2-D. Give biases,
// norms, embeddings and output heads to AdamW, as PyTorch's documentation advises: to a
// torch.optim.AdamW-like optimizer of their own, or to a group of this one with use_muon = false,
// which steps them with AdamW (decoupled weight decay, betas adamw_beta1/adamw_beta2, eps adamw_eps,
// the group's lr and weight_decay; state exp_avg and exp_avg_sq; optim::AdamW's own update code).
// One optimizer then trains the whole model, as Keller Jordan's MuonWithAuxAdam and Moonshot's
// Moonlight do: one amp::initialize, one scheduler, one state dict. With adjust_lr =
// kMatchRmsAdamW the matrices' updates have AdamW's RMS, so one lr and weight decay serve all groups.
//
// Precision: the iteration runs in bf16, as PyTorch's (each product accumulated in f32 and rounded
// to bf16 once, so X is rounded after every operation; the iteration only needs X's singular values
// near 1): it is five pairs of GEMMs per matrix per step, which bf16 makes fast where the processor
// has AVX512-BF16 or AMX, and on Tensor Cores. ns_bf16 = false runs it in the parameter's opmath
// instead (f32; f64 for f64 parameters), which tests/optim/test_muon.cpp compares with an f64
// reference. The momentum buffer and the update are f32 (f64 for f64 parameters) whatever the
// parameter's dtype, and an f16/bf16 parameter is rounded once; PyTorch keeps the buffer in the
// gradient's dtype.
//
// Paths: the update is written once with public ops, so it runs on every device. On the CPU the
// threads take whole matrices (parallel_for over a group's parameters, each one's GEMMs on one
// thread): Newton–Schulz GEMMs of a few hundred rows gain little from being split. On CUDA it is a
// fused device step all the same (has_fused_step): lr and weight_decay come from the optimizer's
// device copy of the options and step_unless_found_inf's flag gates every write through `where`,
// so nothing is read on the host and a CUDA graph can capture the step; use_muon = 0 groups run
// the AdamW kernel.
//
//   std::vector<mg::Tensor> matrices, others;   // p.dim() == 2 (not the embeddings) / the rest
//   mg::optim::Muon muon(matrices, {.lr = 0.02});
//   mg::optim::AdamW adamw(others, {.lr = 3e-4, .weight_decay = 0.01});
// or, as one optimizer:
//   mg::optim::Muon opt({{.params = matrices}, {.params = others, .options = {{"use_muon", 0}}}},
//                       {.lr = 3e-4, .weight_decay = 0.01, .adjust_lr = mg::optim::MuonOptions::kMatchRmsAdamW});
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "mixgrad/optim/optimizer.h"

namespace mg::optim {

struct MuonOptions {
  // adjust_lr: how the lr scales with the matrix's shape [A, B] (PyTorch's adjust_lr_fn).
  static constexpr int64_t kOriginal = 0;           // sqrt(max(1, A / B))
  static constexpr int64_t kMatchRmsAdamW = 1;      // 0.2 sqrt(max(A, B))
  static constexpr int64_t kSpectralUnclamped = 2;  // sqrt(A / B)

  double lr = 1e-3;                                   // >= 0
  double weight_decay = 0.1;                          // decoupled: p *= 1 - lr * weight_decay; >= 0
  double momentum = 0.95;                             // >= 0
  bool nesterov = true;
  std::array<double, 3> ns_coefficients = {3.4445, -4.7750, 2.0315};  // (a, b, c); options "ns_a", "ns_b", "ns_c"
  double eps = 1e-7;                                  // the norm's floor in the normalisation; >= 0
  int64_t ns_steps = 5;                               // Newton–Schulz iterations, in [0, 100)
  int64_t adjust_lr = kOriginal;
  bool ns_bf16 = true;                                // false: the iteration in opmath (f32, f64)
  // A group with use_muon = false steps its parameters (any shape) with AdamW instead; these three
  // are its betas and eps (AdamW's defaults).
  bool use_muon = true;
  double adamw_beta1 = 0.9;                           // in [0, 1)
  double adamw_beta2 = 0.999;                         // in [0, 1)
  double adamw_eps = 1e-8;                            // >= 0

  template <typename F>
  void for_each(F&& f) {
    f("lr", lr);
    f("weight_decay", weight_decay);
    f("momentum", momentum);
    f("nesterov", nesterov);
    f("ns_a", ns_coefficients[0]);
    f("ns_b", ns_coefficients[1]);
    f("ns_c", ns_coefficients[2]);
    f("eps", eps);
    f("ns_steps", ns_steps);
    f("adjust_lr", adjust_lr);
    f("ns_bf16", ns_bf16);
    f("use_muon", use_muon);
    f("adamw_beta1", adamw_beta1);
    f("adamw_beta2", adamw_beta2);
    f("adamw_eps", adamw_eps);
  }
};

class Muon final : public Optimizer {
 public:
  using Options = MuonOptions;
  explicit Muon(const Tensors& params, MuonOptions options = {});
  explicit Muon(const std::vector<ParamGroupSpec>& groups, MuonOptions defaults = {});

 protected:
  void check_options(const OptionMap& options) const override;
  void step_group(ParamGroup& group) override;
  std::vector<std::string> buffer_names() const override { return {"momentum_buffer", "exp_avg", "exp_avg_sq"}; }
  // momentum_buffer in a Muon group, the moments in an AdamW one (use_muon = 0).
  std::vector<std::string> buffers_created(const OptionMap& options) const override;
  std::vector<std::string> buffers_of_every_step(const OptionMap& options) const override {
    return buffers_created(options);
  }
  OptionMap options_added_later() const override;
  // The fused device path (CUDA): AdamW groups on the AdamW kernel, which reads these in AdamHyper's
  // order; Muon groups read lr and weight_decay.
  bool has_fused_step() const override { return true; }
  std::vector<std::string> device_option_names() const override {
    return {"lr", "adamw_beta1", "adamw_beta2", "adamw_eps", "weight_decay"};
  }
};

// NS_k(u) of Muon above for a 2-D u, in `dtype` (bf16: Muon's default), returned in that dtype.
// Exposed for tests and for users who orthogonalise updates of their own.
Tensor newton_schulz_orthogonalize(const Tensor& u, const MuonOptions& options, DType dtype);

}  // namespace mg::optim
