// Helpers of the generic-path tests (tests/optim/test_generic_path.cpp on the CPU,
// tests/cuda/test_cuda_optim.cpp on the GPU): the optimizer option sets, a few seeded steps of
// one set on a given device and path, and the comparison of two runs within the dtype's
// tolerance. The fused CPU path is the reference.
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "core/generator.h"
#include "ops/ops.h"
#include "optim/generic_path.h"
#include "optim/optim.h"
#include "optim_test_util.h"

namespace mg::test {

struct OptimCase {
  std::string name;
  int64_t kind;             // OptimizerKind
  optim::OptionMap options;  // the group's options over the defaults
  int min_steps = 0;         // run at least this many steps (RAdam's rectified branch starts at step 6)
};

// Positions are used by the master-weight tests (tests/optim/test_generic_path.cpp,
// tests/cuda/test_cuda_optim.cpp): append new cases at the end.
inline std::vector<OptimCase> optim_cases() {
  return {
      {"SGD plain", kSGD, {{"lr", 0.1}}},
      {"SGD momentum", kSGD, {{"lr", 0.1}, {"momentum", 0.9}}},
      {"SGD momentum dampening weight_decay", kSGD, {{"lr", 0.05}, {"momentum", 0.9}, {"dampening", 0.1}, {"weight_decay", 0.01}}},
      {"SGD nesterov weight_decay", kSGD, {{"lr", 0.05}, {"momentum", 0.9}, {"nesterov", 1}, {"weight_decay", 0.02}}},
      {"Adam", kAdam, {{"lr", 1e-2}}},
      {"Adam weight_decay", kAdam, {{"lr", 1e-2}, {"weight_decay", 0.1}}},
      {"Adam amsgrad weight_decay", kAdam, {{"lr", 1e-2}, {"amsgrad", 1}, {"weight_decay", 0.05}}},
      {"AdamW decoupled decay", kAdamW, {{"lr", 1e-2}, {"weight_decay", 0.1}}},
      {"AdamW amsgrad", kAdamW, {{"lr", 1e-2}, {"amsgrad", 1}, {"beta1", 0.8}, {"eps", 1e-6}}},
      {"LAMB", kLAMB, {{"lr", 1e-2}, {"weight_decay", 0.01}}},
      {"LAMB no bias correction", kLAMB, {{"lr", 1e-2}, {"bias_correction", 0}, {"weight_decay", 0.0}}},
      {"SGD maximize momentum", kSGD, {{"lr", 0.05}, {"momentum", 0.9}, {"maximize", 1}}},
      {"Adam maximize decoupled", kAdam, {{"lr", 1e-2}, {"decoupled_weight_decay", 1}, {"weight_decay", 0.1}, {"maximize", 1}}},
      {"LAMB maximize", kLAMB, {{"lr", 1e-2}, {"maximize", 1}}},
      {"RMSprop", kRMSprop, {{"lr", 1e-2}}},
      {"RMSprop momentum weight_decay", kRMSprop, {{"lr", 1e-2}, {"momentum", 0.9}, {"weight_decay", 0.05}}},
      {"RMSprop centered momentum maximize", kRMSprop, {{"lr", 1e-2}, {"alpha", 0.9}, {"centered", 1}, {"momentum", 0.5}, {"maximize", 1}}},
      {"RMSprop centered alpha 0.45", kRMSprop, {{"lr", 1e-2}, {"alpha", 0.45}, {"centered", 1}, {"eps", 1e-4}}},
      {"Adagrad", kAdagrad, {{"lr", 0.1}}},
      {"Adagrad lr_decay weight_decay init maximize", kAdagrad, {{"lr", 0.1}, {"lr_decay", 0.05}, {"weight_decay", 0.02}, {"initial_accumulator_value", 0.5}, {"maximize", 1}}},
      {"Adamax weight_decay maximize", kAdamax, {{"lr", 1e-2}, {"weight_decay", 0.05}, {"maximize", 1}}},
      {"NAdam decoupled", kNAdam, {{"lr", 1e-2}, {"weight_decay", 0.1}, {"decoupled_weight_decay", 1}}},
      {"RAdam beta2 0.9 weight_decay", kRAdam, {{"lr", 1e-2}, {"beta2", 0.9}, {"weight_decay", 0.05}}, 7},
      {"NAdam weight_decay maximize", kNAdam, {{"lr", 1e-2}, {"weight_decay", 0.05}, {"maximize", 1}}},
      {"RAdam decoupled", kRAdam, {{"lr", 1e-2}, {"weight_decay", 0.1}, {"decoupled_weight_decay", 1}}, 7},
      {"Adadelta rho weight_decay", kAdadelta, {{"lr", 0.5}, {"rho", 0.8}, {"weight_decay", 0.02}}},
      {"Rprop", kRprop, {{"lr", 1e-2}}},
      {"Rprop etas step sizes maximize", kRprop, {{"lr", 0.05}, {"etaminus", 0.3}, {"etaplus", 1.5}, {"step_size_min", 1e-3}, {"step_size_max", 0.1}, {"maximize", 1}}},
      {"ASGD averaging from step 2 weight_decay", kASGD, {{"lr", 0.05}, {"lambd", 0.1}, {"alpha", 0.5}, {"t0", 2}, {"weight_decay", 0.05}}},
      {"ASGD maximize", kASGD, {{"lr", 0.1}, {"maximize", 1}}},
      {"Adafactor", kAdafactor, {{"lr", 0.05}}},
      {"Adafactor weight_decay d eps1 maximize", kAdafactor, {{"lr", 0.1}, {"weight_decay", 0.05}, {"d", 1.2}, {"eps1", 1e-3}, {"maximize", 1}}},
  };
}

// Parameter shapes: small, odd, one past a multi-tensor chunk (kChunkSize + 37), a zero tensor
// (LAMB's trust ratio falls back to 1) and one without a gradient (skipped, no state).
inline std::vector<Shape> case_shapes() { return {{7, 5}, {33}, {optim::kChunkSize + 37}, {4, 3}, {6}}; }
constexpr std::size_t kZeroParam = 3, kNoGradParam = 4;

// The state after each step: every parameter (as CPU f64 values of its own dtype), then every
// state buffer in buffer-name order, then (masters) every master.
using Snapshot = std::vector<Tensor>;

// Runs `steps` seeded steps of case c with parameters of `dtype` on `device`. `generic` forces the
// generic path for CPU tensors; `masters` turns on f32 master weights (f16/bf16 only).
inline std::vector<Snapshot> run_optim_case(const OptimCase& c, DType dtype, Device device, bool generic,
                                            int steps, bool masters = false) {
  Generator gen(1234);
  Tensors params;
  const std::vector<Shape> shapes = case_shapes();
  for (std::size_t k = 0; k < shapes.size(); ++k) {
    Tensor init = randn(shapes[k], {.dtype = DType::F64}, &gen);
    if (k == kZeroParam) init = zeros(shapes[k], {.dtype = DType::F64});
    params.push_back(to(to(init, dtype), device).detach().requires_grad_());
  }
  std::unique_ptr<optim::Optimizer> opt = make_optimizer(c.kind, {{params, c.options}});
  if (masters) opt->use_master_weights();
  std::unique_ptr<optim::ForceGenericPathGuard> force;
  if (generic) force = std::make_unique<optim::ForceGenericPathGuard>();
  std::vector<Snapshot> out;
  steps = std::max(steps, c.min_steps);
  for (int s = 0; s < steps; ++s) {
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      const Tensor g = randn(shapes[k], {.dtype = DType::F64}, &gen);
      if (k == kNoGradParam) continue;
      params[k].set_grad(to(to(g * (s + 1.0), dtype), device));
    }
    opt->step();
    Snapshot snap;
    for (const Tensor& p : params) snap.push_back(clone(to(p.detach(), Device::cpu())));
    for (const Tensor& p : opt->parameters()) {
      const optim::ParamState* st = opt->state(p);
      if (!st) continue;
      for (const auto& [name, b] : st->buffers) snap.push_back(clone(to(b, Device::cpu())));
      if (masters) snap.push_back(clone(to(p.detach(), Device::cpu())));
    }
    out.push_back(snap);
  }
  return out;
}

