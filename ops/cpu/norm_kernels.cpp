// CPU kernels of the norm op group: layer_norm, rms_norm, batch_norm, group_norm (fused forward
// with per-row / per-channel / per-group statistics), embedding (row gather) and dropout (Philox
// mask). The one decision a reader must know: inputs of any layout and floating dtype are first
// loaded into a dense buffer of the accumulation type A = acc_t<T> (f32 for f16/bf16/f32, f64 for
// f64); statistics are two-pass (mean, then centred sum of squares) in A, and each output element
// is rounded once on store. Parameters (weight, bias, running stats) may have a dtype other than
// x's (batch_norm: f32 parameters next to an f16 input).
#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "core/philox.h"
#include "core/visit_dtype.h"
#include "ops/kernel_registry.h"
#include "ops/register.h"

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
      for (std::size_t k = 0; k < out.size(); ++k) out[k] = convert<A>(base[k]);
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

// mean and 1/sqrt(var + eps) of n values (biased var), accumulated in A.
template <typename A>
void row_stats(const A* x, int64_t n, double eps, A& mean, A& rstd) {
  A s = 0;  // accumulates in A (f32 for f16/bf16/f32, f64 for f64)
  for (int64_t i = 0; i < n; ++i) s += x[i];
  mean = n > 0 ? s / A(n) : A(0);
  A ss = 0;  // centred sum of squares, in A
  for (int64_t i = 0; i < n; ++i) ss += (x[i] - mean) * (x[i] - mean);
  const A var = n > 0 ? ss / A(n) : A(0);
  rstd = A(1) / std::sqrt(var + A(eps));
}

// layer_norm: x [M, D] (D = product of the last attrs.dim sizes) -> y, mean [M], rstd [M].
template <typename T>
void layer_norm_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using A = acc_t<T>;
  const std::vector<A> x = load_values<A>(in[0]);
  const std::vector<A> w = load_param<A>(in, a.mode, kHasWeight), b = load_param<A>(in, a.mode, kHasBias);
  int64_t d = 1;
  for (int64_t i = in[0].dim() - a.dim; i < in[0].dim(); ++i) d *= in[0].shape()[i];
  const int64_t m = d == 0 ? out[1].numel() : int64_t(x.size()) / d;
  T* y = out[0].data<T>();
  A* mean_out = out[1].data<A>();
  A* rstd_out = out[2].data<A>();
  parallel_for(0, m, std::max<int64_t>(1, 16384 / std::max<int64_t>(d, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const A* xr = x.data() + r * d;
      A mu, rs;
      row_stats(xr, d, a.alpha, mu, rs);
      mean_out[r] = mu;
      rstd_out[r] = rs;
      for (int64_t i = 0; i < d; ++i) {
        A v = (xr[i] - mu) * rs;
        if (!w.empty()) v *= w[i];
        if (!b.empty()) v += b[i];
        y[r * d + i] = store<T>(v);
      }
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
      A ss = 0;  // sum of squares, accumulated in A
      for (int64_t i = 0; i < d; ++i) ss += xr[i] * xr[i];
      const A rs = A(1) / std::sqrt((d > 0 ? ss / A(d) : A(0)) + A(a.alpha));
      rstd_out[r] = rs;
      for (int64_t i = 0; i < d; ++i) y[r * d + i] = store<T>(xr[i] * rs * (w.empty() ? A(1) : w[i]));
    }
  });
}

// batch_norm: x [N, C, S] (S = product of the trailing sizes) -> y, mean [C], invstd [C].
// Training: batch statistics, running stats updated in place with momentum (unbiased var);
// eval: the running stats.
template <typename T>
void batch_norm_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using A = acc_t<T>;
  const Tensor& xt = in[0];
  const std::vector<A> x = load_values<A>(xt);
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
  parallel_for(0, c, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t ch = c0; ch < c1; ++ch) {
      A mu, var;
      if (training) {
        A sum = 0;  // per-channel sum over N and S, accumulated in A (f32 for f16/bf16)
        for (int64_t i = 0; i < n; ++i)
          for (int64_t k = 0; k < s; ++k) sum += x[(i * c + ch) * s + k];
        const A cnt = A(n * s);
        mu = cnt > 0 ? sum / cnt : A(0);
        A ss = 0;  // centred sum of squares, in A
        for (int64_t i = 0; i < n; ++i)
          for (int64_t k = 0; k < s; ++k) {
            const A dv = x[(i * c + ch) * s + k] - mu;
            ss += dv * dv;
          }
        var = cnt > 0 ? ss / cnt : A(0);
        var_b[ch] = cnt > 1 ? ss / (cnt - 1) : var;
      } else {
        mu = rm[ch];
        var = rv[ch];
      }
      const A rs = A(1) / std::sqrt(var + A(a.alpha));
      mean_out[ch] = mu;
      invstd_out[ch] = rs;
      const A scale = (w.empty() ? A(1) : w[ch]) * rs;
      const A shift = b.empty() ? A(0) : b[ch];
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < s; ++k) {
          const int64_t e = (i * c + ch) * s + k;
          y[e] = store<T>((x[e] - mu) * scale + shift);  // centre first: x * scale - mu * scale cancels
        }
    }
  });
  if (training && ir >= 0) {  // running = (1 - momentum) * running + momentum * batch statistic
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
        for (int64_t k = 0; k < s; ++k) y[r * len + j * s + k] = store<T>((xr[j * s + k] - mu) * rs * wc + bc);
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
  const std::vector<A> x = load_values<A>(in[0]);
  const uint64_t seed = uint64_t(a.ints[0]), offset = uint64_t(a.ints[1]);
  const float p = float(a.alpha);
  const A scale = A(1.0 / (1.0 - a.alpha));
  T* y = out[0].data<T>();
  bool* mask = out[1].data<bool>();
  const int64_t numel = int64_t(x.size()), blocks = (numel + 3) / 4;
  parallel_for(0, blocks, 4096, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const Philox4 r = philox_block(seed, offset, uint64_t(blk));
      for (int64_t j = 0; j < 4 && blk * 4 + j < numel; ++j) {
        const int64_t i = blk * 4 + j;
        const bool keep = philox_uniform(r.v[j]) >= p;
        mask[i] = keep;
        y[i] = store<T>(keep ? x[i] * scale : A(0));
      }
    }
  });
}


#define MG_REGISTER_FLOATS(op, kernel)                                          \
  register_kernel(OpId::op, DeviceType::CPU, DType::F64, kernel<double>);      \
  register_kernel(OpId::op, DeviceType::CPU, DType::F32, kernel<float>);       \
  register_kernel(OpId::op, DeviceType::CPU, DType::F16, kernel<Half>);        \
  register_kernel(OpId::op, DeviceType::CPU, DType::BF16, kernel<BFloat16>)

}  // namespace

void register_norm_kernels() {
  MG_REGISTER_FLOATS(layer_norm, layer_norm_kernel);
  MG_REGISTER_FLOATS(rms_norm, rms_norm_kernel);
  MG_REGISTER_FLOATS(batch_norm, batch_norm_kernel);
  MG_REGISTER_FLOATS(group_norm, group_norm_kernel);
  MG_REGISTER_FLOATS(embedding, embedding_kernel);
  MG_REGISTER_FLOATS(dropout, dropout_kernel);
}

#undef MG_REGISTER_FLOATS

}  // namespace mg::cpu
