// The fused multi-tensor kernels of mixed-precision training (core/multi_tensor_kernels.h) over
// cuda/multi_tensor_apply.cuh: unscale + inf/NaN check + gradient statistics in one pass, SGD,
// Adam/AdamW, LAMB, RMSprop, Adagrad, Adamax, RAdam, NAdam, Adadelta, Rprop and ASGD steps that update f32
// masters and write the f16/bf16 model copy in the same pass, the deterministic L2 norm, the step
// counters and the one-thread loss-scale update (Adafactor's step, whose sums are per row and column,
// is cuda/kernels/adafactor.cu's, in the same table). The per-element math is the CPU's: the step
// functors of optim/functors.h (fn::SgdStep, fn::AdamStep, ...) with their step scalars from the
// same host/device functions (fn::bias_correction, fn::radam_scalars, fn::nadam_scalars,
// fn::asgd_eta), and
// fn::loss_scale_update (optim/loss_scale_update.h), header-only functors both compilers read.
//
// Decision: the scaler's values (scale, found-inf flag, statistics, step counters) stay on the
// device; a step kernel whose found-inf flag is set returns at once, so a skipped step needs no
// host decision and the host never waits for the GPU inside a training step.
#include <cuda_runtime.h>

#include <cmath>
#include <limits>
#include <type_traits>

#include "mixgrad/core/dtype.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/core/half.h"
#include "mixgrad/core/multi_tensor_kernels.h"
#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/cuda/kernels/adafactor.h"
#include "mixgrad/cuda/kernels/block_reduce.cuh"
#include "mixgrad/cuda/multi_tensor_apply.cuh"
#include "mixgrad/optim/functors.h"
#include "mixgrad/optim/loss_scale_update.h"

namespace mg::cuda {
namespace {

// The smallest normal of storage type T in its opmath (f16: 2^-14; f32 and bf16: 2^-126).
template <typename T>
__device__ __forceinline__ opmath_t<T> smallest_normal() {
  if constexpr (std::is_same_v<T, Half>) return 6.103515625e-05f;
  else if constexpr (std::is_same_v<T, double>) return 2.2250738585072014e-308;
  else return 1.17549435e-38f;
}
// The largest finite value of the opmath type (anything above it, or NaN, is non-finite).
template <typename O>
__device__ __forceinline__ O largest_finite() {
  if constexpr (std::is_same_v<O, double>) return 1.7976931348623157e308;
  else return 3.40282347e+38f;
}
// The factor the CPU pass multiplies by: float(1 / scale), or 1 / scale for f64 gradients.
template <typename O>
__device__ __forceinline__ O inverse_scale(const double* scale) {
  return static_cast<O>(1.0 / *scale);
}

// Classifies v (before unscaling) as the CPU's Classify (amp/unscale.cpp) does.
template <typename O>
__device__ __forceinline__ void classify(O v, O tiny, long long (&c)[3]) {
  const O a = v < O(0) ? -v : v;
  if (!(a <= largest_finite<O>())) ++c[2];  // inf or NaN
  else if (a == O(0)) ++c[0];
  else if (a < tiny) ++c[1];
}

// Adds the block's counts to the device counters (integer atomics: exact in any order) and
// raises the found-inf flag when the block saw a non-finite value.
__device__ __forceinline__ void publish_counts(long long (&c)[3], int64_t* counts, float* found_inf) {
  __shared__ long long sh[3 * 32];
  block_sum<3, long long>(c, sh);
  if (threadIdx.x == 0) {
    if (counts) {
      for (int k = 0; k < 3; ++k) {
        if (c[k]) atomicAdd(reinterpret_cast<unsigned long long*>(counts + k), static_cast<unsigned long long>(c[k]));
      }
    }
    if (c[2] && found_inf) *found_inf = 1.0f;
  }
}

// ---- unscale ----

// In place: x = x * inv (opmath, rounded once), or classify only.
template <typename T>
struct UnscaleInPlace {
  const double* scale;
  float* found_inf;
  int64_t* counts;
  bool check_only;
  __device__ void operator()(const MtaArgs<1>& a, MtaChunk c) const {
    using O = opmath_t<T>;
    T* x = static_cast<T*>(a.addr[0][c.slot]);
    const O inv = inverse_scale<O>(scale), tiny = smallest_normal<T>();
    long long n[3] = {0, 0, 0};
    for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) {
      const O v = static_cast<O>(x[i]);
      classify(v, tiny, n);
      if (!check_only) x[i] = static_cast<T>(v * inv);
    }
    publish_counts(n, counts, found_inf);
  }
};

// To masters: dst (f32) = f32(src) * inv (+ dst).
template <typename T>
struct UnscaleTo {
  const double* scale;
  float* found_inf;
  int64_t* counts;
  bool accumulate;
  bool check_only;
  __device__ void operator()(const MtaArgs<2>& a, MtaChunk c) const {
    const T* x = static_cast<const T*>(a.addr[0][c.slot]);
    float* out = static_cast<float*>(a.addr[1][c.slot]);
    const float inv = inverse_scale<float>(scale), tiny = smallest_normal<T>();
    long long n[3] = {0, 0, 0};
    for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) {
      const float v = static_cast<float>(x[i]);
      classify(v, tiny, n);
      // Two roundings, as the CPU pass (amp/unscale.cpp, built without contraction): nvcc would
      // fuse out + v * inv into one FMA, which differs when the scale is not a power of two.
      if (!check_only) out[i] = accumulate ? __fadd_rn(out[i], __fmul_rn(v, inv)) : v * inv;
    }
    publish_counts(n, counts, found_inf);
  }
};

