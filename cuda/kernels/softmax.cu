// CUDA kernels of softmax, log_softmax and their backward ops (softmax_backward,
// log_softmax_backward) along any dim, and of the class losses built on the same line kernels
// (cross_entropy, cross_entropy_backward, nll_loss), f64/f32/f16/bf16, mirroring
// ops/cpu/loss_kernels.cpp:
// max-shifted, accumulated in f32 for f16/bf16/f32 and f64 for f64 (acc_t), the output rounded
// once on store. Inputs are made dense first (as on the CPU); the output is dense.
//
// Two shapes of kernel:
// - last dim (inner == 1): one block per row (grid-stride over rows). The block size grows with
//   the row (32 .. 1024 threads, at most ~32 elements per thread up to rows of 32768, then at
//   most size / 1024), each thread sums its strided elements sequentially, and the block combines
//   the partial sums as a tree: warp shuffles (xor butterfly), then one value per warp through
//   shared memory, then a shuffle tree in warp 0. A row of 32768 is therefore 32 terms per
//   thread + a 1024-leaf tree; rows beyond 131072 exceed 128 sequential terms per thread.
// - other dims (inner > 1): a block is a tile of 32 consecutive inner positions (threadIdx.x,
//   coalesced) by ry threads along the reduced dim (threadIdx.y, ry a power of two <= 32 chosen
//   so each thread sums at most ~32 terms for sizes up to 1024, size / 32 beyond); the ry partial
//   sums of a column are combined by a tree in shared memory.
// The max uses the CPU's NaN-propagating max, so a NaN in a line makes the whole line NaN, and a
// line of -inf gives NaN (exp(-inf - -inf)), as on the CPU. Results differ from the CPU's only by
// summation order and by CUDA's expf/logf (an ulp or two).
// Class losses: a small kernel counts the targets not ignored (the mean's divisor, kept in device
// memory and read by the loss kernels from there, so a captured CUDA graph divides by each
// replay's count) and publishes a target out of range to the device's report slot, raised as the
// CPU's IndexError at the host's next wait (cuda/host/device_check_report.h: no host
// synchronisation per call, eagerly or in a captured graph). The kernels treat an out-of-range
// target as ignored (loss 0, gradient 0, not counted) rather than read outside the line.
// Per-sample losses are kept in f32 (f64) and a mean/sum is one block's tree.
// Every kernel that may be launched with 1024 threads says so (__launch_bounds__(kMaxThreads)),
// so ptxas keeps it within the 64 registers per thread such a block allows (without it the f64
// strided kernels took 65-78 and their 1024-thread launches failed for want of registers); their
// f64 exp loops are not unrolled (column_for), which keeps them at <= 60 without spills.
#include <cuda_runtime.h>

#include <algorithm>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/core/half.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/device_checks.h"
#include "mixgrad/cuda/kernels/device_check.cuh"
#include "mixgrad/cuda/kernels/launch.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/loss.h"
#include "mixgrad/ops/ops.h"

namespace mg::cuda {
namespace {

// The largest block of this file's launchers (row_threads, 32 x column_threads, ce_total_kernel);
// every kernel launched with that many threads carries __launch_bounds__(kMaxThreads).
constexpr int kMaxThreads = 1024;

__device__ __forceinline__ float acc_exp(float v) { return expf(v); }
__device__ __forceinline__ double acc_exp(double v) { return ::exp(v); }
__device__ __forceinline__ float acc_log(float v) { return logf(v); }
__device__ __forceinline__ double acc_log(double v) { return ::log(v); }

template <typename A>
__device__ __forceinline__ A neg_inf();
template <>
__device__ __forceinline__ float neg_inf<float>() { return __int_as_float(0xff800000); }
template <>
__device__ __forceinline__ double neg_inf<double>() { return __longlong_as_double(0xfff0000000000000ULL); }

// The CPU's max (nan_max): NaN wins, so the tree and the sequential order agree.
struct MaxOp {
  template <typename A>
  __device__ A operator()(A m, A v) const { return (v > m || v != v) ? v : m; }
  template <typename A>
  __device__ static A identity() { return neg_inf<A>(); }
};
struct SumOp {
  template <typename A>
  __device__ A operator()(A a, A b) const { return a + b; }
  template <typename A>
  __device__ static A identity() { return A(0); }
};

template <typename A, typename Op>
__device__ A warp_reduce(A v, Op op) {
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, s));
  return v;
}

