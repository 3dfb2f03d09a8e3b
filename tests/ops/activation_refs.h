// f64 references of the piecewise activations (ops/activation.cpp) and their derivatives,
// written from the definitions (PyTorch's conventions at the kinks and for NaN), shared by the op
// case table, the ulp sweeps and the fused-backward tests.
#pragma once
#include <cmath>
#include <limits>

namespace mg::test::act {

inline double leaky_relu(double x, double slope) { return x > 0 ? x : x * slope; }
inline double leaky_relu_grad(double x, double slope) { return x > 0 ? 1.0 : slope; }
// ELU family: scale x for x > 0, else scale alpha expm1(s x)
inline double elu(double x, double alpha, double scale, double s) {
  return x <= 0 ? scale * alpha * std::expm1(s * x) : scale * x;
}
inline double elu_grad(double x, double alpha, double scale, double s) {
  return x <= 0 ? scale * alpha * s * std::exp(s * x) : scale;
}
inline double relu6_plus3(double x) { return std::isnan(x) ? x : std::fmin(std::fmax(x + 3.0, 0.0), 6.0); }
inline double hardswish(double x) { return x >= 3 ? x : x * relu6_plus3(x) / 6.0; }
inline double hardsigmoid(double x) { return relu6_plus3(x) / 6.0; }
// NaN takes the last branch (1), as the op: x <= -3 and x < 3 are both false
inline double hardswish_grad(double x) { return x <= -3 ? 0.0 : (x < 3 ? x / 3.0 + 0.5 : 1.0); }
inline double hardsigmoid_grad(double x) { return (x > -3 && x < 3) ? 1.0 / 6.0 : 0.0; }
// x tanh(softplus(x)) = x e (2 + e) / ((1 + e)^2 + 1), e = e^x, in long double (no cancellation)
inline double mish(double x) {
  if (x > 40) return x;  // t = 1 to far beyond f64's resolution
  if (x == -INFINITY) return -0.0;  // the limit (the op's choice; PyTorch gives NaN)
  const long double e = std::exp((long double)x);
  const long double p = 1 + e;
  return double((long double)x * (e * (2 + e) / (p * p + 1)));
}
// e b / q^2, b = 4 (1 + x) + e (6 + 4 x) + 4 e^2 + e^3: long double keeps the zero near -1.19
// accurate; ±inf give the limits 1 and -0, as the op
inline double mish_grad(double x) {
  if (std::isnan(x)) return x;
  if (x < -1000) return -0.0;
  if (x > 40) return 1.0;
  const long double X = x, e = std::exp(X), p = 1 + e, q = p * p + 1;
  const long double b = 4 * (1 + X) + e * (6 + 4 * X) + 4 * e * e + e * e * e;
  return double(e * b / (q * q));
}
// The size of mish'(x)'s terms: its bound where they cancel (x near -1.19), as silu's.
inline double mish_grad_terms(double x) {
  if (!(x <= 40)) return 1.0;
  if (x < -1000) return 0.0;
  if (x >= 0) return mish_grad(x);  // positive terms only
  const long double X = x, e = std::exp(X), p = 1 + e, q = p * p + 1;
  const long double b = 4 * std::fabs(1 + X) + e * std::fabs(6 + 4 * X) + 4 * e * e + e * e * e;
  return double(e * b / (q * q));
}

}  // namespace mg::test::act
