// CPU kernels of the norm op group: layer_norm, rms_norm, batch_norm, group_norm (fused forward
// with per-row / per-channel / per-group statistics), embedding (row gather) and dropout (Philox
// mask), and the fused first-order backward of layer_norm, batch_norm (training) and group_norm
// from the saved statistics. The one decision a reader must know: inputs of any layout and floating
// dtype are read as the accumulation type A = acc_t<T> (f32 for f16/bf16/f32, f64 for f64) — the
// forward kernels load them into a dense A buffer first, the backward kernels convert a row at a
// time (no copy for contiguous f32/f64); every sum — the forward statistics (two-pass: mean, then
// the centred sums with the correction term) and the backward Σg, Σg·xhat, dweight, dbias —
// accumulates in A by the summation rule (core/cascade_sum.h, through norm_sums.h: a fixed pairwise
// tree over leaves of 128, O(log n) ulps, the same bits at any thread count), and each output
// element is rounded once on store. Parameters (weight, bias, running stats) may have a dtype other
// than x's (batch_norm: f32 parameters next to an f16 input).
#include <algorithm>
#include <bit>
#include <cmath>
#include <optional>
#include <vector>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/convert.h"
#include "mixgrad/core/half.h"
#include "mixgrad/core/parallel.h"
#include "mixgrad/core/philox.h"
#include "mixgrad/core/philox_batch.h"
#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/ops/cpu/norm_sums.h"
#include "mixgrad/ops/cpu/norm_sums_simd.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/register.h"