// The dtypes a list of tensors holds, each once, in a fixed order.
template <typename F>
void for_each_dtype_group(const Tensors& ts, F&& f) {
  for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
    std::vector<std::size_t> idx;
    for (std::size_t i = 0; i < ts.size(); ++i) {
      if (ts[i].defined() && ts[i].numel() > 0 && ts[i].dtype() == dt) idx.push_back(i);
    }
    if (!idx.empty()) f(dt, idx);
  }
}

Device device_of(const Tensors& ts) {
  for (const Tensor& t : ts) {
    if (t.defined()) return t.device();
  }
  return Device::cuda(current_device());
}

void unscale_cuda(const MultiTensorUnscaleArgs& args) {
  const Device dev = device_of(args.src);
  MG_ASSERT(args.dst.empty() || args.dst.size() == args.src.size(), "unscale: ", args.dst.size(),
            " destinations for ", args.src.size(), " gradients");
  if (!args.dst.empty()) {  // f64 gradients have no widening destination kernel (they are their own master)
    for (const Tensor& t : args.src) MG_ASSERT(t.dtype() != DType::F64, "unscale: an f64 gradient with a destination");
  }
  for_each_dtype_group(args.src, [&](DType dt, const std::vector<std::size_t>& idx) {
    visit_floating(dt, "unscale", [&]<typename T>() {
      if (args.dst.empty()) {
        MtaLists<1> lists;
        for (std::size_t i : idx) lists.add({args.src[i].data_ptr()}, args.src[i].numel());
        multi_tensor_apply<1>(dev, lists, UnscaleInPlace<T>{args.scale, args.found_inf, args.counts, args.check_only});
      } else if constexpr (!std::is_same_v<T, double>) {
        MtaLists<2> lists;
        for (std::size_t i : idx) lists.add({args.src[i].data_ptr(), args.dst[i].data_ptr()}, args.src[i].numel());
        multi_tensor_apply<2>(dev, lists,
                              UnscaleTo<T>{args.scale, args.found_inf, args.counts, args.accumulate, args.check_only});
      }
    });
  });
}

// ---- optimizer steps: lists {param, grad, state0, state1, state2, model} ----

__device__ __forceinline__ bool skip_step(const float* found_inf) { return found_inf && *found_inf != 0.0f; }

// The hyper-parameters of this launch: the device copy when given (MultiTensorStepArgs::hyper,
// rewritten by the optimizer between CUDA graph replays), else the by-value struct.
__device__ __forceinline__ SgdHyper load_hyper(SgdHyper h, const double* d) {
  if (d) {
    h.lr = d[0];
    h.momentum = d[1];
    h.dampening = d[2];
    h.weight_decay = d[3];
  }
  return h;
}
// Adam and LAMB: the same five options, in the same order.
template <typename H>
__device__ __forceinline__ H load_hyper(H h, const double* d) {
  static_assert(std::is_same_v<H, AdamHyper> || std::is_same_v<H, LambHyper>);
  if (d) {
    h.lr = d[0];
    h.beta1 = d[1];
    h.beta2 = d[2];
    h.eps = d[3];
    h.weight_decay = d[4];
  }
  return h;
}

// The element loop of every step kernel: each element of the chunk's parameter in opmath, updated
// in place by step(pi, i), stored rounded once, and the f16/bf16 model copy (addr[5], when the slot
// has one) set from the stored value in the same pass.
template <typename P, typename M, typename Step>
__device__ __forceinline__ void update_params(const MtaArgs<6>& a, MtaChunk c, const Step& step) {
  using T = opmath_t<P>;
  P* p = static_cast<P*>(a.addr[0][c.slot]);
  M* model = static_cast<M*>(a.addr[5][c.slot]);
  for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) {
    T pi = T(p[i]);
    step(pi, i);
    const P stored = P(pi);
    p[i] = stored;
    if (model) model[i] = M(T(stored));
  }
}

// P: the parameter (master) storage type; M: the model copy's (unused when the slot has none).
template <typename P, typename M>
struct SgdChunk {
  SgdHyper hv;
  const float* found_inf;
  const double* hyper;
  __device__ void operator()(const MtaArgs<6>& a, MtaChunk c) const {
    if (skip_step(found_inf)) return;
    const SgdHyper h = load_hyper(hv, hyper);
    using T = opmath_t<P>;
    // The buffer's first update: the step count still at its value when the fused step created the
    // buffer (addr[3]: SGD's device_first_step); null: a buffer loaded or made elsewhere, never new.
    const int64_t* first_step = static_cast<const int64_t*>(a.addr[3][c.slot]);
    const bool first = first_step != nullptr && *a.step[c.slot] == *first_step;
    const fn::SgdStep<T> f{T(h.lr),   T(h.momentum), T(1.0 - h.dampening), T(h.weight_decay),
                           h.nesterov, first,         T(h.maximize ? -1.0 : 1.0)};
    const P* g = static_cast<const P*>(a.addr[1][c.slot]);
    T* buf = static_cast<T*>(a.addr[2][c.slot]);
    update_params<P, M>(a, c, [&](T& pi, int64_t i) {
      T unused = T(0);
      f(pi, T(g[i]), buf ? buf[i] : unused);
    });
  }
};

