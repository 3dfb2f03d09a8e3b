// Adafactor's fused CUDA step (core/multi_tensor_kernels.h, optim/adafactor.h), parameter by
// parameter on the current stream, with nothing read on the host. For a parameter viewed as
// [B, n, m] (two or more dimensions) or as a vector:
//   0. one thread computes the step's scalars (fn::adafactor_scalars of t = *step + 1 and the
//      device copy of the options, so a CUDA graph replays with the lr a scheduler set) into the
//      parameter's scratch;
//   1. sum p^2 (alpha's RMS, before the weight decay) into the scratch;
//   2. matrices: each row's and each column's sum of g^2 folded into R and C by the reductions'
//      store, then max(mean(R), eps1) of each matrix into the scratch; vectors: V = lerp(V, g^2, w);
//   3. sum u^2 over the tensor, u recomputed from g and the state;
//   4. p = p (1 - lr wd) - (alpha / clip) u, u recomputed again, and the f16/bf16 model copy.
// The sums are launch_reduce's (cuda/kernels/reduce.cuh: leaves of 128 combined pairwise, no
// atomics, so the same bits on every run); the reducers below fold g^2 or u^2 and store into the
// state. With the found-inf flag set, 2 and 4 write nothing (0, 1 and 3 fill the scratch only), and
// count_steps leaves t: a skipped step changes nothing. The formulas are the CPU step's
// (optim/functors.h), but the two do not agree bit for bit: the sums follow another tree, and nvcc
// contracts the folds' and lerps' products into FMAs (its default; the CPU file is built without
// contraction, and only the update's two products are rounded apart here), so they agree to a few ulps.
// A parameter that is not contiguous (a channels-last conv weight) steps on contiguous copies of
// it and its gradient, copied back (the factors belong to the logical last two dimensions).
#include <cuda_runtime.h>

#include <type_traits>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/dtype.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/core/half.h"
#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/cuda/kernels/adafactor.h"
#include "mixgrad/cuda/kernels/launch.h"
#include "mixgrad/cuda/kernels/reduce.cuh"
#include "mixgrad/ops/ops.h"
#include "mixgrad/optim/functors.h"

