// The composite losses of ops/margin_losses.h. Each follows PyTorch 2.15's ATen composition (the
// order of the operations and where a kink's gradient goes), in opmath (ops/composite.h).
#include "mixgrad/ops/margin_losses.h"

#include <cmath>
#include <numbers>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/ops/composite.h"
#include "mixgrad/ops/distance.h"
#include "mixgrad/ops/ops.h"

namespace mg {

namespace {

using detail::CompositeInputs;
using detail::composite_inputs;
using detail::reduce_composite;
using detail::round_result;

// The reduced loss, rounded once to the result dtype.
Tensor finish(const Tensor& per_element, Reduction reduction, const CompositeInputs& c) {
  return round_result(reduce_composite(per_element, reduction), c);
}

Tensor zeros_of(const Tensor& like) { return scalar_like(0.0, like); }

// A tensor of the input's shape, dtype and device holding `value` rounded to that dtype as a cast
// rounds (no gradient): PyTorch's `value * ones_like(input)`, so a value beyond f16's range is
// inf there as in PyTorch, not an error of full().
Tensor full_like_value(const Tensor& like, double value) {
  if (!is_floating(like.dtype())) return full(like.shape(), value, {.dtype = like.dtype(), .device = like.device()});
  return to(full(like.shape(), value, {.dtype = DType::F64, .device = like.device()}), like.dtype());
}

void check_same_shape(const char* name, const Tensor& input, const Tensor& target) {
  MG_CHECK(input.shape() == target.shape(), ShapeError, name, ": expected input and target of the same shape, got ",
           describe(input), " and ", describe(target));
}

// A class-index target for an input of `classes` classes (row shape: [N] for [N, C], [] for [C]).
void check_class_target(const char* name, const Tensor& input, const Tensor& target) {
  MG_CHECK(input.dim() == 1 || input.dim() == 2, ShapeError, name, ": expected an input of 1 or 2 dims ([C] or [N, C]), got ",
           describe(input));
  MG_CHECK(target.dtype() == DType::I64 || target.dtype() == DType::I32, DTypeError, name,
           ": expected integer class indices as the target, got ", describe(target));
  // A [C] input takes a 0-d or a one-element [1] target, as PyTorch's.
  const Shape want = input.dim() == 2 ? Shape{input.shape()[0]} : Shape{};
  MG_CHECK(target.shape() == want || (input.dim() == 1 && target.shape() == Shape{1}), ShapeError, name,
           ": expected a target of shape ", shape_str(want), input.dim() == 1 ? " or [1]" : "", " for input ",
           describe(input), ", got ", describe(target));
}

// A per-class weight [C] for an input whose last dim has C classes.
void check_class_weight(const char* name, const Tensor& weight, int64_t classes) {
  if (!weight.defined()) return;
  MG_CHECK(weight.shape() == Shape{classes}, ShapeError, name, ": expected a weight of shape [", classes, "], got ",
           describe(weight));
}

// The triplet losses' common checks: a plain reduction, defined inputs of one number of dims,
// margin > 0 (PyTorch's).
void check_triplet(const char* name, const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                   double margin, Reduction reduction) {
  detail::check_plain_reduction(name, reduction);
  MG_CHECK(anchor.defined() && positive.defined() && negative.defined(), Error, name, ": got an undefined tensor");
  MG_CHECK(margin > 0.0, Error, name, ": margin must be > 0, got ", margin);
  MG_CHECK(positive.dim() == anchor.dim() && negative.dim() == anchor.dim(), ShapeError, name,
           ": expected anchor, positive and negative of the same number of dims, got ", describe(anchor), ", ",
           describe(positive), " and ", describe(negative));
}

}  // namespace

Tensor margin_ranking_loss(const Tensor& x1, const Tensor& x2, const Tensor& target, double margin,
                           Reduction reduction) {
  constexpr const char* kName = "margin_ranking_loss";
  detail::check_plain_reduction(kName, reduction);
  MG_CHECK(x1.defined() && x2.defined() && target.defined(), Error, kName, ": got an undefined tensor");
  MG_CHECK(x1.dim() == x2.dim() && x1.dim() == target.dim(), ShapeError, kName,
           ": expected x1, x2 and target of the same number of dims, got ", describe(x1), ", ", describe(x2), " and ",
           describe(target));
  const CompositeInputs c = composite_inputs(kName, {x1, x2, target});
  const Tensor& y = c.math[2];
  return finish(clamp_min(-y * (c.math[0] - c.math[1]) + margin, 0.0), reduction, c);
}

Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target, double margin, Reduction reduction) {
  constexpr const char* kName = "hinge_embedding_loss";
  detail::check_plain_reduction(kName, reduction);
  MG_CHECK(input.defined() && target.defined(), Error, kName, ": got an undefined tensor");
  check_same_shape(kName, input, target);
  const CompositeInputs c = composite_inputs(kName, {input, target.detach()}, /*labels=*/{1});
  const Tensor& x = c.math[0];
  const Tensor& y = c.math[1];
  const Tensor zero = zeros_of(x);
  // Both terms where the target is neither 1 nor -1, as ATen's where(t != 1, ...) + where(t != -1, ...).
  const Tensor margin_term = where(ne(y, scalar_like(1.0, y)), clamp_min(margin - x, 0.0), zero);
  const Tensor self_term = where(ne(y, scalar_like(-1.0, y)), x, zero);
  return finish(margin_term + self_term, reduction, c);
}

