// The piecewise activations beyond relu/gelu/silu: leaky_relu, the ELU family (elu, selu, celu),
// hardswish, hardsigmoid and mish — rules, backward rules and public functions. Their math is the
// shared functors (ops/functors.h), forward and fused backward alike, so both devices compute the
// same; an ordinary backward runs the fused (grad, x) op (one pass, f'(x) in opmath, rounded once),
// a recorded one (create_graph) builds the same derivative from public ops for double backward.
#include <cmath>

#include "mixgrad/ops/backward_ctx.h"
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/fused_backward.h"
#include "mixgrad/ops/infer.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/register.h"

namespace mg {
namespace {

Tensor zero_of(const Tensor& like) { return scalar_like(0.0, like); }

InferResult infer_leaky_relu(const Tensors& in, const OpAttrs&) { return infer_unary_floating("leaky_relu", in); }
InferResult infer_elu(const Tensors& in, const OpAttrs&) { return infer_unary_floating("elu", in); }
InferResult infer_hardswish(const Tensors& in, const OpAttrs&) { return infer_unary_floating("hardswish", in); }
InferResult infer_hardsigmoid(const Tensors& in, const OpAttrs&) { return infer_unary_floating("hardsigmoid", in); }
InferResult infer_mish(const Tensors& in, const OpAttrs&) { return infer_unary_floating("mish", in); }

// d = 1 where x > 0, else slope
Tensors leaky_relu_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor x = c.input(0);
  const double slope = c.attrs().alpha;
  if (fused_backward(g[0], x)) return {leaky_relu_backward(g[0], x, slope)};
  return {where(gt(x, zero_of(x)), g[0], g[0] * slope)};
}
// d = scale where x > 0 (NaN too, as the fused op), else scale alpha s e^{s x} (s: the input
// scale). The exponential reads min(x, 0): e^{s x} of a large positive x is inf, and the second
// derivative would send where's 0 through it (0 * inf = NaN).
Tensors elu_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor x = c.input(0);
  const OpAttrs& a = c.attrs();
  const double s = a.mode == 1 ? 1.0 / a.alpha : 1.0;
  if (fused_backward(g[0], x)) return {dispatch1(OpId::elu_backward, {g[0], x}, a)};
  const Tensor neg = le(x, zero_of(x));
  return {where(neg, g[0] * (exp(clamp_max(x, 0.0) * s) * (a.alpha * a.beta * s)), g[0] * a.beta)};
}
// d = 0 up to -3, x / 3 + 1/2 below 3, 1 from 3 on (PyTorch 2.15's sides)
Tensors hardswish_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor x = c.input(0);
  if (fused_backward(g[0], x)) return {hardswish_backward(g[0], x)};
  const Tensor mid = where(lt(x, scalar_like(3.0, x)), g[0] * (x / 3.0 + 0.5), g[0]);
  return {where(le(x, scalar_like(-3.0, x)), zero_of(g[0]), mid)};
}
// d = 1/6 strictly inside (-3, 3), else 0
Tensors hardsigmoid_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor x = c.input(0);
  if (fused_backward(g[0], x)) return {hardsigmoid_backward(g[0], x)};
  const Tensor inside = mul(gt(x, scalar_like(-3.0, x)), lt(x, scalar_like(3.0, x)));
  return {where(inside, g[0] * (1.0 / 6.0), zero_of(g[0]))};
}
// d = t + x sigmoid(x) (1 - t^2), t = tanh(softplus(x))
Tensors mish_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor x = c.input(0);
  if (fused_backward(g[0], x)) return {mish_backward(g[0], x)};
  const Tensor t = tanh(softplus(x));
  return {g[0] * (t + x * sigmoid(x) * (1.0 - t * t))};
}

void check_finite(const char* op, const char* name, double v) {
  MG_CHECK(std::isfinite(v), Error, op, ": ", name, " must be finite, got ", v);
}

}  // namespace

