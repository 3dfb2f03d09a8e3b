#include "mixgrad/ops/activation_composites.h"

#include <cmath>
#include <limits>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/autocast_state.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/core/half.h"
#include "mixgrad/core/shape.h"
#include "mixgrad/ops/composite.h"
#include "mixgrad/ops/loss.h"
#include "mixgrad/ops/ops.h"

namespace mg {

namespace {

// f(x) in opmath for the one-input composites, rounded once.
template <typename F>
Tensor unary(const char* name, const Tensor& x, F&& f) {
  const detail::CompositeInputs c = detail::composite_inputs(name, {x});
  return detail::round_result(f(c.math[0]), c);
}

// The shrinks' lambd as PyTorch's kernels use it: converted to the input's dtype first (through
// f32 for f16/bf16), so bf16 hardshrink(0.30078125, 0.3) is 0 as there (0.3 rounds to 0.30078125).
// A finite lambd that overflows the dtype is refused, as PyTorch refuses it.
double shrink_lambd(const char* name, double lambd, const Tensor& x) {
  MG_CHECK(x.defined(), Error, name, ": the input is undefined");
  double v = lambd;
  switch (x.dtype()) {
    case DType::F16: v = float(Half(float(lambd))); break;
    case DType::BF16: v = float(BFloat16(float(lambd))); break;
    case DType::F32: v = double(float(lambd)); break;
    default: break;
  }
  MG_CHECK(std::isfinite(v) || !std::isfinite(lambd), Error, name, ": lambd ", lambd, " cannot be converted to ",
           dtype_name(x.dtype()), " (the input's dtype) without overflow");
  return v;
}

// An integer input of the ops PyTorch computes by true division or tanh (softsign, tanhshrink) as
// f32, the default floating dtype, as PyTorch's type promotion gives them.
Tensor integers_as_float(const Tensor& x) {
  return x.defined() && is_integral(x.dtype()) ? x.to(DType::F32) : x;
}

}  // namespace

Tensor softmin(const Tensor& x, int64_t dim) {
  return unary("softmin", x, [&](const Tensor& a) { return softmax(-a, dim); });
}

Tensor glu(const Tensor& x, int64_t dim) {
  MG_CHECK(x.defined() && x.dim() >= 1, ShapeError, "glu: expected a tensor of at least 1 dim, got ",
           x.defined() ? describe(x) : "undefined");
  const int64_t d = wrap_dim(dim, x.dim(), "glu");
  MG_CHECK(x.size(d) % 2 == 0, ShapeError, "glu: dim ", d, " of ", describe(x), " must have an even size, got ",
           x.size(d));
  return unary("glu", x, [&](const Tensor& a) {
    const int64_t h = a.size(d) / 2;
    return a.narrow(d, 0, h) * sigmoid(a.narrow(d, h, h));
  });
}

Tensor logsigmoid(const Tensor& x) {
  // -softplus(-x) with the linear cutoff at 40, not softplus's default 20: below -20 the dropped
  // e^x is still resolved in f64 (beyond 40 it is under f64's rounding of x). Smooth at 0, so the
  // gradient there is PyTorch's 1/2 (min(x, 0) - log1p(exp(-|x|)) has kinks at 0).
  // 0 - softplus rather than its negation: +0 where softplus underflows to 0 (x >= ~104 in f32,
  // +inf), as PyTorch's.
  return unary("logsigmoid", x, [](const Tensor& a) { return scalar_like(0.0, a) - softplus(-a, 1.0, 40.0); });
}

Tensor softsign(const Tensor& x) {
  return unary("softsign", integers_as_float(x), [](const Tensor& a) { return a / (abs(a) + 1.0); });
}

Tensor tanhshrink(const Tensor& x) {
  return unary("tanhshrink", integers_as_float(x), [](const Tensor& a) { return a - tanh(a); });
}

Tensor hardshrink(const Tensor& x, double lambd) {
  MG_CHECK(!std::isnan(lambd), Error, "hardshrink: lambd must be a number, got ", lambd);
  // PyTorch's test, -lambd <= x <= lambd -> 0, so NaN passes through (and a negative lambd, which
  // PyTorch accepts, keeps every x).
  lambd = shrink_lambd("hardshrink", lambd, x);
  return unary("hardshrink", x, [&](const Tensor& a) {
    const Tensor zero = scalar_like(0.0, a);
    return where(a.ge(-lambd), where(a.le(lambd), zero, a), a);
  });
}

Tensor softshrink(const Tensor& x, double lambd) {
  MG_CHECK(lambd >= 0.0, Error, "softshrink: lambd must be >= 0, got ", lambd);
  MG_CHECK(x.defined(), Error, "softshrink: the input is undefined");
  // PyTorch's range: [0, the largest finite value of the input's dtype].
  const double most = x.dtype() == DType::F16 ? 65504.0 : x.dtype() == DType::BF16 ? 3.3895313892515355e38
                    : x.dtype() == DType::F32 ? double(std::numeric_limits<float>::max())
                                              : std::numeric_limits<double>::max();
  MG_CHECK(lambd <= most, Error, "softshrink: lambd must be in [0, ", most, "] for a ", dtype_name(x.dtype()),
           " input, got ", lambd);
  lambd = shrink_lambd("softshrink", lambd, x);
  return unary("softshrink", x, [&](const Tensor& a) {
    const Tensor zero = scalar_like(0.0, a);
    // PyTorch's order of tests, so NaN passes through (as x + lambd).
    return where(a.ge(-lambd), where(a.le(lambd), zero, a - lambd), a + lambd);
  });
}

Tensor threshold(const Tensor& x, double threshold_value, double value) {
  // An integer input keeps its dtype, threshold and value truncated toward zero as PyTorch
  // converts them (threshold(int [-1, 2, -2], -1.5, 7.9) is [7, 2, 7]).
  if (x.defined() && is_integral(x.dtype())) {
    MG_CHECK(integral_holds(x.dtype(), threshold_value) && integral_holds(x.dtype(), value), Error, "threshold: ",
             threshold_value, " or ", value, " cannot be converted to ", dtype_name(x.dtype()), " without overflow");
    // (+ 0.0: trunc(-0.5) is -0.0, which scalar_like would make an f32 scalar)
    return where(x.le(std::trunc(threshold_value)), scalar_like(std::trunc(value) + 0.0, x), x);
  }
  return unary("threshold", x, [&](const Tensor& a) { return where(a.le(threshold_value), scalar_like(value, a), a); });
}

Tensor prelu(const Tensor& x, const Tensor& weight) {
  MG_CHECK(x.defined() && weight.defined(), Error, "prelu: got an undefined tensor");
  MG_CHECK(weight.dim() <= 1, ShapeError, "prelu: expected weight [1] or [C], got ", describe(weight));
  // PyTorch's channels: dim 1, or 1 for an input of fewer dims.
  const int64_t channels = x.dim() >= 2 ? x.size(1) : 1;
  const int64_t n = weight.numel();
  MG_CHECK(n == 1 || n == channels, ShapeError, "prelu: weight ", describe(weight), " must have ",
           channels == 1 ? std::string("1 element (x ") : str_cat("1 or ", channels, " elements (the channels of x "),
           describe(x), channels == 1 && x.dim() < 2 ? " has fewer than 2 dims, so one channel)" : ", its dim 1)");
  // One dtype, as PyTorch's prelu, which does not promote ("Type promoting not supported"): under
  // autocast its lower policy casts both (f64 is left alone, so f64 beside f32 is still refused).
  const AutocastState& ac = autocast_state(x.device().type);
  const bool autocast_casts = ac.enabled && x.dtype() != DType::F64 && weight.dtype() != DType::F64 &&
                              is_floating(x.dtype()) && is_floating(weight.dtype());
  MG_CHECK(autocast_casts || x.dtype() == weight.dtype(), DTypeError,
           "prelu: expected the input and the weight in one dtype (PyTorch does not promote them), got ", describe(x),
           " and ", describe(weight));
  const detail::CompositeInputs c = detail::composite_inputs("prelu", {x, weight});
  const Tensor& a = c.math[0];
  Shape s(std::size_t(a.dim()), 1);  // x's rank, the channels at dim 1: the result keeps x's shape
  if (a.dim() >= 2) s[1] = n;
  const Tensor w = reshape(c.math[1], s);
  // w times x masked to its non-positive part: the positive branch's unused product would give
  // the weight's gradient 0 * x, NaN for x = +inf (PyTorch's dw is 0 there).
  const Tensor positive = a.gt(0.0);
  return detail::round_result(where(positive, a, w * where(positive, scalar_like(0.0, a), a)), c);
}

Tensor rrelu(const Tensor& x, double lower, double upper, bool training, Generator* gen) {
  MG_CHECK(std::isfinite(lower) && std::isfinite(upper) && lower <= upper, Error,
           "rrelu: expected finite lower <= upper (PyTorch's rule; a negative lower is allowed), got lower=", lower,
           ", upper=", upper);
  return unary("rrelu", x, [&](const Tensor& a) {
    Tensor slope = training ? rand(a.shape(), {.dtype = a.dtype(), .device = a.device()}, gen) * (upper - lower) + lower
                            : scalar_like(0.5 * (lower + upper), a);
    return where(a.gt(0.0), a, slope * a);  // x = 0 takes the slope's gradient, as PyTorch
  });
}

Tensor gumbel_softmax(const Tensor& logits, double tau, bool hard, int64_t dim, Generator* gen) {
  MG_CHECK(tau > 0 && std::isfinite(tau), Error, "gumbel_softmax: tau must be positive and finite, got ", tau);
  MG_CHECK(logits.defined() && logits.dim() >= 1, ShapeError, "gumbel_softmax: expected logits of at least 1 dim, got ",
           logits.defined() ? describe(logits) : "undefined");
  const int64_t d = wrap_dim(dim, logits.dim(), "gumbel_softmax");
  return unary("gumbel_softmax", logits, [&](const Tensor& a) {
    Tensor g;
    {
      NoGradGuard no_grad;
      // u = 0 gives -inf noise (that class never wins); u < 1 keeps the noise finite above
      g = -log(-log(rand(a.shape(), {.dtype = a.dtype(), .device = a.device()}, gen)));
    }
    const Tensor soft = softmax((a + g) / tau, d);
    if (!hard) return soft;
    Shape along(std::size_t(a.dim()), 1);
    along[std::size_t(d)] = a.size(d);
    const Tensor classes = arange(0, a.size(d), 1, {.dtype = DType::I64, .device = a.device()}).reshape(along);
    const Tensor one_hot = eq(classes, argmax(soft, d, /*keepdim=*/true)).to(soft.dtype());
    return one_hot - soft.detach() + soft;
  });
}

}  // namespace mg