// The reduction of v over the block (blockDim.x a multiple of 32, blockDim.y == 1), returned to
// every thread. `sh` holds 32 values; the leading barrier lets a previous call's readers finish.
template <typename A, typename Op>
__device__ A block_reduce(A v, Op op, A* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_reduce(v, op);
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    A w = lane < warps ? sh[lane] : Op::template identity<A>();
    w = warp_reduce(w, op);
    if (lane == 0) sh[0] = w;
  }
  __syncthreads();
  return sh[0];
}

// The reduction of v over threadIdx.y for each threadIdx.x (blockDim = (32, ry), ry a power of
// two), returned to every thread of the column. `sh` holds 32 * 32 values.
template <typename A, typename Op>
__device__ A column_reduce(A v, Op op, A* sh) {
  const int x = threadIdx.x, y = threadIdx.y;
  __syncthreads();
  sh[y * 32 + x] = v;
  __syncthreads();
  for (int s = int(blockDim.y) >> 1; s > 0; s >>= 1) {
    if (y < s) sh[y * 32 + x] = op(sh[y * 32 + x], sh[(y + s) * 32 + x]);
    __syncthreads();
  }
  return sh[x];
}

// Calls f(j) for this thread's positions along a strided line, j = threadIdx.y + k * ry < n.
// kRolled: the loop is not unrolled. The f64 loops that evaluate exp use it: unrolled, f64 exp's
// registers push those kernels to the 64 per thread that a 1024-thread block allows, and ptxas
// spilled (softmax_strided_kernel<f64> forward, ce_strided_kernel<f64> backward). Other dtypes
// keep the compiler's unrolling (the same code as a plain loop).
template <bool kRolled, typename F>
__device__ __forceinline__ void column_for(int64_t n, int ry, F&& f) {
  if constexpr (kRolled) {
#pragma unroll 1
    for (int64_t j = threadIdx.y; j < n; j += ry) f(j);
  } else {
    for (int64_t j = threadIdx.y; j < n; j += ry) f(j);
  }
}

// Forward (kBackward false): a = x, out = softmax(x) or log_softmax(x) (`log`).
// Backward (kBackward true): a = g, b = y, out = y (g - sum(g y)) or g - exp(y) sum(g) (`log`).
// Rows of `size` contiguous elements, `rows` of them.
template <typename T, bool kBackward>
__global__ void __launch_bounds__(kMaxThreads)
    softmax_rows_kernel(int64_t rows, int64_t size, const T* __restrict__ a, const T* __restrict__ b,
                        T* __restrict__ out, bool log) {
  using A = acc_t<T>;  // f32 accumulation for f16/bf16/f32, f64 for f64
  __shared__ A sh[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* ar = a + r * size;
    const T* br = kBackward ? b + r * size : nullptr;
    T* orow = out + r * size;
    if constexpr (!kBackward) {
      A m = MaxOp::identity<A>();
      for (int64_t i = threadIdx.x; i < size; i += blockDim.x) m = MaxOp{}(m, static_cast<A>(ar[i]));
      m = block_reduce(m, MaxOp{}, sh);
      // sum of exp(x - max): per-thread partials, then the block tree, in A
      A s = 0;
      for (int64_t i = threadIdx.x; i < size; i += blockDim.x) s += acc_exp(static_cast<A>(ar[i]) - m);
      s = block_reduce(s, SumOp{}, sh);
      if (log) {
        const A log_s = acc_log(s);  // (x - max) - log(sum), as the CPU: no rounding at ulp(max)
        for (int64_t i = threadIdx.x; i < size; i += blockDim.x) orow[i] = static_cast<T>((static_cast<A>(ar[i]) - m) - log_s);
      } else {
        const A inv = A(1) / s;
        for (int64_t i = threadIdx.x; i < size; i += blockDim.x)
          orow[i] = static_cast<T>(acc_exp(static_cast<A>(ar[i]) - m) * inv);
      }
    } else {
      // sum(g y) (softmax) or sum(g) (log_softmax) in A
      A s = 0;
      for (int64_t i = threadIdx.x; i < size; i += blockDim.x) {
        const A gv = static_cast<A>(ar[i]);
        s += log ? gv : gv * static_cast<A>(br[i]);
      }
      s = block_reduce(s, SumOp{}, sh);
      for (int64_t i = threadIdx.x; i < size; i += blockDim.x) {
        const A gv = static_cast<A>(ar[i]), yv = static_cast<A>(br[i]);
        orow[i] = static_cast<T>(log ? gv - acc_exp(yv) * s : yv * (gv - s));
      }
    }
  }
}