// The tolerance of a comparison, relative to the reference tensor's largest magnitude: f64 1e-12;
// f32 a few ulps (each generic op rounds once where the fused loop may use one FMA; the steps
// compound it); f16/bf16 two ulps of the dtype (an f32 ulp apart can round to neighbours).
inline double path_rtol(DType dt) {
  switch (dt) {
    case DType::F64: return 1e-12;
    case DType::F16: return 2.0 * 9.765625e-4;  // 2^-10
    case DType::BF16: return 2.0 * 7.8125e-3;   // 2^-7
    default: return 16.0 * 5.9604644775390625e-8;  // 2^-24
  }
}

// max |got - want| / max |want| over the tensor (0 for equal tensors; inf on NaN mismatch).
inline double path_rel_error(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = values(got), w = values(want);
  REQUIRE(g.size() == w.size());
  double scale = 1e-300, err = 0.0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    scale = std::max(scale, std::fabs(w[i]));
    if (std::isnan(g[i]) != std::isnan(w[i])) return INFINITY;
    if (!std::isnan(w[i]) && g[i] != w[i]) err = std::max(err, std::fabs(g[i] - w[i]));
  }
  return err / scale;
}

// Checks that two runs agree step by step: each tensor within the tolerance of its own dtype or,
// when wider, of the parameters' dtype `param_dtype` (f32 state of f16 parameters sees the
// parameters' rounding). Returns the largest relative error seen.
inline double compare_runs(const std::vector<Snapshot>& got, const std::vector<Snapshot>& want, DType param_dtype,
                           const std::string& what) {
  REQUIRE(got.size() == want.size());
  double worst = 0.0;
  for (std::size_t s = 0; s < want.size(); ++s) {
    REQUIRE(got[s].size() == want[s].size());
    for (std::size_t k = 0; k < want[s].size(); ++k) {
      INFO(what << ": step " << s + 1 << ", tensor " << k << " (" << dtype_name(want[s][k].dtype()) << ")");
      REQUIRE(got[s][k].dtype() == want[s][k].dtype());
      const double e = path_rel_error(got[s][k], want[s][k]);
      CHECK(e <= std::max(path_rtol(want[s][k].dtype()), path_rtol(param_dtype)));
      worst = std::max(worst, e);
    }
  }
  return worst;
}

}  // namespace mg::test
