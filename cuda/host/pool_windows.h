// The per-output (forward) and per-input (backward) work of the CUDA pooling kernels
// (cuda/kernels/pool.cu) as host-device code, so tests/cuda/test_cuda_misc_ops.cpp runs it element
// by element on the CPU against the CPU kernels. The windows restate ops/cpu/pool_window.h; the
// sums follow the CPU's order (an in-order opmath sum up to kSumLeaf taps, else row-major leaves
// of kSumLeaf combined by core/cascade_sum.h's binary counter); the backward ops are gathers: input
// element i walks the outputs whose window holds it, oh then ow ascending — the order in which the
// CPU's scatter adds to it — so no atomics and the CPU's bits.
// Layouts (PoolLayout): a dense NCHW or NHWC tensor; element e (in memory order) is located as
// (plane = n * C + c, row, col), and a plane's spatial elements are `step` apart (1 or C). The
// per-element arithmetic is the same in both layouts, so NHWC gives the NCHW bits.
#pragma once
#include <cstdint>
#include <vector>

#include "mixgrad/core/dtype.h"
#include "mixgrad/core/macros.h"

namespace mg::cuda {

inline constexpr int64_t kPoolLeaf = 128;  // kSumLeaf of core/cascade_sum.h (checked in the test)

MG_HOST_DEVICE int64_t pool_min(int64_t a, int64_t b) { return a < b ? a : b; }
MG_HOST_DEVICE int64_t pool_max(int64_t a, int64_t b) { return a > b ? a : b; }

// One spatial dim of a strided window: k taps, stride s, padding p, dilation d, input size n.
struct PoolWin {
  int64_t k, s, p, d, n;
};
struct PoolRange {
  int64_t lo, hi, padded;  // real rows [lo, hi), padded window size
};
MG_HOST_DEVICE PoolRange pool_avg_range(const PoolWin& w, int64_t i) {
  const int64_t a = i * w.s - w.p;
  const int64_t b = pool_min(a + w.k, w.n + w.p);
  return {pool_max(a, 0), pool_min(b, w.n), b - a};
}
// [floor(i n / out), ceil((i + 1) n / out))
MG_HOST_DEVICE PoolRange pool_adaptive_range(int64_t n, int64_t out, int64_t i) {
  const int64_t lo = (i * n) / out, hi = ((i + 1) * n + out - 1) / out;
  return {lo, hi, hi - lo};
}

// The average windows (strided or adaptive) of [P, H, W] -> [P, Ho, Wo] and their divisor.
struct AvgGeom {
  bool adaptive, include_pad;
  int64_t divisor_override;  // > 0: every window divides by it (PyTorch's divisor_override)
  PoolWin h, w;          // strided pooling (dilation 1)
  int64_t H, W, Ho, Wo;  // input and output plane sizes
  MG_HOST_DEVICE PoolRange rh(int64_t i) const {
    return adaptive ? pool_adaptive_range(H, Ho, i) : pool_avg_range(h, i);
  }
  MG_HOST_DEVICE PoolRange rw(int64_t j) const {
    return adaptive ? pool_adaptive_range(W, Wo, j) : pool_avg_range(w, j);
  }
  MG_HOST_DEVICE int64_t divisor(const PoolRange& a, const PoolRange& b) const {
    if (divisor_override > 0) return divisor_override;
    return include_pad ? a.padded * b.padded : (a.hi - a.lo) * (b.hi - b.lo);
  }
  // The outputs [first, last] along one dim whose window may hold input row i (the caller checks
  // membership, so a superset would do; these bounds are exact for both kinds of window).
  MG_HOST_DEVICE void candidates(bool rows, int64_t i, int64_t* first, int64_t* last) const {
    const int64_t n = rows ? H : W, out = rows ? Ho : Wo;
    if (adaptive) {
      *first = (i * out) / n;           // hi(o) > i  <=>  o >= floor(i out / n)
      *last = ((i + 1) * out - 1) / n;  // lo(o) <= i <=>  o <= ((i + 1) out - 1) / n
    } else {
      const PoolWin& win = rows ? h : w;  // o s - p <= i < o s - p + k
      const int64_t t = i + win.p - win.k + 1;
      *first = t <= 0 ? 0 : (t + win.s - 1) / win.s;
      *last = (i + win.p) / win.s;
    }
    *first = pool_max(*first, 0);
    *last = pool_min(*last, out - 1);
  }
};

// Where the elements of a dense [N, C, rows, cols] tensor sit in memory: NCHW (planes of rows *
// cols contiguous elements) or NHWC (the C channels of a pixel contiguous, a plane strided by C).
struct PoolLayout {
  bool nhwc = false;
  int64_t c = 1;  // channels (C)
  // Element e in memory order -> its plane (n * C + c), row and column.
  MG_HOST_DEVICE void locate(int64_t e, int64_t rows, int64_t cols, int64_t* plane, int64_t* r, int64_t* q) const {
    if (nhwc) {
      const int64_t ch = e % c, pix = e / c;  // pix = (n * rows + r) * cols + q
      *q = pix % cols;
      *r = (pix / cols) % rows;
      *plane = (pix / (cols * rows)) * c + ch;
    } else {
      *q = e % cols;
      *r = (e / cols) % rows;
      *plane = e / (cols * rows);
    }
  }
  // Offset of element (plane, 0, 0); (plane, r, q) is at base + (r * cols + q) * step().
  MG_HOST_DEVICE int64_t base(int64_t plane, int64_t rows, int64_t cols) const {
    return nhwc ? (plane / c) * rows * cols * c + plane % c : plane * rows * cols;
  }
  MG_HOST_DEVICE int64_t step() const { return nhwc ? c : 1; }
};

// ops/cpu/leaf_sum.h's LeafSum for one thread: in-order leaves of kPoolLeaf terms combined by the
// binary counter of core/cascade_sum.h's Cascade.
template <typename A>
struct PoolLeafSum {
  A levels[48];
  uint64_t count = 0;  // leaves pushed
  A leaf = A(0);
  int64_t in_leaf = 0;
  MG_HOST_DEVICE void push(A v) {
    int level = 0;
    for (uint64_t c = count; c & 1u; c >>= 1, ++level) v = levels[level] + v;
    levels[level] = v;
    ++count;
  }
  MG_HOST_DEVICE void add(A v) {
    leaf += v;
    if (++in_leaf == kPoolLeaf) {
      push(leaf);
      leaf = A(0);
      in_leaf = 0;
    }
  }
  MG_HOST_DEVICE A result() {
    if (count == 0) return leaf;
    if (in_leaf != 0) push(leaf);
    int level = 0;
    while (((count >> level) & 1u) == 0) ++level;
    A acc = levels[level];
    for (uint64_t c = count >> (level + 1); c != 0; c >>= 1) {
      ++level;
      if (c & 1u) acc = levels[level] + acc;
    }
    return acc;
  }
};

// Output o (in memory order) of max pooling over x [N, C, H = h.n, W = w.n] -> [N, C, Ho, Wo], both
// in layout `l`: the flat index (ih * W + iw) of the window's first maximum in the compute type,
// padding skipped, a NaN wins (the window's last NaN, as PyTorch's); *base is the offset of x's plane (the value sits at
// x[*base + index * l.step()]).
template <typename T>
MG_HOST_DEVICE int64_t max_pool_argmax(int64_t o, int64_t Ho, int64_t Wo, const PoolWin& h, const PoolWin& w,
                                       const PoolLayout& l, const T* x, int64_t* base) {
  using Cm = opmath_t<T>;
  int64_t p, oh, ow;
  l.locate(o, Ho, Wo, &p, &oh, &ow);
  const int64_t b = l.base(p, h.n, w.n), st = l.step();
  *base = b;
  int64_t best_i = -1;
  Cm best = Cm(0);
  for (int64_t ki = 0; ki < h.k; ++ki) {
    const int64_t ih = oh * h.s - h.p + ki * h.d;
    if (ih < 0 || ih >= h.n) continue;
    for (int64_t kj = 0; kj < w.k; ++kj) {
      const int64_t iw = ow * w.s - w.p + kj * w.d;
      if (iw < 0 || iw >= w.n) continue;
      const Cm v = static_cast<Cm>(x[b + (ih * w.n + iw) * st]);
      if (best_i < 0 || v > best || v != v) {  // PyTorch's rule: a later NaN takes over
        best = v;
        best_i = ih * w.n + iw;
      }
    }
  }
  return best_i;  // >= 0: the op checks padding <= half the window, so each window holds an element
}

// Output o (in memory order) of average pooling over x [N, C, H, W] -> [N, C, Ho, Wo], both in
// layout `l`: sum in opmath, one divide, one rounding.
template <typename T>
MG_HOST_DEVICE T avg_pool_at(int64_t o, const AvgGeom& g, const PoolLayout& l, const T* x) {
  using Cm = opmath_t<T>;  // f32 for f16/bf16, f64 for f64
  int64_t p, oh, ow;
  l.locate(o, g.Ho, g.Wo, &p, &oh, &ow);
  const T* xpl = x + l.base(p, g.H, g.W);
  const int64_t st = l.step();
  const PoolRange rh = g.rh(oh), rw = g.rw(ow);
  Cm s = Cm(0);
  if ((rh.hi - rh.lo) * (rw.hi - rw.lo) <= kPoolLeaf) {
    for (int64_t ih = rh.lo; ih < rh.hi; ++ih)
      for (int64_t iw = rw.lo; iw < rw.hi; ++iw) s += static_cast<Cm>(xpl[(ih * g.W + iw) * st]);
  } else {
    PoolLeafSum<Cm> ls;
    for (int64_t ih = rh.lo; ih < rh.hi; ++ih)
      for (int64_t iw = rw.lo; iw < rw.hi; ++iw) ls.add(static_cast<Cm>(xpl[(ih * g.W + iw) * st]));
    s = ls.result();
  }
  return static_cast<T>(s / static_cast<Cm>(g.divisor(rh, rw)));
}

// Input element i (in memory order) of the average-pooling backward, gr [N, C, Ho, Wo] -> dx
// [N, C, H, W], both in layout `l`: Σ g / divisor over the windows holding it, in opmath, rounded once.
template <typename T>
MG_HOST_DEVICE T avg_pool_grad_at(int64_t i, const AvgGeom& g, const PoolLayout& l, const T* gr) {
  using Cm = opmath_t<T>;
  int64_t p, ih, iw;
  l.locate(i, g.H, g.W, &p, &ih, &iw);
  const T* gpl = gr + l.base(p, g.Ho, g.Wo);
  const int64_t st = l.step();
  int64_t oh0, oh1, ow0, ow1;
  g.candidates(true, ih, &oh0, &oh1);
  g.candidates(false, iw, &ow0, &ow1);
  Cm acc = Cm(0);
  for (int64_t oh = oh0; oh <= oh1; ++oh) {
    const PoolRange rh = g.rh(oh);
    if (ih < rh.lo || ih >= rh.hi) continue;
    for (int64_t ow = ow0; ow <= ow1; ++ow) {
      const PoolRange rw = g.rw(ow);
      if (iw < rw.lo || iw >= rw.hi) continue;
      acc += static_cast<Cm>(gpl[(oh * g.Wo + ow) * st]) / static_cast<Cm>(g.divisor(rh, rw));
    }
  }
  return static_cast<T>(acc);
}

// Input element i (in memory order) of the max-pooling backward, gr and idx [N, C, Ho, Wo] (idx:
// max_pool2d_indices, flat ih * W + iw) -> dx [N, C, H = h.n, W = w.n], all in layout `l`: the sum
// of g over the outputs whose window maximum is i, oh then ow ascending (the CPU kernel's order),
// in opmath from 0, rounded once. The outputs whose window holds row ih are those with
// oh * s - p + j * d = ih for a tap j: walking j down gives them in ascending order. An index
// that is not a tap of its own window matches no element (a check kernel reports it, deferred:
// cuda/kernels/pool.cu).
template <typename T>
MG_HOST_DEVICE T max_pool_grad_at(int64_t i, int64_t Ho, int64_t Wo, const PoolWin& h, const PoolWin& w,
                                  const PoolLayout& l, const T* gr, const int64_t* idx) {
  using Cm = opmath_t<T>;
  int64_t p, ih, iw;
  l.locate(i, h.n, w.n, &p, &ih, &iw);
  const int64_t ob = l.base(p, Ho, Wo), st = l.step(), target = ih * w.n + iw;
  Cm acc = Cm(0);
  for (int64_t jh = h.k - 1; jh >= 0; --jh) {
    const int64_t th = ih + h.p - jh * h.d;
    if (th < 0 || th % h.s != 0 || th / h.s >= Ho) continue;
    const int64_t oh = th / h.s;
    for (int64_t jw = w.k - 1; jw >= 0; --jw) {
      const int64_t tw = iw + w.p - jw * w.d;
      if (tw < 0 || tw % w.s != 0 || tw / w.s >= Wo) continue;
      const int64_t o = ob + (oh * Wo + tw / w.s) * st;
      if (idx[o] == target) acc += static_cast<Cm>(gr[o]);
    }
  }
  return static_cast<T>(acc);
}

// The geometry from the ops' attrs: avg_pool2d(_backward) ints = {kH, kW, sH, sW, pH, pW, ...},
// mode bit 0 = count_include_pad (bit 1, ceil_mode, only changes the output sizes, which the
// kernels take from the tensors), `divisor_override` attrs.alpha (0: none); adaptive ops read
// only the plane sizes.
inline AvgGeom avg_geom(bool adaptive, const std::vector<int64_t>& ints, int64_t mode, int64_t H, int64_t W,
                        int64_t Ho, int64_t Wo, double divisor_override = 0.0) {
  AvgGeom g{};
  g.adaptive = adaptive;
  g.H = H, g.W = W, g.Ho = Ho, g.Wo = Wo;
  if (!adaptive) {
    g.h = {ints[0], ints[2], ints[4], 1, H};
    g.w = {ints[1], ints[3], ints[5], 1, W};
    g.include_pad = (mode & 1) != 0;
    g.divisor_override = static_cast<int64_t>(divisor_override);
  }
  return g;
}
inline PoolWin max_pool_win(const std::vector<int64_t>& ints, int axis, int64_t n) {
  return {ints[0 + axis], ints[2 + axis], ints[4 + axis], ints[6 + axis], n};
}

}  // namespace mg::cuda