template <typename P, typename M>
struct AdamChunk {
  AdamHyper hv;
  const float* found_inf;
  const double* hyper;
  __device__ void operator()(const MtaArgs<6>& a, MtaChunk c) const {
    if (skip_step(found_inf)) return;
    const AdamHyper h = load_hyper(hv, hyper);
    using T = opmath_t<P>;
    // The step's scalars, in double as the CPU computes them on the host (t = updates so far + 1).
    __shared__ double scalars[2];
    if (threadIdx.x == 0) {
      const long long t = *a.step[c.slot] + 1;
      scalars[0] = -(h.lr / fn::bias_correction(h.beta1, t));  // -lr / (1 - beta1^t)
      scalars[1] = sqrt(fn::bias_correction(h.beta2, t));      // sqrt(1 - beta2^t)
    }
    __syncthreads();
    const fn::AdamStep<T> f{T(h.beta1),
                            T(h.beta2),
                            T(1.0 - h.beta1),
                            T(1.0 - h.beta2),
                            T(h.eps),
                            T(h.decoupled ? 0.0 : h.weight_decay),
                            T(h.decoupled ? 1.0 - h.lr * h.weight_decay : 1.0),
                            T(scalars[0]),
                            T(scalars[1]),
                            h.decoupled,
                            h.amsgrad,
                            T(h.maximize ? -1.0 : 1.0)};
    const P* g = static_cast<const P*>(a.addr[1][c.slot]);
    T* m = static_cast<T*>(a.addr[2][c.slot]);
    T* v = static_cast<T*>(a.addr[3][c.slot]);
    T* vmax = static_cast<T*>(a.addr[4][c.slot]);
    update_params<P, M>(a, c, [&](T& pi, int64_t i) {
      T unused = T(0);
      f(pi, T(g[i]), m[i], v[i], vmax ? vmax[i] : unused);
    });
  }
};

// RMSprop: lr, alpha, eps, weight_decay, momentum (RmspropHyper's doubles, in order).
__device__ __forceinline__ RmspropHyper load_hyper(RmspropHyper h, const double* d) {
  if (d) {
    h.lr = d[0];
    h.alpha = d[1];
    h.eps = d[2];
    h.weight_decay = d[3];
    h.momentum = d[4];
  }
  return h;
}

template <typename P, typename M>
struct RmspropChunk {
  RmspropHyper hv;
  const float* found_inf;
  const double* hyper;
  __device__ void operator()(const MtaArgs<6>& a, MtaChunk c) const {
    if (skip_step(found_inf)) return;
    const RmspropHyper h = load_hyper(hv, hyper);
    using T = opmath_t<P>;
    T* sq = static_cast<T*>(a.addr[2][c.slot]);
    T* ga = static_cast<T*>(a.addr[3][c.slot]);
    T* buf = static_cast<T*>(a.addr[4][c.slot]);
    // The buffers the host made decide the branches: a momentum a CUDA graph's replay reads as > 0
    // where the capture had no buffer stays 0 here (a new capture is demanded: graph_structure).
    const fn::RmspropStep<T> f{T(h.lr),           T(h.alpha), T(1.0 - h.alpha), T(h.eps), T(h.weight_decay),
                               T(buf ? h.momentum : 0.0), h.centered && ga != nullptr, T(h.maximize ? -1.0 : 1.0)};
    const P* g = static_cast<const P*>(a.addr[1][c.slot]);
    update_params<P, M>(a, c, [&](T& pi, int64_t i) {
      T unused_ga = T(0), unused_buf = T(0);
      f(pi, T(g[i]), sq[i], ga ? ga[i] : unused_ga, buf ? buf[i] : unused_buf);
    });
  }
};

// Adagrad: lr, lr_decay, eps, weight_decay (AdagradHyper's doubles, in order).
__device__ __forceinline__ AdagradHyper load_hyper(AdagradHyper h, const double* d) {
  if (d) {
    h.lr = d[0];
    h.lr_decay = d[1];
    h.eps = d[2];
    h.weight_decay = d[3];
  }
  return h;
}

template <typename P, typename M>
struct AdagradChunk {
  AdagradHyper hv;
  const float* found_inf;
  const double* hyper;
  __device__ void operator()(const MtaArgs<6>& a, MtaChunk c) const {
    if (skip_step(found_inf)) return;
    const AdagradHyper h = load_hyper(hv, hyper);
    using T = opmath_t<P>;
    // -clr in double with the host's function (t = updates so far + 1): the same bits.
    __shared__ double neg_clr;
    if (threadIdx.x == 0) neg_clr = fn::adagrad_neg_clr(h.lr, h.lr_decay, *a.step[c.slot] + 1);
    __syncthreads();
    const fn::AdagradStep<T> f{T(neg_clr), T(h.eps), T(h.weight_decay), T(h.maximize ? -1.0 : 1.0)};
    const P* g = static_cast<const P*>(a.addr[1][c.slot]);
    T* sum = static_cast<T*>(a.addr[2][c.slot]);
    update_params<P, M>(a, c, [&](T& pi, int64_t i) { f(pi, T(g[i]), sum[i]); });
  }
};

// Adamax and RAdam: lr, beta1, beta2, eps, weight_decay; NAdam: those and momentum_decay.
template <typename H>
__device__ __forceinline__ H load_adam_like_hyper(H h, const double* d) {
  if (d) {
    h.lr = d[0];
    h.beta1 = d[1];
    h.beta2 = d[2];
    h.eps = d[3];
    h.weight_decay = d[4];
    if constexpr (std::is_same_v<H, NadamHyper>) h.momentum_decay = d[5];
  }
  return h;
}

template <typename P, typename M>
struct AdamaxChunk {
  AdamaxHyper hv;
  const float* found_inf;
  const double* hyper;
  __device__ void operator()(const MtaArgs<6>& a, MtaChunk c) const {
    if (skip_step(found_inf)) return;
    const AdamaxHyper h = load_adam_like_hyper(hv, hyper);
    using T = opmath_t<P>;
    // -lr / (1 - beta1^t) in double, as the host computes it (t = updates so far + 1).
    __shared__ double neg_clr;
    if (threadIdx.x == 0) neg_clr = -h.lr / fn::bias_correction(h.beta1, *a.step[c.slot] + 1);
    __syncthreads();
    const fn::AdamaxStep<T> f{T(1.0 - h.beta1), T(h.beta2), T(h.eps), T(h.weight_decay), T(neg_clr),
                              T(h.maximize ? -1.0 : 1.0)};
    const P* g = static_cast<const P*>(a.addr[1][c.slot]);
    T* m = static_cast<T*>(a.addr[2][c.slot]);
    T* u = static_cast<T*>(a.addr[3][c.slot]);
    update_params<P, M>(a, c, [&](T& pi, int64_t i) { f(pi, T(g[i]), m[i], u[i]); });
  }
};

