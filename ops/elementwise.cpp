// Elementwise ops: public functions, inference and backward rules. Every backward rule states its
// derivative and is written with public ops, so it runs on every device and can itself be
// differentiated (double backward).
#include <cmath>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/autocast_state.h"
#include "mixgrad/core/fill_values.h"
#include "mixgrad/ops/backward_ctx.h"
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/fused_backward.h"
#include "mixgrad/ops/infer.h"
#include "mixgrad/ops/layout.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/register.h"

namespace mg {
namespace {

Tensor unary(OpId op, const Tensor& x, const OpAttrs& attrs = {}) { return dispatch1(op, {x}, attrs); }

// Whether a clamp bound needs a floating result on an integer tensor: NaN or a finite fraction
// (±inf are how clamp_min / clamp_max leave a side open).
bool clamp_bound_needs_float(double v) { return std::isnan(v) || (std::isfinite(v) && v != std::trunc(v)); }

// Whether an integer tensor raised to `e` stays an integer: a whole e in [0, 2^63).
bool integer_exponent(double e) { return e >= 0.0 && e < 0x1p63 && e == std::trunc(e); }

// Casts a and b to their promoted dtype (DESIGN §3) before a binary op.
Tensors promoted(const Tensor& a, const Tensor& b, bool floating_result = false) {
  MG_CHECK(a.defined() && b.defined(), Error, "binary op: undefined tensor operand");
  DType t = promote_types(a.dtype(), b.dtype());
  if (floating_result && !is_floating(t)) t = DType::F32;
  return {a.dtype() == t ? a : to(a, t), b.dtype() == t ? b : to(b, t)};
}

Tensor binary(OpId op, const Tensor& a, const Tensor& b, const OpAttrs& attrs = {},
              bool floating_result = false) {
  return dispatch1(op, promoted(a, b, floating_result), attrs);
}

Tensor zero_like_scalar(const Tensor& g) { return scalar_like(0.0, g); }

// ---- backward rules ----
// d(-x) = -1
Tensors neg_bw(const BackwardCtx&, const Tensors& g) { return {neg(g[0])}; }
// d|x| = sign(x)
Tensors abs_bw(const BackwardCtx& c, const Tensors& g) { return {g[0] * sign(c.input(0))}; }
// d e^x = e^x = y
Tensors exp_bw(const BackwardCtx& c, const Tensors& g) { return {g[0] * c.output(0)}; }
// d log x = 1 / x
Tensors log_bw(const BackwardCtx& c, const Tensors& g) { return {g[0] / c.input(0)}; }
// d log(1 + x) = 1 / (1 + x)
Tensors log1p_bw(const BackwardCtx& c, const Tensors& g) { return {g[0] / (c.input(0) + 1.0)}; }
// d (e^x - 1) = e^x, from the saved input: y + 1 is 0 once y = expm1(x) has rounded to -1 in
// f16/bf16 (x < -8.3 in f16: 3,067 ulp off there, 15,101 in bf16)
Tensors expm1_bw(const BackwardCtx& c, const Tensors& g) { return {g[0] * exp(c.input(0))}; }
// d sqrt x = 1 / (2 y)
Tensors sqrt_bw(const BackwardCtx& c, const Tensors& g) { return {g[0] / (2.0 * c.output(0))}; }
// d x^-1/2 = -1/2 x^-3/2 = -y^3 / 2, y = rsqrt(x) from the saved input in opmath (fn::RsqrtBackward)
Tensors rsqrt_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor x = c.input(0);
  if (fused_backward(g[0], x)) return {rsqrt_backward(g[0], x)};
  const Tensor y = rsqrt(x);
  return {g[0] * (-0.5 * y * y * y)};
}
// d 1/x = -1/x^2 = -y^2, y = 1/x from the saved input in opmath (fn::ReciprocalBackward)
Tensors reciprocal_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor x = c.input(0);
  if (fused_backward(g[0], x)) return {reciprocal_backward(g[0], x)};
  const Tensor y = reciprocal(x);
  return {-(g[0] * y * y)};
}
// d sin x = cos x
Tensors sin_bw(const BackwardCtx& c, const Tensors& g) { return {g[0] * cos(c.input(0))}; }
// d cos x = -sin x
Tensors cos_bw(const BackwardCtx& c, const Tensors& g) { return {-(g[0] * sin(c.input(0)))}; }
// d tanh x = 1 - tanh^2 x, from the saved input: the output has rounded to ±1 in f16/bf16 long
// before 1 - y^2 is negligible (fn::TanhBackward).
Tensors tanh_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor x = c.input(0);
  if (fused_backward(g[0], x)) return {tanh_backward(g[0], x)};
  const Tensor t = tanh(x);
  return {g[0] * (1.0 - t * t)};
}
// d sigmoid x = s (1 - s), s = sigmoid(x), from the saved input (fn::SigmoidBackward)
Tensors sigmoid_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor x = c.input(0);
  if (fused_backward(g[0], x)) return {sigmoid_backward(g[0], x)};
  const Tensor s = sigmoid(x);
  return {g[0] * (s * (1.0 - s))};
}
// d relu x = [not y <= 0] (PyTorch's threshold_backward: a NaN output passes the gradient). An
// ordinary backward runs the fused relu_backward op (one pass, no bool mask); a recorded backward
// (create_graph = true, grad mode on) builds the same select from public ops, whose graph gives
// double backward.
Tensors relu_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor y = c.output(0);
  if (fused_backward(g[0], y)) return {relu_backward(g[0], y)};
  return {where(le(y, zero_like_scalar(y)), zero_like_scalar(g[0]), g[0])};
}
// erf form:  d = Phi(x) + x phi(x) = 0.5 (1 + erf(x / sqrt2)) + x exp(-x^2 / 2) / sqrt(2 pi)
// tanh form: d = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2),
//            t = tanh(sqrt(2/pi) (x + 0.044715 x^3))
// An ordinary backward runs the fused gelu_backward op: one pass, rounded once, and free of the
// cancellation of 1 + erf / 1 + tanh in the negative tail (fn::GeluErfBackward). It is not
// differentiable, so a recorded backward (create_graph = true, grad mode on) builds the same
// derivative from public ops, whose graph gives double backward.
Tensors gelu_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor x = c.input(0);
  if (fused_backward(g[0], x)) {
    return {gelu_backward(g[0], x, c.attrs().mode == 1 ? GeluApprox::Tanh : GeluApprox::None)};
  }
  if (c.attrs().mode == 0) {
    const Tensor cdf = 0.5 * (erf(x * 0.70710678118654752440) + 1.0);
    const Tensor pdf = exp(-0.5 * x * x) * 0.39894228040143267794;
    return {g[0] * (cdf + x * pdf)};
  }
  const double k = 0.79788456080286535588;
  const Tensor x2 = x * x;
  const Tensor t = tanh(k * (x + 0.044715 * x2 * x));
  const Tensor d = 0.5 * (t + 1.0) + 0.5 * x * (1.0 - t * t) * (k * (1.0 + 0.134145 * x2));
  return {g[0] * d};
}
// d x sigmoid(x) = s (1 + x (1 - s)), s = sigmoid(x) (fused: fn::SiluBackward)
Tensors silu_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor x = c.input(0);
  if (fused_backward(g[0], x)) return {silu_backward(g[0], x)};
  const Tensor s = sigmoid(x);
  return {g[0] * (s * (1.0 + x * (1.0 - s)))};
}
// d softplus = sigmoid(beta x), or 1 where beta x > threshold. The fused op keeps beta x in f32
// for f16/bf16 (rounded to f16, 0.3335 * 3 fell to 1.0 and took the other branch than the forward);
// the recorded form (double backward) computes in f32 too and rounds once.
Tensors softplus_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor x = c.input(0);
  if (fused_backward(g[0], x)) return {dispatch1(OpId::softplus_backward, {g[0], x}, c.attrs())};
  const DType dt = g[0].dtype();
  const bool low = dt == DType::F16 || dt == DType::BF16;
  const Tensor bx = (low ? to(x, DType::F32) : x) * c.attrs().alpha;
  const Tensor d = where(gt(bx, scalar_like(c.attrs().beta, bx)), scalar_like(1.0, bx), sigmoid(bx));
  return {low ? to(to(g[0], DType::F32) * d, dt) : g[0] * d};
}
// d erf x = 2 / sqrt(pi) e^(-x^2) (fused: fn::ErfBackward)
Tensors erf_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor x = c.input(0);
  if (fused_backward(g[0], x)) return {erf_backward(g[0], x)};
  return {g[0] * (exp(-(x * x)) * 1.12837916709551257390)};
}
// d (x s) = s, d (x / s) = 1 / s: the same ops on the gradient (linear, so double backward too)
Tensors mul_scalar_bw(const BackwardCtx& c, const Tensors& g) {
  return {dispatch1(OpId::mul_scalar, {g[0]}, {.alpha = c.attrs().alpha})};
}
Tensors div_scalar_bw(const BackwardCtx& c, const Tensors& g) {
  return {dispatch1(OpId::div_scalar, {g[0]}, {.alpha = c.attrs().alpha})};
}
// d sign = 0: sign(x) stays in the graph (requires_grad as its input, as PyTorch's), so a loss
// built on it backpropagates zeros instead of "does not require grad".
Tensors sign_bw(const BackwardCtx&, const Tensors& g) { return {zeros_like(g[0])}; }
// d x^p = p x^(p-1)
Tensors pow_scalar_bw(const BackwardCtx& c, const Tensors& g) {
  const double p = c.attrs().alpha;
  if (p == 0.0) return {zeros_like(g[0])};  // a constant: 0 even for an inf or NaN gradient, as PyTorch's
  const Tensor x = c.input(0);
  return {g[0] * (p * (p == 2.0 ? x : pow(x, p - 1.0)))};
}
// d clamp = 1 where min < x < max, else 0: at a bound the gradient is 0, as PyTorch 2's (its 1.x
// passed it). An open side (clamp_min's max = +inf, clamp_max's min = -inf) is not compared, so
// clamp_min(x, 0) at x = +inf still passes the gradient; a NaN x gets 0.
Tensors clamp_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor x = c.input(0);
  const double lo = c.attrs().alpha, hi = c.attrs().beta;
  Tensor inside;
  if (lo != -INFINITY) inside = gt(x, scalar_like(lo, x));
  if (hi != INFINITY) {
    const Tensor below = lt(x, scalar_like(hi, x));
    inside = inside.defined() ? mul(inside, below) : below;
  }
  if (!inside.defined()) return {g[0]};
  return {where(inside, g[0], zero_like_scalar(g[0]))};
}
// d(a + alpha b) = (1, alpha); sub: (1, -alpha)
Tensors add_bw(const BackwardCtx& c, const Tensors& g) {
  const double alpha = c.attrs().alpha;
  return {g[0], alpha == 1.0 ? g[0] : g[0] * alpha};
}
Tensors sub_bw(const BackwardCtx& c, const Tensors& g) {
  const double alpha = c.attrs().alpha;
  return {g[0], alpha == 1.0 ? neg(g[0]) : g[0] * -alpha};
}
// d(ab) = (b, a)
Tensors mul_bw(const BackwardCtx& c, const Tensors& g) {
  return {c.needs_grad(0) ? g[0] * c.input(1) : Tensor(), c.needs_grad(1) ? g[0] * c.input(0) : Tensor()};
}
uint32_t mul_saves(uint32_t needs) {
  return ((needs & 1u) ? kSaveInput(1) : 0u) | ((needs & 2u) ? kSaveInput(0) : 0u);
}
// d(a/b) = (1/b, -a/b^2). The divisor's as ((a / b) / b): b^2 leaves f16's range for |b| > 256
// or |b| < 2.4e-4 (bf16's beyond 1.8e19 or below about 1e-19), where -a/b^2 itself need not, and
// gave -0 or -inf instead (as PyTorch's div_tensor_other_backward).
Tensors div_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor b = c.input(1);
  Tensor ga, gb;
  if (c.needs_grad(0)) ga = g[0] / b;
  if (c.needs_grad(1)) gb = -(g[0] * ((c.input(0) / b) / b));
  return {ga, gb};
}
uint32_t div_saves(uint32_t needs) { return kSaveInput(1) | ((needs & 2u) ? kSaveInput(0) : 0u); }
// d a^b = (b a^(b-1), a^b log a): the former 0 where b == 0 (a^0 is constant; at a == 0 the
// product is 0 * inf), the latter 0 where a == 0 and b >= 0, as PyTorch's (0^b log 0 for b < 0 is
// inf * -inf = -inf; a NaN b gives NaN)
Tensors pow_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor a = c.input(0), b = c.input(1);
  Tensor ga, gb;
  if (c.needs_grad(0)) ga = where(eq(b, zero_like_scalar(b)), zero_like_scalar(g[0]), g[0] * b * pow(a, b - 1.0));
  if (c.needs_grad(1)) {
    const Tensor y = c.output(0);
    const Tensor zero_base = mul(eq(a, zero_like_scalar(a)), ge(b, zero_like_scalar(b)));
    gb = where(zero_base, zero_like_scalar(g[0]), g[0] * y * log(a));
  }
  return {ga, gb};
}
// div rounded toward zero or -inf: piecewise constant in both operands, a zero gradient (as PyTorch's)
Tensors rounded_div_bw(const BackwardCtx& c, const Tensors& g) {
  Tensor ga, gb;
  if (c.needs_grad(0)) ga = zeros_like(g[0]);
  if (c.needs_grad(1)) gb = zeros_like(g[0]);
  return {ga, gb};
}
// d (a - b q) with q = floor(a / b) (remainder) or trunc(a / b) (fmod) constant between its steps:
// (1, -q)
Tensors remainder_bw(const BackwardCtx& c, const Tensors& g) {
  Tensor gb;
  if (c.needs_grad(1)) gb = -(g[0] * div(c.input(0), c.input(1), RoundingMode::Floor));
  return {g[0], gb};
}
Tensors fmod_bw(const BackwardCtx& c, const Tensors& g) {
  Tensor gb;
  if (c.needs_grad(1)) gb = -(g[0] * div(c.input(0), c.input(1), RoundingMode::Trunc));
  return {g[0], gb};
}
uint32_t quotient_saves(uint32_t needs) { return (needs & 2u) ? kSaveInput(0) | kSaveInput(1) : 0u; }
// d max(a, b) for a: 0 where a < b, g / 2 where a == b, else g (and symmetrically for b), as
// PyTorch's: where a or b is NaN (unordered, and the result NaN) both get g.
Tensors maximum_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor a = c.input(0), b = c.input(1);
  const Tensor z = zero_like_scalar(g[0]);
  const Tensor shared = where(eq(a, b), g[0] * 0.5, g[0]);
  return {where(lt(a, b), z, shared), where(gt(a, b), z, shared)};
}
Tensors minimum_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor a = c.input(0), b = c.input(1);
  const Tensor z = zero_like_scalar(g[0]);
  const Tensor shared = where(eq(a, b), g[0] * 0.5, g[0]);
  return {where(gt(a, b), z, shared), where(lt(a, b), z, shared)};
}
// d where(c, a, b) = (-, [c], [!c])
Tensors where_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor cond = c.input(0);
  const Tensor z = zero_like_scalar(g[0]);
  return {Tensor(), where(cond, g[0], z), where(cond, z, g[0])};
}