namespace mg::cpu {
namespace {

constexpr int64_t kHasWeight = 1, kHasBias = 2, kHasRunning = 4;

int opt_index(int64_t mode, int64_t bit) {
  if (!(mode & bit)) return -1;
  int i = 1;
  for (int64_t b = 1; b < bit; b <<= 1) i += (mode & b) ? 1 : 0;
  return i;
}

template <typename A, typename S>
A convert(S v) {
  if constexpr (std::is_integral_v<A> && std::is_integral_v<S>) return static_cast<A>(v);
  else return static_cast<A>(static_cast<double>(v));
}

// All elements of t (any dtype and strides, cpu) in row-major order, converted to A.
template <typename A>
std::vector<A> load_values(const Tensor& t) {
  std::vector<A> out(std::size_t(t.numel()));
  if (out.empty()) return out;
  visit_dtype(t.dtype(), [&]<typename S>() {
    const S* base = static_cast<const S*>(t.data_ptr());
    const int64_t nd = t.dim();
    if (t.is_contiguous()) {
      if constexpr (std::is_same_v<A, float> && std::is_same_v<S, Half>) {
        convert_f16_to_f32(base, out.data(), int64_t(out.size()));  // SIMD (F16C/AVX-512), exact
      } else if constexpr (std::is_same_v<A, float> && std::is_same_v<S, BFloat16>) {
        convert_bf16_to_f32(base, out.data(), int64_t(out.size()));
      } else {
        for (std::size_t k = 0; k < out.size(); ++k) out[k] = convert<A>(base[k]);
      }
      return;
    }
    if (nd == 4 && t.is_contiguous(MemoryFormat::ChannelsLast)) {
      // dense NHWC: a transpose of each sample's [H*W, C] into [C, H*W], in row-major (NCHW) order
      const int64_t n = t.shape()[0], c = t.shape()[1], hw = t.shape()[2] * t.shape()[3];
      parallel_for(0, n * c, std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(hw, 1)), [&](int64_t b, int64_t e) {
        for (int64_t nc = b; nc < e; ++nc) {
          const S* src = base + (nc / c) * hw * c + nc % c;
          A* dst = out.data() + nc * hw;
          for (int64_t k = 0; k < hw; ++k) dst[k] = convert<A>(src[k * c]);
        }
      });
      return;
    }
    std::vector<int64_t> idx(std::size_t(nd), 0);
    int64_t off = 0;
    for (std::size_t k = 0; k < out.size(); ++k) {
      out[k] = convert<A>(base[off]);
      for (int64_t d = nd - 1; d >= 0; --d) {  // odometer increment
        off += t.strides()[d];
        if (++idx[d] < t.shape()[d]) break;
        off -= t.strides()[d] * t.shape()[d];
        idx[d] = 0;
      }
    }
  });
  return out;
}

// The n values of a contiguous T array from element `first` as opmath A: f32 and f64 read in
// place, f16/bf16 converted (exactly, SIMD) into `buf`. Row passes over 256-element chunks use it
// instead of staging the whole tensor.
template <typename A, typename T>
const A* opmath_chunk(const T* x, int64_t first, int64_t n, A* buf) {
  if constexpr (std::is_same_v<A, T>) {
    return x + first;
  } else if constexpr (std::is_same_v<T, Half>) {
    convert_f16_to_f32(x + first, buf, n);
    return buf;
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    convert_bf16_to_f32(x + first, buf, n);
    return buf;
  } else {
    for (int64_t j = 0; j < n; ++j) buf[j] = convert<A>(x[first + j]);
    return buf;
  }
}

// Optional parameter number `bit` as a dense A vector (empty when absent).
template <typename A>
std::vector<A> load_param(const Tensors& in, int64_t mode, int64_t bit) {
  const int i = opt_index(mode, bit);
  return i >= 0 ? load_values<A>(in[i]) : std::vector<A>{};
}

// Writes v into element k of a contiguous floating tensor of any floating dtype.
void store_value(const Tensor& t, int64_t k, double v) {
  visit_dtype(t.dtype(), [&]<typename S>() { if constexpr (std::is_same_v<S, double>) static_cast<S*>(t.data_ptr())[k] = v;
    else static_cast<S*>(t.data_ptr())[k] = static_cast<S>(static_cast<float>(v)); });
}

template <typename T, typename A>
T store(A v) {
  if constexpr (std::is_same_v<T, double>) return v;
  else return static_cast<T>(static_cast<float>(v));
}

// Stores n opmath values into T, rounding each once (f16/bf16 through the SIMD converters).
template <typename A, typename T>
void store_values(const A* v, T* y, int64_t n) {
  if constexpr (std::is_same_v<T, Half>) convert_f32_to_f16(v, y, n);
  else if constexpr (std::is_same_v<T, BFloat16>) convert_f32_to_bf16(v, y, n);
  else for (int64_t i = 0; i < n; ++i) y[i] = store<T>(v[i]);
}

// Mean and centred sum of squares of cnt values given as runs of consecutive values:
// for_runs(f) calls f(p, len) for each run in order, p pointing to A values or to values that
// widen to A exactly (bf16 read in place). Both passes sum by the rule (norm_sums.h), in
// A: m0 = Σx / cnt; then, with d = x - m0, Σd and Σd² in one pass, and the corrected two-pass form
//   mean = m0 + Σd / cnt,   ss = Σ(x - mean)² = Σd² - (Σd)² / cnt   (clamped at 0).
// The correction removes the rounding of m0 (a constant input gives mean = x and ss = 0 exactly).
template <typename A>
struct Moments {
  A mean = 0, ss = 0;
};
template <typename A, typename ForRuns>
Moments<A> moments(int64_t cnt, const ForRuns& for_runs) {
  if (cnt <= 0) return {};
  RuleSums<A, 1> s;  // Σx, in A
  for_runs([&](const auto* p, int64_t len) { add_values(s, p, len); });
  const A m0 = s.result().v[0] / A(cnt);
  RuleSums<A, 2> c;  // Σd and Σd², in A
  for_runs([&](const auto* p, int64_t len) { add_centred(c, p, len, m0); });
  const SumVec<A, 2> r = c.result();
  const A m2 = r.v[1] - r.v[0] * r.v[0] / A(cnt);
  return {m0 + r.v[0] / A(cnt), m2 < A(0) ? A(0) : m2};  // clamped against rounding; a NaN stays NaN
}

// mean and 1/sqrt(var + eps) of n contiguous values (biased var), by moments().
template <typename A>
void row_stats(const A* x, int64_t n, double eps, A& mean, A& rstd) {
  const Moments<A> m = moments<A>(n, [&](const auto& f) { f(x, n); });
  mean = m.mean;
  const A var = n > 0 ? m.ss / A(n) : A(0);
  rstd = A(1) / std::sqrt(var + A(eps));
}

// layer_norm: x [M, D] (D = product of the last attrs.dim sizes) -> y, mean [M], rstd [M]. A
// contiguous x is read row by row in place (f16/bf16 widened per row); staging the whole tensor
// in a fresh vector had cost as much as the arithmetic (page faults on every call).
template <typename T>
void layer_norm_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using A = acc_t<T>;
  const bool dense = in[0].is_contiguous();
  const std::vector<A> staged = dense ? std::vector<A>{} : load_values<A>(in[0]);
  const T* xt = dense ? in[0].data<T>() : nullptr;
  const std::vector<A> w = load_param<A>(in, a.mode, kHasWeight), b = load_param<A>(in, a.mode, kHasBias);
  int64_t d = 1;
  for (int64_t i = in[0].dim() - a.dim; i < in[0].dim(); ++i) d *= in[0].shape()[i];
  const int64_t m = d == 0 ? out[1].numel() : in[0].numel() / d;
  T* y = out[0].data<T>();
  A* mean_out = out[1].data<A>();
  A* rstd_out = out[2].data<A>();
  const A* wp = w.empty() ? nullptr : w.data();
  const A* bp = b.empty() ? nullptr : b.data();
  parallel_for(0, m, std::max<int64_t>(1, 16384 / std::max<int64_t>(d, 1)), [&](int64_t r0, int64_t r1) {
    constexpr bool kInPlace = std::is_same_v<A, T>;
    std::vector<A> xbuf(kInPlace ? 0 : std::size_t(d)), ybuf(kInPlace ? 0 : std::size_t(d));
    for (int64_t r = r0; r < r1; ++r) {
      const A* xr = dense ? opmath_chunk<A>(xt, r * d, d, xbuf.data()) : staged.data() + r * d;
      A mu, rs;
      row_stats(xr, d, a.alpha, mu, rs);
      mean_out[r] = mu;
      rstd_out[r] = rs;
      A* yr;
      if constexpr (kInPlace) yr = y + r * d;
      else yr = ybuf.data();
      // One loop per affine variant, so each vectorizes.
      if (wp && bp) {
        for (int64_t i = 0; i < d; ++i) yr[i] = (xr[i] - mu) * rs * wp[i] + bp[i];
      } else if (wp) {
        for (int64_t i = 0; i < d; ++i) yr[i] = (xr[i] - mu) * rs * wp[i];
      } else if (bp) {
        for (int64_t i = 0; i < d; ++i) yr[i] = (xr[i] - mu) * rs + bp[i];
      } else {
        for (int64_t i = 0; i < d; ++i) yr[i] = (xr[i] - mu) * rs;
      }
      if constexpr (!kInPlace) store_values(ybuf.data(), y + r * d, d);
    }
  });
}

// rms_norm: x [M, D] -> y = x * rstd * w, rstd [M] = 1 / sqrt(mean(x^2) + eps).
template <typename T>
void rms_norm_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using A = acc_t<T>;
  const std::vector<A> x = load_values<A>(in[0]);
  const std::vector<A> w = load_param<A>(in, a.mode, kHasWeight);
  int64_t d = 1;
  for (int64_t i = in[0].dim() - a.dim; i < in[0].dim(); ++i) d *= in[0].shape()[i];
  const int64_t m = d == 0 ? out[1].numel() : int64_t(x.size()) / d;
  T* y = out[0].data<T>();
  A* rstd_out = out[1].data<A>();
  parallel_for(0, m, std::max<int64_t>(1, 16384 / std::max<int64_t>(d, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const A* xr = x.data() + r * d;
      const A ss = rule_sum<A>(d, [&](int64_t i) { return xr[i] * xr[i]; });  // Σx², by the rule, in A
      const A rs = A(1) / std::sqrt((d > 0 ? ss / A(d) : A(0)) + A(a.alpha));
      rstd_out[r] = rs;
      for (int64_t i = 0; i < d; ++i) y[r * d + i] = store<T>(xr[i] * rs * (w.empty() ? A(1) : w[i]));
    }
  });
}

