// Adafactor: the fused CPU step (optim/adafactor_cpu.cpp) for contiguous CPU parameters, the
// generic path of public ops for the others (other devices, channels-last weights).
#include "mixgrad/optim/adafactor.h"

#include <algorithm>
#include <cmath>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/optim/adafactor_cpu.h"
#include "mixgrad/optim/generic_path.h"

namespace mg::optim {

namespace {

// The machine epsilon of a floating dtype (torch.finfo(dtype).eps).
double dtype_epsilon(DType dt) {
  switch (dt) {
    case DType::F64: return 0x1p-52;
    case DType::F16: return 0x1p-10;
    case DType::BF16: return 0x1p-7;
    default: return 0x1p-23;
  }
}

// The scalars of a step at the parameter's update count t (>= 1), as PyTorch computes them.
detail::AdafactorStepScalars step_scalars(const AdafactorOptions& o, int64_t t, DType dtype) {
  const double step = double(t);
  return {.w = std::pow(step, o.beta2_decay), .rho = std::min(o.lr, 1.0 / std::sqrt(step)),
          .eps1 = o.eps1 >= 0.0 ? o.eps1 : dtype_epsilon(dtype)};
}

// The generic path (optim/generic_path.h): one update of one parameter in opmath (f32, f64 for
// f64) with public ops, the formulas of adafactor.h in PyTorch's order. row/col (matrices) or var
// (the others) are updated in place; the other(s) undefined.
void adafactor_generic(const Tensor& param, const Tensor& grad, Tensor row, Tensor col, Tensor var, DType opmath,
                       const AdafactorOptions& o, const detail::AdafactorStepScalars& s) {
  NoGradGuard no_grad;
  Tensor p = to(param, opmath);
  Tensor g = to(grad, opmath);
  if (o.maximize) g = neg(g);
  const double w = s.w, rho = s.rho, eps1 = s.eps1;
  const double root_numel = std::sqrt(double(p.numel()));
  // alpha from the parameter before the weight decay, a 0-d tensor (no host read).
  // PyTorch takes alpha's and the clip's max on the host (Python's max: a NaN norm gives the
  // floor), so a non-finite element spoils only itself in a vector's step: where, not clamp_min.
  const Tensor rms = norm(p) / root_numel;
  const Tensor alpha = where(gt(rms, scalar_like(o.eps2, rms)), rms, scalar_like(o.eps2, rms)) * rho;
  if (o.weight_decay != 0.0) p.mul_(1.0 - o.lr * o.weight_decay);
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
  const Tensor u = mul(rsqrt(clamp_min(v, eps1 * eps1)), g);
  const Tensor ratio = norm(u) / (root_numel * o.d);
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
  for (const Work& w : collect(group)) {
    const bool factored = w.param.dim() > 1;
    const Tensor row = factored ? buffer(w, "row_var", /*zero=*/true) : Tensor();
    const Tensor col = factored ? buffer(w, "col_var", /*zero=*/true) : Tensor();
    const Tensor var = factored ? Tensor() : buffer(w, "variance", /*zero=*/true);
    const detail::AdafactorStepScalars s = step_scalars(o, ++w.state->step, w.param.dtype());
    if (w.param.numel() == 0) continue;  // nothing to update (and no mean over an empty row)
    if (use_generic_path(w.param) || !w.param.is_contiguous()) {
      adafactor_generic(w.param, w.grad, row, col, var, opmath_dtype(w), o, s);  // in-place ops: versions bumped
      continue;
    }
    detail::adafactor_cpu_step(w.param, w.grad, factored ? row.data_ptr() : nullptr,
                               factored ? col.data_ptr() : nullptr, factored ? nullptr : var.data_ptr(), o, s);
    w.param.bump_version();
  }
}

}  // namespace mg::optim