// The same over lines along a middle dim: tensor [outer, size, inner], line (o, i) starts at
// o * size * inner + i and steps by inner. Tiles of 32 inner positions per block, grid-stride.
template <typename T, bool kBackward>
__global__ void __launch_bounds__(kMaxThreads)
    softmax_strided_kernel(int64_t outer, int64_t size, int64_t inner, const T* __restrict__ a,
                           const T* __restrict__ b, T* __restrict__ out, bool log) {
  using A = acc_t<T>;  // f32 accumulation for f16/bf16/f32, f64 for f64
  constexpr bool kRolled = sizeof(A) == 8;  // f64: the exp loops stay rolled (column_for)
  __shared__ A sh[32 * 32];
  const int64_t tiles_inner = (inner + 31) / 32;
  const int64_t tiles = outer * tiles_inner;
  const int ry = int(blockDim.y);
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t o = t / tiles_inner;
    const int64_t ii = (t % tiles_inner) * 32 + threadIdx.x;
    const bool active = ii < inner;  // inactive threads still take part in the barriers
    const int64_t base = o * size * inner + ii;
    if constexpr (!kBackward) {
      A m = MaxOp::identity<A>();
      if (active) {
        for (int64_t j = threadIdx.y; j < size; j += ry) m = MaxOp{}(m, static_cast<A>(a[base + j * inner]));
      }
      m = column_reduce(m, MaxOp{}, sh);
      // sum of exp(x - max): per-thread partials, then the column tree, in A
      A s = 0;
      if (active) {
        column_for<kRolled>(size, ry, [&](int64_t j) { s += acc_exp(static_cast<A>(a[base + j * inner]) - m); });
      }
      s = column_reduce(s, SumOp{}, sh);
      if (active) {
        if (log) {
          const A log_s = acc_log(s);  // (x - max) - log(sum), as the CPU
          for (int64_t j = threadIdx.y; j < size; j += ry) {
            const int64_t k = base + j * inner;
            out[k] = static_cast<T>((static_cast<A>(a[k]) - m) - log_s);
          }
        } else {
          const A inv = A(1) / s;
          column_for<kRolled>(size, ry, [&](int64_t j) {
            const int64_t k = base + j * inner;
            out[k] = static_cast<T>(acc_exp(static_cast<A>(a[k]) - m) * inv);
          });
        }
      }
    } else {
      // sum(g y) (softmax) or sum(g) (log_softmax) in A
      A s = 0;
      if (active) {
        for (int64_t j = threadIdx.y; j < size; j += ry) {
          const int64_t k = base + j * inner;
          const A gv = static_cast<A>(a[k]);
          s += log ? gv : gv * static_cast<A>(b[k]);
        }
      }
      s = column_reduce(s, SumOp{}, sh);
      if (active) {
        for (int64_t j = threadIdx.y; j < size; j += ry) {
          const int64_t k = base + j * inner;
          const A gv = static_cast<A>(a[k]), yv = static_cast<A>(b[k]);
          out[k] = static_cast<T>(log ? gv - acc_exp(yv) * s : yv * (gv - s));
        }
      }
    }
  }
}

// ---- cross_entropy / cross_entropy_backward ----
// logits [outer, classes, inner] dense ([N, C, d...] or [C]), target i64 [outer * inner] dense
// (the class of each sample, or ignore; validated on the device by check_targets, and a target
// outside [0, classes) is treated as ignored: see target_ignored). Sample s = o * inner + i
// is line (o, i).
template <typename T>
struct CeArgs {
  using A = acc_t<T>;
  int64_t outer = 0, classes = 0, inner = 1;
  const T* x = nullptr;
  const int64_t* target = nullptr;
  int64_t ignore = -100;
  A eps = 0;              // label smoothing
  A* loss = nullptr;      // forward: [samples] per-sample losses in A (0 for ignored targets)
  const T* grad = nullptr;  // backward: [samples] (reduction none) or [1]
  int64_t mode = 0;       // Reduction: 0 none, 1 mean, 2 sum
  // backward, mean: the number of targets not ignored (the divisor), in device memory (written by
  // ce_check_kernel on the same stream), so a replayed CUDA graph reads each batch's count
  const unsigned long long* count = nullptr;
  T* dx = nullptr;        // backward: [outer, classes, inner]
};

