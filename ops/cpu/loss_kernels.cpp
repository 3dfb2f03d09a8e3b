// CPU kernels of the softmax family and the losses. softmax, log_softmax, their backward ops,
// cross_entropy, cross_entropy_backward and nll_loss are fused line kernels: one line per
// position along the reduced (class) dim, max-shifted, accumulating in f32 for f16/bf16 (f64 for
// f64) and rounding once on store, in parallel over lines. Every sum — a line's Σ exp, Σ g y, Σ x
// and the batch total of a Mean/Sum loss — follows the summation rule (core/cascade_sum.h, via
// ops/cpu/leaf_sum.h), so it is accurate to O(log n) ulps and independent of the thread count
// (lines never split across threads; the batch total is one cascade). The elementwise losses are composite
// kernels: the inputs are widened to the compute dtype (f32, or f64 for f64), the loss is computed
// with public ops (no autograd, no autocast) and rounded once into the output; being device-
// agnostic, they are also the CUDA backend's kernels of these ops (ops/cpu/composite_losses.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/autocast_state.h"
#include "mixgrad/core/fast_math.h"
#include "mixgrad/core/parallel.h"
#include "mixgrad/ops/cpu/composite_losses.h"
#include "mixgrad/ops/cpu/leaf_sum.h"
#include "mixgrad/ops/cpu/softmax_line.h"
#include "mixgrad/ops/cpu/reducers.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/loss.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/register.h"

namespace mg::cpu {
namespace {

// A dense copy of t (t itself when contiguous), taken without recording autograd.
Tensor dense(const Tensor& t) {
  NoGradGuard no_grad;
  return t.is_contiguous() ? t : contiguous(t);
}

// Lines along `dim` of a contiguous tensor: line l starts at (l / inner) * size * inner + l % inner
// and steps by inner.
struct Lines {
  int64_t count = 0, size = 0, inner = 1;
  int64_t start(int64_t l) const { return (l / inner) * size * inner + l % inner; }
};
Lines lines_along(const Shape& shape, int64_t dim) {
  Lines g;
  g.size = shape[dim];
  int64_t outer = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
  for (std::size_t d = dim + 1; d < shape.size(); ++d) g.inner *= shape[d];
  g.count = outer * g.inner;
  return g;
}
int64_t line_grain(const Lines& g) { return std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(1, g.size)); }

// ---- softmax / log_softmax: out [x's shape] ----
template <typename T, bool kLog>
void softmax_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using Acc = acc_t<T>;  // f32 accumulation for f16/bf16/f32, f64 for f64
  const Tensor x = dense(in[0]);
  const T* xp = x.data<T>();
  T* yp = out[0].data<T>();
  const Lines g = lines_along(x.shape(), a.dim);
  if (g.size == 0) return;
  parallel_for(0, g.count, line_grain(g), [&](int64_t b, int64_t e) {
    for (int64_t l = b; l < e; ++l) {
      const T* xl = xp + g.start(l);
      T* yl = yp + g.start(l);
      const Acc m = line_max<Acc>(xl, g.size, g.inner);
      if constexpr (kLog) {
        // sum of exp(x - max), accumulated in Acc by the rule; y = (x - max) - log(sum), never
        // x - (max + log(sum)), which rounds max + log(sum) at ulp(max): with logits sharing a
        // large offset (1000 and 990) that lost every digit of a small log-probability
        const Acc log_s = std::log(exp_sum<Acc>(xl, g.size, g.inner, m));
        for (int64_t i = 0; i < g.size; ++i) {
          yl[i * g.inner] = static_cast<T>((static_cast<Acc>(xl[i * g.inner]) - m) - log_s);
        }
      } else if (std::is_same_v<T, Acc> && g.inner == 1) {
        // the exps land in the output, then scale: one exp per element
        Acc* ya = reinterpret_cast<Acc*>(yl);
        const Acc inv = Acc(1) / exp_sum<Acc>(xl, g.size, 1, m, ya);
        for (int64_t i = 0; i < g.size; ++i) ya[i] *= inv;
      } else {
        const Acc inv = Acc(1) / exp_sum<Acc>(xl, g.size, g.inner, m);
        for (int64_t i = 0; i < g.size; ++i)
          yl[i * g.inner] = static_cast<T>(fast::exp_rounded(static_cast<Acc>(xl[i * g.inner]) - m) * inv);
      }
    }
  });
}