#define MG_UNARY_INFER(name)                                              \
  InferResult infer_##name(const Tensors& in, const OpAttrs&) {           \
    return infer_unary_floating(#name, in);                               \
  }
MG_UNARY_INFER(exp)
MG_UNARY_INFER(log)
MG_UNARY_INFER(log1p)
MG_UNARY_INFER(expm1)
MG_UNARY_INFER(sqrt)
MG_UNARY_INFER(rsqrt)
MG_UNARY_INFER(reciprocal)
MG_UNARY_INFER(sin)
MG_UNARY_INFER(cos)
MG_UNARY_INFER(tanh)
MG_UNARY_INFER(sigmoid)
MG_UNARY_INFER(gelu)
// (grad, x or y) of an activation's fused backward: the same shape and floating dtype.
InferResult infer_activation_backward(const char* op, const Tensors& in) {
  check_floating(op, in[1]);
  MG_CHECK(in[0].shape() == in[1].shape(), ShapeError, op, ": expected grad and input of the same shape, got grad ",
           describe(in[0]), " and input ", describe(in[1]));
  check_same_dtype(op, in[0], in[1]);
  return {{{in[1].shape(), in[1].dtype(), elementwise_layout(in, in[1].shape())}}, in[1].dtype()};
}
InferResult infer_gelu_backward(const Tensors& in, const OpAttrs&) { return infer_activation_backward("gelu_backward", in); }
InferResult infer_relu_backward(const Tensors& in, const OpAttrs&) { return infer_activation_backward("relu_backward", in); }
#define MG_ACTIVATION_BACKWARD(op, F) \
  InferResult infer_##op(const Tensors& in, const OpAttrs&) { return infer_activation_backward(#op, in); }