// Whether sample target t contributes nothing: ignore_index, or a class outside [0, classes)
// (reported by check_targets at the host's next wait) — never read x there.
__device__ __forceinline__ bool target_ignored(int64_t t, int64_t ignore, int64_t classes) {
  return t == ignore || t < 0 || t >= classes;
}

// The mean's divisor as the accumulation type: the device count, converted as an int64_t (the
// host value the kernels were given before the count moved to the device).
template <typename A>
__device__ __forceinline__ A mean_divisor(const unsigned long long* count) {
  return static_cast<A>(static_cast<int64_t>(*count));
}

// The upstream weight of sample s: grad[s] (none), grad / count (mean), grad (sum).
template <typename T>
__device__ acc_t<T> ce_weight(const CeArgs<T>& p, int64_t s) {
  using A = acc_t<T>;
  if (p.mode == 0) return static_cast<A>(p.grad[s]);
  const A g0 = static_cast<A>(p.grad[0]);
  return p.mode == 1 ? g0 / mean_divisor<A>(p.count) : g0;
}

// Forward: loss_s = (1 - eps) (lse - x_t) + eps (lse - mean_c x_c), 0 for ignored targets.
// Backward: dx_c = w (softmax_c - (1 - eps) [c == t] - eps / C), 0 for ignored targets.
// (Ignored: target_ignored, which includes an out-of-range target.)
// One block per sample (inner == 1); the target is read by every thread, so the ignore branch is
// uniform over the block.
template <typename T, bool kBackward>
__global__ void __launch_bounds__(kMaxThreads) ce_rows_kernel(CeArgs<T> p) {
  using A = acc_t<T>;  // f32 accumulation for f16/bf16/f32, f64 for f64
  __shared__ A sh[32];
  const int64_t C = p.classes;
  for (int64_t r = blockIdx.x; r < p.outer; r += gridDim.x) {
    const int64_t t = p.target[r];
    const T* xr = p.x + r * C;
    if (target_ignored(t, p.ignore, C)) {
      if constexpr (kBackward) {
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) p.dx[r * C + c] = static_cast<T>(0.0f);
      } else {
        if (threadIdx.x == 0) p.loss[r] = A(0);
      }
      continue;
    }
    A m = MaxOp::identity<A>();
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) m = MaxOp{}(m, static_cast<A>(xr[c]));
    m = block_reduce(m, MaxOp{}, sh);
    // sum of exp(x - max): per-thread partials, then the block tree, in A
    A se = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) se += acc_exp(static_cast<A>(xr[c]) - m);
    se = block_reduce(se, SumOp{}, sh);
    if constexpr (!kBackward) {
      A sx = 0;  // sum of x - max (label smoothing only), in A
      if (p.eps != A(0)) {
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) sx += static_cast<A>(xr[c]) - m;
        sx = block_reduce(sx, SumOp{}, sh);
      }
      if (threadIdx.x == 0) {  // every term relative to the max, as the CPU
        const A log_se = acc_log(se);
        const A nll = log_se - (static_cast<A>(xr[t]) - m);
        p.loss[r] = p.eps == A(0) ? nll : (A(1) - p.eps) * nll + p.eps * (log_se - sx / static_cast<A>(C));
      }
    } else {
      const A w = ce_weight(p, r);
      const A inv = A(1) / se;
      const A off = p.eps / static_cast<A>(C > 1 ? C : 1);
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        A d = acc_exp(static_cast<A>(xr[c]) - m) * inv - off;
        if (c == t) d -= A(1) - p.eps;
        p.dx[r * C + c] = static_cast<T>(w * d);
      }
    }
  }
}