// Elements of a tensor read as A, a run of consecutive row-major elements at a time, inside the
// parallel loops. A contiguous tensor is read in place (converted per run into the caller's
// buffer unless it already holds A); any other layout is first gathered into a dense A copy, and
// so is a tensor that needs converting when `short_runs` (runs too short to convert one by one).
template <typename A>
class RunReader {
 public:
  RunReader(const Tensor& t, bool short_runs) {
    if (t.is_contiguous() && !(short_runs && t.dtype() != dtype_v<A>)) {
      base_ = t.data_ptr();
      dtype_ = t.dtype();
    } else {
      copy_ = load_values<A>(t);
      base_ = copy_.data();
      dtype_ = dtype_v<A>;
    }
  }
  // Elements [off, off + n) as A: a pointer into the data, or `buf` (n elements) filled with them.
  const A* get(int64_t off, int64_t n, A* buf) const {
    if (dtype_ == dtype_v<A>) return static_cast<const A*>(base_) + off;
    visit_dtype(dtype_, [&]<typename S>() {
      const S* p = static_cast<const S*>(base_) + off;
      if constexpr (std::is_same_v<A, float> && std::is_same_v<S, Half>) convert_f16_to_f32(p, buf, n);
      else if constexpr (std::is_same_v<A, float> && std::is_same_v<S, BFloat16>) convert_bf16_to_f32(p, buf, n);
      else for (int64_t i = 0; i < n; ++i) buf[i] = convert<A>(p[i]);
    });
    return buf;
  }

 private:
  const void* base_ = nullptr;
  DType dtype_ = dtype_v<A>;
  std::vector<A> copy_;
};

// Rows of C channels of a channels-last [N, C, H, W] tensor (pixel r = (n * H + h) * W + w) read
// as A: a pointer into the data when it is dense NHWC in A, else the row converted into `buf`
// (a tensor in another layout is first copied to dense NHWC).
template <typename A>
class ChannelRows {
 public:
  explicit ChannelRows(const Tensor& t) : t_(t) {
    if (!t_.is_contiguous(MemoryFormat::ChannelsLast)) {
      NoGradGuard no_grad;
      t_ = contiguous(t, MemoryFormat::ChannelsLast);
    }
    c_ = t_.shape()[1];
  }
  // Rows [r, r + k) (k * C consecutive values: the tensor is dense NHWC); `buf` holds k * C.
  const A* get(int64_t r, int64_t k, A* buf) const {
    if (t_.dtype() == dtype_v<A>) return static_cast<const A*>(t_.data_ptr()) + r * c_;
    const int64_t n = k * c_;
    visit_dtype(t_.dtype(), [&]<typename S>() {
      const S* p = static_cast<const S*>(t_.data_ptr()) + r * c_;
      if constexpr (std::is_same_v<A, float> && std::is_same_v<S, Half>) convert_f16_to_f32(p, buf, n);
      else if constexpr (std::is_same_v<A, float> && std::is_same_v<S, BFloat16>) convert_bf16_to_f32(p, buf, n);
      else for (int64_t i = 0; i < n; ++i) buf[i] = convert<A>(p[i]);
    });
    return buf;
  }
  // Rows per block: about 512 values, so the per-call cost of the converters is spread.
  int64_t block_rows() const { return std::max<int64_t>(1, 512 / std::max<int64_t>(c_, 1)); }

 private:
  Tensor t_;
  int64_t c_ = 0;
};

// Whether a kernel's [N, C, H, W] output was allocated channels-last (and is not also NCHW).
bool nhwc_output(const Tensor& out) { return out.dim() == 4 && !out.is_contiguous(); }

// Where element (sample ni, channel ch, position k) of an [N, C, S] output lies: row-major, or
// channels-last ([N, S, C] in memory) when the infer rule allocated it so.
struct OutputIndex {
  int64_t c, s;
  bool nhwc;
  OutputIndex(const Tensor& out, int64_t c, int64_t s) : c(c), s(s), nhwc(nhwc_output(out)) {}
  int64_t operator()(int64_t ni, int64_t ch, int64_t k) const { return nhwc ? (ni * s + k) * c + ch : (ni * c + ch) * s + k; }
};