template <typename P, typename M>
struct RadamChunk {
  RadamHyper hv;
  const float* found_inf;
  const double* hyper;
  __device__ void operator()(const MtaArgs<6>& a, MtaChunk c) const {
    if (skip_step(found_inf)) return;
    const RadamHyper h = load_adam_like_hyper(hv, hyper);
    using T = opmath_t<P>;
    __shared__ fn::RadamScalars sc;
    if (threadIdx.x == 0) sc = fn::radam_scalars(h.beta1, h.beta2, *a.step[c.slot] + 1);
    __syncthreads();
    const fn::RadamStep<T> f{T(1.0 - h.beta1),     T(h.beta2),       T(1.0 - h.beta2),
                             T(h.eps),             T(h.weight_decay), h.decoupled,
                             T(1.0 - fn::product_rounded(h.lr, h.weight_decay)), T(sc.bias_correction1), T(h.lr),
                             sc.rectified,         T(sc.rect),       T(sc.sqrt_bias_correction2),
                             T(h.maximize ? -1.0 : 1.0)};
    const P* g = static_cast<const P*>(a.addr[1][c.slot]);
    T* m = static_cast<T*>(a.addr[2][c.slot]);
    T* v = static_cast<T*>(a.addr[3][c.slot]);
    update_params<P, M>(a, c, [&](T& pi, int64_t i) { f(pi, T(g[i]), m[i], v[i]); });
  }
};

// NAdam: the coefficients from t and the parameter's mu_product before this update (addr[4], a
// [1] f64), which commit_scalars (NadamCommit) advances after every block has read it.
template <typename P, typename M>
struct NadamChunk {
  NadamHyper hv;
  const float* found_inf;
  const double* hyper;
  __device__ void operator()(const MtaArgs<6>& a, MtaChunk c) const {
    if (skip_step(found_inf)) return;
    const NadamHyper h = load_adam_like_hyper(hv, hyper);
    using T = opmath_t<P>;
    __shared__ fn::NadamScalars sc;
    if (threadIdx.x == 0) {
      const double before = *static_cast<const double*>(a.addr[4][c.slot]);
      sc = fn::nadam_scalars(h.lr, h.beta1, h.beta2, h.momentum_decay, *a.step[c.slot] + 1, before);
    }
    __syncthreads();
    const fn::NadamStep<T> f{T(1.0 - h.beta1), T(h.beta2),          T(1.0 - h.beta2),  T(h.eps),
                             T(h.weight_decay), h.decoupled,        T(1.0 - fn::product_rounded(h.lr, h.weight_decay)),
                             T(sc.bias_correction2), T(sc.coef_grad), T(sc.coef_avg),
                             T(h.maximize ? -1.0 : 1.0)};
    const P* g = static_cast<const P*>(a.addr[1][c.slot]);
    T* m = static_cast<T*>(a.addr[2][c.slot]);
    T* v = static_cast<T*>(a.addr[3][c.slot]);
    update_params<P, M>(a, c, [&](T& pi, int64_t i) { f(pi, T(g[i]), m[i], v[i]); });
  }
};

// Adadelta: lr, rho, eps, weight_decay (AdadeltaHyper's doubles, in order).
__device__ __forceinline__ AdadeltaHyper load_hyper(AdadeltaHyper h, const double* d) {
  if (d) {
    h.lr = d[0];
    h.rho = d[1];
    h.eps = d[2];
    h.weight_decay = d[3];
  }
  return h;
}

template <typename P, typename M>
struct AdadeltaChunk {
  AdadeltaHyper hv;
  const float* found_inf;
  const double* hyper;
  __device__ void operator()(const MtaArgs<6>& a, MtaChunk c) const {
    if (skip_step(found_inf)) return;
    const AdadeltaHyper h = load_hyper(hv, hyper);
    using T = opmath_t<P>;
    const fn::AdadeltaStep<T> f{T(h.rho), T(1.0 - h.rho), T(h.eps), T(h.weight_decay), T(h.lr),
                                T(h.maximize ? -1.0 : 1.0)};
    const P* g = static_cast<const P*>(a.addr[1][c.slot]);
    T* sq = static_cast<T*>(a.addr[2][c.slot]);
    T* acc = static_cast<T*>(a.addr[3][c.slot]);
    update_params<P, M>(a, c, [&](T& pi, int64_t i) { f(pi, T(g[i]), sq[i], acc[i]); });
  }
};

// Rprop: lr (the step sizes' value before the first update), etaminus, etaplus, step_size_min,
// step_size_max.
__device__ __forceinline__ RpropHyper load_hyper(RpropHyper h, const double* d) {
  if (d) {
    h.lr = d[0];
    h.etaminus = d[1];
    h.etaplus = d[2];
    h.step_size_min = d[3];
    h.step_size_max = d[4];
  }
  return h;
}

