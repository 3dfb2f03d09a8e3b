// CPU kernels of the pooling ops, parallel over the N * C planes. Decision: max pooling compares
// in the compute type and copies the winning element (no rounding); average pooling sums in
// opmath (f32 for f16/bf16, f64 for f64) by the summation rule (windows longer than kSumLeaf taps,
// as in global pooling, in leaves combined pairwise), divides and rounds once on store; the backward kernels
// accumulate a whole input plane in opmath before one rounding. Inputs are made dense first, in
// the layout of the output (the infer rules keep the input's: channels-last stays NHWC), and every
// plane is addressed through its strides (Planes below), so NCHW and NHWC run the same arithmetic
// in the same order and give the same bits.
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/parallel.h"
#include "mixgrad/ops/cpu/leaf_sum.h"
#include "mixgrad/ops/cpu/pool_window.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/ops.h"

namespace mg::cpu {
namespace {

// t dense in the layout of `like` (NCHW or NHWC).
Tensor dense_like(const Tensor& t, const Tensor& like) {
  NoGradGuard no_grad;
  return contiguous(t, like.is_contiguous() ? MemoryFormat::Contiguous : MemoryFormat::ChannelsLast);
}

// The (n, c) planes of a 4-D tensor of any strides: plane p = n * C + c starts at base(p), and
// element (i, j) of a plane sits at i * sh + j * sw (in elements).
struct Planes {
  int64_t sn, sc, sh, sw, C;
  explicit Planes(const Tensor& t)
      : sn(t.stride(0)), sc(t.stride(1)), sh(t.stride(2)), sw(t.stride(3)), C(t.size(1)) {}
  int64_t base(int64_t p) const { return (p / C) * sn + (p % C) * sc; }
  int64_t at(int64_t i, int64_t j) const { return i * sh + j * sw; }
};

// attrs.mode: bit 0 count_include_pad (avg), bit 1 ceil_mode (ops/pool.cpp)
Window1d max_dim(const OpAttrs& a, int axis, int64_t n) {
  return {a.ints[0 + axis], a.ints[2 + axis], a.ints[4 + axis], a.ints[6 + axis], n, (a.mode & 2) != 0};
}
Window1d avg_dim(const OpAttrs& a, int axis, int64_t n) {
  return {a.ints[0 + axis], a.ints[2 + axis], a.ints[4 + axis], 1, n, (a.mode & 2) != 0};
}

// Index (ih * W + iw) of the first maximum of the window at (oh, ow) of the plane x [H, W] (element
// (ih, iw) at pl.at(ih, iw)); taps in the padding are skipped (-inf); a NaN wins, the last one of
// the window as in PyTorch's kernels.
template <typename T>
int64_t window_argmax(const T* x, const Planes& pl, const Window1d& h, const Window1d& w, int64_t oh, int64_t ow) {
  using Cm = opmath_t<T>;
  int64_t best_i = -1;
  Cm best = -std::numeric_limits<Cm>::infinity();
  for (int64_t ki = 0; ki < h.k; ++ki) {
    const int64_t ih = h.start(oh) + ki * h.d;
    if (ih < 0 || ih >= h.n) continue;
    for (int64_t kj = 0; kj < w.k; ++kj) {
      const int64_t iw = w.start(ow) + kj * w.d;
      if (iw < 0 || iw >= w.n) continue;
      const Cm v = Cm(x[pl.at(ih, iw)]);
      if (best_i < 0 || v > best || std::isnan(v)) {  // PyTorch's rule: a later NaN takes over
        best = v;
        best_i = ih * w.n + iw;
      }
    }
  }
  return best_i;  // >= 0: padding <= half the window, so every window holds a real element
}

// out [N, C, Ho, Wo]: the max (values) or its index (I64) over each window.
template <typename T, bool kIndices>
void max_pool2d_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  const Tensor x = dense_like(in[0], out[0]);
  const Window1d h = max_dim(a, 0, x.size(2)), w = max_dim(a, 1, x.size(3));
  const int64_t ho = h.out(), wo = w.out(), planes = x.size(0) * x.size(1);
  const Planes xs(x), os(out[0]);
  const T* xp = static_cast<const T*>(x.data_ptr());
  parallel_for(0, planes, 1, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const T* xpl = xp + xs.base(p);
      for (int64_t oh = 0; oh < ho; ++oh) {
        for (int64_t ow = 0; ow < wo; ++ow) {
          const int64_t i = window_argmax(xpl, xs, h, w, oh, ow);
          const int64_t o = os.base(p) + os.at(oh, ow);
          if constexpr (kIndices) {
            static_cast<int64_t*>(out[0].data_ptr())[o] = i;
          } else {
            static_cast<T*>(out[0].data_ptr())[o] = xpl[xs.at(i / w.n, i % w.n)];
          }
        }
      }
    }
  });
}