// batch_norm: x [N, C, S] (S = product of the trailing sizes) -> y, mean [C], invstd [C].
// Channels-last (y allocated NHWC by the infer rule): the statistics are the same sums over the same
// value order (x gathered channel-major), and y is written a pixel row of C channels at a time with
// the per-channel scale and shift — the same arithmetic per element, so the same bits as NCHW.
// Training: batch statistics, running stats updated in place with momentum (unbiased var);
// eval: the running stats.
template <typename T>
void batch_norm_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using A = acc_t<T>;
  const Tensor& xt = in[0];
  // x is read three times (Σx, the centred sums, the output): a contiguous input in A or bf16 in
  // place (bf16 widened to f32 inline: a shift, which the loops vectorize), anything else
  // converted once into a dense A copy (SIMD for f16). Measured against the dense f32 copy of a
  // bf16 input (bench_norm, 1 thread, Xeon with AMX, GB/s): [128,16,28,28] forward 3.8 -> 5.9,
  // backward 7.1 -> 9.6; [128,64,7,7] forward 2.5 -> 3.1, backward 3.2-3.5 -> 6.0.
  using X = std::conditional_t<std::is_same_v<T, BFloat16>, BFloat16, A>;
  const bool in_place = xt.is_contiguous() && xt.dtype() == dtype_v<X>;
  std::optional<RunReader<A>> xr;
  if (!in_place) xr.emplace(xt, /*short_runs=*/true);
  const std::vector<A> w = load_param<A>(in, a.mode, kHasWeight), b = load_param<A>(in, a.mode, kHasBias);
  const int ir = opt_index(a.mode, kHasRunning);
  const bool training = a.keepdim;
  const int64_t n = xt.shape()[0], c = xt.shape()[1];
  const int64_t s = n * c == 0 ? 0 : xt.numel() / (n * c);
  std::vector<A> rm, rv;
  if (ir >= 0) rm = load_values<A>(in[ir]), rv = load_values<A>(in[ir + 1]);
  T* y = out[0].data<T>();
  A* mean_out = out[1].data<A>();
  A* invstd_out = out[2].data<A>();
  std::vector<A> var_b(std::size_t(c), A(0));
  const bool nhwc = nhwc_output(out[0]);
  std::vector<A> scales(nhwc ? std::size_t(c) : 0), shifts(nhwc ? std::size_t(c) : 0);
  // The per-channel pass, on x as bf16 in place or as A.
  auto channels = [&](const auto* x) {
    parallel_for(0, c, 1, [&](int64_t c0, int64_t c1) {
      std::vector<A> row, chan;
      // Short runs (s < 256, e.g. 7x7 maps): the channel's N runs copied (bf16: widened) once into
      // one A run (L2-sized), which the two sums and the output then read. The rule's sums of one
      // long run cost less than of N short ones (its per-run head and tail work, and the SIMD
      // adders batch whole leaves only within a run): bf16 [128,64,7,7] 3.1 -> 5.2-5.4 GB/s in
      // bench_norm; f32 [128,64,7,7] forward 0.58 -> 0.19 ms (1 thread). The terms keep their
      // numbers, so the sums are the same bits (RuleSums numbers terms in order, whatever the runs).
      const bool gather = s < 256;
      for (int64_t ch = c0; ch < c1; ++ch) {
        A mu, var;
        if (gather) {
          chan.resize(std::size_t(n * s));
          for (int64_t i = 0; i < n; ++i) {
            const auto* xr = x + (i * c + ch) * s;
            A* cr = chan.data() + i * s;
            for (int64_t k = 0; k < s; ++k) cr[k] = A(xr[k]);
          }
        }
        if (training) {
          // Σ over the N runs of S values of this channel, by the rule, in A (f32 for f16/bf16)
          const int64_t cnt = n * s;
          const Moments<A> m = moments<A>(cnt, [&](const auto& f) {
            if (gather) {
              f(static_cast<const A*>(chan.data()), cnt);
            } else {
              for (int64_t i = 0; i < n; ++i) f(x + (i * c + ch) * s, s);
            }
          });
          mu = m.mean;
          var = cnt > 0 ? m.ss / A(cnt) : A(0);
          var_b[ch] = cnt > 1 ? m.ss / A(cnt - 1) : var;
        } else {
          mu = rm[ch];
          var = rv[ch];
        }
        const A rs = A(1) / std::sqrt(var + A(a.alpha));
        mean_out[ch] = mu;
        invstd_out[ch] = rs;
        const A scale = (w.empty() ? A(1) : w[ch]) * rs;
        const A shift = b.empty() ? A(0) : b[ch];
        if (nhwc) {  // y is written by pixel rows below
          scales[std::size_t(ch)] = scale;
          shifts[std::size_t(ch)] = shift;
          continue;
        }
        // y of one run from its S inputs `src` (A, or bf16 widened inline)
        auto write_run = [&](const auto* src, int64_t e0) {
          if constexpr (std::is_same_v<T, Half>) {
            // f16: the row in f32, then one SIMD rounding pass (the scalar f16 store dominated f16
            // training). bf16 stays on the scalar store, which the compiler vectorises: a row pass
            // through convert_f32_to_bf16 measured slower on short rows (bench_norm, 128x64x7x7)
            row.resize(std::size_t(s));
            for (int64_t k = 0; k < s; ++k) row[std::size_t(k)] = (A(src[k]) - mu) * scale + shift;
            store_values(row.data(), y + e0, s);
          } else {
            for (int64_t k = 0; k < s; ++k) {
              y[e0 + k] = store<T>((A(src[k]) - mu) * scale + shift);  // centre first: x * scale - mu * scale cancels
            }
          }
        };
        for (int64_t i = 0; i < n; ++i) {
          const int64_t e0 = (i * c + ch) * s;
          if (gather) {
            write_run(static_cast<const A*>(chan.data() + i * s), e0);
          } else {
            write_run(x + e0, e0);
          }
        }
      }
    });
  };
  if (in_place) {
    channels(xt.data<X>());
  } else {
    channels(xr->get(0, xt.numel(), nullptr));
  }
  if (nhwc) {
    const ChannelRows<A> xrows(xt);
    const int64_t kb = xrows.block_rows();
    parallel_for(0, n * s, std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(c, 1)), [&](int64_t r0, int64_t r1) {
      std::vector<A> xbuf(static_cast<std::size_t>(kb * c)), row(static_cast<std::size_t>(kb * c));
      for (int64_t r = r0; r < r1; r += kb) {
        const int64_t k = std::min(kb, r1 - r);
        const A* xv = xrows.get(r, k, xbuf.data());
        for (int64_t i = 0; i < k; ++i) {
          for (int64_t ch = 0; ch < c; ++ch) {
            const std::size_t j = std::size_t(ch);
            row[std::size_t(i * c + ch)] = (xv[i * c + ch] - mean_out[ch]) * scales[j] + shifts[j];  // centre first
          }
        }
        store_values(row.data(), y + r * c, k * c);  // one rounding each
      }
    });
  }
  // running = (1 - momentum) * running + momentum * batch statistic; an empty batch (N = 0 or
  // H = W = 0, accepted as PyTorch does) has no statistic and leaves them alone
  if (training && ir >= 0 && n * s > 0) {
    const double mom = a.beta;
    for (int64_t ch = 0; ch < c; ++ch) {
      store_value(in[ir], ch, (1.0 - mom) * double(rm[ch]) + mom * double(mean_out[ch]));
      store_value(in[ir + 1], ch, (1.0 - mom) * double(rv[ch]) + mom * double(var_b[ch]));
    }
  }
}