// ---- softmax_backward: y (g - sum(g y)); log_softmax_backward: g - exp(y) sum(g) ----
template <typename T, bool kLog>
void softmax_backward_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using Acc = acc_t<T>;  // f32 accumulation for f16/bf16/f32, f64 for f64
  const Tensor gt = dense(in[0]), yt = dense(in[1]);
  const T* gp = gt.data<T>();
  const T* yp = yt.data<T>();
  T* op = out[0].data<T>();
  const Lines g = lines_along(yt.shape(), a.dim);
  if (g.size == 0) return;
  parallel_for(0, g.count, line_grain(g), [&](int64_t b, int64_t e) {
    for (int64_t l = b; l < e; ++l) {
      const int64_t o = g.start(l);
      // sum(g y) (softmax) or sum(g) (log_softmax), accumulated in Acc by the rule
      const Acc s = line_sum<Acc>(g.size, [&](int64_t i) {
        const Acc gv = static_cast<Acc>(gp[o + i * g.inner]);
        return kLog ? gv : gv * static_cast<Acc>(yp[o + i * g.inner]);
      });
      // exp(y) by fast::exp_rounded (e^y rounded once; libm for f64), so the loop vectorizes
      auto grad_in = [s](Acc gv, Acc yv) { return kLog ? gv - fast::exp_rounded(yv) * s : yv * (gv - s); };
      if (g.inner == 1) {
        for (int64_t i = 0; i < g.size; ++i) op[o + i] = static_cast<T>(grad_in(static_cast<Acc>(gp[o + i]), static_cast<Acc>(yp[o + i])));
      } else {
        for (int64_t i = 0; i < g.size; ++i) {
          const int64_t k = o + i * g.inner;
          op[k] = static_cast<T>(grad_in(static_cast<Acc>(gp[k]), static_cast<Acc>(yp[k])));
        }
      }
    }
  });
}

// ---- class losses: logits [N, C, d...] (or [C]), target i64 [N, d...] (or []) ----
struct ClassGeom {
  int64_t samples = 0, classes = 0, inner = 1;
  // Offset of sample s's class-0 logit; classes step by inner.
  int64_t start(int64_t s) const { return (s / inner) * classes * inner + s % inner; }
};
ClassGeom class_geom(const Tensor& logits) {
  const Lines l = lines_along(logits.shape(), logits.dim() == 1 ? 0 : 1);
  return {l.count, l.size, l.inner};
}

// Throws IndexError for the first target outside [0, C) that is not ignore_index; returns the
// number of non-ignored targets. Runs before any parallel region.
int64_t check_targets(const char* op, const int64_t* t, const ClassGeom& g, int64_t ignore, const Tensor& logits) {
  int64_t count = 0;
  for (int64_t s = 0; s < g.samples; ++s) {
    if (t[s] == ignore) continue;
    MG_CHECK(t[s] >= 0 && t[s] < g.classes, IndexError, op, ": target ", t[s], " is out of range for ", g.classes,
             " classes (expected 0 <= target < ", g.classes, " or ignore_index ", ignore, "); got input ",
             describe(logits), "\n  hint: labels must be class indices; mark padding with ignore_index");
    ++count;
  }
  return count;
}

// Writes the per-sample losses `loss` reduced by attrs.mode into out.
template <typename T, typename Acc>
void store_class_loss(const std::vector<Acc>& loss, int64_t count, const OpAttrs& a, Tensor& out) {
  T* op = out.data<T>();
  const Reduction r = Reduction(a.mode);
  if (r == Reduction::None) {
    for (std::size_t s = 0; s < loss.size(); ++s) op[s] = static_cast<T>(loss[s]);
    return;
  }
  // accumulated in Acc (f32 for f16/bf16/f32, f64 for f64) by the rule, chunks in parallel
  const Acc total = cascade_sum<Acc>(int64_t(loss.size()), [&](int64_t s) { return loss[std::size_t(s)]; },
                                     /*parallel=*/true);
  // Mean over the non-ignored targets: 0 / 0 = NaN when all are ignored, as PyTorch.
  op[0] = static_cast<T>(r == Reduction::Mean ? total / static_cast<Acc>(count) : total);
}

