// CUDA kernels of the pooling ops (NCHW, f64/f32/f16/bf16), mirroring ops/cpu/pool_kernels.cpp
// and its windows (ops/cpu/pool_window.h, re-stated below as device code):
// - max_pool2d / max_pool2d_indices: one thread per output; the window is scanned row-major in
//   the compute type with the CPU's rule (first maximum wins, a NaN wins and stays, padding
//   skipped), and the winning element is copied, so values and indices equal the CPU's exactly.
//   Its backward is the public scatter_add of the indices (ops/pool.cpp), which has a CUDA kernel.
// - avg_pool2d / adaptive_avg_pool2d: one thread per output, summing its window in opmath (f32
//   for f16/bf16, f64 for f64) in the CPU's order — in order up to kSumLeaf (128) taps, else
//   row-major leaves of 128 combined by the CPU's binary counter (core/cascade_sum.h) — then one
//   divide and one rounding: the same operations as the CPU, so the same bits.
// - avg_pool2d_backward / adaptive_avg_pool2d_backward: gather, no atomics: one thread per input
//   element walks the outputs whose window holds it, oh then ow ascending (the CPU's scatter
//   order), adding g / divisor in opmath, and rounds once: deterministic and equal to the CPU.
// Inputs are made dense first; outputs are dense.
#include <cuda_runtime.h>

#include <algorithm>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/cascade_sum.h"
#include "mixgrad/core/half.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/kernels/launch.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/ops.h"