// The same for inner > 1: tiles of 32 samples (consecutive inner positions) x ry threads along
// the classes, as softmax_strided_kernel; lanes past the end or with an ignored target take part
// in the barriers with neutral values.
template <typename T, bool kBackward>
__global__ void __launch_bounds__(kMaxThreads) ce_strided_kernel(CeArgs<T> p) {
  using A = acc_t<T>;  // f32 accumulation for f16/bf16/f32, f64 for f64
  constexpr bool kRolled = sizeof(A) == 8;  // f64: the exp loops stay rolled (column_for)
  __shared__ A sh[32 * 32];
  const int64_t C = p.classes, inner = p.inner;
  const int64_t tiles_inner = (inner + 31) / 32;
  const int64_t tiles = p.outer * tiles_inner;
  const int ry = int(blockDim.y);
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t o = tile / tiles_inner;
    const int64_t ii = (tile % tiles_inner) * 32 + threadIdx.x;
    const bool in_range = ii < inner;
    const int64_t s = o * inner + ii;
    const int64_t t = in_range ? p.target[s] : p.ignore;
    const bool active = in_range && !target_ignored(t, p.ignore, C);
    const int64_t base = o * C * inner + ii;
    if constexpr (kBackward) {
      if (in_range && !active) {
        for (int64_t j = threadIdx.y; j < C; j += ry) p.dx[base + j * inner] = static_cast<T>(0.0f);
      }
    }
    A m = MaxOp::identity<A>();
    if (active) {
      for (int64_t j = threadIdx.y; j < C; j += ry) m = MaxOp{}(m, static_cast<A>(p.x[base + j * inner]));
    }
    m = column_reduce(m, MaxOp{}, sh);
    // sum of exp(x - max): per-thread partials, then the column tree, in A
    A se = 0;
    if (active) {
      column_for<kRolled>(C, ry, [&](int64_t j) { se += acc_exp(static_cast<A>(p.x[base + j * inner]) - m); });
    }
    se = column_reduce(se, SumOp{}, sh);
    if constexpr (!kBackward) {
      A sx = 0;  // sum of x - max (label smoothing only), in A
      if (p.eps != A(0)) {
        if (active) {
          for (int64_t j = threadIdx.y; j < C; j += ry) sx += static_cast<A>(p.x[base + j * inner]) - m;
        }
        sx = column_reduce(sx, SumOp{}, sh);
      }
      if (in_range && threadIdx.y == 0) {
        A l = 0;
        if (active) {
          const A log_se = acc_log(se);  // every term relative to the max, as the CPU
          const A nll = log_se - (static_cast<A>(p.x[base + t * inner]) - m);
          l = p.eps == A(0) ? nll : (A(1) - p.eps) * nll + p.eps * (log_se - sx / static_cast<A>(C));
        }
        p.loss[s] = l;
      }
    } else {
      if (active) {
        const A w = ce_weight(p, s);
        const A inv = A(1) / se;
        const A off = p.eps / static_cast<A>(C > 1 ? C : 1);
        column_for<kRolled>(C, ry, [&](int64_t j) {
          const int64_t k = base + j * inner;
          A d = acc_exp(static_cast<A>(p.x[k]) - m) * inv - off;
          if (j == t) d -= A(1) - p.eps;
          p.dx[k] = static_cast<T>(w * d);
        });
      }
    }
  }
}

// out (reduction none) [samples] = the per-sample losses, rounded once.
template <typename T, typename A>
__global__ void ce_store_kernel(int64_t n, const A* loss, T* out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = static_cast<T>(loss[i]);
}

// out[0] = the total of the per-sample losses (/ *count for mean, read from device memory; 0 / 0
// = NaN when every target is ignored, as on the CPU). One block of 1024 threads: per-thread
// partials (at most 128 terms each up to 131072 samples), then the block tree, in A.
template <typename T, typename A>
__global__ void __launch_bounds__(kMaxThreads)
    ce_total_kernel(int64_t n, const A* loss, T* out, bool mean, const unsigned long long* count) {
  __shared__ A sh[32];
  A s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += loss[i];
  s = block_reduce(s, SumOp{}, sh);
  if (threadIdx.x == 0) out[0] = static_cast<T>(mean ? s / mean_divisor<A>(count) : s);
}

// nll_loss: loss_s = -logp[s, t_s], 0 for ignored targets (target_ignored: also a target out of
// range, reported by check_targets); logp [outer, classes, inner] dense.
template <typename T, typename A>
__global__ void nll_kernel(int64_t samples, int64_t classes, int64_t inner, const T* logp, const int64_t* target,
                           int64_t ignore, A* loss) {
  for (int64_t s = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; s < samples; s += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = target[s];
    loss[s] = target_ignored(t, ignore, classes)
                  ? A(0)
                  : -static_cast<A>(logp[(s / inner) * classes * inner + t * inner + s % inner]);
  }
}