#include "mixgrad/ops/activation_backward_ops.def"
#undef MG_ACTIVATION_BACKWARD
MG_UNARY_INFER(silu)
MG_UNARY_INFER(softplus)
MG_UNARY_INFER(erf)
// pow_scalar: floating, or an integer tensor with a whole exponent >= 0 (the public pow makes an
// f32 result for any other exponent, so only pow_ reaches the refusal).
InferResult infer_pow_scalar(const Tensors& in, const OpAttrs& a) {
  if (in[0].is_floating_point()) return infer_unary_floating("pow_scalar", in);
  MG_CHECK(in[0].dtype() != DType::Bool && integer_exponent(a.alpha), DTypeError, "pow_: ", describe(in[0]), " ** ",
           a.alpha, " is not an integer of its dtype (",
           in[0].dtype() == DType::Bool ? "a bool tensor's power is i64" : "the exponent is not a whole number >= 0",
           ") and cannot be written in place",
           "\n  hint: use pow(), which returns the ", in[0].dtype() == DType::Bool ? "i64" : "f32",
           " result, or convert the tensor first");
  return infer_unary_any("pow_scalar", in);
}
MG_UNARY_INFER(mul_scalar)
MG_UNARY_INFER(div_scalar)
#undef MG_UNARY_INFER