// group_norm: x [N, C, S] in groups of C/G channels -> y, mean [N, G], rstd [N, G].
template <typename T>
void group_norm_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using A = acc_t<T>;
  const Tensor& xt = in[0];
  const std::vector<A> x = load_values<A>(xt);
  const std::vector<A> w = load_param<A>(in, a.mode, kHasWeight), b = load_param<A>(in, a.mode, kHasBias);
  const int64_t n = xt.shape()[0], c = xt.shape()[1], g = a.dim, cg = c / g;
  const int64_t s = n * c == 0 ? 0 : xt.numel() / (n * c);
  const int64_t len = cg * s;  // elements per (sample, group), contiguous in row-major order
  T* y = out[0].data<T>();
  const OutputIndex at(out[0], c, s);  // y keeps x's layout (the infer rule): the same values either way
  A* mean_out = out[1].data<A>();
  A* rstd_out = out[2].data<A>();
  parallel_for(0, n * g, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const A* xr = x.data() + r * len;
      A mu, rs;
      row_stats(xr, len, a.alpha, mu, rs);
      mean_out[r] = mu;
      rstd_out[r] = rs;
      const int64_t c_first = (r % g) * cg;
      for (int64_t j = 0; j < cg; ++j) {
        const A wc = w.empty() ? A(1) : w[c_first + j];
        const A bc = b.empty() ? A(0) : b[c_first + j];
        T* yj = y + at(r / g, c_first + j, 0);
        const int64_t step = at.nhwc ? c : 1;
        for (int64_t k = 0; k < s; ++k) yj[k * step] = store<T>((xr[j * s + k] - mu) * rs * wc + bc);
      }
    }
  });
}

// embedding: out[k, :] = weight[indices[k], :] (exact copies in T); every index validated first.
template <typename T>
void embedding_kernel(const Tensors& in, Tensors& out, const OpAttrs&) {
  const Tensor& wt = in[0];
  const std::vector<int64_t> idx = load_values<int64_t>(in[1]);
  const int64_t v = wt.shape()[0], d = wt.shape()[1];
  for (int64_t i : idx) {
    MG_CHECK(i >= 0 && i < v, IndexError, "embedding: index ", i, " is out of range for a table of ", v,
             " rows; weight ", describe(wt), ", indices ", describe(in[1]),
             "\n  hint: indices must lie in [0, ", v, ")");
  }
  const T* w = wt.data<T>();
  const int64_t s0 = wt.strides()[0], s1 = wt.strides()[1];
  T* y = out[0].data<T>();
  parallel_for(0, int64_t(idx.size()), std::max<int64_t>(1, 16384 / std::max<int64_t>(d, 1)),
               [&](int64_t k0, int64_t k1) {
                 for (int64_t k = k0; k < k1; ++k)
                   for (int64_t j = 0; j < d; ++j) y[k * d + j] = w[idx[k] * s0 + j * s1];
               });
}


// dropout: element i is kept when the i-th uniform of the Philox stream at (seed, offset) is >= p
// (probability 1 - p); kept values are scaled by 1 / (1 - p) in opmath and rounded once.
template <typename T>
void dropout_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using A = acc_t<T>;
  // A contiguous x is read chunk by chunk; any other layout is staged in row-major order once.
  std::vector<A> staged;
  if (!in[0].is_contiguous()) staged = load_values<A>(in[0]);
  const T* xt = staged.empty() ? in[0].data<T>() : nullptr;
  const uint64_t seed = uint64_t(a.ints[0]), offset = uint64_t(a.ints[1]);
  const float drop_p = float(a.alpha);
  const A scale = A(1.0 / (1.0 - a.alpha));
  T* y = out[0].data<T>();
  bool* mask = out[1].data<bool>();
  const int64_t numel = in[0].numel(), blocks = (numel + 3) / 4;
  constexpr int64_t kChunk = 64;  // Philox blocks generated together (256 elements)
  parallel_for(0, (blocks + kChunk - 1) / kChunk, 16, [&](int64_t c0, int64_t c1) {
    uint32_t words[4 * kChunk];
    A buf[4 * kChunk];
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t first = c * kChunk * 4, n = std::min(numel - first, kChunk * 4);
      philox_blocks(seed, offset, uint64_t(c * kChunk), (n + 3) / 4, words);
      // Branch-free: a kept/dropped branch mispredicts p of the time, so the factor is a select
      // of two constants and the multiply always runs: x * (keep ? 1/(1-p) : 0), PyTorch's
      // x * noise, so a dropped NaN or inf stays NaN (never a silent 0) and a dropped negative
      // is -0. Local copies of the constants (the bool mask may alias anything), then one bulk store.
      A kept[4 * kChunk];
      bool keep[4 * kChunk];
      const A* xs = xt ? opmath_chunk<A>(xt, first, n, buf) : staged.data() + first;
      const float dp = drop_p;
      const A sc = scale;
      for (int64_t j = 0; j < n; ++j) {
        const bool k = philox_uniform(words[j]) >= dp;
        keep[j] = k;
        kept[j] = xs[j] * (k ? sc : A(0));
      }
      std::copy(keep, keep + n, mask + first);
      store_values(kept, y + first, n);
    }
  });
}

// dropout_backward: dx = grad * keep * (1 / (1 - p)), the product in opmath (grad * keep is exact,
// so a dropped element is grad * 0 = +-0 as the unfused form gave) and rounded once.
template <typename T>
void dropout_backward_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using A = acc_t<T>;
  const bool dense = in[0].is_contiguous() && in[1].is_contiguous();
  std::vector<A> staged_g, staged_keep;
  if (!dense) {
    staged_g = load_values<A>(in[0]);
    staged_keep = load_values<A>(in[1]);
  }
  const T* gt = dense ? in[0].data<T>() : nullptr;
  const bool* kt = dense ? in[1].data<bool>() : nullptr;
  const A scale = A(1.0 / (1.0 - a.alpha));
  T* dx = out[0].data<T>();
  const int64_t numel = in[0].numel();
  constexpr int64_t kChunk = 256;
  parallel_for(0, (numel + kChunk - 1) / kChunk, 64, [&](int64_t c0, int64_t c1) {
    A buf[kChunk], res[kChunk];
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t first = c * kChunk, n = std::min(numel - first, kChunk);
      const A* gs = gt ? opmath_chunk<A>(gt, first, n, buf) : staged_g.data() + first;
      const A sc = scale;
      if (kt) {
        // The mask's bytes read as uint8_t: gcc does not vectorize loads of bool (this loop ran
        // scalar, 3x a plain multiply's time per element).
        const uint8_t* ks = reinterpret_cast<const uint8_t*>(kt + first);
        for (int64_t j = 0; j < n; ++j) res[j] = gs[j] * A(int32_t(ks[j])) * sc;
      } else {
        const A* ks = staged_keep.data() + first;
        for (int64_t j = 0; j < n; ++j) res[j] = gs[j] * ks[j] * sc;
      }
      store_values(res, dx + first, n);
    }
  });
}