// Target validation: publishes the first target outside [0, classes) that is not `ignore` to the
// device's report slot (cuda/kernels/device_check.cuh), and counts the others (integer atomics:
// exact and order-independent). `flags` is zeroed before: a CheckScratch, then the count (the
// mean's divisor the loss kernels read).
__global__ void ce_check_kernel(int64_t n, const int64_t* target, int64_t classes, int64_t ignore,
                                unsigned long long* flags, DeviceCheckSlot slot, DeviceCheck check) {
  auto* scratch = reinterpret_cast<CheckScratch*>(flags);
  unsigned long long count = 0;
  int64_t first = -1;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t v = target[i];
    if (v == ignore) continue;
    if (v < 0 || v >= classes) {
      if (first < 0) first = i;
    } else {
      ++count;
    }
  }
  if (count > 0) atomicAdd(&flags[kCheckScratchWords], count);
  note_first_bad(scratch, first);
  publish_first_bad(scratch, [&](int64_t position) { publish_device_check(slot, check, target[position], classes, ignore); });
}

// Lines along `dim` of a dense tensor of `shape`: [outer, size, inner].
struct Lines {
  int64_t outer = 1, size = 0, inner = 1;
};
Lines lines_along(const Shape& shape, int64_t dim) {
  Lines g;
  if (shape.empty()) {  // a 0-d tensor: one line of one element
    g.size = 1;
    return g;
  }
  g.size = shape[dim];
  for (int64_t d = 0; d < dim; ++d) g.outer *= shape[d];
  for (std::size_t d = dim + 1; d < shape.size(); ++d) g.inner *= shape[d];
  return g;
}

// Threads for one row: a power of two in [32, 1024 = kMaxThreads], about one per 32 elements.
int row_threads(int64_t size) {
  int t = 32;
  while (t < kMaxThreads && int64_t(t) * 32 < size) t *= 2;
  return t;
}
// Threads along the reduced dim of the strided kernel: a power of two in [1, 32] (blocks of
// 32 x 32 = kMaxThreads at most).
static_assert(32 * 32 == kMaxThreads);
int column_threads(int64_t size) {
  int t = 1;
  while (t < 32 && int64_t(t) * 32 < size) t *= 2;
  return t;
}

template <typename T, bool kBackward>
void launch_softmax(const Tensor& a, const Tensor* b, const Tensor& out, int64_t dim, bool log) {
  const Lines g = lines_along(out.shape(), dim);
  if (g.size == 0 || g.outer == 0 || g.inner == 0) return;
  const LaunchContext ctx(out.device());
  const T* pa = static_cast<const T*>(a.data_ptr());
  const T* pb = b != nullptr ? static_cast<const T*>(b->data_ptr()) : nullptr;
  T* po = static_cast<T*>(out.data_ptr());
  constexpr int64_t kMaxGrid = int64_t(1) << 30;
  if (g.inner == 1) {
    const int64_t blocks = std::min<int64_t>(g.outer, std::min(kMaxGrid, ctx.max_blocks * 8));
    softmax_rows_kernel<T, kBackward><<<unsigned(blocks), row_threads(g.size), 0, ctx.stream>>>(
        g.outer, g.size, pa, pb, po, log);
  } else {
    const int64_t tiles = g.outer * ((g.inner + 31) / 32);
    const int64_t blocks = std::min<int64_t>(tiles, std::min(kMaxGrid, ctx.max_blocks * 8));
    const dim3 threads(32, unsigned(column_threads(g.size)));
    softmax_strided_kernel<T, kBackward><<<unsigned(blocks), threads, 0, ctx.stream>>>(g.outer, g.size, g.inner, pa,
                                                                                       pb, po, log);
  }
  MG_CUDA_CHECK_LAUNCH(kBackward ? "softmax backward kernel" : "softmax kernel");
}

