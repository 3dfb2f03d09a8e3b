// The softmax family and the losses: public functions, shape/dtype inference and backward rules.
// Kernels: ops/cpu/loss_kernels.cpp. Every backward rule states its derivative and is written with
// public ops, so double backward works; softmax, log_softmax and cross_entropy differentiate
// through fused *_backward ops whose own rules are again public ops.
//
// Class losses take logits [N, C, d1, ...] (or [C]) with the class dim at 1 (0 for [C]) and an
// i64 target with the class dim removed ([N, d1, ...], or []).
#include "mixgrad/ops/loss.h"

#include <cmath>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/autocast_state.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/ops/arg_checks.h"
#include "mixgrad/ops/backward_ctx.h"
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/infer.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/register.h"
#include "mixgrad/ops/weighted_loss.h"

namespace mg {

const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::None: return "none";
    case Reduction::Mean: return "mean";
    case Reduction::Sum: return "sum";
    case Reduction::BatchMean: return "batchmean";
  }
  return "?";
}

namespace {

Reduction reduction_of(const OpAttrs& a) { return Reduction(a.mode); }

// ---- inference ----
InferResult infer_softmax_like(const char* op, const Tensors& in) {
  check_floating(op, in[0]);
  return {{{in[0].shape(), in[0].dtype()}}, in[0].dtype()};
}
InferResult infer_softmax(const Tensors& in, const OpAttrs&) { return infer_softmax_like("softmax", in); }
InferResult infer_log_softmax(const Tensors& in, const OpAttrs&) { return infer_softmax_like("log_softmax", in); }

// (grad, y): same shape and dtype.
InferResult infer_softmax_bw_like(const char* op, const Tensors& in) {
  check_floating(op, in[1]);
  MG_CHECK(in[0].shape() == in[1].shape(), ShapeError, op, ": expected grad and output of the same shape, got grad ",
           describe(in[0]), " and output ", describe(in[1]));
  check_same_dtype(op, in[0], in[1]);
  return {{{in[1].shape(), in[1].dtype()}}, in[1].dtype()};
}
InferResult infer_softmax_backward(const Tensors& in, const OpAttrs&) {
  return infer_softmax_bw_like("softmax_backward", in);
}
InferResult infer_log_softmax_backward(const Tensors& in, const OpAttrs&) {
  return infer_softmax_bw_like("log_softmax_backward", in);
}

// The target shape a class loss expects for `logits`: the logits shape without the class dim.
Shape class_target_shape(const Shape& logits) {
  if (logits.size() <= 1) return {};
  Shape s = logits;
  s.erase(s.begin() + 1);
  return s;
}

void check_class_inputs(const char* op, const Tensor& logits, const Tensor& target) {
  check_floating(op, logits);
  MG_CHECK(logits.dim() >= 1, ShapeError, op, ": expected input [N, C] or [N, C, d1, ...] (or [C]), got ",
           describe(logits));
  MG_CHECK(target.dtype() == DType::I64, DTypeError, op, ": expected an i64 target of class indices, got target ",
           describe(target), " for input ", describe(logits),
           "\n  hint: convert labels with to(target, DType::I64)",
           std::string(op) == "cross_entropy" ? "; cross_entropy also takes class probabilities (a floating target of "
                                                "the input's shape)"
                                              : "");
  const Shape want = class_target_shape(logits.shape());
  MG_CHECK(target.shape() == want, ShapeError, op, ": expected target of shape ", want,
           " (the input shape without the class dim), got target ", describe(target), " for input ",
           describe(logits));
}

Shape loss_shape(Reduction r, const Shape& elementwise) { return r == Reduction::None ? elementwise : Shape{}; }

InferResult infer_class_loss(const char* op, const Tensors& in, const OpAttrs& a) {
  check_class_inputs(op, in[0], in[1]);
  return {{{loss_shape(reduction_of(a), in[1].shape()), in[0].dtype()}}, in[0].dtype()};
}
InferResult infer_cross_entropy(const Tensors& in, const OpAttrs& a) {
  return infer_class_loss("cross_entropy", in, a);
}
InferResult infer_nll_loss(const Tensors& in, const OpAttrs& a) { return infer_class_loss("nll_loss", in, a); }

// (grad, logits, target)
InferResult infer_cross_entropy_backward(const Tensors& in, const OpAttrs& a) {
  const char* op = "cross_entropy_backward";
  check_class_inputs(op, in[1], in[2]);
  const Shape want = loss_shape(reduction_of(a), in[2].shape());
  MG_CHECK(in[0].shape() == want, ShapeError, op, ": expected grad of shape ", want, " (reduction ",
           reduction_name(reduction_of(a)), "), got grad ", describe(in[0]), " for input ", describe(in[1]));
  check_same_dtype(op, in[0], in[1]);
  return {{{in[1].shape(), in[1].dtype()}}, in[1].dtype()};
}

// Elementwise losses: every input of input 0's shape (pos_weight: broadcast to it), one dtype.
InferResult infer_pointwise_loss(const char* op, const Tensors& in, const OpAttrs& a) {
  check_floating(op, in[0]);
  MG_CHECK(in[1].shape() == in[0].shape(), ShapeError, op, ": expected input and target of the same shape, got input ",
           describe(in[0]), " and target ", describe(in[1]),
           "\n  hint: reshape the target (e.g. unsqueeze a [N] target to [N, 1]) so the shapes match");
  check_same_dtype(op, in[0], in[1]);
  for (std::size_t i = 2; i < in.size(); ++i) {
    check_same_dtype(op, in[0], in[i]);
    const Shape& ws = in[i].shape();
    const Shape& xs = in[0].shape();
    bool fits = ws.size() <= xs.size();
    for (std::size_t k = 1; fits && k <= ws.size(); ++k) {
      fits = ws[ws.size() - k] == 1 || ws[ws.size() - k] == xs[xs.size() - k];
    }
    MG_CHECK(fits, ShapeError, op,
             ": pos_weight ", describe(in[i]), " does not broadcast to input ", describe(in[0]),
             "\n  hint: pos_weight has one weight per class of the last dim: shape [", xs.empty() ? 1 : xs.back(), "]");
  }
  const Reduction r = reduction_of(a);
  MG_CHECK(r != Reduction::BatchMean || std::string(op) == "kl_div", Error, op,
           ": reduction batchmean is only accepted by kl_div\n  hint: use Reduction::Mean");
  return {{{loss_shape(r, in[0].shape()), in[0].dtype()}}, in[0].dtype()};
}
#define MG_POINTWISE_INFER(name) \
  InferResult infer_##name(const Tensors& in, const OpAttrs& a) { return infer_pointwise_loss(#name, in, a); }
MG_POINTWISE_INFER(mse_loss)
MG_POINTWISE_INFER(l1_loss)
MG_POINTWISE_INFER(smooth_l1_loss)
MG_POINTWISE_INFER(huber_loss)
MG_POINTWISE_INFER(binary_cross_entropy_with_logits)
MG_POINTWISE_INFER(kl_div)
MG_POINTWISE_INFER(binary_cross_entropy)
#undef MG_POINTWISE_INFER

// ---- backward helpers ----
Tensor s0(double v, const Tensor& like) { return scalar_like(v, like); }

// Class-loss geometry: the class dim and count of a logits shape.
int64_t class_dim(const Shape& logits) { return logits.size() == 1 ? 0 : 1; }

// [N, 1, d...] (or [1]) 0/1 mask of the non-ignored targets, in `dtype`.
Tensor valid_mask(const Tensor& target, int64_t ignore_index, int64_t cdim, DType dtype) {
  return to(unsqueeze(ne(target, scalar_like(double(ignore_index), target)), cdim), dtype);
}
// [N, C, d...] (or [C]) one-hot of the targets along the class dim (0 rows for targets outside
// [0, C), e.g. ignore_index), in `dtype`.
Tensor onehot_mask(const Tensor& target, const Shape& logits, DType dtype) {
  const int64_t cdim = class_dim(logits);
  Shape cshape(logits.size(), 1);
  cshape[cdim] = logits[cdim];
  const Tensor classes = reshape(arange(0, logits[cdim], 1, {.dtype = DType::I64, .device = target.device()}), cshape);
  return to(eq(classes, unsqueeze(target, cdim)), dtype);
}
// The valid count a Mean divides by, at least 1: with every target ignored the gradient is 0, as
// PyTorch's (0 / 0 would make every upstream gradient NaN), while the loss itself is NaN. Counted
// in f32 (f64 for f64): an f16 count is inf from 65,520 targets on, and bf16's inexact from 257.
Tensor mean_count(const Tensor& valid) {
  return clamp_min(sum(to(valid, valid.dtype() == DType::F64 ? DType::F64 : DType::F32)), 1.0);
}
// x / mean_count(valid) in the count's precision, rounded once to x's dtype.
Tensor per_valid(const Tensor& x, const Tensor& valid) {
  const Tensor count = mean_count(valid);
  return to(to(x, count.dtype()) / count, x.dtype());
}
// The per-sample weight w, broadcastable to the logits: the upstream gradient (unsqueezed over the
// class dim for None), times the valid mask, divided by the valid count for Mean.
Tensor class_weight(const Tensor& g, const Tensor& valid, Reduction r, int64_t cdim) {
  if (r == Reduction::None) return unsqueeze(g, cdim) * valid;
  if (r == Reduction::Sum) return g * valid;
  return per_valid(g, valid) * valid;
}
// The gradient of a reduced elementwise loss broadcast over its elements: g, g / numel for Mean,
// g / size(0) for BatchMean.
Tensor reduced_grad(const BackwardCtx& c, const Tensor& g) {
  const Shape& s = c.input_shape(0);
  switch (reduction_of(c.attrs())) {
    case Reduction::Mean: return g / double(shape_numel(s));
    case Reduction::BatchMean: return g / double(s.empty() ? 1 : s[0]);
    default: return g;
  }
}
// log(1 + exp(-x)), stable for any x: softplus(-x) (whose fused backward is sigmoid(-x), smooth at
// 0; the composite log1p(exp(-|x|)) + relu(-x) gave the wrong second derivative there).
Tensor softplus_neg(const Tensor& x) { return softplus(-x); }

// ---- backward rules ----
// d softmax: dx = y (g - sum(g y, dim)) — the fused softmax_backward op
Tensors softmax_bw(const BackwardCtx& c, const Tensors& g) {
  return {softmax_backward(g[0], c.output(0), c.attrs().dim)};
}
// d log_softmax: dx = g - exp(y) sum(g, dim) — the fused log_softmax_backward op
Tensors log_softmax_bw(const BackwardCtx& c, const Tensors& g) {
  return {log_softmax_backward(g[0], c.output(0), c.attrs().dim)};
}
// out = y (g - s), s = sum(g y). With cotangent u:
//   d/dg = y (u - sum(u y))            (softmax_backward is self-adjoint in g)
//   d/dy = u (g - s) - g sum(u y)
Tensors softmax_backward_bw(const BackwardCtx& c, const Tensors& u) {
  const int64_t dim = c.attrs().dim;
  const Tensor g = c.input(0), y = c.input(1);
  Tensors out(2);
  if (c.needs_grad(0)) out[0] = softmax_backward(u[0], y, dim);
  if (c.needs_grad(1)) {
    const Tensor s = sum(g * y, {dim}, true);
    out[1] = u[0] * (g - s) - g * sum(u[0] * y, {dim}, true);
  }
  return out;
}
// out = g - exp(y) sum(g). With cotangent u:
//   d/dg = u - sum(u exp(y))
//   d/dy = -u exp(y) sum(g)
Tensors log_softmax_backward_bw(const BackwardCtx& c, const Tensors& u) {
  const int64_t dim = c.attrs().dim;
  const Tensor g = c.input(0), ey = exp(c.input(1));
  Tensors out(2);
  if (c.needs_grad(0)) out[0] = u[0] - sum(u[0] * ey, {dim}, true);
  if (c.needs_grad(1)) out[1] = -(u[0] * ey * sum(g, {dim}, true));
  return out;
}

Reduction ce_reduction(const BackwardCtx& c) { return reduction_of(c.attrs()); }
int64_t ce_ignore(const BackwardCtx& c) { return c.attrs().ints.at(0); }

// d cross_entropy / d logits = w (softmax(x) - (1 - eps) onehot(t) - eps / C) — the fused op
Tensors cross_entropy_bw(const BackwardCtx& c, const Tensors& g) {
  const OpAttrs& a = c.attrs();
  return {cross_entropy_backward(g[0], c.input(0), c.input(1), ce_reduction(c), ce_ignore(c), a.alpha), Tensor()};
}
// out = w (p - q), p = softmax(x), q = (1 - eps) onehot + eps / C, w = g valid (/ count). With
// cotangent u:
//   d/dg = sum_c(u (p - q)) valid (None), sum(u (p - q) valid) (/ count for Mean)
//   d/dx = w p (u - sum_c(u p)) = softmax_backward(w u, p)
Tensors cross_entropy_backward_bw(const BackwardCtx& c, const Tensors& u) {
  const Tensor g = c.input(0), x = c.input(1), t = c.input(2);
  const Shape& shape = c.input_shape(1);
  const int64_t cdim = class_dim(shape);
  const double eps = c.attrs().alpha;
  const Reduction r = ce_reduction(c);
  const Tensor p = softmax(x, cdim);
  const Tensor valid = valid_mask(t, ce_ignore(c), cdim, x.dtype());
  Tensors out(3);
  if (c.needs_grad(0)) {
    const Tensor q = onehot_mask(t, shape, x.dtype()) * (1.0 - eps) + eps / double(shape[cdim]);
    const Tensor ud = u[0] * (p - q) * valid;
    if (r == Reduction::None) out[0] = squeeze(sum(ud, {cdim}, true), cdim);
    else if (r == Reduction::Sum) out[0] = sum(ud);
    else out[0] = per_valid(sum(ud), valid);
  }
  if (c.needs_grad(1)) out[1] = softmax_backward(u[0] * class_weight(g, valid, r, cdim), p, cdim);
  return out;
}
// d nll / d logp = -w onehot(t)
Tensors nll_loss_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor t = c.input(1);
  const Shape& shape = c.input_shape(0);
  const int64_t cdim = class_dim(shape);
  const DType dt = g[0].dtype();
  const Tensor valid = valid_mask(t, ce_ignore(c), cdim, dt);
  return {-(class_weight(g[0], valid, ce_reduction(c), cdim) * onehot_mask(t, shape, dt)), Tensor()};
}