namespace mg::cuda {
namespace {

template <typename T>
using Scalars = fn::AdafactorScalars<T>;

MG_HOST_DEVICE bool skipped(const float* found_inf) { return found_inf != nullptr && *found_inf != 0.0f; }

// The options of this launch: the device copy when given (rewritten between CUDA graph replays).
__device__ __forceinline__ AdafactorHyper load_hyper(AdafactorHyper h, const double* d) {
  if (d) {
    h.lr = d[0];
    h.beta2_decay = d[1];
    h.eps1 = d[2];
    h.eps2 = d[3];
    h.d = d[4];
    h.weight_decay = d[5];
  }
  return h;
}

template <typename T>
__global__ void scalars_kernel(AdafactorHyper hv, const double* hyper, const int64_t* step, double dtype_eps,
                               int64_t numel, int64_t n, int64_t m, Scalars<T>* out) {
  const AdafactorHyper h = load_hyper(hv, hyper);
  *out = fn::adafactor_scalars<T>(h.lr, h.beta2_decay, h.eps1, h.eps2, h.d, h.weight_decay, h.maximize, dtype_eps,
                                  *step + 1, numel, n, m);
}

// The second-moment estimate V of element i (the flat index of a contiguous parameter): the
// factored R C / max(mean(R), eps1) of its matrix, or the full V (var set).
template <typename T>
struct SecondMoment {
  const T* row;       // [B n]
  const T* col;       // [B m]
  const T* mean_row;  // [B]: max(mean(R), eps1)
  const T* var;       // [numel], or null for a matrix
  int64_t n, m;
  MG_HOST_DEVICE T at(int64_t i) const {
    if (var) return var[i];
    const int64_t r = i / m;
    return fn::adafactor_factored_variance(row[r], col[(r / n) * m + (i - r * m)], mean_row[r / n]);
  }
};

// Reducers (launch_reduce's interface, cuda/host/reducers.h): opmath accumulation, sums only.
template <typename P>
struct SumOfSquaresOp {  // sum x^2 into out[o]
  using Acc = opmath_t<P>;
  Acc* out;
  MG_HOST_DEVICE Acc init() const { return Acc(0); }
  MG_HOST_DEVICE Acc fold(Acc a, P x, int64_t) const {
    const Acc v = Acc(x);
    return a + v * v;
  }
  MG_HOST_DEVICE Acc combine(Acc a, Acc b) const { return a + b; }
  MG_HOST_DEVICE void store(int64_t o, Acc a, int64_t) const { out[o] = a; }
};

// A row's (or a column's) sum of g^2 folded into its factor: f = lerp(f, sum / m (n), w).
template <typename P>
struct FoldFactorOp : SumOfSquaresOp<P> {
  using Acc = opmath_t<P>;
  const Scalars<Acc>* scalars;
  const float* found_inf;
  bool columns;
  MG_HOST_DEVICE void store(int64_t o, Acc a, int64_t) const {
    if (skipped(found_inf)) return;
    const Scalars<Acc>& c = *scalars;
    this->out[o] = fn::aten_lerp(this->out[o], a / (columns ? c.n_rows : c.n_cols), c.w);
  }
};

// max(mean(R), eps1) of each matrix's (folded) R.
template <typename T>
struct MeanRowFloorOp {
  using Acc = T;
  T* out;
  const Scalars<T>* scalars;
  MG_HOST_DEVICE Acc init() const { return T(0); }
  MG_HOST_DEVICE Acc fold(Acc a, T x, int64_t) const { return a + x; }
  MG_HOST_DEVICE Acc combine(Acc a, Acc b) const { return a + b; }
  MG_HOST_DEVICE void store(int64_t o, Acc a, int64_t) const {
    const T mean = a / scalars->n_rows;
    out[o] = mean < scalars->eps1 ? scalars->eps1 : mean;  // std::max(mean, eps1), as the CPU step
  }
};

// sum u^2 over the whole gradient (the fold's position is the flat index).
template <typename P>
struct UpdateSquaresOp : SumOfSquaresOp<P> {
  using Acc = opmath_t<P>;
  SecondMoment<Acc> v;
  const Scalars<Acc>* scalars;
  MG_HOST_DEVICE Acc fold(Acc a, P x, int64_t i) const {
    const Acc u = fn::adafactor_update(Acc(x), v.at(i), *scalars);
    return a + u * u;
  }
};

// V = lerp(V, g^2, w) of a vector, unless skipped.
template <typename P>
__global__ void fold_variance_kernel(const P* g, opmath_t<P>* var, int64_t numel, const Scalars<opmath_t<P>>* scalars,
                                     const float* found_inf) {
  using T = opmath_t<P>;
  if (skipped(found_inf)) return;
  const T w = scalars->w;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x) {
    const T x = T(g[i]);
    var[i] = fn::aten_lerp(var[i], x * x, w);
  }
}

// Products rounded on their own, as the CPU step (compiled without contraction) rounds them.
template <typename T>
__device__ __forceinline__ T mul_rn(T a, T b) {
  if constexpr (std::is_same_v<T, double>) return __dmul_rn(a, b);
  else return __fmul_rn(a, b);
}

// p = p (1 - lr wd) - (alpha / clip) u, stored in P, and the model copy (M; model null: none).
// sums: [0] sum p^2, [1] sum u^2.
template <typename P, typename M>
__global__ void apply_kernel(P* p, const P* g, M* model, int64_t numel, SecondMoment<opmath_t<P>> v,
                             const opmath_t<P>* sums, const Scalars<opmath_t<P>>* scalars, const float* found_inf) {
  using T = opmath_t<P>;
  if (skipped(found_inf)) return;
  const Scalars<T> c = *scalars;
  const T step = fn::adafactor_step_size(sums[0], sums[1], c);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x) {
    const T u = fn::adafactor_update(T(g[i]), v.at(i), c);
    const P stored = P(mul_rn(T(p[i]), c.decay) - mul_rn(u, step));
    p[i] = stored;
    if (model) model[i] = M(T(stored));
  }
}