Tensor soft_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  constexpr const char* kName = "soft_margin_loss";
  detail::check_plain_reduction(kName, reduction);
  MG_CHECK(input.defined() && target.defined(), Error, kName, ": got an undefined tensor");
  check_same_shape(kName, input, target);
  const CompositeInputs c = composite_inputs(kName, {input, target}, /*labels=*/{1});
  // log(1 + exp(-y x)); softplus switches to its argument past 20, where PyTorch's log1p(exp())
  // differs by less than e^-20 and overflows to inf past 88 (f32).
  return finish(softplus(-(c.math[0] * c.math[1])), reduction, c);
}

Tensor cosine_embedding_loss(const Tensor& x1, const Tensor& x2, const Tensor& target, double margin,
                             Reduction reduction) {
  constexpr const char* kName = "cosine_embedding_loss";
  detail::check_plain_reduction(kName, reduction);
  MG_CHECK(x1.defined() && x2.defined() && target.defined(), Error, kName, ": got an undefined tensor");
  MG_CHECK((x1.dim() == 1 || x1.dim() == 2) && x2.dim() == x1.dim(), ShapeError, kName,
           ": expected x1 and x2 of 1 or 2 dims ([D] or [N, D]), both the same, got ", describe(x1), " and ",
           describe(x2));
  MG_CHECK(target.dim() == x1.dim() - 1, ShapeError, kName, ": expected a target of ", x1.dim() - 1,
           " dims (one label per row), got ", describe(target), " for x1 ", describe(x1));
  const CompositeInputs c = composite_inputs(kName, {x1, x2, target.detach()}, /*labels=*/{2});
  const Tensor& a = c.math[0];
  const Tensor& b = c.math[1];
  const Tensor& y = c.math[2];
  const int64_t d = x1.dim() - 1;
  constexpr double kEpsilon = 1e-12;  // ATen's EPSILON, added to each squared magnitude
  const Tensor prod = sum(a * b, {d});
  // sqrt of each factor (ATen takes the root of their product, which overflows f32 already when
  // each squared magnitude is past 1.8e19).
  const Tensor mag = sqrt(sum(a * a, {d}) + kEpsilon) * sqrt(sum(b * b, {d}) + kEpsilon);
  const Tensor cos = prod / mag;
  const Tensor zero = zeros_of(cos);
  const Tensor pos = where(eq(y, scalar_like(1.0, y)), 1.0 - cos, zero);
  const Tensor neg = where(eq(y, scalar_like(-1.0, y)), clamp_min(cos - margin, 0.0), zero);
  return finish(pos + neg, reduction, c);
}

Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative, double margin,
                           double p, double eps, bool swap, Reduction reduction) {
  constexpr const char* kName = "triplet_margin_loss";
  // Any real p, as pairwise_distance. Any number of dims, the distance along the last (PyTorch:
  // [2, 3, 4] gives [2, 3]; 0-d inputs are single numbers).
  check_triplet(kName, anchor, positive, negative, margin, reduction);
  const CompositeInputs c = composite_inputs(kName, {anchor, positive, negative});
  const Tensor& a = c.math[0];
  const Tensor& pos = c.math[1];
  const Tensor& neg = c.math[2];
  const Tensor d_pos = pairwise_distance(a, pos, p, eps);
  Tensor d_neg = pairwise_distance(a, neg, p, eps);
  if (swap) d_neg = minimum(d_neg, pairwise_distance(pos, neg, p, eps));
  return finish(clamp_min(margin + d_pos - d_neg, 0.0), reduction, c);
}