// ---- fused backward: (grad, x, mean, rstd, [weight]) -> (dx, [dweight], [dbias]) ----
// With xhat = (x - mean) * rstd and gxhat = g * w over the L elements normalised together:
//   dx = rstd * (gxhat - sum(gxhat) / L - xhat * sum(gxhat * xhat) / L)
// and per parameter entry dweight = sum(g * xhat), dbias = sum(g). Everything accumulates in A,
// by the summation rule.

// The weight of a fused backward (input 4, mode bit0) as a dense A vector; empty when absent.
template <typename A>
std::vector<A> backward_weight(const Tensors& in, int64_t mode) {
  return (mode & kHasWeight) ? load_values<A>(in[4]) : std::vector<A>{};
}

// Where the optional outputs of a fused backward are: dweight (mode bit0, with the weight input 4)
// and dbias (mode bit1), both A, one entry per parameter element; null when not asked for.
template <typename A>
struct ParamGradOutputs {
  A* dweight = nullptr;
  A* dbias = nullptr;
  ParamGradOutputs(Tensors& out, int64_t mode) {
    int k = 1;
    if (mode & kHasWeight) dweight = out[k++].data<A>();
    if (mode & kHasBias) dbias = out[k++].data<A>();
  }
  bool any() const { return dweight || dbias; }
};

// layer_norm_backward: g, x [M, D] (D = product of the last attrs.dim sizes), mean, rstd [M],
// weight [D] -> dx [M, D], dweight, dbias [D]. Each row's Σgxhat and Σgxhat·xhat follow the rule.
// dweight and dbias are column sums over the M rows, also by the rule with in-order leaves: fixed
// blocks of kSumLeaf rows (parallel over blocks) each add their rows in order into a partial [D]
// row, and the block partials of each column combine pairwise in block order (a Cascade per
// column) — the grouping depends on M alone, never on the thread count.
template <typename T>
void layer_norm_backward_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using A = acc_t<T>;
  const Tensor& xt = in[1];
  int64_t d = 1;
  for (int64_t i = xt.dim() - a.dim; i < xt.dim(); ++i) d *= xt.shape()[i];
  const int64_t m = in[2].numel();
  const RunReader<A> g(in[0], false), x(xt, false);
  const std::vector<A> mean = load_values<A>(in[2]), rstd = load_values<A>(in[3]);  // any layout
  const std::vector<A> w = backward_weight<A>(in, a.mode);
  T* dx = out[0].data<T>();
  const ParamGradOutputs<A> pg(out, a.mode);
  const int64_t rows_per_block = kSumLeaf;
  const int64_t blocks = m == 0 ? 0 : (m + rows_per_block - 1) / rows_per_block;
  // Partial sums of g * xhat and g per block of rows, in A.
  std::vector<A> part_w(pg.dweight ? std::size_t(blocks * d) : 0, A(0));
  std::vector<A> part_b(pg.dbias ? std::size_t(blocks * d) : 0, A(0));
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(rows_per_block * d, 1));
  parallel_for(0, blocks, grain, [&](int64_t b0, int64_t b1) {
    std::vector<A> gbuf(static_cast<std::size_t>(d)), xbuf(static_cast<std::size_t>(d));
    for (int64_t blk = b0; blk < b1; ++blk) {
      A* pw = pg.dweight ? part_w.data() + blk * d : nullptr;
      A* pb = pg.dbias ? part_b.data() + blk * d : nullptr;
      for (int64_t r = blk * rows_per_block; r < std::min(m, (blk + 1) * rows_per_block); ++r) {
        const A* gr = g.get(r * d, d, gbuf.data());
        const A* xr = x.get(r * d, d, xbuf.data());
        const A mu = mean[r], rs = rstd[r];
        RuleSums<A, 2> rows;  // Σgxhat, Σgxhat·xhat over the row, by the rule, in A
        if (w.empty()) {
          add_grad_sums(rows, gr, xr, d, mu, rs);
        } else {
          rows.add(d, [&](int64_t i) {
            const A xh = (xr[i] - mu) * rs, gh = gr[i] * w[i];
            return SumVec<A, 2>{{gh, gh * xh}};
          });
        }
        const SumVec<A, 2> sums = rows.result();
        const A m1 = sums.v[0] / A(d), m2 = sums.v[1] / A(d);
        for (int64_t i = 0; i < d; ++i) {
          const A xh = (xr[i] - mu) * rs;
          const A gh = w.empty() ? gr[i] : gr[i] * w[i];
          dx[r * d + i] = store<T>(rs * (gh - m1 - xh * m2));
        }
        // this block's leaf of the column sums: rows in order, in A
        if (pw) for (int64_t i = 0; i < d; ++i) pw[i] += gr[i] * ((xr[i] - mu) * rs);
        if (pb) for (int64_t i = 0; i < d; ++i) pb[i] += gr[i];
      }
    }
  });
  if (!pg.any()) return;
  // dweight / dbias: each column's block partials combined pairwise in block order, in A.
  parallel_for(0, d, 256, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      Cascade<A> sw, sb;
      for (int64_t blk = 0; blk < blocks; ++blk) {
        if (pg.dweight) sw.push(part_w[blk * d + i]);
        if (pg.dbias) sb.push(part_b[blk * d + i]);
      }
      if (pg.dweight) pg.dweight[i] = sw.result(A(0));
      if (pg.dbias) pg.dbias[i] = sb.result(A(0));
    }
  });
}

