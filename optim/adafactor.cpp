// Adafactor: the fused CPU step (optim/adafactor_cpu.cpp) for contiguous CPU parameters, the
// device's fused kernel (cuda/kernels/adafactor.cu) for a group on one CUDA device, the generic path
// of public ops for the others (channels-last CPU weights, a group spanning devices).
#include "mixgrad/optim/adafactor.h"

#include <array>
#include <cmath>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/multi_tensor_kernels.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/optim/adafactor_cpu.h"
#include "mixgrad/optim/functors.h"
#include "mixgrad/optim/generic_path.h"

namespace mg::optim {

namespace {

// The generic path (optim/generic_path.h): one update of one parameter in opmath (f32, f64 for
// f64) with public ops, the formulas of adafactor.h in PyTorch's order. row/col (matrices) or var
// (the others) are updated in place; the other(s) undefined.
void adafactor_generic(const Tensor& param, const Tensor& grad, Tensor row, Tensor col, Tensor var, DType opmath,
                       const AdafactorOptions& o, int64_t t) {
  NoGradGuard no_grad;
  Tensor p = to(param, opmath);
  Tensor g = to(grad, opmath);
  if (o.maximize) g = neg(g);
  const fn::AdafactorScalars<double> s = fn::adafactor_scalars<double>(
      o.lr, o.beta2_decay, o.eps1, o.eps2, o.d, o.weight_decay, o.maximize, machine_epsilon(param.dtype()), t,
      p.numel(), 1, 1);
  const double w = s.w, rho = s.rho, eps1 = s.eps1;
  const double root_numel = s.root_numel;
  // alpha from the parameter before the weight decay, a 0-d tensor (no host read).
  // PyTorch takes alpha's and the clip's max on the host (Python's max: a NaN norm gives the
  // floor), so a non-finite element spoils only itself in a vector's step: where, not clamp_min.
  const Tensor rms = norm(p) / root_numel;
  const Tensor alpha = where(gt(rms, scalar_like(o.eps2, rms)), rms, scalar_like(o.eps2, rms)) * rho;
  if (o.weight_decay != 0.0) p.mul_(s.decay);
  const Tensor g2 = mul(g, g);
  Tensor v;
  if (p.dim() > 1) {
    const int64_t n = p.shape()[std::size_t(p.dim() - 2)], m = p.shape().back();
    row.copy_(aten_lerp(row, sum(g2, {-1}, /*keepdim=*/true) / double(m), w));
    col.copy_(aten_lerp(col, sum(g2, {-2}, /*keepdim=*/true) / double(n), w));
    v = mul(row, col) / clamp_min(mean(row, {-2}, /*keepdim=*/true), eps1);  // [..., n, 1] x [..., 1, m]
  } else {
    var.copy_(aten_lerp(var, g2, w));
    v = var;
  }
  const Tensor u = mul(rsqrt(clamp_min(v, s.eps1_sq)), g);
  const Tensor ratio = norm(u) / s.root_numel_d;
  const Tensor clip = where(gt(ratio, scalar_like(1.0, ratio)), ratio, scalar_like(1.0, ratio));
  p.sub_(mul(u, alpha / clip));
  if (!p.is_same(param)) Tensor(param).copy_(p);
}

}  // namespace

Adafactor::Adafactor(const Tensors& params, AdafactorOptions options)
    : Adafactor(std::vector<ParamGroupSpec>{{params}}, options) {}

Adafactor::Adafactor(const std::vector<ParamGroupSpec>& groups, AdafactorOptions defaults)
    : Optimizer("Adafactor", options_to_map(defaults)) {
  init_groups(groups);
}

void Adafactor::check_options(const OptionMap& m) const {
  check_bool_options<AdafactorOptions>(m, "Adafactor");
  const AdafactorOptions o = options_from_map<AdafactorOptions>(m, "Adafactor");
  MG_CHECK(o.lr >= 0.0, Error, "Adafactor: lr must be >= 0, got ", o.lr);
  MG_CHECK(o.beta2_decay <= 0.0, Error, "Adafactor: beta2_decay must be <= 0, got ", o.beta2_decay);
  MG_CHECK(o.eps1 >= 0.0 || o.eps1 == AdafactorOptions::kDtypeEpsilon, Error,
           "Adafactor: eps1 must be >= 0, or -1 for the machine epsilon of the parameter's dtype; got ", o.eps1);
  MG_CHECK(o.eps2 >= 0.0, Error, "Adafactor: eps2 must be >= 0, got ", o.eps2);
  MG_CHECK(o.d >= 1.0, Error, "Adafactor: the clipping threshold d must be >= 1, got ", o.d);
  MG_CHECK(o.weight_decay >= 0.0, Error, "Adafactor: weight_decay must be >= 0, got ", o.weight_decay);
}

std::optional<Shape> Adafactor::buffer_shape(const std::string& name, const Tensor& p) const {
  Shape s = p.shape();
  if (s.size() < 2) return name == "variance" ? std::optional<Shape>(s) : std::nullopt;
  if (name == "row_var") s.back() = 1;
  else if (name == "col_var") s[s.size() - 2] = 1;
  else return std::nullopt;
  return s;
}

void Adafactor::step_group(ParamGroup& group) {
  const AdafactorOptions o = options_from_map<AdafactorOptions>(group.options, name());
  const std::vector<Work> work = collect(group);
  // Every buffer is made before any step is counted: a refusal there leaves every step as it was.
  std::vector<std::array<Tensor, 3>> state;  // row_var, col_var (matrices) or variance
  for (const Work& w : work) {
    const bool factored = w.param.dim() > 1;
    state.push_back({factored ? buffer(w, "row_var", /*zero=*/true) : Tensor(),
                     factored ? buffer(w, "col_var", /*zero=*/true) : Tensor(),
                     factored ? Tensor() : buffer(w, "variance", /*zero=*/true)});
  }
  MultiTensorStepArgs args;
  if (const MultiTensorKernels* k = fused_step_args(group, work, args)) {
    for (const auto& [row, col, var] : state) {
      args.state[0].push_back(row);
      args.state[1].push_back(col);
      args.state[2].push_back(var);
    }
    k->adafactor(args, {.lr = o.lr, .beta2_decay = o.beta2_decay, .eps1 = o.eps1, .eps2 = o.eps2, .d = o.d,
                        .weight_decay = o.weight_decay, .maximize = o.maximize});
    finish_fused_step(work, k, args);
    return;
  }
  for (std::size_t i = 0; i < work.size(); ++i) {
    const Work& w = work[i];
    const auto& [row, col, var] = state[i];
    const int64_t t = ++w.state->step;
    if (w.param.numel() == 0) continue;  // nothing to update (and no mean over an empty row)
    if (use_generic_path(w.param) || !w.param.is_contiguous()) {
      adafactor_generic(w.param, w.grad, row, col, var, opmath_dtype(w), o, t);  // in-place ops: versions bumped
      continue;
    }
    const bool factored = w.param.dim() > 1;
    detail::adafactor_cpu_step(w.param, w.grad, factored ? row.data_ptr() : nullptr,
                               factored ? col.data_ptr() : nullptr, factored ? nullptr : var.data_ptr(), o, t);
    w.param.bump_version();
  }
}

}  // namespace mg::optim