template <typename P, typename M>
struct RpropChunk {
  RpropHyper hv;
  const float* found_inf;
  const double* hyper;
  __device__ void operator()(const MtaArgs<6>& a, MtaChunk c) const {
    if (skip_step(found_inf)) return;
    const RpropHyper h = load_hyper(hv, hyper);
    using T = opmath_t<P>;
    const fn::RpropStep<T> f{T(h.etaminus), T(h.etaplus), T(h.step_size_min), T(h.step_size_max),
                             T(h.maximize ? -1.0 : 1.0)};
    const P* g = static_cast<const P*>(a.addr[1][c.slot]);
    T* prev = static_cast<T*>(a.addr[2][c.slot]);
    T* size = static_cast<T*>(a.addr[3][c.slot]);
    // The first update seeds the step sizes with its lr (skipped steps made the buffer, no update).
    const bool first = *a.step[c.slot] == 0;
    update_params<P, M>(a, c, [&](T& pi, int64_t i) {
      if (first) size[i] = T(h.lr);
      f(pi, T(g[i]), prev[i], size[i]);
    });
  }
};

// ASGD: lr, lambd, alpha, t0, weight_decay (AsgdHyper's doubles, in order).
__device__ __forceinline__ AsgdHyper load_hyper(AsgdHyper h, const double* d) {
  if (d) {
    h.lr = d[0];
    h.lambd = d[1];
    h.alpha = d[2];
    h.t0 = d[3];
    h.weight_decay = d[4];
  }
  return h;
}

// ASGD: the parameter's eta and mu of this step (addr[3], addr[4]: [1] f64), which
// commit_scalars (AsgdCommit) advances after every block has read them.
template <typename P, typename M>
struct AsgdChunk {
  AsgdHyper hv;
  const float* found_inf;
  const double* hyper;
  __device__ void operator()(const MtaArgs<6>& a, MtaChunk c) const {
    if (skip_step(found_inf)) return;
    const AsgdHyper h = load_hyper(hv, hyper);
    using T = opmath_t<P>;
    // The first update (step count 0) starts from lr and 1, whatever skipped steps left there.
    const bool first = *a.step[c.slot] == 0;
    const double eta = first ? h.lr : *static_cast<const double*>(a.addr[3][c.slot]);
    const double mu = first ? 1.0 : *static_cast<const double*>(a.addr[4][c.slot]);
    const fn::AsgdStep<T> f{T(1.0 - fn::product_rounded(h.lambd, eta)), T(-eta), T(h.weight_decay), T(mu), mu != 1.0,
                            T(h.maximize ? -1.0 : 1.0)};
    const P* g = static_cast<const P*>(a.addr[1][c.slot]);
    T* ax = static_cast<T*>(a.addr[2][c.slot]);
    update_params<P, M>(a, c, [&](T& pi, int64_t i) { f(pi, T(g[i]), ax[i]); });
  }
};

void* ptr_or_null(const Tensors& list, std::size_t i) {
  return i < list.size() && list[i].defined() ? list[i].data_ptr() : nullptr;
}

// Groups the parameters by (param dtype, model dtype) and calls run.template operator()<P, M>(lists)
// for each group (M = P where the group has no model copy).
template <typename Run>
void for_each_step_group(const MultiTensorStepArgs& args, const char* who, const Run& run) {
  for_each_dtype_group(args.params, [&](DType pdt, const std::vector<std::size_t>& pidx) {
    for (int mk = 0; mk < 3; ++mk) {  // model copy: none, f16, bf16
      std::vector<std::size_t> idx;
      for (std::size_t i : pidx) {
        const Tensor m = i < args.model.size() ? args.model[i] : Tensor();
        MG_ASSERT(!m.defined() || m.dtype() == DType::F16 || m.dtype() == DType::BF16, who,
                  ": a model copy of dtype ", dtype_name(m.dtype()), " (the kernels write f16 or bf16)");
        const int kind = !m.defined() ? 0 : (m.dtype() == DType::F16 ? 1 : 2);
        if (kind == mk) idx.push_back(i);
      }
      if (idx.empty()) continue;
      MtaLists<6> lists;
      for (std::size_t i : idx) {
        lists.add({args.params[i].data_ptr(), args.grads[i].data_ptr(), ptr_or_null(args.state[0], i),
                   ptr_or_null(args.state[1], i), ptr_or_null(args.state[2], i), ptr_or_null(args.model, i)},
                  args.params[i].numel(), args.steps[i]);
      }
      visit_floating(pdt, who, [&]<typename P>() {
        if (mk == 0) run.template operator()<P, P>(lists);
        else if (mk == 1) run.template operator()<P, Half>(lists);
        else run.template operator()<P, BFloat16>(lists);
      });
    }
  });
}

// Runs Chunk<P, M>{h, found_inf, hyper} over each group.
template <template <typename, typename> class Chunk, typename Hyper>
void step_cuda(const MultiTensorStepArgs& args, const Hyper& h, const char* who) {
  const Device dev = device_of(args.params);
  MG_ASSERT(args.steps.size() == args.params.size() && args.grads.size() == args.params.size(), who, ": ",
            args.params.size(), " parameters with ", args.grads.size(), " gradients and ", args.steps.size(),
            " step counters");
  for_each_step_group(args, who, [&]<typename P, typename M>(const MtaLists<6>& lists) {
    multi_tensor_apply<6>(dev, lists, Chunk<P, M>{h, args.found_inf, args.hyper});
  });
}

// ---- LAMB: stage 1, the trust ratios, stage 2 ----

// The bias corrections of the slot's tensor (1 - beta^t, or 1), computed once per block.
struct LambCorrections {
  double bc1, bc2;
};
__device__ __forceinline__ LambCorrections lamb_corrections(const LambHyper& h, const int64_t* step) {
  __shared__ double c[2];
  if (threadIdx.x == 0) {
    const long long t = *step + 1;
    c[0] = h.bias_correction ? fn::bias_correction(h.beta1, t) : 1.0;
    c[1] = h.bias_correction ? fn::bias_correction(h.beta2, t) : 1.0;
  }
  __syncthreads();
  return {c[0], c[1]};
}