// The rows/columns an output position averages over and its divisor.
struct AvgWindows {
  bool adaptive;
  Window1d h, w;          // strided pooling
  int64_t H, W, Ho, Wo;   // both
  bool include_pad;
  int64_t divisor_override;  // > 0: every window divides by it (PyTorch's divisor_override)
  AvgRange rh(int64_t i) const { return adaptive ? adaptive_range(H, Ho, i) : avg_range(h, i); }
  AvgRange rw(int64_t j) const { return adaptive ? adaptive_range(W, Wo, j) : avg_range(w, j); }
  int64_t divisor(const AvgRange& a, const AvgRange& b) const {
    if (divisor_override > 0) return divisor_override;
    return include_pad ? a.padded * b.padded : (a.hi - a.lo) * (b.hi - b.lo);
  }
};

AvgWindows avg_windows(OpId op, const OpAttrs& a, int64_t H, int64_t W, int64_t Ho, int64_t Wo) {
  AvgWindows aw{};
  aw.adaptive = op == OpId::adaptive_avg_pool2d || op == OpId::adaptive_avg_pool2d_backward;
  aw.H = H, aw.W = W, aw.Ho = Ho, aw.Wo = Wo;
  if (!aw.adaptive) {
    aw.h = avg_dim(a, 0, H);
    aw.w = avg_dim(a, 1, W);
    aw.include_pad = (a.mode & 1) != 0;
    aw.divisor_override = static_cast<int64_t>(a.alpha);
  }
  return aw;
}

// y [N, C, Ho, Wo] = mean of x over each window.
template <typename T, OpId kOp>
void avg_pool2d_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using Cm = opmath_t<T>;
  const Tensor x = dense_like(in[0], out[0]);
  const int64_t H = x.size(2), W = x.size(3), Ho = out[0].size(2), Wo = out[0].size(3);
  const AvgWindows aw = avg_windows(kOp, a, H, W, Ho, Wo);
  const Planes xs(x), ys(out[0]);
  const T* xp = static_cast<const T*>(x.data_ptr());
  T* yp = static_cast<T*>(out[0].data_ptr());
  parallel_for(0, x.size(0) * x.size(1), 1, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const T* xpl = xp + xs.base(p);
      for (int64_t oh = 0; oh < Ho; ++oh) {
        const AvgRange rh = aw.rh(oh);
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const AvgRange rw = aw.rw(ow);
          // accumulates in f32 for f16/bf16, f64 for f64, by the summation rule: a window of up
          // to kSumLeaf taps is one in-order leaf; longer ones (adaptive / global pooling) are
          // leaves of kSumLeaf taps in row-major order, combined pairwise
          Cm s = 0;
          if ((rh.hi - rh.lo) * (rw.hi - rw.lo) <= kSumLeaf) {
            for (int64_t ih = rh.lo; ih < rh.hi; ++ih)
              for (int64_t iw = rw.lo; iw < rw.hi; ++iw) s += Cm(xpl[xs.at(ih, iw)]);
          } else {
            LeafSum<Cm> ls;
            for (int64_t ih = rh.lo; ih < rh.hi; ++ih) {
              const T* row = xpl + xs.at(ih, rw.lo);
              ls.add_run(rw.hi - rw.lo, [&](int64_t i) { return Cm(row[i * xs.sw]); });
            }
            s = ls.result();
          }
          yp[ys.base(p) + ys.at(oh, ow)] = T(s / Cm(aw.divisor(rh, rw)));  // one rounding
        }
      }
    }
  });
}

// dx [N, C, H, W] = each g [N, C, Ho, Wo] divided by its window's divisor, added over the window.
template <typename T, OpId kOp>
void avg_pool2d_backward_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using Cm = opmath_t<T>;
  const Tensor g = dense_like(in[0], out[0]);
  const int64_t H = out[0].size(2), W = out[0].size(3), Ho = g.size(2), Wo = g.size(3);
  const AvgWindows aw = avg_windows(kOp, a, H, W, Ho, Wo);
  const Planes gs(g), ds(out[0]);
  const T* gp = static_cast<const T*>(g.data_ptr());
  T* dxp = static_cast<T*>(out[0].data_ptr());
  parallel_for(0, g.size(0) * g.size(1), 1, [&](int64_t b, int64_t e) {
    std::vector<Cm> acc(static_cast<std::size_t>(H * W));  // f32 for f16/bf16, f64 for f64
    for (int64_t p = b; p < e; ++p) {
      std::fill(acc.begin(), acc.end(), Cm(0));
      for (int64_t oh = 0; oh < Ho; ++oh) {
        const AvgRange rh = aw.rh(oh);
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const AvgRange rw = aw.rw(ow);
          const Cm v = Cm(gp[gs.base(p) + gs.at(oh, ow)]) / Cm(aw.divisor(rh, rw));
          for (int64_t ih = rh.lo; ih < rh.hi; ++ih)
            for (int64_t iw = rw.lo; iw < rw.hi; ++iw) acc[std::size_t(ih * W + iw)] += v;
        }
      }
      T* dst = dxp + ds.base(p);
      for (int64_t i = 0; i < H * W; ++i) dst[ds.at(i / W, i % W)] = T(acc[std::size_t(i)]);  // one rounding
    }
  });
}