namespace mg::cuda {
namespace {

// One spatial dim of a strided window (ops/cpu/pool_window.h's Window1d): k taps, stride s,
// padding p, dilation d, input size n.
struct Win {
  int64_t k, s, p, d, n;
};
__device__ __forceinline__ int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

struct Range {
  int64_t lo, hi, padded;  // real rows [lo, hi), padded window size
};
__device__ Range avg_range(const Win& w, int64_t i) {
  const int64_t a = i * w.s - w.p;
  const int64_t b = imin(a + w.k, w.n + w.p);
  return {imax(a, 0), imin(b, w.n), b - a};
}
// [floor(i n / out), ceil((i + 1) n / out))
__device__ Range adaptive_range(int64_t n, int64_t out, int64_t i) {
  const int64_t lo = (i * n) / out, hi = ((i + 1) * n + out - 1) / out;
  return {lo, hi, hi - lo};
}

// The average windows of an output position (strided or adaptive) and their divisor.
struct AvgGeom {
  bool adaptive, include_pad;
  Win h, w;                // strided pooling (dilation 1)
  int64_t H, W, Ho, Wo;    // input and output plane sizes
  __device__ Range rh(int64_t i) const { return adaptive ? adaptive_range(H, Ho, i) : avg_range(h, i); }
  __device__ Range rw(int64_t j) const { return adaptive ? adaptive_range(W, Wo, j) : avg_range(w, j); }
  __device__ int64_t divisor(const Range& a, const Range& b) const {
    return include_pad ? a.padded * b.padded : (a.hi - a.lo) * (b.hi - b.lo);
  }
  // Outputs along one dim whose window may hold input row i: [first, last] (a superset is fine,
  // the caller checks membership; these are exact for both kinds of window).
  __device__ void candidates(bool rows, int64_t i, int64_t* first, int64_t* last) const {
    const int64_t n = rows ? H : W, out = rows ? Ho : Wo;
    if (adaptive) {
      *first = (i * out) / n;                  // hi(o) > i  <=>  o >= floor(i out / n)
      *last = ((i + 1) * out - 1) / n;         // lo(o) <= i <=>  o <= ((i + 1) out - 1) / n
    } else {
      const Win& win = rows ? h : w;           // o s - p <= i < o s - p + k
      const int64_t t = i + win.p - win.k + 1;
      *first = t <= 0 ? 0 : (t + win.s - 1) / win.s;
      *last = (i + win.p) / win.s;
    }
    *first = imax(*first, 0);
    *last = imin(*last, out - 1);
  }
};

// The CPU's LeafSum (ops/cpu/leaf_sum.h) for one thread: in-order leaves of kSumLeaf terms,
// combined by Cascade's binary counter (core/cascade_sum.h).
template <typename A>
struct DeviceLeafSum {
  A levels[40];
  uint64_t count = 0;  // leaves pushed
  A leaf = A(0);
  int64_t in_leaf = 0;
  __device__ void push(A v) {
    int level = 0;
    for (uint64_t c = count; c & 1u; c >>= 1, ++level) v = levels[level] + v;
    levels[level] = v;
    ++count;
  }
  __device__ void add(A v) {
    leaf += v;
    if (++in_leaf == kSumLeaf) {
      push(leaf);
      leaf = A(0);
      in_leaf = 0;
    }
  }
  __device__ A result() {
    if (count == 0) return leaf;
    if (in_leaf != 0) push(leaf);
    int level = __ffsll(static_cast<long long>(count)) - 1;
    A acc = levels[level];
    for (uint64_t c = count >> (level + 1); c != 0; c >>= 1) {
      ++level;
      if (c & 1u) acc = levels[level] + acc;
    }
    return acc;
  }
};

// x [P, H, W] (P = N * C planes) -> values (T) or indices (i64 into H * W) [P, Ho, Wo]
template <typename T>
__global__ void max_pool2d_forward_kernel(int64_t total, int64_t Ho, int64_t Wo, Win h, Win w,
                                          const T* __restrict__ x, T* __restrict__ y, int64_t* __restrict__ idx) {
  using Cm = opmath_t<T>;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = o % Wo, oh = (o / Wo) % Ho, p = o / (Wo * Ho);
    const T* xpl = x + p * h.n * w.n;
    int64_t best_i = -1;
    Cm best = Cm(0);
    for (int64_t ki = 0; ki < h.k; ++ki) {
      const int64_t ih = oh * h.s - h.p + ki * h.d;
      if (ih < 0 || ih >= h.n) continue;
      for (int64_t kj = 0; kj < w.k; ++kj) {
        const int64_t iw = ow * w.s - w.p + kj * w.d;
        if (iw < 0 || iw >= w.n) continue;
        const Cm v = static_cast<Cm>(xpl[ih * w.n + iw]);
        if (best_i < 0 || v > best || (v != v && !(best != best))) {
          best = v;
          best_i = ih * w.n + iw;
        }
      }
    }
    // best_i >= 0: the op checks padding <= half the window, so every window holds an element
    if (idx != nullptr) {
      idx[o] = best_i;
    } else {
      y[o] = xpl[best_i];
    }
  }
}

// x [P, H, W] -> y [P, Ho, Wo]: the mean over each window
template <typename T>
__global__ void avg_pool2d_forward_kernel(int64_t total, AvgGeom g, const T* __restrict__ x, T* __restrict__ y) {
  using Cm = opmath_t<T>;  // f32 for f16/bf16, f64 for f64
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = o % g.Wo, oh = (o / g.Wo) % g.Ho, p = o / (g.Wo * g.Ho);
    const T* xpl = x + p * g.H * g.W;
    const Range rh = g.rh(oh), rw = g.rw(ow);
    Cm s = Cm(0);
    if ((rh.hi - rh.lo) * (rw.hi - rw.lo) <= kSumLeaf) {
      for (int64_t ih = rh.lo; ih < rh.hi; ++ih)
        for (int64_t iw = rw.lo; iw < rw.hi; ++iw) s += static_cast<Cm>(xpl[ih * g.W + iw]);
    } else {
      DeviceLeafSum<Cm> ls;
      for (int64_t ih = rh.lo; ih < rh.hi; ++ih)
        for (int64_t iw = rw.lo; iw < rw.hi; ++iw) ls.add(static_cast<Cm>(xpl[ih * g.W + iw]));
      s = ls.result();
    }
    y[o] = static_cast<T>(s / static_cast<Cm>(g.divisor(rh, rw)));  // one rounding
  }
}

// gr [P, Ho, Wo] -> dx [P, H, W]: each input element sums g / divisor over the windows holding it
template <typename T>
__global__ void avg_pool2d_backward_kernel(int64_t total, AvgGeom g, const T* __restrict__ gr, T* __restrict__ dx) {
  using Cm = opmath_t<T>;  // f32 for f16/bf16, f64 for f64
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t iw = i % g.W, ih = (i / g.W) % g.H, p = i / (g.W * g.H);
    const T* gpl = gr + p * g.Ho * g.Wo;
    int64_t oh0, oh1, ow0, ow1;
    g.candidates(true, ih, &oh0, &oh1);
    g.candidates(false, iw, &ow0, &ow1);
    Cm acc = Cm(0);
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      const Range rh = g.rh(oh);
      if (ih < rh.lo || ih >= rh.hi) continue;
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const Range rw = g.rw(ow);
        if (iw < rw.lo || iw >= rw.hi) continue;
        acc += static_cast<Cm>(gpl[oh * g.Wo + ow]) / static_cast<Cm>(g.divisor(rh, rw));
      }
    }
    dx[i] = static_cast<T>(acc);  // one rounding
  }
}