template <typename T>
__device__ __forceinline__ fn::LambStage1<T> lamb_stage1(const LambHyper& h, LambCorrections c) {
  return {T(h.beta1), T(h.beta2), T(1.0 - h.beta1), T(1.0 - h.beta2), T(c.bc1), T(c.bc2),
          T(h.eps),   T(h.weight_decay), T(h.maximize ? -1.0 : 1.0)};
}

// Stage 1: moments updated; sq[chunk] = sum p^2, sq[num_chunks + chunk] = sum u^2 (opmath, the
// block tree of block_sum).
template <typename P, typename M>
struct LambStage1Chunk {
  LambHyper hv;
  const float* found_inf;
  const double* hyper;
  double* sq;
  int64_t num_chunks;
  __device__ void operator()(const MtaArgs<6>& a, MtaChunk c) const {
    if (skip_step(found_inf)) return;
    const LambHyper h = load_hyper(hv, hyper);
    using T = opmath_t<P>;
    const fn::LambStage1<T> f = lamb_stage1<T>(h, lamb_corrections(h, a.step[c.slot]));
    const P* p = static_cast<const P*>(a.addr[0][c.slot]);
    const P* g = static_cast<const P*>(a.addr[1][c.slot]);
    T* m = static_cast<T*>(a.addr[2][c.slot]);
    T* v = static_cast<T*>(a.addr[3][c.slot]);
    T acc[2] = {T(0), T(0)};
    for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) {
      const T pi = T(p[i]);
      const T u = f(pi, T(g[i]), m[i], v[i]);
      acc[0] += pi * pi;
      acc[1] += u * u;
    }
    __shared__ T sh[2 * 32];
    block_sum<2, T>(acc, sh);
    if (threadIdx.x == 0) {
      sq[c.chunk] = double(acc[0]);
      sq[num_chunks + c.chunk] = double(acc[1]);
    }
  }
};

// Stage 2: the tensor's trust ratio, then u recomputed from the stored moments, p -= lr * ratio * u,
// the model copy written. ratio = ||p|| / ||u|| (1 when either is 0) from the tensor's stage-1
// chunk sums, added in chunk order in opmath by thread 0 of every block of the tensor (the same
// additions in every block, so one value per tensor; a tensor's chunks are consecutive in the
// plan's global order, its first one c.chunk - the block's chunk index within the tensor). No
// per-tensor table comes from the host, so the step copies nothing from host memory (and can be
// captured into a CUDA graph).
template <typename P, typename M>
struct LambStage2Chunk {
  LambHyper hv;
  const float* found_inf;
  const double* hyper;
  const double* sq;
  int64_t num_chunks;
  __device__ void operator()(const MtaArgs<6>& a, MtaChunk c) const {
    if (skip_step(found_inf)) return;
    const LambHyper h = load_hyper(hv, hyper);
    using T = opmath_t<P>;
    __shared__ double neg_step;
    if (threadIdx.x == 0) {
      const int64_t first = c.chunk - a.block_chunk[blockIdx.x];
      const int64_t count = (a.numel[c.slot] + kMtaChunk - 1) / kMtaChunk;
      T sp = T(0), su = T(0);
      for (int64_t k = first; k < first + count; ++k) {
        sp += T(sq[k]);
        su += T(sq[num_chunks + k]);
      }
      const T p_norm = sqrt(sp), u_norm = sqrt(su);
      const T ratio = (p_norm != T(0) && u_norm != T(0)) ? p_norm / u_norm : T(1);
      neg_step = double(-(T(h.lr) * ratio));
    }
    __syncthreads();
    const fn::LambStage1<T> f = lamb_stage1<T>(h, lamb_corrections(h, a.step[c.slot]));
    const fn::LambApply<T> apply{T(neg_step)};
    const T* m = static_cast<const T*>(a.addr[2][c.slot]);
    const T* v = static_cast<const T*>(a.addr[3][c.slot]);
    update_params<P, M>(a, c, [&](T& pi, int64_t i) { pi = apply(pi, f.update(pi, m[i], v[i])); });
  }
};

void lamb_cuda(const MultiTensorStepArgs& args, const LambHyper& h) {
  MG_ASSERT(args.steps.size() == args.params.size() && args.grads.size() == args.params.size(), "LAMB: ",
            args.params.size(), " parameters with ", args.grads.size(), " gradients and ", args.steps.size(), " step counters");
  const Device dev = device_of(args.params);
  for_each_step_group(args, "LAMB", [&]<typename P, typename M>(const MtaLists<6>& lists) {
    const MultiTensorPlan plan = plan_multi_tensor(
        lists.numel, {.chunk_size = kMtaChunk, .max_tensors = kMtaMaxTensors, .max_blocks = kMtaMaxBlocks});
    const int64_t nc = std::max<int64_t>(plan.num_chunks, 1);
    const Tensor sq = empty({2 * nc}, {.dtype = DType::F64, .device = dev});
    // Both stages cut the lists by the same plan (multi_tensor_apply's options), so stage 2's global
    // chunk numbers index stage 1's sums.
    multi_tensor_apply<6>(dev, lists, LambStage1Chunk<P, M>{h, args.found_inf, args.hyper, sq.data<double>(), nc});
    multi_tensor_apply<6>(dev, lists, LambStage2Chunk<P, M>{h, args.found_inf, args.hyper, sq.data<double>(), nc});
  });
}