// mse: d/dx = 2 (x - y), d/dy = -2 (x - y)
Tensors mse_loss_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor gx = reduced_grad(c, g[0]) * (2.0 * (c.input(0) - c.input(1)));
  return {gx, -gx};
}
// l1: d/dx = sign(x - y), d/dy = -sign(x - y)
Tensors l1_loss_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor gx = reduced_grad(c, g[0]) * sign(c.input(0) - c.input(1));
  return {gx, -gx};
}
// smooth_l1: d/dx = d / beta where |d| < beta, else sign(d) (d = x - y); d/dy = -d/dx
Tensors smooth_l1_loss_bw(const BackwardCtx& c, const Tensors& g) {
  const double beta = c.attrs().alpha;
  const Tensor d = c.input(0) - c.input(1);
  const Tensor slope = beta == 0.0 ? sign(d) : where(lt(abs(d), s0(beta, d)), d / beta, sign(d));
  const Tensor gx = reduced_grad(c, g[0]) * slope;
  return {gx, -gx};
}
// huber: d/dx = d where |d| < delta, else delta sign(d) (d = x - y); d/dy = -d/dx
Tensors huber_loss_bw(const BackwardCtx& c, const Tensors& g) {
  const double delta = c.attrs().alpha;
  const Tensor d = c.input(0) - c.input(1);
  const Tensor slope = where(lt(abs(d), s0(delta, d)), d, sign(d) * delta);
  const Tensor gx = reduced_grad(c, g[0]) * slope;
  return {gx, -gx};
}
// loss = (1 - t) x + lw sp, sp = softplus(-x), lw = 1 + (pw - 1) t (pw = 1 without pos_weight):
//   d/dx = (1 - t) sigmoid(x) - pw t sigmoid(-x),  d/dt = -x + (pw - 1) sp,  d/dpw = t sp
// d/dx in that form has no cancellation at t = 0 or 1 (as (1 - t) - lw sigmoid(-x) had: 1 -
// sigmoid(-x) was exactly 0 for a confident negative, in bf16 from x = -7 on). f16/bf16 compute in
// f32 and round each gradient once.
Tensors bce_with_logits_bw(const BackwardCtx& c, const Tensors& g) {
  const DType dt = c.input(0).dtype();
  const bool low = dt == DType::F16 || dt == DType::BF16;
  const auto wide = [&](const Tensor& v) { return low && v.dtype() == dt ? to(v, DType::F32) : v; };
  const auto back = [&](const Tensor& v, int i) { return low && c.input(i).dtype() == dt ? to(v, dt) : v; };
  const Tensor x = wide(c.input(0)), t = wide(c.input(1));
  const Tensor ge = reduced_grad(c, wide(g[0]));
  Tensors out(c.num_inputs());
  if (c.num_inputs() == 2) {
    if (c.needs_grad(0)) out[0] = back(ge * (sigmoid(x) - t), 0);
    if (c.needs_grad(1)) out[1] = back(-(ge * x), 1);
    return out;
  }
  const Tensor pw = wide(c.input(2));
  const Tensor sp = softplus_neg(x);
  if (c.needs_grad(0)) out[0] = back(ge * ((1.0 - t) * sigmoid(x) - pw * t * sigmoid(-x)), 0);
  if (c.needs_grad(1)) out[1] = back(ge * ((pw - 1.0) * sp - x), 1);
  if (c.needs_grad(2)) out[2] = back(ge * t * sp, 2);
  return out;
}
// kl_div: d/dx = -t, d/dt = log t + 1 - x (0 where t == 0, where PyTorch's is NaN; NaN for t < 0);
// log_target: d/dx = -exp(t), d/dt = exp(t) (t - x + 1)
Tensors kl_div_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor x = c.input(0), t = c.input(1);
  const Tensor ge = reduced_grad(c, g[0]);
  const bool log_target = c.attrs().ints.at(0) != 0;
  if (log_target) {
    const Tensor et = exp(t);
    return {-(ge * et), ge * et * (t - x + 1.0)};
  }
  const Tensor zero = eq(t, s0(0.0, t));
  const Tensor t_safe = where(zero, s0(1.0, t), t);
  return {-(ge * t), ge * where(zero, s0(0.0, x), log(t_safe) + 1.0 - x)};
}
// bce: d/dp = (p - t) / max(p (1 - p), 1e-12), d/dt = max(log(1 - p), -100) - max(log p, -100)
Tensors bce_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor p = c.input(0), t = c.input(1);
  const Tensor ge = reduced_grad(c, g[0]);
  Tensors out(2);
  if (c.needs_grad(0)) out[0] = ge * (p - t) / clamp_min(p * (1.0 - p), 1e-12);
  if (c.needs_grad(1)) out[1] = ge * (clamp_min(log(1.0 - p), -100.0) - clamp_min(log(p), -100.0));
  return out;
}