Win max_dim(const OpAttrs& a, int axis, int64_t n) {
  return {a.ints[0 + axis], a.ints[2 + axis], a.ints[4 + axis], a.ints[6 + axis], n};
}

// in = (x [N, C, H, W]); out = max values [N, C, Ho, Wo] (T) or their indices (i64); attrs.ints =
// {kH, kW, sH, sW, pH, pW, dH, dW}
template <typename T, bool kIndices>
void max_pool2d_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  NoGradGuard no_grad;  // the dense copy is not part of the graph
  const Tensor x = contiguous(in[0]);
  const int64_t total = out[0].numel();
  if (total == 0) return;
  const LaunchContext ctx(x.device());
  max_pool2d_forward_kernel<T><<<ctx.blocks(total), kThreads, 0, ctx.stream>>>(
      total, out[0].size(2), out[0].size(3), max_dim(a, 0, x.size(2)), max_dim(a, 1, x.size(3)),
      static_cast<const T*>(x.data_ptr()), kIndices ? nullptr : static_cast<T*>(out[0].data_ptr()),
      kIndices ? static_cast<int64_t*>(out[0].data_ptr()) : nullptr);
  MG_CUDA_CHECK_LAUNCH("max_pool2d kernel");
}

AvgGeom avg_geom(bool adaptive, const OpAttrs& a, int64_t H, int64_t W, int64_t Ho, int64_t Wo) {
  AvgGeom g{};
  g.adaptive = adaptive;
  g.H = H, g.W = W, g.Ho = Ho, g.Wo = Wo;
  if (!adaptive) {
    g.h = {a.ints[0], a.ints[2], a.ints[4], 1, H};
    g.w = {a.ints[1], a.ints[3], a.ints[5], 1, W};
    g.include_pad = a.mode != 0;
  }
  return g;
}

// in = (x [N, C, H, W]); out = y [N, C, Ho, Wo]; attrs as avg_pool2d or adaptive_avg_pool2d
template <typename T, bool kAdaptive>
void avg_pool2d_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  NoGradGuard no_grad;
  const Tensor x = contiguous(in[0]);
  const int64_t total = out[0].numel();
  if (total == 0) return;
  const AvgGeom g = avg_geom(kAdaptive, a, x.size(2), x.size(3), out[0].size(2), out[0].size(3));
  const LaunchContext ctx(x.device());
  avg_pool2d_forward_kernel<T><<<ctx.blocks(total), kThreads, 0, ctx.stream>>>(
      total, g, static_cast<const T*>(x.data_ptr()), static_cast<T*>(out[0].data_ptr()));
  MG_CUDA_CHECK_LAUNCH("avg_pool2d kernel");
}

// in = (g [N, C, Ho, Wo]); out = dx [N, C, H, W]; attrs as the *_backward op
template <typename T, bool kAdaptive>
void avg_pool2d_backward_kernel_fn(const Tensors& in, Tensors& out, const OpAttrs& a) {
  NoGradGuard no_grad;
  const Tensor gr = contiguous(in[0]);
  const int64_t total = out[0].numel();
  if (total == 0) return;
  const AvgGeom g = avg_geom(kAdaptive, a, out[0].size(2), out[0].size(3), gr.size(2), gr.size(3));
  const LaunchContext ctx(gr.device());
  avg_pool2d_backward_kernel<T><<<ctx.blocks(total), kThreads, 0, ctx.stream>>>(
      total, g, static_cast<const T*>(gr.data_ptr()), static_cast<T*>(out[0].data_ptr()));
  MG_CUDA_CHECK_LAUNCH("avg_pool2d backward kernel");
}

template <typename T>
void reg() {
  constexpr DType d = dtype_v<T>;
  constexpr DeviceType cuda = DeviceType::CUDA;
  register_kernel(OpId::max_pool2d, cuda, d, max_pool2d_kernel<T, false>);
  register_kernel(OpId::max_pool2d_indices, cuda, d, max_pool2d_kernel<T, true>);
  register_kernel(OpId::avg_pool2d, cuda, d, avg_pool2d_kernel<T, false>);
  register_kernel(OpId::adaptive_avg_pool2d, cuda, d, avg_pool2d_kernel<T, true>);
  register_kernel(OpId::avg_pool2d_backward, cuda, d, avg_pool2d_backward_kernel_fn<T, false>);
  register_kernel(OpId::adaptive_avg_pool2d_backward, cuda, d, avg_pool2d_backward_kernel_fn<T, true>);
}

}  // namespace

void register_pool_kernels() {
  reg<double>();
  reg<float>();
  reg<Half>();
  reg<BFloat16>();
}

}  // namespace mg::cuda
