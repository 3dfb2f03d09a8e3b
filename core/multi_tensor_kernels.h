// The hook through which a device backend provides fused multi-tensor kernels (DESIGN §5): the
// unscale + inf/NaN check + gradient statistics pass, the steps of every optimizer in optim/
// (SGD, Adam/AdamW, LAMB, RMSprop, Adagrad, Adamax, NAdam, RAdam, Adadelta, Rprop, ASGD, Adafactor) that also write the
// low-precision model copy, the deterministic L2 norm for clipping, and the one-thread loss scale
// update. optim/ and amp/ call them for tensors on that device; cuda/kernels/multi_tensor.cu
// registers the CUDA table from register_cuda_kernels().
// Decision: a per-DeviceType table of function pointers set once at init, the pattern of
// set_device_fill_fn (core/device_fill.h), because cuda/ sits below optim/ and amp/ (DESIGN §1)
// and nothing outside cuda/ may include a CUDA header. The arguments are tensors plus device
// pointers to the loss scaler's device values, so a step can run without the host reading
// anything back: every "should this step be skipped?" decision is a device value.
//
//   if (const MultiTensorKernels* k = multi_tensor_kernels(DeviceType::CUDA)) k->unscale(args);
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "mixgrad/core/device.h"
#include "mixgrad/core/tensor.h"