// ---- public-function helpers ----
void check_reduction(const char* op, Reduction r, bool allow_batchmean = false) {
  const int64_t m = int64_t(r);
  MG_CHECK(m >= 0 && m <= 3 && (allow_batchmean || r != Reduction::BatchMean), Error, op,
           ": reduction must be none, mean or sum", allow_batchmean ? " (or batchmean)" : "", ", got ",
           reduction_name(r), "\n  hint: batchmean is accepted by kl_div only");
}
// i32 targets are widened to i64; anything else is left for inference to reject.
Tensor index_target(const Tensor& t) { return t.dtype() == DType::I32 ? to(t, DType::I64) : t; }
// Inputs cast to their promoted dtype.
Tensors promote_all(Tensors ts) {
  DType d = ts[0].dtype();
  for (const Tensor& t : ts) d = promote_types(d, t.dtype());
  for (Tensor& t : ts) {
    if (t.dtype() != d) t = to(t, d);
  }
  return ts;
}
OpAttrs dim_attrs(const char* op, const Tensor& x, int64_t dim) { return {.dim = wrap_dim(dim, x.dim(), op)}; }

Tensor softmax_like(OpId op, const char* name, const Tensor& x, int64_t dim) {
  check_defined(name, x);
  if (x.dim() == 0) {
    wrap_dim(dim, 1, name);
    return reshape(dispatch1(op, {reshape(x, {1})}, {.dim = 0}), {});
  }
  return dispatch1(op, {x}, dim_attrs(name, x, dim));
}
Tensor softmax_bw_like(OpId op, const char* name, const Tensor& grad, const Tensor& y, int64_t dim) {
  check_defined(name, grad, y);
  const Tensor g = grad.dtype() == y.dtype() ? grad : to(grad, y.dtype());
  if (y.dim() == 0) {
    wrap_dim(dim, 1, name);
    return reshape(dispatch1(op, {reshape(g, {1}), reshape(y, {1})}, {.dim = 0}), {});
  }
  return dispatch1(op, {g, y}, dim_attrs(name, y, dim));
}

}  // namespace