Tensor multi_margin_loss(const Tensor& input, const Tensor& target, int64_t p, double margin, const Tensor& weight,
                         Reduction reduction) {
  constexpr const char* kName = "multi_margin_loss";
  detail::check_plain_reduction(kName, reduction);
  MG_CHECK(input.defined() && target.defined(), Error, kName, ": got an undefined tensor");
  MG_CHECK(p == 1 || p == 2, Error, kName, ": p must be 1 or 2, got ", p);
  check_class_target(kName, input, target);
  const int64_t classes = input.shape().back();
  check_class_weight(kName, weight, classes);
  const CompositeInputs c = weight.defined() ? composite_inputs(kName, {input, weight}) : composite_inputs(kName, {input});
  const bool rows = input.dim() == 2;
  const Tensor x = rows ? c.math[0] : unsqueeze(c.math[0], 0);  // [N, C]
  const Tensor t = unsqueeze(rows ? to(target, DType::I64) : reshape(to(target, DType::I64), {1}), 1);  // [N, 1]
  const Tensor x_target = gather(x, 1, t);  // [N, 1]; an index outside [0, C) is gather's IndexError
  Tensor z = clamp_min(margin - x_target + x, 0.0);
  if (p == 2) z = z * z;
  if (weight.defined()) z = z * unsqueeze(index_select(c.math[1], 0, reshape(t, {-1})), 1);
  // The target's own class contributes nothing.
  const Tensor own = eq(reshape(arange(0, classes, 1, {.dtype = DType::I64, .device = x.device()}), {1, classes}), t);
  const Tensor per_row = sum(where(own, zeros_of(z), z), {1}) / double(classes);
  return finish(rows ? per_row : reshape(per_row, target.shape()), reduction, c);  // [1] for a [1] target
}

Tensor multilabel_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  constexpr const char* kName = "multilabel_margin_loss";
  detail::check_plain_reduction(kName, reduction);
  MG_CHECK(input.defined() && target.defined(), Error, kName, ": got an undefined tensor");
  MG_CHECK(input.dim() <= 2, ShapeError, kName, ": expected an input of at most 2 dims ([], [C] or [N, C]), got ",
           describe(input));
  MG_CHECK(target.dtype() == DType::I64 || target.dtype() == DType::I32, DTypeError, kName,
           ": expected integer class indices as the target, got ", describe(target));
  check_same_shape(kName, input, target);
  // As PyTorch: a 0-d input is one class; no classes (C = 0) is refused.
  MG_CHECK(input.dim() == 0 || input.size(-1) > 0, ShapeError, kName, ": expected at least one class, got ",
           describe(input));
  if (input.dim() == 0) {
    return reshape(multilabel_margin_loss(reshape(input, {1}), reshape(target, {1}), reduction), {});
  }
  const CompositeInputs c = composite_inputs(kName, {input});
  const bool rows = input.dim() == 2;
  const Tensor x = rows ? c.math[0] : unsqueeze(c.math[0], 0);  // [N, C]
  const int64_t n = x.size(0), classes = x.size(1);
  // How often each class is listed before the row's first -1 (its count weights its hinge terms,
  // as PyTorch's loop over the list does), built on the host: the list's end is data-dependent.
  const Tensor t = to(rows ? target : unsqueeze(target, 0), DType::I64).to(Device::cpu()).contiguous();
  const int64_t* tp = t.data<int64_t>();
  std::vector<double> listed(std::size_t(n * classes), 0.0);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t k = 0; k < classes; ++k) {
      const int64_t y = tp[r * classes + k];
      MG_CHECK(y >= -1 && y < classes, IndexError, kName, ": target value ", y, " (row ", r, ", position ", k,
               ") is out of range [-1, ", classes, ")");
      if (y == -1) break;
      listed[std::size_t(r * classes + y)] += 1.0;
    }
  }
  const Tensor count = from_vector<double>(listed, {n, classes}).to(x.dtype()).to(x.device());  // [N, C]
  const Tensor unlisted = eq(count, scalar_like(0.0, count));                                    // [N, C]
  // hinge[n, j, i] = max(0, 1 - x[n, j] + x[n, i]), weighted by count[n, j] and kept for unlisted i.
  const Tensor hinge = clamp_min(1.0 - unsqueeze(x, 2) + unsqueeze(x, 1), 0.0);  // [N, C, C]
  const Tensor kept = where(unsqueeze(unlisted, 1), hinge, zeros_of(hinge)) * unsqueeze(count, 2);
  const Tensor per_row = sum(kept, {1, 2}) / double(std::max<int64_t>(classes, 1));
  return finish(rows ? per_row : reshape(per_row, {}), reduction, c);
}

