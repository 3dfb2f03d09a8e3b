// Elementwise math written once (DESIGN §6): named functors templated on the compute type
// ("opmath": float for f16/bf16 storage, double for f64), compiled by g++ for the CPU loops in
// ops/cpu/ and by nvcc for the CUDA grid-stride kernels. The f64 gradient checks therefore test
// the exact formulas the GPU runs.
#pragma once
#include <cmath>

#include "mixgrad/core/fast_math.h"
#include "mixgrad/core/macros.h"

namespace mg::fn {

// ---- unary ----
struct Neg {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return -x; }
};
struct Abs {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return x < T(0) ? -x : x; }
};
struct Sign {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    return x > T(0) ? T(1) : (x < T(0) ? T(-1) : (x == T(0) ? T(0) : x));  // NaN stays NaN
  }
};
// exp, tanh and erf use mg::fast (vectorisable) for f32 and libm for f64.
struct Exp {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return fast::exp(x); }
};
struct Log {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return std::log(x); }
};
struct Log1p {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return std::log1p(x); }
};
struct Expm1 {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return std::expm1(x); }
};
struct Sqrt {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return std::sqrt(x); }
};
struct Rsqrt {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return T(1) / std::sqrt(x); }
};
struct Reciprocal {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return T(1) / x; }
};
struct Sin {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return std::sin(x); }
};
struct Cos {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return std::cos(x); }
};
struct Tanh {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return fast::tanh(x); }
};
// 1 / (1 + e^-x) for x >= 0 and e^x / (1 + e^x) below, so nothing overflows and small values keep
// their relative accuracy; both sides are computed and selected (vectorisable).
struct Sigmoid {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    const T e = fast::exp(x < T(0) ? x : -x);  // e^{-|x|}
    const T r = T(1) / (T(1) + e);
    return x >= T(0) ? r : (x == x ? e * r : x);
  }
};
struct Relu {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return x > T(0) ? x : (x == x ? T(0) : x); }
};
// 0.5 x (1 + erf(x / sqrt 2))
struct GeluErf {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    return T(0.5) * x * (T(1) + fast::erf(x * T(0.70710678118654752440)));
  }
};
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
struct GeluTanh {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    const T inner = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
    return T(0.5) * x * (T(1) + fast::tanh(inner));
  }
};
// x * sigmoid(x)
struct Silu {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return x * Sigmoid{}(x); }
};
// log(1 + e^(beta x)) / beta, and x itself once beta x > threshold (as PyTorch).
struct Softplus {
  double beta, threshold;
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    const T bx = T(beta) * x;
    return bx > T(threshold) ? x : std::log1p(std::exp(bx)) / T(beta);
  }
};
struct Erf {
  template <typename T> MG_HOST_DEVICE T operator()(T x) const { return fast::erf(x); }
};
struct PowScalar {
  double exponent;
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    if (exponent == 2.0) return x * x;
    if (exponent == 1.0) return x;
    return std::pow(x, T(exponent));
  }
};
// min/max given as doubles; NaN propagates.
struct Clamp {
  double lo, hi;
  template <typename T> MG_HOST_DEVICE T operator()(T x) const {
    if (!(x == x)) return x;
    if (double(x) < lo) return T(lo);
    if (double(x) > hi) return T(hi);
    return x;
  }
};

// ---- binary ----
struct Add {
  double alpha;
  template <typename T> MG_HOST_DEVICE T operator()(T a, T b) const {
    return alpha == 1.0 ? a + b : a + T(alpha) * b;
  }
};
struct Sub {
  double alpha;
  template <typename T> MG_HOST_DEVICE T operator()(T a, T b) const {
    return alpha == 1.0 ? a - b : a - T(alpha) * b;
  }
};
struct Mul {
  template <typename T> MG_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (sizeof(T) == 1 && T(2) == T(1)) {
      return a && b;  // bool: logical and
    } else {
      return a * b;
    }
  }
};
struct Div {
  template <typename T> MG_HOST_DEVICE T operator()(T a, T b) const { return a / b; }
};
struct Pow {
  template <typename T> MG_HOST_DEVICE T operator()(T a, T b) const { return std::pow(a, b); }
};
// NaN propagates from either side (as torch.maximum).
struct Maximum {
  template <typename T> MG_HOST_DEVICE T operator()(T a, T b) const {
    if (!(a == a)) return a;
    if (!(b == b)) return b;
    return a > b ? a : b;
  }
};
struct Minimum {
  template <typename T> MG_HOST_DEVICE T operator()(T a, T b) const {
    if (!(a == a)) return a;
    if (!(b == b)) return b;
    return a < b ? a : b;
  }
};
struct Eq {
  template <typename T> MG_HOST_DEVICE bool operator()(T a, T b) const { return a == b; }
};
struct Ne {
  template <typename T> MG_HOST_DEVICE bool operator()(T a, T b) const { return a != b; }
};
struct Lt {
  template <typename T> MG_HOST_DEVICE bool operator()(T a, T b) const { return a < b; }
};
struct Le {
  template <typename T> MG_HOST_DEVICE bool operator()(T a, T b) const { return a <= b; }
};
struct Gt {
  template <typename T> MG_HOST_DEVICE bool operator()(T a, T b) const { return a > b; }
};
struct Ge {
  template <typename T> MG_HOST_DEVICE bool operator()(T a, T b) const { return a >= b; }
};

}  // namespace mg::fn