void register_loss_rules() {
  const uint32_t in01 = kSaveInput(0) | kSaveInput(1);
  set_op_rule(OpId::softmax, {.infer = infer_softmax, .backward = softmax_bw, .save = kSaveOutput(0)});
  set_op_rule(OpId::log_softmax, {.infer = infer_log_softmax, .backward = log_softmax_bw, .save = kSaveOutput(0)});
  set_op_rule(OpId::softmax_backward,
              {.infer = infer_softmax_backward, .backward = softmax_backward_bw, .save = in01});
  set_op_rule(OpId::log_softmax_backward,
              {.infer = infer_log_softmax_backward, .backward = log_softmax_backward_bw, .save = in01});
  set_op_rule(OpId::cross_entropy, {.infer = infer_cross_entropy, .backward = cross_entropy_bw, .save = in01});
  set_op_rule(OpId::cross_entropy_backward, {.infer = infer_cross_entropy_backward,
                                             .backward = cross_entropy_backward_bw,
                                             .save = in01 | kSaveInput(2)});
  set_op_rule(OpId::nll_loss, {.infer = infer_nll_loss, .backward = nll_loss_bw, .save = kSaveInput(1)});
  set_op_rule(OpId::mse_loss, {.infer = infer_mse_loss, .backward = mse_loss_bw, .save = in01});
  set_op_rule(OpId::l1_loss, {.infer = infer_l1_loss, .backward = l1_loss_bw, .save = in01});
  set_op_rule(OpId::smooth_l1_loss, {.infer = infer_smooth_l1_loss, .backward = smooth_l1_loss_bw, .save = in01});
  set_op_rule(OpId::huber_loss, {.infer = infer_huber_loss, .backward = huber_loss_bw, .save = in01});
  set_op_rule(OpId::binary_cross_entropy_with_logits,
              {.infer = infer_binary_cross_entropy_with_logits, .backward = bce_with_logits_bw,
               .save = in01 | kSaveInput(2)});
  set_op_rule(OpId::kl_div, {.infer = infer_kl_div, .backward = kl_div_bw, .save = in01});
  set_op_rule(OpId::binary_cross_entropy, {.infer = infer_binary_cross_entropy, .backward = bce_bw, .save = in01});
}

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_like(OpId::softmax, "softmax", x, dim); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_like(OpId::log_softmax, "log_softmax", x, dim); }
Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim) {
  return softmax_bw_like(OpId::softmax_backward, "softmax_backward", grad, y, dim);
}
Tensor log_softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim) {
  return softmax_bw_like(OpId::log_softmax_backward, "log_softmax_backward", grad, y, dim);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction, int64_t ignore_index,
                     double label_smoothing, const Tensor& weight) {
  check_defined("cross_entropy", logits, target);
  check_reduction("cross_entropy", reduction);
  MG_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, Error,
           "cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
  if (target.is_floating_point()) {  // class probabilities (soft labels: mixup, distillation)
    return detail::probability_cross_entropy(logits, target, weight, reduction, ignore_index, label_smoothing);
  }
  if (weight.defined()) {
    check_floating("cross_entropy", logits);
    return detail::weighted_class_loss("cross_entropy", logits, index_target(target), weight, reduction, ignore_index,
                                       label_smoothing, /*from_logits=*/true);
  }
  return dispatch1(OpId::cross_entropy, {logits, index_target(target)},
                   {.ints = {ignore_index}, .alpha = label_smoothing, .mode = int64_t(reduction)});
}