// loss_s = (1 - eps) (lse - x_t) + eps (lse - mean_c x_c), 0 for ignored targets.
template <typename T>
void cross_entropy_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using Acc = acc_t<T>;  // f32 accumulation for f16/bf16/f32, f64 for f64
  const Tensor x = dense(in[0]), t = dense(in[1]);
  const ClassGeom g = class_geom(x);
  const int64_t ignore = a.ints.at(0);
  const int64_t* tp = t.data<int64_t>();
  const int64_t count = check_targets("cross_entropy", tp, g, ignore, in[0]);
  const T* xp = x.data<T>();
  const Acc eps = static_cast<Acc>(a.alpha);
  std::vector<Acc> loss(g.samples, Acc(0));
  parallel_for(0, g.samples, std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(1, g.classes)),
               [&](int64_t b, int64_t e) {
                 for (int64_t s = b; s < e; ++s) {
                   if (tp[s] == ignore) continue;
                   const T* xs = xp + g.start(s);
                   const Acc m = line_max<Acc>(xs, g.classes, g.inner);
                   // sum of exp(x - max) and of x - max, accumulated in Acc by the rule; every
                   // term relative to the max (as log_softmax), so a large common offset of the
                   // logits costs no accuracy
                   const Acc log_se = std::log(exp_sum<Acc>(xs, g.classes, g.inner, m));
                   const Acc sxm = eps == Acc(0) ? Acc(0)
                                                 : line_sum<Acc>(g.classes, [&](int64_t c) {
                                                     return static_cast<Acc>(xs[c * g.inner]) - m;
                                                   });
                   const Acc nll = log_se - (static_cast<Acc>(xs[tp[s] * g.inner]) - m);
                   loss[s] = eps == Acc(0) ? nll
                                           : (Acc(1) - eps) * nll + eps * (log_se - sxm / static_cast<Acc>(g.classes));
                 }
               });
  store_class_loss<T>(loss, count, a, out[0]);
}

// dx_c = w (softmax_c - (1 - eps) [c == t] - eps / C), w = grad (/ count for Mean); 0 for ignored.
template <typename T>
void cross_entropy_backward_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using Acc = acc_t<T>;  // f32 accumulation for f16/bf16/f32, f64 for f64
  const Tensor gr = dense(in[0]), x = dense(in[1]), t = dense(in[2]);
  const ClassGeom g = class_geom(x);
  const int64_t ignore = a.ints.at(0);
  const int64_t* tp = t.data<int64_t>();
  const int64_t count = check_targets("cross_entropy_backward", tp, g, ignore, in[1]);
  const T* xp = x.data<T>();
  const T* gp = gr.data<T>();
  T* op = out[0].data<T>();
  const Reduction r = Reduction(a.mode);
  const Acc eps = static_cast<Acc>(a.alpha);
  const Acc off = eps / static_cast<Acc>(std::max<int64_t>(1, g.classes));
  const Acc g0 = r == Reduction::None ? Acc(0)
                 : r == Reduction::Mean ? static_cast<Acc>(gp[0]) / static_cast<Acc>(count)
                                        : static_cast<Acc>(gp[0]);
  parallel_for(0, g.samples, std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(1, g.classes)),
               [&](int64_t b, int64_t e) {
                 for (int64_t s = b; s < e; ++s) {
                   const int64_t o = g.start(s);
                   if (tp[s] == ignore) {
                     for (int64_t c = 0; c < g.classes; ++c) op[o + c * g.inner] = static_cast<T>(0.0f);
                     continue;
                   }
                   const Acc w = r == Reduction::None ? static_cast<Acc>(gp[s]) : g0;
                   const T* xs = xp + o;
                   const Acc m = line_max<Acc>(xs, g.classes, g.inner);
                   // sum of exp(x - max), accumulated in Acc by the rule; a dense f32/f64 row keeps
                   // the exps in the output and scales them there (one exp per element, not two)
                   if (std::is_same_v<T, Acc> && g.inner == 1) {
                     Acc* row = reinterpret_cast<Acc*>(op + o);
                     const Acc inv = Acc(1) / exp_sum<Acc>(xs, g.classes, 1, m, row);
                     for (int64_t c = 0; c < g.classes; ++c) row[c] = w * (row[c] * inv - off);
                     row[tp[s]] = w * ((fast::exp_rounded(static_cast<Acc>(xs[tp[s]]) - m) * inv - off) - (Acc(1) - eps));
                     continue;
                   }
                   const Acc inv = Acc(1) / exp_sum<Acc>(xs, g.classes, g.inner, m);
                   for (int64_t c = 0; c < g.classes; ++c) {
                     Acc d = fast::exp_rounded(static_cast<Acc>(xs[c * g.inner]) - m) * inv - off;
                     if (c == tp[s]) d -= Acc(1) - eps;
                     op[o + c * g.inner] = static_cast<T>(w * d);
                   }
                 }
               });
}