void sgd_cuda(const MultiTensorStepArgs& args, const SgdHyper& h) { step_cuda<SgdChunk>(args, h, "SGD"); }
void rmsprop_cuda(const MultiTensorStepArgs& args, const RmspropHyper& h) {
  MG_ASSERT(args.state[0].size() == args.params.size(), "RMSprop: a square_avg buffer per parameter");
  step_cuda<RmspropChunk>(args, h, "RMSprop");
}
void adagrad_cuda(const MultiTensorStepArgs& args, const AdagradHyper& h) {
  MG_ASSERT(args.state[0].size() == args.params.size(), "Adagrad: a sum buffer per parameter");
  step_cuda<AdagradChunk>(args, h, "Adagrad");
}
void adam_cuda(const MultiTensorStepArgs& args, const AdamHyper& h) {
  MG_ASSERT(!h.amsgrad || args.state[2].size() == args.params.size(), "Adam: amsgrad without a max buffer per parameter");
  step_cuda<AdamChunk>(args, h, h.decoupled ? "AdamW" : "Adam");
}

void adamax_cuda(const MultiTensorStepArgs& args, const AdamaxHyper& h) {
  MG_ASSERT(args.state[0].size() == args.params.size() && args.state[1].size() == args.params.size(),
            "Adamax: exp_avg and exp_inf buffers per parameter");
  step_cuda<AdamaxChunk>(args, h, "Adamax");
}
void radam_cuda(const MultiTensorStepArgs& args, const RadamHyper& h) {
  MG_ASSERT(args.state[0].size() == args.params.size() && args.state[1].size() == args.params.size(),
            "RAdam: exp_avg and exp_avg_sq buffers per parameter");
  step_cuda<RadamChunk>(args, h, "RAdam");
}
void adadelta_cuda(const MultiTensorStepArgs& args, const AdadeltaHyper& h) {
  MG_ASSERT(args.state[0].size() == args.params.size() && args.state[1].size() == args.params.size(),
            "Adadelta: square_avg and acc_delta buffers per parameter");
  step_cuda<AdadeltaChunk>(args, h, "Adadelta");
}

void rprop_cuda(const MultiTensorStepArgs& args, const RpropHyper& h) {
  MG_ASSERT(args.state[0].size() == args.params.size() && args.state[1].size() == args.params.size(),
            "Rprop: prev and step_size buffers per parameter");
  step_cuda<RpropChunk>(args, h, "Rprop");
}

// ---- per-parameter device scalars after a step (NAdam's mu_product, ASGD's eta and mu) ----

// Up to two [1] f64 scalars per parameter and its step counter, 64 parameters per launch.
struct DeviceScalars {
  double* value[2][64];
  const int64_t* step[64];
  int n;
};

// update(hyper, value0, value1, t) for each parameter with t = *step + 1 (the count not yet
// advanced), unless the step is skipped. Launched after the step kernel, which read the old values.
template <typename Update>
__global__ void commit_scalars_kernel(DeviceScalars s, Update update, const double* hyper, const float* found_inf) {
  if (skip_step(found_inf)) return;
  for (int i = threadIdx.x; i < s.n; i += blockDim.x) update(hyper, s.value[0][i], s.value[1][i], *s.step[i] + 1);
}

// Runs commit_scalars_kernel over args.state[first .. first + count) (count 1 or 2), each a [1]
// f64 tensor per parameter.
template <typename Update>
void commit_scalars(const MultiTensorStepArgs& args, std::size_t first, std::size_t count, const Update& update,
                    const char* who) {
  const std::size_t n = args.params.size();
  for (std::size_t j = first; j < first + count; ++j) {
    MG_ASSERT(args.state[j].size() == n, who, ": a device scalar per parameter");
    for (const Tensor& t : args.state[j]) {
      MG_ASSERT(t.defined() && t.dtype() == DType::F64 && t.numel() == 1, who, ": device scalars must be [1] f64 tensors");
    }
  }
  LaunchContext ctx(device_of(args.params));
  for (std::size_t b = 0; b < n; b += 64) {
    DeviceScalars s{};
    s.n = int(std::min<std::size_t>(64, n - b));
    for (int i = 0; i < s.n; ++i) {
      for (std::size_t j = 0; j < count; ++j) s.value[j][i] = args.state[first + j][b + std::size_t(i)].data<double>();
      s.step[i] = args.steps[b + std::size_t(i)];
    }
    commit_scalars_kernel<<<1, 64, 0, ctx.stream>>>(s, update, args.hyper, args.found_inf);
    MG_CUDA_CHECK_LAUNCH("commit_scalars_kernel");
  }
}

// NAdam: mu_product *= mu_t, the product the step kernel used (fn::nadam_scalars).
struct NadamCommit {
  NadamHyper hv;
  __device__ void operator()(const double* hyper, double* product, double*, long long t) const {
    const NadamHyper h = load_adam_like_hyper(hv, hyper);
    *product = fn::product_rounded(*product, fn::nadam_mu(h.beta1, h.momentum_decay, t));
  }
};

// ASGD: eta and mu after update t.
struct AsgdCommit {
  AsgdHyper hv;
  __device__ void operator()(const double* hyper, double* eta, double* mu, long long t) const {
    const AsgdHyper h = load_hyper(hv, hyper);
    *eta = fn::asgd_eta(h.lr, h.lambd, h.alpha, t);
    *mu = fn::asgd_mu(h.t0, t);
  }
};

void nadam_cuda(const MultiTensorStepArgs& args, const NadamHyper& h) {
  const std::size_t n = args.params.size();
  MG_ASSERT(args.state[0].size() == n && args.state[1].size() == n && args.state[2].size() == n,
            "NAdam: exp_avg, exp_avg_sq and mu_product per parameter");
  step_cuda<NadamChunk>(args, h, "NAdam");
  commit_scalars(args, 2, 1, NadamCommit{h}, "NAdam");
}

