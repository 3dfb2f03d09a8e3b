// The per-element math of the optimizers and of gradient clipping, written once (DESIGN §6):
// named functors templated on the compute type T ("opmath": float for f16/bf16/f32 parameters,
// double for f64), compiled by g++ for the CPU chunk loops in optim/*.cpp and, later, by nvcc for
// the multi-tensor-apply kernels. The per-parameter path and the multi-tensor path call the same
// functor on the same elements, so their results are bit-identical.
//
// The decision a reader must know: the operation order follows PyTorch 1.13's single-tensor
// implementations (torch/optim/{sgd,adam,adamw}.py) and, for LAMB, NVIDIA Apex's FusedLAMB, so an
// f64 run agrees with them to rounding (tests/optim/test_optim_reference.cpp measures it).
// Scalars that depend only on the step (bias corrections, step sizes) are computed on the host in
// double and handed to the functor already converted to T.
//
//   fn::AdamStep<float> f{...};  f(p, g, m, v, vmax);   // one element, state updated in place
#pragma once
#include <cmath>

#include "mixgrad/core/macros.h"

namespace mg::fn {

// The bias correction 1 - beta^t of step t >= 1 (Adam, LAMB, Adamax, RAdam), in double. beta^t by
// binary exponentiation: the same IEEE multiplications in the same order on the host and in the
// CUDA kernels (which read t from device memory), so both devices' step scalars agree to the bit;
// pow's last bit is the library's (glibc rounds correctly, CUDA's double pow is within 2 ulp).
// Each squaring doubles the relative error it inherits, so beta^t carries about t roundings: the
// result is within 2^-53 (1 + 2 t beta^t) of 1 - beta^t (tests/optim/test_optimizers.cpp), at most
// 2^-52 / (e (1 - beta)) + 2^-53, 4e-13 for beta = 0.9999 — five orders below f32's rounding.
// Each product rounded on its own on both sides: a compiler may not fuse the last one into the
// subtraction (an FMA), which g++ with -march=native or nvcc's --fmad could do differently.
MG_HOST_DEVICE double product_rounded(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  volatile double p = a * b;  // stored: no contraction across it
  return p;
#endif
}
// beta^t by binary exponentiation (see bias_correction).
MG_HOST_DEVICE double power_of(double beta, long long t) {
  double power = 1.0;
  for (double square = beta; t > 0; t >>= 1, square = product_rounded(square, square)) {
    if (t & 1) power = product_rounded(power, square);
  }
  return power;
}
MG_HOST_DEVICE double bias_correction(double beta, long long t) { return 1.0 - power_of(beta, t); }

// beta^t to within about an ulp: binary exponentiation in double-double arithmetic (each product's
// rounding error recovered exactly with a fused multiply-add, correctly rounded on the host and in
// CUDA alike, and every other product rounded on its own, so both devices give the same bits).
// RAdam needs it: its rho_t subtracts two nearly equal terms, which magnifies the t roundings of
// power_of a thousandfold at its first rectified steps.
MG_HOST_DEVICE double fused_multiply_add(double a, double b, double c) {
#ifdef __CUDA_ARCH__
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
MG_HOST_DEVICE void double_double_multiply(double& hi, double& lo, double bh, double bl) {
  const double p = product_rounded(hi, bh);
  const double e = fused_multiply_add(hi, bh, -p) + (product_rounded(hi, bl) + product_rounded(lo, bh));
  hi = p + e;
  lo = e - (hi - p);
}
MG_HOST_DEVICE double power_of_accurate(double beta, long long t) {
  double ph = 1.0, pl = 0.0, sh = beta, sl = 0.0;  // the power so far and beta^(2^k), each hi + lo
  for (; t > 0; t >>= 1) {
    if (t & 1) double_double_multiply(ph, pl, sh, sl);
    if (t > 1) {
      const double h = sh, l = sl;
      double_double_multiply(sh, sl, h, l);
    }
  }
  return ph + pl;
}

// RAdam's scalars for the t-th update (Liu et al. 2020, torch.optim.RAdam's formulas term for
// term): the bias corrections, the length of the approximated SMA rho_t and, when rho_t > 5, the
// variance rectification r_t. Shared by the host and the CUDA kernel: beta2^t by
// power_of_accurate and square roots (correctly rounded on both) instead of pow(x, 0.5), so both
// agree to the bit.
struct RadamScalars {
  double bias_correction1, sqrt_bias_correction2, rect;
  bool rectified;
};
MG_HOST_DEVICE RadamScalars radam_scalars(double beta1, double beta2, long long t) {
  const double beta2_t = power_of_accurate(beta2, t);
  const double bc2 = 1.0 - beta2_t;
  const double rho_inf = 2.0 / (1.0 - beta2) - 1.0;
  const double rho_t = rho_inf - product_rounded(2.0 * double(t), beta2_t) / bc2;
  RadamScalars c{bias_correction(beta1, t), std::sqrt(bc2), 0.0, rho_t > 5.0};
  if (c.rectified) {
    c.rect = std::sqrt(product_rounded(product_rounded(rho_t - 4.0, rho_t - 2.0), rho_inf) /
                       product_rounded(product_rounded(rho_inf - 4.0, rho_inf - 2.0), rho_t));
  }
  return c;
}

// NAdam's momentum coefficient mu_t = beta1 (1 - 0.5 * 0.96^(t * momentum_decay)) and the scalars
// of its t-th update from the product of the mu's before it (PyTorch's per-parameter mu_product):
// the bias correction 1 - beta2^t, coef_grad = -lr (1 - mu_t) / (1 - prod mu_1..t) and
// coef_avg = -lr mu_(t+1) / (1 - prod mu_1..t+1) (torch.optim.NAdam's formulas term for term), and
// the new product. Shared by the host and the CUDA kernel; pow's last bit is each library's.
MG_HOST_DEVICE double nadam_mu(double beta1, double momentum_decay, long long t) {
  return beta1 * (1.0 - 0.5 * std::pow(0.96, double(t) * momentum_decay));
}
struct NadamScalars {
  double bias_correction2, coef_grad, coef_avg, mu_product;
};
MG_HOST_DEVICE NadamScalars nadam_scalars(double lr, double beta1, double beta2, double momentum_decay, long long t,
                                          double mu_product_before) {
  const double mu = nadam_mu(beta1, momentum_decay, t), mu_next = nadam_mu(beta1, momentum_decay, t + 1);
  const double product = product_rounded(mu_product_before, mu);
  return {bias_correction(beta2, t), -lr * (1.0 - mu) / (1.0 - product),
          (-lr * mu_next) / (1.0 - product_rounded(product, mu_next)), product};
}

// Adagrad's decayed step, -lr / (1 + (t - 1) lr_decay), for the t-th update: the product rounded
// on its own, so the host and the CUDA kernel (t from device memory) agree to the bit.
MG_HOST_DEVICE double adagrad_neg_clr(double lr, double lr_decay, long long t) {
  return -(lr / (1.0 + product_rounded(double(t) - 1.0, lr_decay)));
}

// Every step functor takes grad_sign: -1 with `maximize` (the gradient is negated first, as
// torch.optim's maximize=True: the step ascends), else 1. A multiply by +-1 is exact, so it is the
// negation bit for bit, and unlike a runtime branch it keeps the CPU loops vectorized.

// SGD with momentum, dampening, Nesterov and L2 weight decay (torch.optim.SGD):
//   g = grad_sign * g
//   g += weight_decay * p
//   buf = first ? g : momentum * buf + (1 - dampening) * g          (when momentum != 0)
//   g = nesterov ? g + momentum * buf : buf
//   p -= lr * g
template <typename T>
struct SgdStep {
  T lr;
  T momentum;
  T one_minus_dampening;
  T weight_decay;
  bool nesterov;
  bool first;  // the momentum buffer is new: it starts as the (decayed) gradient
  T grad_sign;  // 1, or -1 to maximize
  MG_HOST_DEVICE void operator()(T& p, T g, T& buf) const {
    g = g * grad_sign;
    if (weight_decay != T(0)) g = g + weight_decay * p;
    if (momentum != T(0)) {
      buf = first ? g : buf * momentum + one_minus_dampening * g;
      g = nesterov ? g + momentum * buf : buf;
    }
    p = p + (-lr) * g;
  }
};

// Adam and AdamW (torch.optim.Adam / AdamW), with amsgrad:
//   g = grad_sign * g
//   Adam:  g += weight_decay * p            AdamW: p *= 1 - lr * weight_decay (decoupled)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   vmax = max(vmax, v)                     (amsgrad; NaN propagates as torch.maximum)
//   p -= lr / (1 - beta1^t) * m / (sqrt(v or vmax) / sqrt(1 - beta2^t) + eps)
template <typename T>
struct AdamStep {
  T beta1;
  T beta2;
  T one_minus_beta1;
  T one_minus_beta2;
  T eps;
  T weight_decay;   // L2 term added to the gradient (Adam); 0 for AdamW
  T decay_factor;   // 1 - lr * weight_decay (AdamW); 1 for Adam
  T neg_step_size;  // -lr / (1 - beta1^t)
  T bias_correction2_sqrt;  // sqrt(1 - beta2^t)
  bool decoupled;
  bool amsgrad;
  T grad_sign;  // 1, or -1 to maximize
  MG_HOST_DEVICE void operator()(T& p, T g, T& m, T& v, T& vmax) const {
    g = g * grad_sign;
    if (decoupled) {
      p = p * decay_factor;
    } else if (weight_decay != T(0)) {
      g = g + weight_decay * p;
    }
    m = m * beta1 + one_minus_beta1 * g;
    v = v * beta2 + one_minus_beta2 * g * g;
    T denom;
    if (amsgrad) {
      vmax = (vmax != vmax || vmax > v) ? vmax : v;
      denom = std::sqrt(vmax) / bias_correction2_sqrt + eps;
    } else {
      denom = std::sqrt(v) / bias_correction2_sqrt + eps;
    }
    p = p + neg_step_size * m / denom;
  }
};

// LAMB (You et al. 2019; Apex FusedLAMB), stage 1: the moments and the Adam direction with bias
// correction plus decoupled weight decay,
//   m = beta1 * m + (1 - beta1) * g,   v = beta2 * v + (1 - beta2) * g^2
//   u = (m / bc1) / (sqrt(v / bc2) + eps) + weight_decay * p      (bc = 1 - beta^t, or 1)
// Stage 2 (LambApply) moves p by the update scaled with the per-tensor trust ratio; it recomputes
// u with update() from the stored moments instead of keeping u in a scratch buffer.
template <typename T>
struct LambStage1 {
  T beta1;
  T beta2;
  T one_minus_beta1;
  T one_minus_beta2;
  T bias_correction1;
  T bias_correction2;
  T eps;
  T weight_decay;
  T grad_sign;  // 1, or -1 to maximize
  MG_HOST_DEVICE T update(T p, T m, T v) const {
    return (m / bias_correction1) / (std::sqrt(v / bias_correction2) + eps) + weight_decay * p;
  }
  // Updates the moments in place and returns u.
  MG_HOST_DEVICE T operator()(T p, T g, T& m, T& v) const {
    g = g * grad_sign;
    m = m * beta1 + one_minus_beta1 * g;
    v = v * beta2 + one_minus_beta2 * g * g;
    return update(p, m, v);
  }
};

// LAMB stage 2: p -= lr * ratio * u, with ratio = ||p|| / ||u|| for the tensor (1 when either
// norm is 0); neg_step = -(lr * ratio) is computed per tensor on the host.
template <typename T>
struct LambApply {
  T neg_step;
  MG_HOST_DEVICE T operator()(T p, T u) const { return p + neg_step * u; }
};

// RMSprop (torch.optim.RMSprop, Hinton's lecture 6e; centered: Graves 2013), with momentum:
//   g = grad_sign * g + weight_decay * p
//   sq = alpha * sq + (1 - alpha) * g^2                       ("square_avg")
//   ga = lerp(ga, g, 1 - alpha)                               ("grad_avg", centered only)
//   avg = sqrt(centered ? sq - ga^2 : sq) + eps
//   momentum > 0:  buf = momentum * buf + g / avg;  p -= lr * buf      ("momentum_buffer")
//   otherwise:     p -= lr * (g / avg)
// The lerp is PyTorch's (ATen's lerp: a + w (b - a) for w < 0.5, else b - (b - a)(1 - w)).
template <typename T>
struct RmspropStep {
  T lr;
  T alpha;
  T one_minus_alpha;
  T eps;
  T weight_decay;
  T momentum;
  bool centered;
  T grad_sign;  // 1, or -1 to maximize
  // ga, buf: unused (any value) unless centered / momentum > 0.
  MG_HOST_DEVICE void operator()(T& p, T g, T& sq, T& ga, T& buf) const {
    g = g * grad_sign;
    if (weight_decay != T(0)) g = g + weight_decay * p;
    sq = sq * alpha + one_minus_alpha * g * g;
    T avg;
    if (centered) {
      ga = one_minus_alpha < T(0.5) ? ga + one_minus_alpha * (g - ga) : g - (g - ga) * alpha;
      avg = std::sqrt(sq - ga * ga) + eps;
    } else {
      avg = std::sqrt(sq) + eps;
    }
    if (momentum > T(0)) {
      buf = buf * momentum + g / avg;
      p = p + (-lr) * buf;
    } else {
      p = p + (-lr) * (g / avg);
    }
  }
};

// Adagrad (torch.optim.Adagrad, Duchi et al. 2011):
//   g = grad_sign * g + weight_decay * p
//   sum = sum + g^2                                           ("sum", starts at initial_accumulator_value)
//   p -= clr * (g / (sqrt(sum) + eps)),   clr = lr / (1 + (t - 1) * lr_decay)   (host, double)
template <typename T>
struct AdagradStep {
  T neg_clr;  // -clr
  T eps;
  T weight_decay;
  T grad_sign;  // 1, or -1 to maximize
  MG_HOST_DEVICE void operator()(T& p, T g, T& sum) const {
    g = g * grad_sign;
    if (weight_decay != T(0)) g = g + weight_decay * p;
    sum = sum + g * g;
    p = p + neg_clr * (g / (std::sqrt(sum) + eps));
  }
};

// ATen's lerp (torch.lerp, exp_avg.lerp_(g, w) in PyTorch 2.x's optimizers): a + w (b - a) for
// w < 0.5, else b - (b - a)(1 - w).
template <typename T>
MG_HOST_DEVICE T aten_lerp(T a, T b, T w) {
  return w < T(0.5) ? a + w * (b - a) : b - (b - a) * (T(1) - w);
}

// Adamax (torch.optim.Adamax, Kingma & Ba 2015 §7.1):
//   g = grad_sign * g + weight_decay * p
//   m = lerp(m, g, 1 - beta1)                                 ("exp_avg")
//   u = max(beta2 * u, |g| + eps)                             ("exp_inf"; NaN propagates)
//   p -= lr / (1 - beta1^t) * m / u                           (neg_clr: host, double)
template <typename T>
struct AdamaxStep {
  T one_minus_beta1;
  T beta2;
  T eps;
  T weight_decay;
  T neg_clr;    // -lr / (1 - beta1^t)
  T grad_sign;  // 1, or -1 to maximize
  MG_HOST_DEVICE void operator()(T& p, T g, T& m, T& u) const {
    g = g * grad_sign;
    if (weight_decay != T(0)) g = g + weight_decay * p;
    m = aten_lerp(m, g, one_minus_beta1);
    const T a = u * beta2, b = (g < T(0) ? -g : g) + eps;
    u = (a != a || b != b) ? a + b : (a > b ? a : b);  // torch.maximum: NaN wins
    p = p + neg_clr * m / u;  // ATen's addcdiv: (value * m) / u
  }
};

// NAdam's and RAdam's weight decay: decoupled, p *= 1 - lr * weight_decay ("decay"); else L2,
// g += weight_decay * p; nothing when weight_decay is 0. Their step functors take the mode as a
// template argument: Runtime (the default; the CUDA kernels) reads it from the members per element,
// and the CPU loops pick one of the others per chunk (weight_decay_mode), because g++ keeps the
// runtime test as a select on a scalar condition, which its vectorizer cannot do: the loops of both
// ran scalar, 6x slower than Adam's on BERT-mini's parameters.
enum class WeightDecayMode { Runtime, None, L2, Decoupled };
inline WeightDecayMode weight_decay_mode(double weight_decay, bool decoupled) {
  return weight_decay == 0.0 ? WeightDecayMode::None : decoupled ? WeightDecayMode::Decoupled : WeightDecayMode::L2;
}
template <WeightDecayMode M, typename T>
MG_HOST_DEVICE void adam_like_weight_decay(T& p, T& g, T weight_decay, bool decoupled, T decay) {
  if constexpr (M == WeightDecayMode::L2) {
    g = g + weight_decay * p;
  } else if constexpr (M == WeightDecayMode::Decoupled) {
    p = p * decay;
  } else if constexpr (M == WeightDecayMode::Runtime) {
    if (weight_decay != T(0)) {
      if (decoupled) p = p * decay;
      else g = g + weight_decay * p;
    }
  }
}

// NAdam (torch.optim.NAdam, Dozat 2016), with PyTorch's momentum decay:
//   g = grad_sign * g;  decoupled ? p *= 1 - lr * weight_decay : g += weight_decay * p
//   m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) g^2
//   d = sqrt(v / (1 - beta2^t)) + eps
//   p += coef_grad * g / d;  p += coef_avg * m / d
// with mu_t = beta1 (1 - 0.5 * 0.96^(t * momentum_decay)), coef_grad = -lr (1 - mu_t) / (1 - prod mu_1..t),
// coef_avg = -lr mu_(t+1) / (1 - prod mu_1..t+1) (host, double).
template <typename T>
struct NadamStep {
  T one_minus_beta1;
  T beta2;
  T one_minus_beta2;
  T eps;
  T weight_decay;
  bool decoupled;
  T decay;              // 1 - lr * weight_decay (decoupled)
  T bias_correction2;   // 1 - beta2^t
  T coef_grad;
  T coef_avg;
  T grad_sign;
  template <WeightDecayMode M = WeightDecayMode::Runtime>
  MG_HOST_DEVICE void operator()(T& p, T g, T& m, T& v) const {
    g = g * grad_sign;
    adam_like_weight_decay<M>(p, g, weight_decay, decoupled, decay);
    m = aten_lerp(m, g, one_minus_beta1);
    v = v * beta2 + one_minus_beta2 * g * g;
    const T d = std::sqrt(v / bias_correction2) + eps;
    p = p + coef_grad * g / d;  // ATen's addcdiv: (value * g) / d
    p = p + coef_avg * m / d;
  }
};

// RAdam (torch.optim.RAdam, Liu et al. 2020):
//   g and weight decay as NAdam's;  m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) g^2
//   rectified (rho_t > 5): p -= (m / (1 - beta1^t)) * lr * (sqrt(1 - beta2^t) / (sqrt(v) + eps)) * r_t
//   otherwise:             p -= (m / (1 - beta1^t)) * lr
// with rho_t and r_t from the step (host, double).
template <typename T>
struct RadamStep {
  T one_minus_beta1;
  T beta2;
  T one_minus_beta2;
  T eps;
  T weight_decay;
  bool decoupled;
  T decay;
  T bias_correction1;
  T lr;
  bool rectified;
  T rect;                // r_t
  T sqrt_bias_correction2;
  T grad_sign;
  // Rectified: -1 reads the member `rectified` (the CUDA kernels), 0 or 1 fixes it (the CPU loops,
  // for the reason weight_decay_mode gives).
  template <WeightDecayMode M = WeightDecayMode::Runtime, int Rectified = -1>
  MG_HOST_DEVICE void operator()(T& p, T g, T& m, T& v) const {
    g = g * grad_sign;
    adam_like_weight_decay<M>(p, g, weight_decay, decoupled, decay);
    m = aten_lerp(m, g, one_minus_beta1);
    v = v * beta2 + one_minus_beta2 * g * g;
    const T corrected = m / bias_correction1;
    // PyTorch's sqrt(1 - beta2^t) / tensor is reciprocal(tensor) * sqrt(1 - beta2^t)
    const bool r = Rectified < 0 ? rectified : Rectified == 1;
    if (r) p = p - corrected * lr * ((T(1) / (std::sqrt(v) + eps)) * sqrt_bias_correction2) * rect;
    else p = p - corrected * lr;
  }
};

// Adadelta (torch.optim.Adadelta, Zeiler 2012):
//   g = grad_sign * g + weight_decay * p
//   sq = rho * sq + (1 - rho) g^2                             ("square_avg")
//   delta = sqrt(acc + eps) / sqrt(sq + eps) * g
//   acc = rho * acc + (1 - rho) delta^2                       ("acc_delta")
//   p -= lr * delta
template <typename T>
struct AdadeltaStep {
  T rho;
  T one_minus_rho;
  T eps;
  T weight_decay;
  T lr;
  T grad_sign;
  MG_HOST_DEVICE void operator()(T& p, T g, T& sq, T& acc) const {
    g = g * grad_sign;
    if (weight_decay != T(0)) g = g + weight_decay * p;
    sq = sq * rho + one_minus_rho * g * g;
    const T delta = std::sqrt(acc + eps) / std::sqrt(sq + eps) * g;
    acc = acc * rho + one_minus_rho * delta * delta;
    p = p + (-lr) * delta;
  }
};

// Rprop (torch.optim.Rprop, Riedmiller & Braun 1993), per element:
//   g = grad_sign * g;  s = sign(g * prev) (NaN: 0, as ATen's sign)
//   step_size = clamp(step_size * (s > 0 ? etaplus : s < 0 ? etaminus : 1), step_size_min, step_size_max)
//   s < 0: g = 0 (the sign flipped: no move, and no flip counted next step)
//   p -= sign(g) * step_size;  prev = g
// So a NaN gradient leaves p and step_size as they were (PyTorch's CPU behaviour) and becomes prev.
template <typename T>
struct RpropStep {
  T etaminus;
  T etaplus;
  T step_size_min;
  T step_size_max;
  T grad_sign;
  MG_HOST_DEVICE void operator()(T& p, T g, T& prev, T& step_size) const {
    g = g * grad_sign;
    const T prod = g * prev;
    const T factor = prod > T(0) ? etaplus : (prod < T(0) ? etaminus : T(1));
    const T s = step_size * factor;
    step_size = s != s ? s : (s < step_size_min ? step_size_min : (s > step_size_max ? step_size_max : s));
    if (prod < T(0)) g = T(0);
    const T direction = g > T(0) ? T(1) : (g < T(0) ? T(-1) : T(0));
    p = p - direction * step_size;
    prev = g;
  }
};

// ASGD (torch.optim.ASGD: SGD with Polyak-Ruppert averaging and a decaying step, Polyak &
// Juditsky 1992), per element with the parameter's eta and mu of this step:
//   g = grad_sign * g + weight_decay * p;  p *= 1 - lambd * eta;  p -= eta * g
//   ax = mu != 1 ? ax + (p - ax) * mu : p          ("ax", the average)
template <typename T>
struct AsgdStep {
  T decay;    // 1 - lambd * eta
  T neg_eta;  // -eta
  T weight_decay;
  T mu;
  bool average;  // mu != 1
  T grad_sign;
  MG_HOST_DEVICE void operator()(T& p, T g, T& ax) const {
    g = g * grad_sign;
    if (weight_decay != T(0)) g = g + weight_decay * p;
    p = p * decay;
    p = p + neg_eta * g;  // ATen's add_(g, alpha = -eta)
    ax = average ? ax + (p - ax) * mu : p;
  }
};
// ASGD's eta and mu after update t (torch.optim.ASGD's formulas term for term, the products
// rounded on their own: the host and the CUDA kernel agree up to pow's last bit).
MG_HOST_DEVICE double asgd_eta(double lr, double lambd, double alpha, long long t) {
  return lr / std::pow(1.0 + product_rounded(product_rounded(lambd, lr), double(t)), alpha);
}
MG_HOST_DEVICE double asgd_mu(double t0, long long t) {
  const double since = double(t) - t0;
  return 1.0 / (since > 1.0 ? since : 1.0);
}

// Adafactor (optim/adafactor.h): the scalars of one parameter's update t (>= 1) in opmath T, the
// fused CPU step's and the CUDA kernels' (cuda/kernels/adafactor.cu), which compute them from the
// device step count. eps1 < 0 means the machine epsilon of the parameter's dtype (dtype_eps).
// [n, m]: the last two dimensions (1, 1 for a vector).
template <typename T>
struct AdafactorScalars {
  T w, rho, eps1, eps1_sq, eps2, decay, root_numel, root_numel_d, n_cols, n_rows, sign;
};
template <typename T>
MG_HOST_DEVICE AdafactorScalars<T> adafactor_scalars(double lr, double beta2_decay, double eps1, double eps2, double d,
                                                     double weight_decay, bool maximize, double dtype_eps,
                                                     long long t, long long numel, long long n, long long m) {
  const double step = double(t), e1 = eps1 >= 0.0 ? eps1 : dtype_eps;
  const double inv_root_step = 1.0 / std::sqrt(step), root_numel = std::sqrt(double(numel));
  return {T(std::pow(step, beta2_decay)), T(lr < inv_root_step ? lr : inv_root_step), T(e1),
          T(product_rounded(e1, e1)),     T(eps2),      T(1.0 - product_rounded(lr, weight_decay)),
          T(root_numel),                  T(product_rounded(root_numel, d)), T(double(m)),
          T(double(n)),                   T(maximize ? -1.0 : 1.0)};
}
// PyTorch's host max(a, x) (Python's): x only when x > a, so a NaN x gives a. A non-finite element
// then spoils only itself in a vector's step, not alpha or the clipping divisor of the whole one.
template <typename T>
MG_HOST_DEVICE T python_max(T a, T x) {
  return x > a ? x : a;
}
// u = g / sqrt(max(v, eps1^2)), g's sign flipped to maximize (v: the second-moment estimate). The
// max is std::max's (and clamp_min's): a NaN v stays NaN.
template <typename T>
MG_HOST_DEVICE T adafactor_update(T g, T v, const AdafactorScalars<T>& c) {
  return (c.sign * g) * (T(1) / std::sqrt(v < c.eps1_sq ? c.eps1_sq : v));
}
// V of a factored element: (R_row C_col) / max(mean(R), eps1), the last already floored.
template <typename T>
MG_HOST_DEVICE T adafactor_factored_variance(T row, T col, T mean_row_floor) {
  return (row * col) / mean_row_floor;
}
// alpha / max(1, RMS(u) / d), alpha = max(eps2, RMS(p)) rho: what u is multiplied by, from the
// tensor's sums of p^2 (before the weight decay) and of u^2.
template <typename T>
MG_HOST_DEVICE T adafactor_step_size(T sum_p2, T sum_u2, const AdafactorScalars<T>& c) {
  const T alpha = python_max(c.eps2, T(std::sqrt(sum_p2)) / c.root_numel) * c.rho;
  return alpha / python_max(T(1), T(std::sqrt(sum_u2)) / c.root_numel_d);
}

// Sum of |x|^p for a p-norm (p = 2 and p = 1 without pow); the caller accumulates in f32 (f64
// for f64 tensors).
template <typename T>
struct NormPow {
  T p;
  MG_HOST_DEVICE T operator()(T x) const {
    const T a = x < T(0) ? -x : x;
    if (p == T(2)) return a * a;
    if (p == T(1)) return a;
    return std::pow(a, p);
  }
};

// max(acc, |x|) that keeps a NaN once seen (the infinity norm of a tensor holding NaN is NaN).
template <typename T>
struct AbsMax {
  MG_HOST_DEVICE T operator()(T acc, T x) const {
    const T a = x < T(0) ? -x : x;
    if (acc != acc) return acc;
    return (a != a || a > acc) ? a : acc;
  }
};

// Gradient clipping by value: clamp to [-clip, clip]; NaN stays NaN.
template <typename T>
struct ClampAbs {
  T clip;
  MG_HOST_DEVICE T operator()(T x) const { return x < -clip ? -clip : (x > clip ? clip : x); }
};

}  // namespace mg::fn