// loss_s = -logp[s, t_s], 0 for ignored targets.
template <typename T>
void nll_loss_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using Acc = acc_t<T>;  // f32 accumulation for f16/bf16/f32, f64 for f64
  const Tensor x = dense(in[0]), t = dense(in[1]);
  const ClassGeom g = class_geom(x);
  const int64_t ignore = a.ints.at(0);
  const int64_t* tp = t.data<int64_t>();
  const int64_t count = check_targets("nll_loss", tp, g, ignore, in[0]);
  const T* xp = x.data<T>();
  std::vector<Acc> loss(g.samples, Acc(0));
  for (int64_t s = 0; s < g.samples; ++s) {
    if (tp[s] != ignore) loss[s] = -static_cast<Acc>(xp[g.start(s) + tp[s] * g.inner]);
  }
  store_class_loss<T>(loss, count, a, out[0]);
}

// ---- composite elementwise losses ----
// Turns autocast off for the public ops a composite kernel calls (the dispatcher already applied
// the op's policy to its inputs).
struct AutocastOff {
  bool was = autocast_state().enabled;
  AutocastOff() { autocast_state().enabled = false; }
  ~AutocastOff() { autocast_state().enabled = was; }
};

Tensor reduce_loss(const Tensor& l, const OpAttrs& a) {
  switch (Reduction(a.mode)) {
    case Reduction::None: return l;
    case Reduction::Mean: return mean(l);
    case Reduction::Sum: return sum(l);
    case Reduction::BatchMean: return sum(l) / double(l.dim() == 0 ? 1 : l.size(0));
  }
  return l;
}

using LossFn = Tensor (*)(const Tensors& in, const OpAttrs& a);  // elementwise loss, compute dtype

// Inputs widened to f32 (f64 stays f64), the loss computed and reduced there, rounded once on store.
template <typename T, LossFn kFn>
void composite_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  NoGradGuard no_grad;
  AutocastOff no_autocast;
  const DType compute = std::is_same_v<T, double> ? DType::F64 : DType::F32;
  Tensors c;
  for (const Tensor& t : in) c.push_back(t.dtype() == compute ? t : to(t, compute));
  out[0].copy_(reduce_loss(kFn(c, a), a));
}

// (x - y)^2
Tensor mse_fn(const Tensors& in, const OpAttrs&) {
  const Tensor d = in[0] - in[1];
  return d * d;
}
// |x - y|
Tensor l1_fn(const Tensors& in, const OpAttrs&) { return abs(in[0] - in[1]); }
// 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta
Tensor smooth_l1_fn(const Tensors& in, const OpAttrs& a) {
  const double beta = a.alpha;
  const Tensor d = abs(in[0] - in[1]);
  if (beta == 0.0) return d;
  // (0.5 d^2) / beta, PyTorch's order: 0.5 / beta is inf in f32 for a beta below ~1.5e-39, which
  // made 0 * inf = NaN at d = 0.
  return where(lt(d, scalar_like(beta, d)), (d * d * 0.5) / beta, d - 0.5 * beta);
}
// 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta) (PyTorch's huber_loss)
Tensor huber_fn(const Tensors& in, const OpAttrs& a) {
  const double delta = a.alpha;
  const Tensor d = abs(in[0] - in[1]);
  return where(lt(d, scalar_like(delta, d)), d * d * 0.5, (d - 0.5 * delta) * delta);
}
// (1 - t) x + lw (log1p(exp(-|x|)) + max(-x, 0)), lw = 1 + (pw - 1) t (1 without pos_weight)
Tensor bce_with_logits_fn(const Tensors& in, const OpAttrs&) {
  const Tensor& x = in[0];
  const Tensor& t = in[1];
  const Tensor sp = log1p(exp(-abs(x))) + relu(-x);  // softplus(-x), stable
  if (in.size() == 2) return (1.0 - t) * x + sp;
  return (1.0 - t) * x + (1.0 + (in[2] - 1.0) * t) * sp;
}
// t (log t - x), 0 where t == 0 (PyTorch's xlogy); a negative or NaN target gives NaN, as
// PyTorch's (a NaN teacher distribution must not hide as a zero loss); log_target: exp(t) (t - x)
Tensor kl_div_fn(const Tensors& in, const OpAttrs& a) {
  const Tensor& x = in[0];
  const Tensor& t = in[1];
  if (a.ints.at(0) != 0) return exp(t) * (t - x);
  const Tensor zero = eq(t, scalar_like(0.0, t));
  const Tensor t_safe = where(zero, scalar_like(1.0, t), t);
  return where(zero, scalar_like(0.0, t), t * (log(t_safe) - x));
}
// On the CPU, the probabilities must lie in [0, 1], as PyTorch requires (outside it log(1 - p) or
// log p is NaN: a loss that silently never trains). NaN passes: it is an overflow upstream, which
// a GradScaler skips. Not checked on CUDA, where a probability outside [0, 1] gives a NaN loss:
// the check would need a host read per call (the deferred device checks report integers only).
void check_probabilities(const Tensor& probs) {
  if (!probs.device().is_cpu()) return;
  const Tensor p = contiguous(probs);
  const auto scan = [&](const auto* v) {
    for (int64_t i = 0; i < p.numel(); ++i) {
      MG_CHECK(!(v[i] < 0 || v[i] > 1), Error, "binary_cross_entropy: the input must be probabilities in [0, 1], got ",
               double(v[i]), " at flat position ", i, " of ", describe(probs),
               "\n  hint: apply sigmoid first, or pass the logits to binary_cross_entropy_with_logits (more stable)");
    }
  };
  if (p.dtype() == DType::F64) scan(p.data<double>());
  else scan(p.data<float>());
}