Tensor cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target, Reduction reduction,
                              int64_t ignore_index, double label_smoothing) {
  check_defined("cross_entropy_backward", grad, logits, target);
  check_reduction("cross_entropy_backward", reduction);
  const Tensor g = grad.dtype() == logits.dtype() ? grad : to(grad, logits.dtype());
  return dispatch1(OpId::cross_entropy_backward, {g, logits, index_target(target)},
                   {.ints = {ignore_index}, .alpha = label_smoothing, .mode = int64_t(reduction)});
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction, int64_t ignore_index,
                const Tensor& weight) {
  check_defined("nll_loss", log_probs, target);
  check_reduction("nll_loss", reduction);
  if (weight.defined()) {
    check_floating("nll_loss", log_probs);
    return detail::weighted_class_loss("nll_loss", log_probs, index_target(target), weight, reduction, ignore_index,
                                       0.0, /*from_logits=*/false);
  }
  return dispatch1(OpId::nll_loss, {log_probs, index_target(target)},
                   {.ints = {ignore_index}, .mode = int64_t(reduction)});
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_defined("mse_loss", input, target);
  check_reduction("mse_loss", reduction);
  return dispatch1(OpId::mse_loss, promote_all({input, target}), {.mode = int64_t(reduction)});
}
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_defined("l1_loss", input, target);
  check_reduction("l1_loss", reduction);
  return dispatch1(OpId::l1_loss, promote_all({input, target}), {.mode = int64_t(reduction)});
}
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  check_defined("smooth_l1_loss", input, target);
  check_reduction("smooth_l1_loss", reduction);
  MG_CHECK(beta >= 0.0, Error, "smooth_l1_loss: beta must be >= 0, got ", beta);
  return dispatch1(OpId::smooth_l1_loss, promote_all({input, target}), {.alpha = beta, .mode = int64_t(reduction)});
}
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  check_defined("huber_loss", input, target);
  check_reduction("huber_loss", reduction);
  MG_CHECK(delta > 0.0 && std::isfinite(delta), Error, "huber_loss: delta must be finite and > 0, got ", delta);
  const Tensor y = dispatch1(OpId::huber_loss, promote_all({input, target}), {.alpha = delta, .mode = int64_t(reduction)});
  // The input's dtype, as PyTorch's huber_loss (unlike mse/l1/smooth_l1, which promote): computed
  // in the promoted dtype and rounded once into it. Under autocast its fp32 policy decides.
  const bool autocast = autocast_state(input.device().type).enabled;
  return !autocast && is_floating(input.dtype()) && y.dtype() != input.dtype() ? to(y, input.dtype()) : y;
}
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& pos_weight,
                                        Reduction reduction, const Tensor& weight) {
  check_defined("binary_cross_entropy_with_logits", input, target);
  check_reduction("binary_cross_entropy_with_logits", reduction);
  if (weight.defined()) {
    return detail::weighted_binary_loss("binary_cross_entropy_with_logits", input, target, pos_weight, weight,
                                        reduction, /*from_logits=*/true);
  }
  Tensors in{input, target};
  if (pos_weight.defined()) in.push_back(pos_weight);
  return dispatch1(OpId::binary_cross_entropy_with_logits, promote_all(in), {.mode = int64_t(reduction)});
}
Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target, Reduction reduction, const Tensor& weight) {
  check_defined("binary_cross_entropy", probs, target);
  check_reduction("binary_cross_entropy", reduction);
  if (weight.defined()) {
    return detail::weighted_binary_loss("binary_cross_entropy", probs, target, Tensor(), weight, reduction,
                                        /*from_logits=*/false);
  }
  return dispatch1(OpId::binary_cross_entropy, promote_all({probs, target}), {.mode = int64_t(reduction)});
}
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction, bool log_target) {
  check_defined("kl_div", input, target);
  check_reduction("kl_div", reduction, /*allow_batchmean=*/true);
  MG_CHECK(is_floating(input.dtype()) && is_floating(target.dtype()), DTypeError,
           "kl_div: expected floating input and target (log-probabilities and probabilities), got input ",
           describe(input), ", target ", describe(target));
  return dispatch1(OpId::kl_div, promote_all({input, target}),
                   {.ints = {int64_t(log_target)}, .mode = int64_t(reduction)});
}

}  // namespace mg