// Counts the targets (dense i64 [n]) not ignored and validates them as the CPU does, on the
// device: returns the zeroed-then-written buffer (a CheckScratch, then the count) on the current
// stream; count_of() points the loss kernels at the count (the mean's divisor), so it is never a
// host value a captured graph would freeze. Nothing is read back: a bad target is published to
// the device's report slot and raised as the CPU's IndexError at the host's next wait
// (cuda/host/device_check_report.h), and the loss kernels treat it as ignored (target_ignored),
// never reading outside the line. Inside a CUDA graph capture the check is captured with the
// step, so a replay with a bad target reports it too.
Tensor check_targets(DeviceCheck check, const Tensor& target, int64_t classes, int64_t ignore) {
  const int64_t n = target.numel();
  // A CheckScratch, then the count (0 when n == 0).
  Tensor flags = zeros({kCheckScratchWords + 1}, {.dtype = DType::I64, .device = target.device()});
  if (n == 0) return flags;
  const LaunchContext ctx(target.device());
  ce_check_kernel<<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(
      n, static_cast<const int64_t*>(target.data_ptr()), classes, ignore,
      static_cast<unsigned long long*>(flags.data_ptr()), detail::device_check_slot(target.device().index), check);
  MG_CUDA_CHECK_LAUNCH("cross_entropy target check kernel");
  return flags;
}

// The count of a check_targets buffer, on the device.
const unsigned long long* count_of(const Tensor& flags) {
  return static_cast<const unsigned long long*>(flags.data_ptr()) + kCheckScratchWords;
}

template <typename T, bool kBackward>
void launch_ce(const CeArgs<T>& p, Device device) {
  const LaunchContext ctx(device);
  constexpr int64_t kMaxGrid = int64_t(1) << 30;
  if (p.inner == 1) {
    const int64_t blocks = std::min<int64_t>(p.outer, std::min(kMaxGrid, ctx.max_blocks * 8));
    ce_rows_kernel<T, kBackward><<<unsigned(blocks), row_threads(p.classes), 0, ctx.stream>>>(p);
  } else {
    const int64_t tiles = p.outer * ((p.inner + 31) / 32);
    const int64_t blocks = std::min<int64_t>(tiles, std::min(kMaxGrid, ctx.max_blocks * 8));
    ce_strided_kernel<T, kBackward><<<unsigned(blocks), dim3(32, unsigned(column_threads(p.classes))), 0,
                                      ctx.stream>>>(p);
  }
  MG_CUDA_CHECK_LAUNCH(kBackward ? "cross_entropy backward kernel" : "cross_entropy kernel");
}

// in = (logits, target); out = the loss reduced by attrs.mode (ints[0] = ignore_index,
// alpha = label smoothing).
template <typename T>
void cross_entropy_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using A = acc_t<T>;
  NoGradGuard no_grad;  // the dense copies are not part of the graph
  const Tensor x = contiguous(in[0]), t = contiguous(in[1]);
  const Lines g = lines_along(x.shape(), x.dim() == 1 ? 0 : 1);
  CeArgs<T> p;
  p.outer = g.outer;
  p.classes = g.size;
  p.inner = g.inner;
  p.ignore = a.ints.at(0);
  const Tensor flags = check_targets(DeviceCheck::CrossEntropy, t, p.classes, p.ignore);  // alive past the launches
  p.x = static_cast<const T*>(x.data_ptr());
  p.target = static_cast<const int64_t*>(t.data_ptr());
  p.eps = static_cast<A>(a.alpha);
  const int64_t samples = g.outer * g.inner;
  const Tensor loss = empty({samples}, {.dtype = dtype_v<A>, .device = x.device()});  // every sample is written
  p.loss = static_cast<A*>(loss.data_ptr());
  if (samples > 0) launch_ce<T, false>(p, x.device());
  const LaunchContext ctx(x.device());
  T* po = static_cast<T*>(out[0].data_ptr());
  if (a.mode == int64_t(Reduction::None)) {
    if (samples == 0) return;
    ce_store_kernel<T, A><<<ctx.blocks(samples), kThreads, 0, ctx.stream>>>(samples, p.loss, po);
  } else {
    ce_total_kernel<T, A><<<1, kMaxThreads, 0, ctx.stream>>>(samples, p.loss, po,
                                                             a.mode == int64_t(Reduction::Mean), count_of(flags));
  }
  MG_CUDA_CHECK_LAUNCH("cross_entropy store kernel");
}