// dx [N, C, H, W] = each g [N, C, Ho, Wo] added at its window's maximum (indices from
// max_pool2d_indices): a plane accumulated in opmath, outputs in row-major order, rounded once.
template <typename T>
void max_pool2d_backward_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using Cm = opmath_t<T>;
  const Tensor g = dense_like(in[0], out[0]), idx = dense_like(in[1], out[0]);
  const int64_t H = out[0].size(2), W = out[0].size(3), Ho = g.size(2), Wo = g.size(3);
  const Planes gs(g), is(idx), ds(out[0]);
  const T* gp = static_cast<const T*>(g.data_ptr());
  const int64_t* ip = idx.data<int64_t>();
  T* dxp = static_cast<T*>(out[0].data_ptr());
  const int64_t planes = g.size(0) * g.size(1);
  // An index that is not a tap of its own window (not from max_pool2d_indices with these
  // attrs) is an error, found before any write: the CUDA gather, which visits only the windows
  // holding an element, could not add it.
  const Window1d wh = max_dim(a, 0, H), ww = max_dim(a, 1, W);
  auto tap = [](const Window1d& w, int64_t o, int64_t i) {
    const int64_t off = i - w.start(o);
    return off >= 0 && off % w.d == 0 && off / w.d < w.k;
  };
  parallel_for(0, planes, 1, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      for (int64_t oh = 0; oh < Ho; ++oh) {
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const int64_t t = ip[is.base(p) + is.at(oh, ow)];
          MG_CHECK(t >= 0 && t < H * W && tap(wh, oh, t / W) && tap(ww, ow, t % W), IndexError,
                   "max_pool2d_backward: index ", t, " at output (", oh, ", ", ow, ") of plane ", p,
                   " is not an element of that output's window in the ", H, " x ", W,
                   " input plane\n  hint: pass max_pool2d_indices of the same kernel, stride, padding and dilation");
        }
      }
    }
  });
  parallel_for(0, planes, 1, [&](int64_t b, int64_t e) {
    std::vector<Cm> acc(static_cast<std::size_t>(H * W));  // f32 for f16/bf16, f64 for f64
    for (int64_t p = b; p < e; ++p) {
      std::fill(acc.begin(), acc.end(), Cm(0));
      for (int64_t oh = 0; oh < Ho; ++oh) {
        for (int64_t ow = 0; ow < Wo; ++ow) {
          acc[std::size_t(ip[is.base(p) + is.at(oh, ow)])] += Cm(gp[gs.base(p) + gs.at(oh, ow)]);
        }
      }
      T* dst = dxp + ds.base(p);
      for (int64_t i = 0; i < H * W; ++i) dst[ds.at(i / W, i % W)] = T(acc[std::size_t(i)]);  // one rounding
    }
  });
}

template <typename T> struct MaxK { static constexpr KernelFn fn = max_pool2d_kernel<T, false>; };
template <typename T> struct MaxBwK { static constexpr KernelFn fn = max_pool2d_backward_kernel<T>; };
template <typename T> struct MaxIdxK { static constexpr KernelFn fn = max_pool2d_kernel<T, true>; };
template <typename T> struct AvgK { static constexpr KernelFn fn = avg_pool2d_kernel<T, OpId::avg_pool2d>; };
template <typename T> struct AvgBwK {
  static constexpr KernelFn fn = avg_pool2d_backward_kernel<T, OpId::avg_pool2d_backward>;
};
template <typename T> struct AdaK { static constexpr KernelFn fn = avg_pool2d_kernel<T, OpId::adaptive_avg_pool2d>; };
template <typename T> struct AdaBwK {
  static constexpr KernelFn fn = avg_pool2d_backward_kernel<T, OpId::adaptive_avg_pool2d_backward>;
};

}  // namespace

void register_pool_kernels() {
  register_cpu_floating<MaxK>(OpId::max_pool2d);
  register_cpu_floating<MaxIdxK>(OpId::max_pool2d_indices);
  register_cpu_floating<MaxBwK>(OpId::max_pool2d_backward);
  register_cpu_floating<AvgK>(OpId::avg_pool2d);
  register_cpu_floating<AvgBwK>(OpId::avg_pool2d_backward);
  register_cpu_floating<AdaK>(OpId::adaptive_avg_pool2d);
  register_cpu_floating<AdaBwK>(OpId::adaptive_avg_pool2d_backward);
}

}  // namespace mg::cpu