// -(t max(log p, -100) + (1 - t) max(log(1 - p), -100))
Tensor bce_fn(const Tensors& in, const OpAttrs&) {
  const Tensor& p = in[0];
  const Tensor& t = in[1];
  check_probabilities(p);
  return -(t * clamp_min(log(p), -100.0) + (1.0 - t) * clamp_min(log(1.0 - p), -100.0));
}

template <typename T>
void reg() {
  constexpr DType d = dtype_v<T>;
  constexpr DeviceType cpu = DeviceType::CPU;
  register_kernel(OpId::softmax, cpu, d, softmax_kernel<T, false>);
  register_kernel(OpId::log_softmax, cpu, d, softmax_kernel<T, true>);
  register_kernel(OpId::softmax_backward, cpu, d, softmax_backward_kernel<T, false>);
  register_kernel(OpId::log_softmax_backward, cpu, d, softmax_backward_kernel<T, true>);
  register_kernel(OpId::cross_entropy, cpu, d, cross_entropy_kernel<T>);
  register_kernel(OpId::cross_entropy_backward, cpu, d, cross_entropy_backward_kernel<T>);
  register_kernel(OpId::nll_loss, cpu, d, nll_loss_kernel<T>);
}

// The composite losses of one dtype on `device`: the same body on every device, since it only
// calls public ops, which dispatch to that device's kernels.
template <typename T>
void reg_composite(DeviceType device) {
  constexpr DType d = dtype_v<T>;
  register_kernel(OpId::mse_loss, device, d, composite_kernel<T, mse_fn>);
  register_kernel(OpId::l1_loss, device, d, composite_kernel<T, l1_fn>);
  register_kernel(OpId::smooth_l1_loss, device, d, composite_kernel<T, smooth_l1_fn>);
  register_kernel(OpId::huber_loss, device, d, composite_kernel<T, huber_fn>);
  register_kernel(OpId::binary_cross_entropy_with_logits, device, d, composite_kernel<T, bce_with_logits_fn>);
  register_kernel(OpId::kl_div, device, d, composite_kernel<T, kl_div_fn>);
  register_kernel(OpId::binary_cross_entropy, device, d, composite_kernel<T, bce_fn>);
}

}  // namespace

void register_loss_kernels() {
  reg<double>();
  reg<float>();
  reg<Half>();
  reg<BFloat16>();
  register_composite_loss_kernels(DeviceType::CPU);
}

}  // namespace mg::cpu

namespace mg {

void register_composite_loss_kernels(DeviceType device) {
  cpu::reg_composite<double>(device);
  cpu::reg_composite<float>(device);
  cpu::reg_composite<Half>(device);
  cpu::reg_composite<BFloat16>(device);
}

}  // namespace mg