void register_activation_rules() {
  const uint32_t in0 = kSaveInput(0);
  set_op_rule(OpId::leaky_relu, {.infer = infer_leaky_relu, .backward = leaky_relu_bw, .save = in0});
  set_op_rule(OpId::elu, {.infer = infer_elu, .backward = elu_bw, .save = in0});
  set_op_rule(OpId::hardswish, {.infer = infer_hardswish, .backward = hardswish_bw, .save = in0});
  set_op_rule(OpId::hardsigmoid, {.infer = infer_hardsigmoid, .backward = hardsigmoid_bw, .save = in0});
  set_op_rule(OpId::mish, {.infer = infer_mish, .backward = mish_bw, .save = in0});
}

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  check_finite("leaky_relu", "negative_slope", negative_slope);
  return dispatch1(OpId::leaky_relu, {x}, {.alpha = negative_slope});
}
Tensor elu(const Tensor& x, double alpha) {
  check_finite("elu", "alpha", alpha);
  return dispatch1(OpId::elu, {x}, {.alpha = alpha, .beta = 1.0});
}
Tensor selu(const Tensor& x) {
  return dispatch1(OpId::elu, {x}, {.alpha = kSeluAlpha, .beta = kSeluScale});
}
Tensor celu(const Tensor& x, double alpha) {
  // alpha (e^{x / alpha} - 1): 0 would divide by 0, as PyTorch refuses it too.
  MG_CHECK(std::isfinite(alpha) && alpha != 0.0, Error, "celu: alpha must be finite and not 0, got ", alpha);
  return dispatch1(OpId::elu, {x}, {.alpha = alpha, .beta = 1.0, .mode = 1});
}
Tensor hardswish(const Tensor& x) { return dispatch1(OpId::hardswish, {x}); }
Tensor hardsigmoid(const Tensor& x) { return dispatch1(OpId::hardsigmoid, {x}); }
Tensor mish(const Tensor& x) { return dispatch1(OpId::mish, {x}); }
Tensor hardtanh(const Tensor& x, double min_val, double max_val) {
  MG_CHECK(!(min_val > max_val), Error, "hardtanh: min_val (", min_val, ") is greater than max_val (", max_val, ")");
  // An integer input keeps its dtype, the bounds truncated toward zero as PyTorch converts them
  // (hardtanh(int [3, -3], -1.5, 2.7) is [2, -1]); clamp would promote to a float for them.
  if (x.defined() && !is_floating(x.dtype()) && x.dtype() != DType::Bool) {
    return clamp(x, std::trunc(min_val), std::trunc(max_val));
  }
  return clamp(x, min_val, max_val);
}
Tensor relu6(const Tensor& x) { return clamp(x, 0.0, 6.0); }

Tensor leaky_relu_backward(const Tensor& grad, const Tensor& x, double negative_slope) {
  MG_CHECK(grad.defined() && x.defined(), Error, "leaky_relu_backward: undefined tensor operand");
  return dispatch1(OpId::leaky_relu_backward, {grad, x}, {.alpha = negative_slope});
}
Tensor softplus_backward(const Tensor& grad, const Tensor& x, double beta, double threshold) {
  MG_CHECK(grad.defined() && x.defined(), Error, "softplus_backward: undefined tensor operand");
  MG_CHECK(beta != 0 && std::isfinite(beta), Error, "softplus_backward: beta must be finite and not 0, got ", beta);
  return dispatch1(OpId::softplus_backward, {grad, x}, {.alpha = beta, .beta = threshold});
}
Tensor elu_backward(const Tensor& grad, const Tensor& x, double alpha, double scale, bool celu_input_scale) {
  MG_CHECK(grad.defined() && x.defined(), Error, "elu_backward: undefined tensor operand");
  MG_CHECK(!celu_input_scale || alpha != 0.0, Error, "elu_backward: a CELU input scale needs alpha != 0");
  return dispatch1(OpId::elu_backward, {grad, x}, {.alpha = alpha, .beta = scale, .mode = celu_input_scale ? 1 : 0});
}

}  // namespace mg