// batch_norm_backward (training): g, x [N, C, S] (S = product of the trailing sizes), mean,
// invstd [C], weight [C] -> dx [N, C, S], dweight, dbias [C]. Parallel over channels; each
// channel's Σg and Σg·xhat run over its N·S values as one sum by the rule.
template <typename T>
void batch_norm_backward_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using A = acc_t<T>;
  const Tensor& xt = in[1];
  const int64_t n = xt.shape()[0], c = xt.shape()[1];
  const int64_t s = n * c == 0 ? 0 : xt.numel() / (n * c);
  // g and x are read twice (the sums, then dx): contiguous inputs in A or bf16 in place (bf16
  // widened inline, as in the forward), anything else per run or as a dense A copy.
  using X = std::conditional_t<std::is_same_v<T, BFloat16>, BFloat16, A>;
  const bool in_place = in[0].is_contiguous() && xt.is_contiguous() && in[0].dtype() == dtype_v<X> &&
                        xt.dtype() == dtype_v<X>;
  std::optional<RunReader<A>> g, x;
  if (!in_place) g.emplace(in[0], /*short_runs=*/s < 64), x.emplace(xt, /*short_runs=*/s < 64);
  const std::vector<A> mean = load_values<A>(in[2]), invstd = load_values<A>(in[3]);  // any layout
  const std::vector<A> w = backward_weight<A>(in, a.mode);
  T* dx = out[0].data<T>();
  const ParamGradOutputs<A> pg(out, a.mode);
  // channels-last dx: the per-channel sums as for NCHW, then dx by pixel rows (same arithmetic)
  const bool nhwc = nhwc_output(out[0]);
  std::vector<A> m1s(nhwc ? std::size_t(c) : 0), m2s(nhwc ? std::size_t(c) : 0), wcs(nhwc ? std::size_t(c) : 0);
  // The per-channel pass; get_g(off, buf) and get_x(off, buf) give the S values of a run.
  auto channels = [&](const auto& get_g, const auto& get_x) {
    parallel_for(0, c, 1, [&](int64_t c0, int64_t c1) {
      std::vector<A> gbuf(in_place ? 0 : static_cast<std::size_t>(s)), xbuf(in_place ? 0 : static_cast<std::size_t>(s));
      std::vector<A> dxbuf(std::is_same_v<T, Half> ? static_cast<std::size_t>(s) : 0);
      // Short runs (s < 256) gathered into one run of g and one of x for the sums, as the forward
      // does (the same terms in the same order: the same bits). 1 thread, [128,64,7,7] backward:
      // bf16 0.39-0.46 -> 0.26 ms, f32 0.37 -> 0.22 ms.
      const bool gather = s < 256;
      std::vector<A> gch, xch;
      for (int64_t ch = c0; ch < c1; ++ch) {
        const A mu = mean[ch], rs = invstd[ch];
        RuleSums<A, 2> sums;  // Σg and Σg·xhat over the N runs of S values, by the rule, in A
        if (gather) {
          gch.resize(std::size_t(n * s));
          xch.resize(std::size_t(n * s));
          for (int64_t i = 0; i < n; ++i) {
            const int64_t off = (i * c + ch) * s;
            const auto* gr = get_g(off, gbuf.data());
            const auto* xr = get_x(off, xbuf.data());
            for (int64_t k = 0; k < s; ++k) gch[std::size_t(i * s + k)] = A(gr[k]), xch[std::size_t(i * s + k)] = A(xr[k]);
          }
          add_grad_sums(sums, static_cast<const A*>(gch.data()), static_cast<const A*>(xch.data()), n * s, mu, rs);
        } else {
          for (int64_t i = 0; i < n; ++i) {
            const int64_t off = (i * c + ch) * s;
            const auto* gr = get_g(off, gbuf.data());
            const auto* xr = get_x(off, xbuf.data());
            add_grad_sums(sums, gr, xr, s, mu, rs);
          }
        }
        const SumVec<A, 2> r = sums.result();
        const A sg = r.v[0], sgx = r.v[1];
        if (pg.dweight) pg.dweight[ch] = sgx;
        if (pg.dbias) pg.dbias[ch] = sg;
        const A wc = w.empty() ? A(1) : w[ch];
        const A cnt = A(n * s);
        const A m1 = wc * sg / cnt, m2 = wc * sgx / cnt;  // mean(gxhat), mean(gxhat * xhat)
        if (nhwc) {
          m1s[std::size_t(ch)] = m1;
          m2s[std::size_t(ch)] = m2;
          wcs[std::size_t(ch)] = wc;
          continue;
        }
        for (int64_t i = 0; i < n; ++i) {
          const int64_t off = (i * c + ch) * s;
          const auto* gr = get_g(off, gbuf.data());
          const auto* xr = get_x(off, xbuf.data());
          if constexpr (std::is_same_v<T, Half>) {
            // f16: the row in f32, then one SIMD rounding pass (as in the forward)
            for (int64_t k = 0; k < s; ++k) {
              const A xh = (A(xr[k]) - mu) * rs;
              dxbuf[std::size_t(k)] = rs * (A(gr[k]) * wc - m1 - xh * m2);
            }
            store_values(dxbuf.data(), dx + off, s);
          } else {
            for (int64_t k = 0; k < s; ++k) {
              const A xh = (A(xr[k]) - mu) * rs;
              dx[off + k] = store<T>(rs * (A(gr[k]) * wc - m1 - xh * m2));
            }
          }
        }
      }
    });
  };
  if (in_place) {
    const X* gp = in[0].data<X>();
    const X* xp = xt.data<X>();
    channels([&](int64_t off, A*) { return gp + off; }, [&](int64_t off, A*) { return xp + off; });
  } else {
    channels([&](int64_t off, A* buf) { return g->get(off, s, buf); },
             [&](int64_t off, A* buf) { return x->get(off, s, buf); });
  }
  if (nhwc) {
    const ChannelRows<A> grows(in[0]), xrows(xt);
    const int64_t kb = xrows.block_rows();
    parallel_for(0, n * s, std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(c, 1)), [&](int64_t r0, int64_t r1) {
      const std::size_t len = static_cast<std::size_t>(kb * c);
      std::vector<A> gbuf(len), xbuf(len), row(len);
      for (int64_t r = r0; r < r1; r += kb) {
        const int64_t k = std::min(kb, r1 - r);
        const A* gv = grows.get(r, k, gbuf.data());
        const A* xv = xrows.get(r, k, xbuf.data());
        for (int64_t i = 0; i < k; ++i) {
          for (int64_t ch = 0; ch < c; ++ch) {
            const std::size_t j = std::size_t(ch);
            const A rs = invstd[j];
            const A xh = (xv[i * c + ch] - mean[j]) * rs;
            row[std::size_t(i * c + ch)] = rs * (gv[i * c + ch] * wcs[j] - m1s[j] - xh * m2s[j]);
          }
        }
        store_values(row.data(), dx + r * c, k * c);  // one rounding each
      }
    });
  }
}