InferResult infer_any(const Tensors& in, const OpAttrs&) { return infer_unary_any("", in); }
InferResult infer_fill(const Tensors& in, const OpAttrs& a) {
  MG_CHECK(fill_value_holds(in[0].dtype(), a.alpha), Error, "fill_: value ", a.alpha, " cannot be converted to ",
           dtype_name(in[0].dtype()), " without overflow; got ", describe(in[0]));
  return infer_unary_any("", in);
}
// clamp: on an integer tensor the bounds must be whole (±inf: no bound); the public clamp promotes
// to f32 otherwise, so only clamp_ (in place) reaches this refusal.
InferResult infer_clamp(const Tensors& in, const OpAttrs& a) {
  const double bad = clamp_bound_needs_float(a.alpha) ? a.alpha : a.beta;
  MG_CHECK(is_floating(in[0].dtype()) || !(clamp_bound_needs_float(a.alpha) || clamp_bound_needs_float(a.beta)),
           DTypeError, "clamp_: the result is f32 (the bound ", bad, " is not a whole number) but the tensor "
           "written in place is ", describe(in[0]), "\n  hint: use clamp(), which returns the f32 result, or convert "
           "the tensor to f32 first");
  return infer_unary_any("", in);
}
InferResult infer_signed(const Tensors& in, const OpAttrs&) {
  MG_CHECK(in[0].dtype() != DType::Bool, DTypeError, "neg: not supported for bool tensors, got ",
           describe(in[0]));
  return infer_unary_any("", in);
}

// add/sub: a + alpha * b. On integer tensors alpha is converted to their dtype, so it must be a
// whole number the dtype holds (PyTorch refuses a fractional alpha there too).
InferResult infer_add_sub(const char* name, const Tensors& in, const OpAttrs& a) {
  InferResult r = infer_broadcast(name, in, std::nullopt);
  const DType t = r.kernel_dtype;
  MG_CHECK(!is_integral(t) || (a.alpha == std::trunc(a.alpha) && integral_holds(t, a.alpha)), Error, name,
           ": alpha ", a.alpha, " is not a whole number that ", dtype_name(t), " holds; got ", describe(in[0]),
           " and ", describe(in[1]));
  return r;
}
InferResult infer_add(const Tensors& in, const OpAttrs& a) { return infer_add_sub("add", in, a); }
InferResult infer_sub(const Tensors& in, const OpAttrs& a) { return infer_add_sub("sub", in, a); }