// in = (log_probs, target); out = the loss reduced by attrs.mode (ints[0] = ignore_index).
template <typename T>
void nll_loss_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using A = acc_t<T>;
  NoGradGuard no_grad;  // the dense copies are not part of the graph
  const Tensor x = contiguous(in[0]), t = contiguous(in[1]);
  const Lines g = lines_along(x.shape(), x.dim() == 1 ? 0 : 1);
  const int64_t ignore = a.ints.at(0);
  const Tensor flags = check_targets(DeviceCheck::NllLoss, t, g.size, ignore);  // alive past the launches
  const int64_t samples = g.outer * g.inner;
  const Tensor loss = empty({samples}, {.dtype = dtype_v<A>, .device = x.device()});  // every sample is written
  A* pl = static_cast<A*>(loss.data_ptr());
  T* po = static_cast<T*>(out[0].data_ptr());
  const LaunchContext ctx(x.device());
  if (samples > 0) {
    nll_kernel<T, A><<<ctx.blocks(samples), kThreads, 0, ctx.stream>>>(
        samples, g.size, g.inner, static_cast<const T*>(x.data_ptr()), static_cast<const int64_t*>(t.data_ptr()),
        ignore, pl);
    MG_CUDA_CHECK_LAUNCH("nll_loss kernel");
  }
  if (a.mode == int64_t(Reduction::None)) {
    if (samples == 0) return;
    ce_store_kernel<T, A><<<ctx.blocks(samples), kThreads, 0, ctx.stream>>>(samples, pl, po);
  } else {
    ce_total_kernel<T, A><<<1, kMaxThreads, 0, ctx.stream>>>(samples, pl, po, a.mode == int64_t(Reduction::Mean),
                                                             count_of(flags));
  }
  MG_CUDA_CHECK_LAUNCH("nll_loss store kernel");
}

// in = (grad, logits, target); out = d loss / d logits [logits' shape].
template <typename T>
void cross_entropy_backward_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using A = acc_t<T>;
  NoGradGuard no_grad;  // the dense copies are not part of the graph
  const Tensor gr = contiguous(in[0]), x = contiguous(in[1]), t = contiguous(in[2]);
  const Lines g = lines_along(x.shape(), x.dim() == 1 ? 0 : 1);
  CeArgs<T> p;
  p.outer = g.outer;
  p.classes = g.size;
  p.inner = g.inner;
  p.ignore = a.ints.at(0);
  const Tensor flags = check_targets(DeviceCheck::CrossEntropyBackward, t, p.classes, p.ignore);  // alive past launch
  p.count = count_of(flags);
  p.x = static_cast<const T*>(x.data_ptr());
  p.target = static_cast<const int64_t*>(t.data_ptr());
  p.eps = static_cast<A>(a.alpha);
  p.grad = static_cast<const T*>(gr.data_ptr());
  p.mode = a.mode;
  p.dx = static_cast<T*>(out[0].data_ptr());
  if (out[0].numel() == 0) return;
  launch_ce<T, true>(p, x.device());
}

// out [x's shape] = softmax(x) or log_softmax(x) along attrs.dim
template <typename T, bool kLog>
void softmax_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  NoGradGuard no_grad;  // the dense copy is not part of the graph
  const Tensor x = contiguous(in[0]);
  launch_softmax<T, false>(x, nullptr, out[0], a.dim, kLog);
}

// in = (g, y): out = y (g - sum(g y)) (softmax) or g - exp(y) sum(g) (log_softmax) along attrs.dim
template <typename T, bool kLog>
void softmax_backward_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  NoGradGuard no_grad;  // the dense copies are not part of the graph
  const Tensor g = contiguous(in[0]), y = contiguous(in[1]);
  launch_softmax<T, true>(g, &y, out[0], a.dim, kLog);
}

template <typename T>
void reg() {
  constexpr DType d = dtype_v<T>;
  constexpr DeviceType cuda = DeviceType::CUDA;
  register_kernel(OpId::softmax, cuda, d, softmax_kernel<T, false>);
  register_kernel(OpId::log_softmax, cuda, d, softmax_kernel<T, true>);
  register_kernel(OpId::softmax_backward, cuda, d, softmax_backward_kernel<T, false>);
  register_kernel(OpId::log_softmax_backward, cuda, d, softmax_backward_kernel<T, true>);
  register_kernel(OpId::cross_entropy, cuda, d, cross_entropy_kernel<T>);
  register_kernel(OpId::cross_entropy_backward, cuda, d, cross_entropy_backward_kernel<T>);
  register_kernel(OpId::nll_loss, cuda, d, nll_loss_kernel<T>);
}

}  // namespace

void register_softmax_kernels() {
  reg<double>();
  reg<float>();
  reg<Half>();
  reg<BFloat16>();
}

}  // namespace mg::cuda