// group_norm_backward: g, x [N, C, S] in G groups of C/G channels, mean, rstd [N, G], weight [C]
// -> dx [N, C, S], dweight, dbias [C]. Parallel over (sample, group). The per-(sample, channel)
// Σg and Σg·xhat over S follow the rule; a group's Σgxhat, Σgxhat·xhat combine its C/G channel
// sums pairwise, and dweight / dbias combine the N per-sample sums of a channel pairwise in sample
// order (fixed trees: nothing depends on the thread count).
template <typename T>
void group_norm_backward_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using A = acc_t<T>;
  const Tensor& xt = in[1];
  const int64_t n = xt.shape()[0], c = xt.shape()[1], grp = a.dim, cg = c / grp;
  const int64_t s = n * c == 0 ? 0 : xt.numel() / (n * c);
  const int64_t len = cg * s;  // elements per (sample, group), contiguous in row-major order
  const RunReader<A> g(in[0], false), x(xt, false);
  const std::vector<A> mean = load_values<A>(in[2]), rstd = load_values<A>(in[3]);  // any layout
  const std::vector<A> w = backward_weight<A>(in, a.mode);
  T* dx = out[0].data<T>();
  const OutputIndex at(out[0], c, s);  // dx in x's layout (the infer rule)
  const ParamGradOutputs<A> pg(out, a.mode);
  // sum(g) and sum(g * xhat) per (sample, channel) over S, in A.
  std::vector<A> sum_g(std::size_t(n * c)), sum_gx(std::size_t(n * c));
  parallel_for(0, n * grp, 1, [&](int64_t r0, int64_t r1) {
    std::vector<A> gbuf(static_cast<std::size_t>(len)), xbuf(static_cast<std::size_t>(len));
    for (int64_t r = r0; r < r1; ++r) {
      const A* gr = g.get(r * len, len, gbuf.data());
      const A* xr = x.get(r * len, len, xbuf.data());
      const A mu = mean[r], rs = rstd[r];
      const int64_t nc_first = r * cg;  // (sample, first channel of the group) as n * C + c
      Cascade<SumVec<A, 2>> group;  // Σgxhat, Σgxhat·xhat over the group: channel sums pairwise, in A
      for (int64_t j = 0; j < cg; ++j) {
        const A* gj = gr + j * s;
        const A* xj = xr + j * s;
        RuleSums<A, 2> ch;  // over S, by the rule, in A
        add_grad_sums(ch, gj, xj, s, mu, rs);
        const SumVec<A, 2> sums = ch.result();
        sum_g[nc_first + j] = sums.v[0];
        sum_gx[nc_first + j] = sums.v[1];
        const A wc = w.empty() ? A(1) : w[(r % grp) * cg + j];
        group.push(SumVec<A, 2>{{wc * sums.v[0], wc * sums.v[1]}});
      }
      const SumVec<A, 2> gs = group.result(SumVec<A, 2>{});
      const A m1 = len > 0 ? gs.v[0] / A(len) : A(0), m2 = len > 0 ? gs.v[1] / A(len) : A(0);
      for (int64_t j = 0; j < cg; ++j) {
        const A wc = w.empty() ? A(1) : w[(r % grp) * cg + j];
        T* dxj = dx + at(r / grp, (r % grp) * cg + j, 0);
        const int64_t step = at.nhwc ? c : 1;
        for (int64_t k = 0; k < s; ++k) {
          const A xh = (xr[j * s + k] - mu) * rs;
          dxj[k * step] = store<T>(rs * (gr[j * s + k] * wc - m1 - xh * m2));
        }
      }
    }
  });
  if (!pg.any()) return;
  for (int64_t ch = 0; ch < c; ++ch) {  // over the samples, pairwise in sample order, in A
    Cascade<A> sw, sb;
    for (int64_t i = 0; i < n; ++i) sw.push(sum_gx[i * c + ch]), sb.push(sum_g[i * c + ch]);
    if (pg.dweight) pg.dweight[ch] = sw.result(A(0));
    if (pg.dbias) pg.dbias[ch] = sb.result(A(0));
  }
}

#define MG_REGISTER_FLOATS(op, kernel)                                          \
  register_kernel(OpId::op, DeviceType::CPU, DType::F64, kernel<double>);      \
  register_kernel(OpId::op, DeviceType::CPU, DType::F32, kernel<float>);       \
  register_kernel(OpId::op, DeviceType::CPU, DType::F16, kernel<Half>);        \
  register_kernel(OpId::op, DeviceType::CPU, DType::BF16, kernel<BFloat16>)

}  // namespace

void register_norm_kernels() {
  MG_REGISTER_FLOATS(layer_norm, layer_norm_kernel);
  MG_REGISTER_FLOATS(layer_norm_backward, layer_norm_backward_kernel);
  MG_REGISTER_FLOATS(rms_norm, rms_norm_kernel);
  MG_REGISTER_FLOATS(batch_norm, batch_norm_kernel);
  MG_REGISTER_FLOATS(batch_norm_backward, batch_norm_backward_kernel);
  MG_REGISTER_FLOATS(group_norm, group_norm_kernel);
  MG_REGISTER_FLOATS(group_norm_backward, group_norm_backward_kernel);
  MG_REGISTER_FLOATS(embedding, embedding_kernel);
  MG_REGISTER_FLOATS(dropout, dropout_kernel);
  MG_REGISTER_FLOATS(dropout_backward, dropout_backward_kernel);
}

#undef MG_REGISTER_FLOATS

}  // namespace mg::cpu