// The rounded divisions and remainders: numeric operands (PyTorch has no bool kernels for them).
InferResult infer_division(const char* name, const Tensors& in) {
  MG_CHECK(in[0].dtype() != DType::Bool, DTypeError, name, ": not supported for bool tensors, got ",
           describe(in[0]), " and ", describe(in[1]), "\n  hint: convert them with to(t, DType::I64) first");
  return infer_broadcast(name, in, std::nullopt);
}
InferResult infer_div_trunc(const Tensors& in, const OpAttrs&) { return infer_division("div (trunc)", in); }
InferResult infer_div_floor(const Tensors& in, const OpAttrs&) { return infer_division("div (floor)", in); }
InferResult infer_remainder(const Tensors& in, const OpAttrs&) { return infer_division("remainder", in); }
InferResult infer_fmod(const Tensors& in, const OpAttrs&) { return infer_division("fmod", in); }

#define MG_BINARY_INFER(name, out)                                         \
  InferResult infer_##name(const Tensors& in, const OpAttrs&) {            \
    return infer_broadcast(#name, in, out);                                \
  }
MG_BINARY_INFER(mul, std::nullopt)
MG_BINARY_INFER(div, std::nullopt)
MG_BINARY_INFER(pow, std::nullopt)
MG_BINARY_INFER(maximum, std::nullopt)
MG_BINARY_INFER(minimum, std::nullopt)
MG_BINARY_INFER(eq, DType::Bool)
MG_BINARY_INFER(ne, DType::Bool)
MG_BINARY_INFER(lt, DType::Bool)
MG_BINARY_INFER(le, DType::Bool)
MG_BINARY_INFER(gt, DType::Bool)
MG_BINARY_INFER(ge, DType::Bool)
#undef MG_BINARY_INFER

InferResult infer_where(const Tensors& in, const OpAttrs&) {
  MG_CHECK(in[0].dtype() == DType::Bool, DTypeError, "where: expected a bool condition, got ",
           describe(in[0]));
  check_same_dtype("where", in[1], in[2]);
  Shape shape = broadcast_shapes(in[0].shape(), in[1].shape(), "where");
  shape = broadcast_shapes(shape, in[2].shape(), "where");
  return {{{shape, in[1].dtype(), elementwise_layout(in, shape)}}, in[1].dtype()};
}

}  // namespace

void register_elementwise_rules() {
  const uint32_t in0 = kSaveInput(0), out0 = kSaveOutput(0);
  set_op_rule(OpId::neg, {.infer = infer_signed, .backward = neg_bw});
  set_op_rule(OpId::abs, {.infer = infer_any, .backward = abs_bw, .save = in0});
  set_op_rule(OpId::sign, {.infer = infer_any, .backward = sign_bw});
  for (OpId op : {OpId::floor, OpId::ceil, OpId::trunc, OpId::round}) {  // piecewise constant: sign's zero gradient
    set_op_rule(op, {.infer = infer_any, .backward = sign_bw});
  }
  set_op_rule(OpId::exp, {.infer = infer_exp, .backward = exp_bw, .save = out0});
  set_op_rule(OpId::log, {.infer = infer_log, .backward = log_bw, .save = in0});
  set_op_rule(OpId::log1p, {.infer = infer_log1p, .backward = log1p_bw, .save = in0});
  set_op_rule(OpId::expm1, {.infer = infer_expm1, .backward = expm1_bw, .save = in0});
  set_op_rule(OpId::sqrt, {.infer = infer_sqrt, .backward = sqrt_bw, .save = out0});
  set_op_rule(OpId::rsqrt, {.infer = infer_rsqrt, .backward = rsqrt_bw, .save = in0});
  set_op_rule(OpId::reciprocal, {.infer = infer_reciprocal, .backward = reciprocal_bw, .save = in0});
  set_op_rule(OpId::sin, {.infer = infer_sin, .backward = sin_bw, .save = in0});
  set_op_rule(OpId::cos, {.infer = infer_cos, .backward = cos_bw, .save = in0});
  set_op_rule(OpId::tanh, {.infer = infer_tanh, .backward = tanh_bw, .save = in0});
  set_op_rule(OpId::sigmoid, {.infer = infer_sigmoid, .backward = sigmoid_bw, .save = in0});
  set_op_rule(OpId::relu, {.infer = infer_any, .backward = relu_bw, .save = out0});
  set_op_rule(OpId::relu_backward, {.infer = infer_relu_backward});
  set_op_rule(OpId::gelu, {.infer = infer_gelu, .backward = gelu_bw, .save = in0});
  set_op_rule(OpId::gelu_backward, {.infer = infer_gelu_backward});
#define MG_ACTIVATION_BACKWARD(op, F) set_op_rule(OpId::op, {.infer = infer_##op});
#include "mixgrad/ops/activation_backward_ops.def"
#undef MG_ACTIVATION_BACKWARD
  set_op_rule(OpId::silu, {.infer = infer_silu, .backward = silu_bw, .save = in0});
  set_op_rule(OpId::softplus, {.infer = infer_softplus, .backward = softplus_bw, .save = in0});
  set_op_rule(OpId::erf, {.infer = infer_erf, .backward = erf_bw, .save = in0});
  set_op_rule(OpId::pow_scalar, {.infer = infer_pow_scalar, .backward = pow_scalar_bw, .save = in0});
  set_op_rule(OpId::mul_scalar, {.infer = infer_mul_scalar, .backward = mul_scalar_bw});
  set_op_rule(OpId::div_scalar, {.infer = infer_div_scalar, .backward = div_scalar_bw});
  set_op_rule(OpId::clamp, {.infer = infer_clamp, .backward = clamp_bw, .save = in0});
  set_op_rule(OpId::fill, {.infer = infer_fill});
  set_op_rule(OpId::add, {.infer = infer_add, .backward = add_bw});
  set_op_rule(OpId::sub, {.infer = infer_sub, .backward = sub_bw});
  set_op_rule(OpId::mul, {.infer = infer_mul, .backward = mul_bw, .saves = mul_saves});
  set_op_rule(OpId::div, {.infer = infer_div, .backward = div_bw, .saves = div_saves});
  set_op_rule(OpId::pow, {.infer = infer_pow, .backward = pow_bw,
                          .save = kSaveInput(0) | kSaveInput(1) | kSaveOutput(0)});
  set_op_rule(OpId::div_trunc, {.infer = infer_div_trunc, .backward = rounded_div_bw});
  set_op_rule(OpId::div_floor, {.infer = infer_div_floor, .backward = rounded_div_bw});
  set_op_rule(OpId::remainder, {.infer = infer_remainder, .backward = remainder_bw, .saves = quotient_saves});
  set_op_rule(OpId::fmod, {.infer = infer_fmod, .backward = fmod_bw, .saves = quotient_saves});
  set_op_rule(OpId::maximum, {.infer = infer_maximum, .backward = maximum_bw, .save = in0 | kSaveInput(1)});
  set_op_rule(OpId::minimum, {.infer = infer_minimum, .backward = minimum_bw, .save = in0 | kSaveInput(1)});
  set_op_rule(OpId::eq, {.infer = infer_eq});
  set_op_rule(OpId::ne, {.infer = infer_ne});
  set_op_rule(OpId::lt, {.infer = infer_lt});
  set_op_rule(OpId::le, {.infer = infer_le});
  set_op_rule(OpId::gt, {.infer = infer_gt});
  set_op_rule(OpId::ge, {.infer = infer_ge});
  set_op_rule(OpId::where, {.infer = infer_where, .backward = where_bw, .save = in0});
}