void asgd_cuda(const MultiTensorStepArgs& args, const AsgdHyper& h) {
  const std::size_t n = args.params.size();
  MG_ASSERT(args.state[0].size() == n && args.state[1].size() == n && args.state[2].size() == n,
            "ASGD: ax, eta and mu per parameter");
  step_cuda<AsgdChunk>(args, h, "ASGD");
  commit_scalars(args, 1, 2, AsgdCommit{h}, "ASGD");
}

// ---- step counters ----

struct StepPointers {
  int64_t* p[64];
  int n;
};

__global__ void count_steps_kernel(StepPointers s, const float* found_inf) {
  if (skip_step(found_inf)) return;
  for (int i = threadIdx.x; i < s.n; i += blockDim.x) *s.p[i] += 1;
}

void count_steps_cuda(const std::vector<int64_t*>& steps, const float* found_inf, Device device) {
  if (steps.empty()) return;
  LaunchContext ctx(device);
  for (std::size_t b = 0; b < steps.size(); b += 64) {
    StepPointers s{};
    s.n = int(std::min<std::size_t>(64, steps.size() - b));
    for (int i = 0; i < s.n; ++i) s.p[i] = steps[b + std::size_t(i)];
    count_steps_kernel<<<1, 64, 0, ctx.stream>>>(s, found_inf);
    MG_CUDA_CHECK_LAUNCH("count_steps_kernel");
  }
}

// ---- deterministic L2 norm ----

// partials[chunk] = Σ x² over the chunk (opmath: f32 for f16/bf16/f32, f64 for f64), through the
// fixed tree of block_sum.
template <typename T>
struct SumSquaresChunk {
  double* partials;
  __device__ void operator()(const MtaArgs<1>& a, MtaChunk c) const {
    using O = opmath_t<T>;
    const T* x = static_cast<const T*>(a.addr[0][c.slot]);
    O s[1] = {O(0)};
    for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) {
      const O v = static_cast<O>(x[i]);
      s[0] += v * v;
    }
    __shared__ O sh[32];
    block_sum<1, O>(s, sh);
    if (threadIdx.x == 0) partials[c.chunk] = double(s[0]);
  }
};

// out = sqrt(Σ partials) in f32, as the contract (core/multi_tensor_kernels.h) and the CPU: a
// total past f32's range is inf (clip_grad_norm_ then leaves the gradients alone) even when every
// partial is finite. One block: thread j adds partials j, j + 256, ... in order, then the fixed
// tree of block_sum, so the bits repeat run to run (a one-thread loop read ~5,000 partials of a
// 340M-parameter model one after another).
__global__ void __launch_bounds__(kThreads) combine_norm_kernel(const double* partials, int64_t n, float* out) {
  float v[1] = {0.0f};
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) v[0] += static_cast<float>(partials[i]);
  __shared__ float sh[32];
  block_sum<1, float>(v, sh);
  if (threadIdx.x == 0) *out = sqrtf(v[0]);
}

void l2_norm_cuda(const Tensors& tensors, const Tensor& out) {
  const Device dev = out.device();
  int64_t total_chunks = 0;
  for (const Tensor& t : tensors) {
    if (t.defined()) total_chunks += (t.numel() + kMtaChunk - 1) / kMtaChunk;
  }
  const Tensor partials = empty({std::max<int64_t>(total_chunks, 1)}, {.dtype = DType::F64, .device = dev});
  double* base = partials.data<double>();
  int64_t offset = 0;
  for_each_dtype_group(tensors, [&](DType dt, const std::vector<std::size_t>& idx) {
    MtaLists<1> lists;
    for (std::size_t i : idx) lists.add({tensors[i].data_ptr()}, tensors[i].numel());
    visit_floating(dt, "l2_norm", [&]<typename T>() {
      offset += multi_tensor_apply<1>(dev, lists, SumSquaresChunk<T>{base + offset}).num_chunks;
    });
  });
  LaunchContext ctx(dev);
  combine_norm_kernel<<<1, kThreads, 0, ctx.stream>>>(base, offset, out.data<float>());
  MG_CUDA_CHECK_LAUNCH("combine_norm_kernel");
}

// ---- loss-scale update ----

__global__ void scale_update_kernel(fn::LossScaleState* s, fn::LossScaleRule r, float* found_inf, int32_t* outcome) {
  const fn::LossScaleOutcome o = fn::loss_scale_update(*s, r, *found_inf != 0.0f);
  if (*outcome == int32_t(fn::LossScaleOutcome::Ok)) *outcome = int32_t(o);
  *found_inf = 0.0f;
}

void scale_update_cuda(void* state, const void* rule, float* found_inf, int32_t* outcome, Device device) {
  LaunchContext ctx(device);
  scale_update_kernel<<<1, 1, 0, ctx.stream>>>(static_cast<fn::LossScaleState*>(state),
                                               *static_cast<const fn::LossScaleRule*>(rule), found_inf, outcome);
  MG_CUDA_CHECK_LAUNCH("scale_update_kernel");
}

const MultiTensorKernels kTable{&unscale_cuda,      &sgd_cuda,          &adam_cuda,    &lamb_cuda,
                                &count_steps_cuda,  &l2_norm_cuda,      &scale_update_cuda, &rmsprop_cuda,
                                &adagrad_cuda,      &adamax_cuda,       &radam_cuda,   &nadam_cuda,
                                &adadelta_cuda,     &rprop_cuda,        &asgd_cuda,    &adafactor_cuda};

}  // namespace

void register_multi_tensor_kernels() { set_multi_tensor_kernels(DeviceType::CUDA, &kTable); }

}  // namespace mg::cuda