Tensor triplet_margin_with_distance_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                                         const std::function<Tensor(const Tensor&, const Tensor&)>& distance_function,
                                         double margin, bool swap, Reduction reduction) {
  constexpr const char* kName = "triplet_margin_with_distance_loss";
  check_triplet(kName, anchor, positive, negative, margin, reduction);
  auto d = [&](const Tensor& u, const Tensor& v) {
    const Tensor r = distance_function ? distance_function(u, v) : pairwise_distance(u, v);
    MG_CHECK(r.defined() && r.dtype() != DType::Bool, Error, kName,
             ": the distance function must return a number tensor, got ", r.defined() ? describe(r) : "undefined");
    return is_floating(r.dtype()) ? r : r.to(DType::F32);  // integer distances promote, as PyTorch's
  };
  const Tensor d_pos = d(anchor, positive);
  Tensor d_neg = d(anchor, negative);
  if (swap) d_neg = minimum(d_neg, d(positive, negative));
  const CompositeInputs c = composite_inputs(kName, {d_pos, d_neg});
  return finish(clamp_min(margin + c.math[0] - c.math[1], 0.0), reduction, c);
}

Tensor multilabel_soft_margin_loss(const Tensor& input, const Tensor& target, const Tensor& weight,
                                   Reduction reduction) {
  constexpr const char* kName = "multilabel_soft_margin_loss";
  detail::check_plain_reduction(kName, reduction);
  MG_CHECK(input.defined() && target.defined(), Error, kName, ": got an undefined tensor");
  MG_CHECK(input.dim() >= 1, ShapeError, kName, ": expected an input with a class dim ([C], [N, C], [N, ..., C]), got ",
           describe(input));
  check_same_shape(kName, input, target);
  const int64_t classes = input.shape().back();
  check_class_weight(kName, weight, classes);
  const CompositeInputs c = weight.defined() ? composite_inputs(kName, {input, target, weight})
                                             : composite_inputs(kName, {input, target});
  const Tensor& x = c.math[0];
  const Tensor& y = c.math[1];
  // log sigmoid(x) = -softplus(-x), stable at both ends.
  Tensor loss = -(y * -softplus(-x) + (1.0 - y) * -softplus(x));
  if (weight.defined()) loss = loss * c.math[2];
  return finish(sum(loss, {input.dim() - 1}) / double(classes), reduction, c);
}

Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, bool log_input, bool full, double eps,
                        Reduction reduction) {
  constexpr const char* kName = "poisson_nll_loss";
  detail::check_plain_reduction(kName, reduction);
  MG_CHECK(input.defined() && target.defined(), Error, kName, ": got an undefined tensor");
  check_same_shape(kName, input, target);
  MG_CHECK(eps >= 0.0, Error, kName, ": eps must be >= 0, got ", eps);
  const CompositeInputs c = composite_inputs(kName, {input, target});
  const Tensor& x = c.math[0];
  const Tensor& y = c.math[1];
  Tensor loss = log_input ? exp(x) - y * x : x - y * log(x + eps);
  if (full) {
    // Stirling's approximation of log(y!) where y > 1 (0 elsewhere); y replaced by 2 under the
    // mask so that log(y) of the masked-out entries is finite for the gradient too.
    const Tensor big = gt(y, scalar_like(1.0, y));
    const Tensor ys = where(big, y, scalar_like(2.0, y));
    const Tensor stirling = ys * log(ys) - ys + 0.5 * log(2.0 * std::numbers::pi * ys);
    loss = loss + where(big, stirling, zeros_of(stirling));
  }
  return finish(loss, reduction, c);
}

Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, const Tensor& var, bool full, double eps,
                         Reduction reduction) {
  constexpr const char* kName = "gaussian_nll_loss";
  detail::check_plain_reduction(kName, reduction);
  MG_CHECK(input.defined() && target.defined() && var.defined(), Error, kName, ": got an undefined tensor");
  MG_CHECK(eps >= 0.0, Error, kName, ": eps must be >= 0, got ", eps);
  check_same_shape(kName, input, target);
  // var (PyTorch 2.15's rule): the input's shape; or the input's without the last dim (one variance
  // per row); or the input's shape with exactly one dim of size 1 (broadcast along it).
  const Shape& xs = input.shape();
  const Shape& vs = var.shape();
  Shape without_last = xs;
  if (!without_last.empty()) without_last.pop_back();
  const bool one_per_row = vs != xs && vs == without_last;
  int64_t mismatched = 0, mismatched_ones = 0;
  if (vs.size() == xs.size()) {
    for (std::size_t k = 0; k < xs.size(); ++k) {
      if (vs[k] == xs[k]) continue;
      ++mismatched;
      if (vs[k] == 1) ++mismatched_ones;
    }
  }
  const bool one_dim_broadcast = vs.size() == xs.size() && mismatched == 1 && mismatched_ones == 1;
  MG_CHECK(vs == xs || one_per_row || one_dim_broadcast, ShapeError, kName, ": expected var of the input's shape ",
           shape_str(xs), ", of it without the last dim ", shape_str(without_last),
           ", or of it with one dim of size 1; got ", describe(var));
  if (var.device().is_cpu() && var.numel() > 0) {
    // A negative variance is an error, as PyTorch's; checked on the CPU only (a host read on CUDA).
    NoGradGuard no_grad;
    // Negative entries counted, not the minimum: a NaN wins every min and hid a -1 beside it.
    const Tensor negative = lt(var, scalar_like(0.0, var));
    const int64_t count = sum(negative.to(DType::I64)).item<int64_t>();
    MG_CHECK(count == 0, Error, kName, ": var has ", count, " negative value(s) (the lowest ",
             min(where(negative, var, scalar_like(0.0, var))).item<double>(), "); variances must be >= 0");
  }
  const CompositeInputs c = composite_inputs(kName, {input, target, one_per_row ? unsqueeze(var, -1) : var});
  const Tensor& x = c.math[0];
  const Tensor& y = c.math[1];
  const Tensor& v = c.math[2];
  // The clamp at eps passes the gradient straight through (PyTorch clamps a clone under no_grad):
  // v + max(eps - v, 0), held constant; written so that an infinite variance stays inf (the loss
  // is then inf, as PyTorch's) where clamp_min(v, eps) - v would be inf - inf = NaN.
  const Tensor vc = v + relu(eps - v).detach();
  const Tensor d = x - y;
  Tensor loss = 0.5 * (log(vc) + d * d / vc);
  if (full) loss = loss + 0.5 * std::log(2.0 * std::numbers::pi);
  return finish(loss, reduction, c);
}

Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, double var, bool full, double eps,
                         Reduction reduction) {
  MG_CHECK(input.defined(), Error, "gaussian_nll_loss: got an undefined tensor");
  MG_CHECK(!(var < 0.0), Error, "gaussian_nll_loss: var has a negative value (", var, "); variances must be >= 0");
  return gaussian_nll_loss(input, target, full_like_value(input, var), full, eps, reduction);
}

}  // namespace mg