// ---- public API ----
Tensor neg(const Tensor& x) { return unary(OpId::neg, x); }
Tensor abs(const Tensor& x) { return unary(OpId::abs, x); }
Tensor sign(const Tensor& x) { return unary(OpId::sign, x); }
Tensor exp(const Tensor& x) { return unary(OpId::exp, x); }
Tensor log(const Tensor& x) { return unary(OpId::log, x); }
Tensor log1p(const Tensor& x) { return unary(OpId::log1p, x); }
Tensor expm1(const Tensor& x) { return unary(OpId::expm1, x); }
Tensor sqrt(const Tensor& x) { return unary(OpId::sqrt, x); }
Tensor floor(const Tensor& x) { return unary(OpId::floor, x); }
Tensor ceil(const Tensor& x) { return unary(OpId::ceil, x); }
Tensor trunc(const Tensor& x) { return unary(OpId::trunc, x); }
Tensor round(const Tensor& x) { return unary(OpId::round, x); }
Tensor rsqrt(const Tensor& x) { return unary(OpId::rsqrt, x); }
Tensor reciprocal(const Tensor& x) { return unary(OpId::reciprocal, x); }
Tensor sin(const Tensor& x) { return unary(OpId::sin, x); }
Tensor cos(const Tensor& x) { return unary(OpId::cos, x); }
Tensor tanh(const Tensor& x) { return unary(OpId::tanh, x); }
Tensor sigmoid(const Tensor& x) { return unary(OpId::sigmoid, x); }
Tensor relu(const Tensor& x) { return unary(OpId::relu, x); }
Tensor relu_backward(const Tensor& grad, const Tensor& y) {
  MG_CHECK(grad.defined() && y.defined(), Error, "relu_backward: undefined tensor operand");
  return dispatch1(OpId::relu_backward, {grad, y});
}
Tensor gelu(const Tensor& x, GeluApprox approximate) {
  return unary(OpId::gelu, x, {.mode = approximate == GeluApprox::Tanh ? 1 : 0});
}
#define MG_ACTIVATION_BACKWARD_WITH_ATTRS(op, F)  // written by hand (ops/activation.cpp)
#define MG_ACTIVATION_BACKWARD(op, F)                                                 \
  Tensor op(const Tensor& grad, const Tensor& x) {                                   \
    MG_CHECK(grad.defined() && x.defined(), Error, #op ": undefined tensor operand"); \
    return dispatch1(OpId::op, {grad, x});                                           \
  }
#include "mixgrad/ops/activation_backward_ops.def"
#undef MG_ACTIVATION_BACKWARD
#undef MG_ACTIVATION_BACKWARD_WITH_ATTRS

Tensor gelu_backward(const Tensor& grad, const Tensor& x, GeluApprox approximate) {
  MG_CHECK(grad.defined() && x.defined(), Error, "gelu_backward: undefined tensor operand");
  return dispatch1(OpId::gelu_backward, {grad, x}, {.mode = approximate == GeluApprox::Tanh ? 1 : 0});
}
Tensor silu(const Tensor& x) { return unary(OpId::silu, x); }
Tensor softplus(const Tensor& x, double beta, double threshold) {
  // A negative beta is PyTorch's too (the same formula); 0 would divide by 0.
  MG_CHECK(beta != 0 && std::isfinite(beta), Error, "softplus: beta must be finite and not 0, got ", beta);
  return unary(OpId::softplus, x, {.alpha = beta, .beta = threshold});
}
Tensor erf(const Tensor& x) { return unary(OpId::erf, x); }
Tensor pow(const Tensor& x, double exponent) {
  if (x.defined() && !is_floating(x.dtype())) {
    // Integers, as PyTorch's: a whole exponent >= 0 keeps the dtype (bool becomes i64, as its
    // scalars do) and wraps; a negative whole one is refused; any other (a fraction, NaN, inf)
    // gives f32, as `x op v` does for a scalar the dtype cannot hold.
    if (integer_exponent(exponent)) {
      return unary(OpId::pow_scalar, x.dtype() == DType::Bool ? to(x, DType::I64) : x, {.alpha = exponent});
    }
    MG_CHECK(!(std::isfinite(exponent) && exponent == std::trunc(exponent)), Error,
             "pow: integers to negative integer powers are not allowed, got ", describe(x), " ** ", exponent,
             "\n  hint: convert to a floating dtype first: pow(to(x, DType::F32), ", exponent, ")");
    return unary(OpId::pow_scalar, to(x, DType::F32), {.alpha = exponent});
  }
  return unary(OpId::pow_scalar, x, {.alpha = exponent});
}
// min > max is PyTorch's: every value is max, and the gradient 0 (clamp_bw: no x lies inside).
Tensor clamp(const Tensor& x, double min, double max) {
  // A bound an integer tensor cannot hold exactly makes an f32 result, as `x op v` does (and as
  // PyTorch's clamp): clamp(i, 2.5) is 2.5, not a bound truncated to 2 that the result then breaks.
  if (x.defined() && !is_floating(x.dtype()) && (clamp_bound_needs_float(min) || clamp_bound_needs_float(max))) {
    return unary(OpId::clamp, to(x, DType::F32), {.alpha = min, .beta = max});
  }
  return unary(OpId::clamp, x, {.alpha = min, .beta = max});
}
Tensor clamp_min(const Tensor& x, double min) { return clamp(x, min, INFINITY); }
Tensor clamp_max(const Tensor& x, double max) { return clamp(x, -INFINITY, max); }

Tensor add(const Tensor& a, const Tensor& b, double alpha) { return binary(OpId::add, a, b, {.alpha = alpha}); }
namespace detail {
// PyTorch's rule: no subtraction with a bool operand (tensor or, through scalar_like, a scalar's
// i64 beside a bool tensor), which would read as set difference or negation but is neither.
void check_bool_subtraction(const Tensor& a, const Tensor& b) {
  MG_CHECK(!(a.defined() && b.defined() && (a.dtype() == DType::Bool || b.dtype() == DType::Bool)), DTypeError,
           "sub: subtraction with a bool tensor is not supported, got ", describe(a), " and ", describe(b),
           "\n  hint: to invert a mask use ~m or logical_not(m); the difference of two masks is logical_xor(a, b), "
           "what one has and the other lacks logical_and(a, ~b)");
}
}  // namespace detail

Tensor sub(const Tensor& a, const Tensor& b, double alpha) {
  detail::check_bool_subtraction(a, b);
  return binary(OpId::sub, a, b, {.alpha = alpha});
}
Tensor mul(const Tensor& a, const Tensor& b) { return binary(OpId::mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(OpId::div, a, b, {}, /*floating_result=*/true); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary(OpId::pow, a, b); }

namespace {
// The rounded divisions and remainders after promotion. An integer divisor with a zero is refused
// on the host, as PyTorch's CPU refuses it (C++ integer division by zero traps; the kernels give
// 0 there). Reading the answer synchronises a CUDA stream, only for integer operands.
Tensor integer_safe_division(OpId op, const char* name, const Tensor& a, const Tensor& b,
                              bool divisor_checked = false) {
  const Tensors ab = promoted(a, b);
  // (a divisor whose zeros divide nothing, the broadcast result being empty, is fine, as PyTorch's)
  if (!divisor_checked && is_integral(ab[1].dtype()) && ab[1].numel() > 0 &&
      shape_numel(broadcast_shapes(ab[0].shape(), ab[1].shape(), name)) > 0) {
    const bool has_zero =
        amax(eq(ab[1], scalar_like(0.0, ab[1])).to(DType::U8)).to(Device::cpu()).item<uint8_t>() != 0;
    MG_CHECK(!has_zero, Error, name, ": integer division by zero (the divisor ", describe(b),
             " holds a 0)\n  hint: convert the operands to a floating dtype for inf/NaN results");
  }
  return dispatch1(op, ab);
}
// A scalar divisor is checked here, with no read of the device.
Tensor scalar_division(OpId op, const char* name, const Tensor& a, double b) {
  MG_CHECK(a.defined(), Error, name, ": got an undefined tensor");
  const Tensor s = scalar_like(b, a);
  MG_CHECK(b != 0.0 || !is_integral(promote_types(a.dtype(), s.dtype())), Error, name,
           ": integer division by zero (the divisor is 0 and ", describe(a), " is an integer tensor)"
           "\n  hint: convert the tensor to a floating dtype for inf/NaN results");
  return integer_safe_division(op, name, a, s, /*divisor_checked=*/true);
}
OpId rounded_division_op(RoundingMode mode) { return mode == RoundingMode::Trunc ? OpId::div_trunc : OpId::div_floor; }
const char* rounded_division_name(RoundingMode mode) {
  return mode == RoundingMode::Trunc ? "div (trunc)" : "div (floor)";
}
}  // namespace

Tensor div(const Tensor& a, const Tensor& b, RoundingMode mode) {
  if (mode == RoundingMode::None) return div(a, b);
  return integer_safe_division(rounded_division_op(mode), rounded_division_name(mode), a, b);
}
Tensor div(const Tensor& a, double b, RoundingMode mode) {
  if (mode == RoundingMode::None) return a / b;
  return scalar_division(rounded_division_op(mode), rounded_division_name(mode), a, b);
}
Tensor floor_divide(const Tensor& a, const Tensor& b) { return div(a, b, RoundingMode::Floor); }
Tensor floor_divide(const Tensor& a, double b) { return div(a, b, RoundingMode::Floor); }
Tensor remainder(const Tensor& a, const Tensor& b) { return integer_safe_division(OpId::remainder, "remainder", a, b); }
Tensor fmod(const Tensor& a, const Tensor& b) { return integer_safe_division(OpId::fmod, "fmod", a, b); }
Tensor remainder(const Tensor& a, double b) { return scalar_division(OpId::remainder, "remainder", a, b); }
Tensor fmod(const Tensor& a, double b) { return scalar_division(OpId::fmod, "fmod", a, b); }
Tensor operator%(const Tensor& a, const Tensor& b) { return remainder(a, b); }
Tensor operator%(const Tensor& a, double b) { return remainder(a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(OpId::maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary(OpId::minimum, a, b); }
Tensor eq(const Tensor& a, const Tensor& b) { return binary(OpId::eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary(OpId::ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary(OpId::lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return binary(OpId::le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary(OpId::gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary(OpId::ge, a, b); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const Tensors ab = promoted(a, b);
  return dispatch1(OpId::where, {cond, ab[0], ab[1]});
}

Tensor scalar_like(double value, const Tensor& like) {
  DType t = like.dtype();
  // A bool tensor's scalar is an integer, as PyTorch's int scalar (mask + 1 and mask * 1 are i64;
  // a 0/1 bool scalar made mask + 1.0 look for a bool add), or f32 when fractional (below).
  if (t == DType::Bool) t = DType::I64;
  // A value the integer dtype cannot hold exactly (a fraction, NaN, +-inf, out of its range, -0) is
  // an f32 scalar, so x + 0.5 and x * 1e20 on an i32 x compute in f32 instead of truncating or
  // overflowing, and x / -0.0 is -inf for a positive x, as PyTorch's.
  const bool negative_zero = value == 0.0 && std::signbit(value);
  if (is_integral(t) && !(value == std::trunc(value) && integral_holds(t, value) && !negative_zero)) {
    t = DType::F32;
  }
  return scalar_tensor(value, {.dtype = t, .device = like.device()});
}

Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, scalar_like(b, a)); }
Tensor operator-(const Tensor& a, double b) { return sub(a, scalar_like(b, a)); }
// A floating tensor times or over a scalar keeps the scalar in opmath (mul_scalar / div_scalar),
// as PyTorch: h * 65536.0 on an f16 h is not inf. Integer and bool tensors take the promotion of
// scalar_like (x * 0.5 on an i32 x is f32).
Tensor operator*(const Tensor& a, double b) {
  if (a.defined() && is_floating(a.dtype())) return dispatch1(OpId::mul_scalar, {a}, {.alpha = b});
  return mul(a, scalar_like(b, a));
}
Tensor operator/(const Tensor& a, double b) {
  if (a.defined() && is_floating(a.dtype())) return dispatch1(OpId::div_scalar, {a}, {.alpha = b});
  return div(a, scalar_like(b, a));
}
Tensor operator+(double a, const Tensor& b) { return add(scalar_like(a, b), b); }
Tensor operator-(double a, const Tensor& b) { return sub(scalar_like(a, b), b); }
Tensor operator*(double a, const Tensor& b) { return b * a; }
// scalar / tensor under autocast runs in f32, as PyTorch's autocast lists __rdiv__ among its fp32
// ops: 1 / x of a small f16 x overflows f16 (x = 1e-5 gives inf, where reciprocal(x), an fp32-policy
// op, gives 99864). The scalar becomes an f32 0-d tensor, so div's promote policy widens x.
// Outside autocast it stays in x's dtype, as PyTorch's, computed as reciprocal(x) * a with a in
// opmath (PyTorch's form): 70000 / x is not inf for every f16 x.
Tensor operator/(double a, const Tensor& b) {
  const bool lowp = b.defined() && (b.dtype() == DType::F16 || b.dtype() == DType::BF16);
  if (lowp && autocast_state(b.device().type).enabled) {
    return div(scalar_tensor(a, {.dtype = DType::F32, .device = b.device()}), b);
  }
  if (lowp) return to(reciprocal(to(b, DType::F32)) * a, b.dtype());
  return div(scalar_like(a, b), b);
}

}  // namespace mg