namespace mg {

// unscale: for every defined src[i] (f64/f32/f16/bf16, contiguous, all on one device) classify
// each value before unscaling (zero; nonzero below the dtype's smallest normal; inf/NaN) and
//   in place (dst empty):     src[i] = src[i] * inv      (opmath f32, f64 for f64; rounded once)
//   to masters (dst given):   dst[i] = f32(src[i]) * inv (+ dst[i] when accumulate)
// with inv = float(1 / *scale) (f64 gradients: 1 / *scale in double), as the CPU pass computes it.
struct MultiTensorUnscaleArgs {
  Tensors src;                  // gradients [any]
  Tensors dst;                  // empty, or one f32 tensor per src of the same numel
  bool accumulate = false;
  bool check_only = false;      // classify only; nothing is written but the flags and counts
  const double* scale = nullptr;  // device [1] f64: the loss scale
  float* found_inf = nullptr;   // device [1] f32: set to 1 when any value is inf/NaN (never cleared)
  int64_t* counts = nullptr;    // device [3] i64 {zeros, underflowed, nonfinite}: added to
};

// The lists an optimizer step reads and writes; entry i of every non-empty list belongs to
// params[i]. State buffers hold opmath (f32; f64 for f64 params).
struct MultiTensorStepArgs {
  Tensors params;                 // [any] contiguous: the f32 masters, or the parameters themselves
  Tensors grads;                  // same numel and dtype as params
  // SGD {momentum, the [1] i64 step at which the fused step created the momentum buffer (undefined:
  // the buffer is not new)},
  // Adam {exp_avg, exp_avg_sq, max_exp_avg_sq}, LAMB {exp_avg, exp_avg_sq},
  // RMSprop {square_avg, grad_avg (centered), momentum_buffer (momentum > 0)}, Adagrad {sum},
  // Adamax {exp_avg, exp_inf}, RAdam {exp_avg, exp_avg_sq}, Adadelta {square_avg, acc_delta},
  // Rprop {prev, step_size}, ASGD {ax, the [1] f64 eta and mu of the step},
  // NAdam {exp_avg, exp_avg_sq, the [1] f64 product of the mu's so far ("mu_product")},
  // Adafactor {row_var, col_var (parameters of 2+ dimensions), variance (the others); the unused undefined}
  std::array<Tensors, 3> state;
  Tensors model;                  // empty, or per param the f16/bf16 model tensor set to round(param) in the same pass
  std::vector<int64_t*> steps;    // device i64 per param: updates applied so far (read; see count_steps)
  const float* found_inf = nullptr;  // device [1] f32 or null: when nonzero the step changes nothing
  // device f64 or null: the hyper-parameter struct's doubles in declaration order (SgdHyper: lr,
  // momentum, dampening, weight_decay; AdamHyper and LambHyper: lr, beta1, beta2, eps,
  // weight_decay; RmspropHyper: lr, alpha, eps, weight_decay, momentum; AdagradHyper: lr, lr_decay,
  // eps, weight_decay; AdamaxHyper and RadamHyper: lr, beta1, beta2, eps, weight_decay; NadamHyper:
  // those and momentum_decay; AdadeltaHyper: lr, rho, eps, weight_decay; RpropHyper: lr (each
  // step size's value before the first update), etaminus, etaplus, step_size_min, step_size_max; AsgdHyper: lr,
  // lambd, alpha, t0, weight_decay; AdafactorHyper: lr, beta2_decay, eps1, eps2, d, weight_decay); when set the kernels read these instead of the struct's, so a CUDA graph
  // replays with the lr a scheduler set since (the optimizer rewrites them before each replay).
  const double* hyper = nullptr;
};

// maximize: the gradient is negated first (grad_sign -1 in optim/functors.h).
struct SgdHyper {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
  bool maximize;
};
struct LambHyper {
  double lr, beta1, beta2, eps, weight_decay;
  bool bias_correction;
  bool maximize;
};
struct AdamHyper {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;  // AdamW
  bool amsgrad;
  bool maximize;
};

struct RmspropHyper {
  double lr, alpha, eps, weight_decay, momentum;
  bool centered;
  bool maximize;
};
struct AdagradHyper {
  double lr, lr_decay, eps, weight_decay;
  bool maximize;
};
struct AdamaxHyper {
  double lr, beta1, beta2, eps, weight_decay;
  bool maximize;
};
struct RadamHyper {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;
  bool maximize;
};
struct NadamHyper {
  double lr, beta1, beta2, eps, weight_decay, momentum_decay;
  bool decoupled;
  bool maximize;
};
struct AdadeltaHyper {
  double lr, rho, eps, weight_decay;
  bool maximize;
};
struct AsgdHyper {
  double lr, lambd, alpha, t0, weight_decay;
  bool maximize;
};
struct RpropHyper {
  double lr, etaminus, etaplus, step_size_min, step_size_max;
  bool maximize;
};
struct AdafactorHyper {
  double lr, beta2_decay, eps1, eps2, d, weight_decay;  // eps1 < 0: the parameter dtype's machine epsilon
  bool maximize;
};

struct MultiTensorKernels {
  void (*unscale)(const MultiTensorUnscaleArgs& args);
  // fn::SgdStep per element; the momentum buffer starts as the gradient where *steps[i] equals
  // its creation step (state[1][i]; never when undefined).
  void (*sgd)(const MultiTensorStepArgs& args, const SgdHyper& h);
  // fn::AdamStep per element with t = *steps[i] + 1 (bias corrections computed on the device in double).
  void (*adam)(const MultiTensorStepArgs& args, const AdamHyper& h);
  // LAMB: fn::LambStage1 (moments, per-chunk sums of p^2 and u^2 in opmath), each tensor's trust
  // ratio from its chunk sums added in order, then fn::LambApply and the model copy; t as Adam's.
  void (*lamb)(const MultiTensorStepArgs& args, const LambHyper& h);
  // *steps[i] += 1 for every i unless *found_inf is set: call after the step kernels.
  void (*count_steps)(const std::vector<int64_t*>& steps, const float* found_inf, Device device);
  // out = the 2-norm of all tensors together as f32 (f32 accumulation; the per-chunk partials
  // combined in f32 by a fixed tree, so the same bits every run). out: device [1] f32.
  void (*l2_norm)(const Tensors& tensors, const Tensor& out);
  // One loss-scale update (fn::loss_scale_update) on the device: state points at a device
  // fn::LossScaleState, rule is copied by value (an fn::LossScaleRule), outcome at a device i32
  // (fn::LossScaleOutcome; the first non-Ok value is kept), then *found_inf is cleared for the next
  // iteration.
  void (*scale_update)(void* state, const void* rule, float* found_inf, int32_t* outcome, Device device);
  // fn::RmspropStep per element (grad_avg and momentum_buffer null unless centered / momentum > 0:
  // the kernel runs with the group's flags, not the buffers' presence).
  void (*rmsprop)(const MultiTensorStepArgs& args, const RmspropHyper& h);
  // fn::AdagradStep per element with -lr / (1 + (t - 1) lr_decay), t = *steps[i] + 1, in double on the device.
  void (*adagrad)(const MultiTensorStepArgs& args, const AdagradHyper& h);
  // fn::AdamaxStep per element with -lr / (1 - beta1^t), t = *steps[i] + 1, in double on the device.
  void (*adamax)(const MultiTensorStepArgs& args, const AdamaxHyper& h);
  // fn::RadamStep per element with fn::radam_scalars(beta1, beta2, t) computed on the device.
  void (*radam)(const MultiTensorStepArgs& args, const RadamHyper& h);
  // fn::NadamStep per element with fn::nadam_scalars from t and the parameter's mu_product
  // (state[2]), which a second launch then multiplies by mu_t unless *found_inf is set; call before
  // count_steps (it reads t).
  void (*nadam)(const MultiTensorStepArgs& args, const NadamHyper& h);
  // fn::AdadeltaStep per element (no step-dependent scalar).
  void (*adadelta)(const MultiTensorStepArgs& args, const AdadeltaHyper& h);
  // fn::RpropStep per element; a parameter's first update (*steps[i] == 0) starts every step size at lr.
  void (*rprop)(const MultiTensorStepArgs& args, const RpropHyper& h);
  // fn::AsgdStep per element with the parameter's eta and mu (state[1], state[2]; lr and 1 at its
  // first update, *steps[i] == 0), which a second
  // launch then sets to fn::asgd_eta / fn::asgd_mu of t = *steps[i] + 1 unless *found_inf is set;
  // call before count_steps.
  void (*asgd)(const MultiTensorStepArgs& args, const AsgdHyper& h);
  // Adafactor (optim/adafactor.h), parameter by parameter: sum p^2, the factored (or full) second
  // moments folded in, sum u^2, then the update and the model copy, with the scalars of t =
  // *steps[i] + 1 (fn::adafactor_scalars) computed on the device; the sums follow the CUDA
  // reductions' tree (cuda/host/reducers.h). Call before count_steps (it reads t).
  void (*adafactor)(const MultiTensorStepArgs& args, const AdafactorHyper& h);
};

void set_multi_tensor_kernels(DeviceType type, const MultiTensorKernels* kernels);
// The registered table, or nullptr (the CPU has none: optim/ runs its own chunk loops there).
const MultiTensorKernels* multi_tensor_kernels(DeviceType type);

}  // namespace mg