// One parameter's step: p and g contiguous, of storage type P; model null or of type M.
template <typename P, typename M>
void step_one(const Tensor& param, const Tensor& grad, M* model, const Tensor& row, const Tensor& col,
              const Tensor& var, const int64_t* step, const MultiTensorStepArgs& args, const AdafactorHyper& h) {
  using T = opmath_t<P>;
  const Device dev = param.device();
  const int64_t numel = param.numel();
  const bool factored = param.dim() > 1;
  const int64_t m = factored ? param.shape().back() : 1;
  const int64_t n = factored ? param.shape()[std::size_t(param.dim() - 2)] : 1;
  const int64_t batch = factored ? numel / (n * m) : 1;
  // Scratch (freed on return: the caching allocator hands it out again only to work queued after
  // these kernels on this stream): the scalars, then sum p^2, sum u^2 and each matrix's floor.
  constexpr int64_t kScalarSlots = int64_t(sizeof(Scalars<T>) / sizeof(T));
  static_assert(sizeof(Scalars<T>) % sizeof(T) == 0);
  const Tensor scratch = empty({kScalarSlots + 2 + batch}, {.dtype = dtype_of<T>::value, .device = dev});
  T* base = static_cast<T*>(scratch.data_ptr());
  Scalars<T>* scalars = reinterpret_cast<Scalars<T>*>(base);
  T* sums = base + kScalarSlots;
  T* mean_row = sums + 2;
  const LaunchContext ctx(dev);
  scalars_kernel<T><<<1, 1, 0, ctx.stream>>>(h, args.hyper, step, machine_epsilon(param.dtype()), numel, n, m, scalars);
  MG_CUDA_CHECK_LAUNCH("adafactor scalars_kernel");
  const Tensor flat = reshape(param, {numel});
  const Tensor gflat = reshape(grad, {numel});
  launch_reduce<P>(flat, {0}, SumOfSquaresOp<P>{sums});
  SecondMoment<T> v{nullptr, nullptr, mean_row, nullptr, n, m};
  if (factored) {
    T* r = static_cast<T*>(row.data_ptr());
    T* c = static_cast<T*>(col.data_ptr());
    launch_reduce<P>(reshape(grad, {batch * n, m}), {1}, FoldFactorOp<P>{{r}, scalars, args.found_inf, false});
    launch_reduce<P>(reshape(grad, {batch, n, m}), {1}, FoldFactorOp<P>{{c}, scalars, args.found_inf, true});
    launch_reduce<T>(reshape(row, {batch, n}), {1}, MeanRowFloorOp<T>{mean_row, scalars});
    v.row = r;
    v.col = c;
  } else {
    T* vv = static_cast<T*>(var.data_ptr());
    fold_variance_kernel<P><<<ctx.blocks(numel), kThreads, 0, ctx.stream>>>(
        static_cast<const P*>(grad.data_ptr()), vv, numel, scalars, args.found_inf);
    MG_CUDA_CHECK_LAUNCH("adafactor fold_variance_kernel");
    v.var = vv;
  }
  launch_reduce<P>(gflat, {0}, UpdateSquaresOp<P>{{sums + 1}, v, scalars});
  apply_kernel<P, M><<<ctx.blocks(numel), kThreads, 0, ctx.stream>>>(
      static_cast<P*>(param.data_ptr()), static_cast<const P*>(grad.data_ptr()), model, numel, v, sums, scalars,
      args.found_inf);
  MG_CUDA_CHECK_LAUNCH("adafactor apply_kernel");
}

}  // namespace

void adafactor_cuda(const MultiTensorStepArgs& args, const AdafactorHyper& h) {
  MG_ASSERT(args.steps.size() == args.params.size() && args.grads.size() == args.params.size(), "Adafactor: ",
            args.params.size(), " parameters with ", args.grads.size(), " gradients and ", args.steps.size(),
            " step counters");
  NoGradGuard no_grad;  // the copies and copy-backs below are no part of any graph
  for (std::size_t i = 0; i < args.params.size(); ++i) {
    const Tensor& p = args.params[i];
    if (p.numel() == 0) continue;  // nothing to update (and no mean over an empty row)
    const Tensor row = i < args.state[0].size() ? args.state[0][i] : Tensor();
    const Tensor col = i < args.state[1].size() ? args.state[1][i] : Tensor();
    const Tensor var = i < args.state[2].size() ? args.state[2][i] : Tensor();
    MG_ASSERT(p.dim() > 1 ? row.defined() && col.defined() : var.defined(), "Adafactor: parameter ", i,
              " without its second-moment state");
    const Tensor model = i < args.model.size() ? args.model[i] : Tensor();
    // The factors belong to the logical last two dimensions: a parameter stored in another order
    // steps on contiguous copies, copied back (and into its model copy) afterwards.
    const bool dense = p.is_contiguous() && args.grads[i].is_contiguous();
    const Tensor pc = dense ? p : contiguous(p);
    const Tensor gc = dense ? args.grads[i] : contiguous(args.grads[i]);
    visit_floating(p.dtype(), "Adafactor", [&]<typename P>() {
      if (dense && model.defined() && model.dtype() == DType::F16) {
        step_one<P, Half>(pc, gc, static_cast<Half*>(model.data_ptr()), row, col, var, args.steps[i], args, h);
      } else if (dense && model.defined() && model.dtype() == DType::BF16) {
        step_one<P, BFloat16>(pc, gc, static_cast<BFloat16*>(model.data_ptr()), row, col, var, args.steps[i], args, h);
      } else {
        MG_ASSERT(!model.defined() || !dense, "Adafactor: a model copy of dtype ", dtype_name(model.dtype()),
                  " (the kernel writes f16 or bf16)");
        step_one<P, P>(pc, gc, static_cast<P*>(nullptr), row, col, var, args.steps[i], args, h);
      }
    });
    if (!dense) {  // copies of unchanged values on a skipped step
      Tensor(p).copy_(pc);
      if (model.defined()) Tensor(model).copy_(p);  // rounded once, as the kernel rounds
    }
  }
}

}  // namespace mg::cuda
