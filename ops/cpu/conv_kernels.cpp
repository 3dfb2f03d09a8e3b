// CPU kernels of the conv group: conv2d, its two gradient ops and conv_transpose2d. f32 and bf16
// go to oneDNN's convolutions where they measure faster (ops/cpu/conv_onednn.cpp decides per
// direction, dtype and shape); f16, and bf16 where oneDNN has no bf16 kernel (below AVX-512), run
// the f32 primitives on inputs widened exactly to f32; everything else runs here as im2col + the
// shared GEMM (ops/cpu/gemm.h). Decision: between load and store the im2col path runs in the compute type
// Cm = opmath_t<T> (f32 for f16/bf16, f64 for f64): the columns are built in Cm, the GEMM
// accumulates in Cm, and the output is rounded to T once. Inputs of any layout are made dense
// first; shapes were validated by the ops' infer rules (ops/conv.cpp). Channels-last: the infer
// rules allocate the activations' output NHWC when the input is (ops/layout.h); oneDNN then reads
// and writes NHWC directly, and the im2col path runs NCHW into a temporary copied into the output.
#include <cstring>
#include <type_traits>
#include <vector>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/parallel.h"
#include "mixgrad/core/convert.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/ops/cpu/conv_onednn.h"
#include "mixgrad/ops/cpu/gemm.h"
#include "mixgrad/ops/cpu/im2col.h"
#include "mixgrad/ops/cpu/leaf_sum.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/layout.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/register.h"

namespace mg::cpu {
namespace {

// t dense in format f (t itself when it already is).
Tensor dense(const Tensor& t, MemoryFormat f = MemoryFormat::Contiguous) {
  NoGradGuard no_grad;
  return contiguous(t, f);
}

// The format a dense activation is laid out in (NCHW when it is dense in both).
MemoryFormat dense_format(const Tensor& t) {
  return t.is_contiguous() ? MemoryFormat::Contiguous : MemoryFormat::ChannelsLast;
}

// Runs body(y) on a dense NCHW y: `out` itself when it is one, else a temporary copied into the
// channels-last `out` afterwards (the im2col path is written for NCHW).
template <typename Body>
void into_nchw(Tensor& out, const Body& body) {
  if (out.is_contiguous()) return body(out);
  Tensor y = empty(out.shape(), {.dtype = out.dtype()});
  body(y);
  NoGradGuard no_grad;
  out.copy_(y);
}

// The dense tensor `t` (of storage type T) as a vector of compute-type values.
template <typename T, typename C>
std::vector<C> load(const Tensor& t) {
  const T* p = static_cast<const T*>(t.data_ptr());
  std::vector<C> v(std::size_t(t.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = C(p[i]);
  return v;
}

// The dtypes oneDNN convolves (ops/cpu/conv_onednn.cpp decides which directions it runs).
template <typename T>
constexpr bool kOnednnConv = std::is_same_v<T, float> || std::is_same_v<T, BFloat16>;

// f16 — and bf16 where the auto path does not run oneDNN's bf16 convolution (it does on AMX only:
// oneDNN 2.6 has none below AVX-512, and with AVX512-BF16 alone it measured slower than this path,
// see conv_onednn.cpp) — convolve on oneDNN's f32 primitives
// where the f32 choice would: the inputs widened exactly to f32, f32 accumulation, one rounding of
// the result — the contract of the im2col path (and of the f16 GEMM), at oneDNN's speed. Measured
// ResNet-8 O1 f16 training: 56 samples/s on im2col; ResNet-20 O1 bf16 on a Zen 3 (AVX2): see
// benchmarks/RESULTS.md.
template <typename T>
constexpr bool kWidenConv = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// t (dense, f16 or bf16) widened exactly to a new f32 tensor of its layout; undefined stays undefined.
template <typename T>
Tensor widen(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor f = empty(t.shape(), {.dtype = DType::F32, .memory_format = t.dim() == 4 ? dense_format(t) : MemoryFormat::Contiguous});
  float* dst = static_cast<float*>(f.data_ptr());
  if constexpr (std::is_same_v<T, Half>) convert_f16_to_f32(static_cast<const Half*>(t.data_ptr()), dst, t.numel());
  else convert_bf16_to_f32(static_cast<const BFloat16*>(t.data_ptr()), dst, t.numel());
  return f;
}
// out (f16 or bf16) = f (f32, same shape and layout), each element rounded once to nearest even.
template <typename T>
void narrow(const Tensor& f, Tensor& out) {
  const float* src = static_cast<const float*>(f.data_ptr());
  if constexpr (std::is_same_v<T, Half>) convert_f32_to_f16(src, static_cast<Half*>(out.data_ptr()), f.numel());
  else convert_f32_to_bf16(src, static_cast<BFloat16*>(out.data_ptr()), f.numel());
}


// out [n, m] (dense, compute type) = a @ b (+ c broadcast along rows when c is given).
template <typename C>
void gemm_c(int64_t n, int64_t k, int64_t m, GemmOperand a, GemmOperand b, C* out,
            const C* row_bias = nullptr) {
  GemmProblem p = single_gemm(n, k, m, a, b, out);
  if (row_bias) {
    p.c = gemm_matrix(row_bias, 1, 0);
    p.beta = 1.0;
  }
  gemm<C>(p);
}

// y[n, g] [og, Ho*Wo] = w[g] [og, cg*kk] @ im2col(x[n, g]) [cg*kk, Ho*Wo] + bias[g] — one
// sample per parallel task, one GEMM per group. x, w, y dense NCHW / OIHW; the bias is in[2].
template <typename T>
void conv2d_im2col(const Tensor& x, const Tensor& w, const Tensors& in, Tensor& out0, const ConvGeom& g) {
  using Cm = opmath_t<T>;
  const std::vector<Cm> wc = load<T, Cm>(w);
  std::vector<Cm> bias;
  if (in.size() > 2) bias = load<T, Cm>(dense(in[2]));  // [O]
  const T* xp = static_cast<const T*>(x.data_ptr());
  T* yp = static_cast<T*>(out0.data_ptr());
  const int64_t K = g.cg() * g.kk(), hw = g.hw_out();
  parallel_for(0, g.N, 1, [&](int64_t b, int64_t e) {
    std::vector<Cm> col(std::size_t(K * hw));
    std::vector<Cm> acc(std::is_same_v<T, Cm> ? 0 : std::size_t(g.og() * hw));
    for (int64_t n = b; n < e; ++n) {
      for (int64_t gr = 0; gr < g.groups; ++gr) {
        im2col(xp + (n * g.C + gr * g.cg()) * g.H * g.W, col.data(), hw, g);
        T* y = yp + (n * g.O + gr * g.og()) * hw;
        Cm* dst = nullptr;
        if constexpr (std::is_same_v<T, Cm>) dst = y; else dst = acc.data();
        // f32 accumulation for f16/bf16 (f64 for f64) inside the GEMM; bias added in Cm
        gemm_c<Cm>(g.og(), K, hw, gemm_matrix(wc.data() + gr * g.og() * K, K, 1), gemm_matrix(col.data(), hw, 1),
                   dst, bias.empty() ? nullptr : bias.data() + gr * g.og());
        if constexpr (!std::is_same_v<T, Cm>) {
          for (int64_t i = 0; i < g.og() * hw; ++i) y[i] = T(acc[std::size_t(i)]);  // one rounding
        }
      }
    }
  });
}

// conv2d: oneDNN (f32/bf16, NCHW or NHWC), oneDNN f32 on widened f16/bf16, else im2col.
template <typename T>
void conv2d_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  const MemoryFormat fmt = dense_format(out[0]);  // the activations' layout, chosen by infer_conv2d
  const Tensor x = dense(in[0], fmt);  // [N, C, H, W], NCHW or NHWC as the output
  const Tensor w = dense(in[1]);  // [O, C/groups, kH, kW]
  const ConvGeom g = conv_geom(attrs, x.size(0), x.size(1), x.size(2), x.size(3), w.size(0),
                               w.size(2), w.size(3));
  if constexpr (kOnednnConv<T>) {
    if (onednn_conv2d_forward(x, w, in.size() > 2 ? dense(in[2]) : Tensor(), out[0], g)) return;
  }
  if constexpr (kWidenConv<T>) {
    if (onednn_conv_picks(ConvDir::Forward, DType::F32, g)) {
      Tensor y = empty(out[0].shape(), {.dtype = DType::F32, .memory_format = fmt});
      const bool ran = onednn_conv2d_forward(widen<T>(x), widen<T>(w), in.size() > 2 ? widen<T>(dense(in[2])) : Tensor(), y, g);
      MG_ASSERT(ran, "conv2d: oneDNN refused an f32 convolution it picked");
      return narrow<T>(y, out[0]);
    }
  }
  into_nchw(out[0], [&](Tensor& y) { conv2d_im2col<T>(dense(in[0]), w, in, y, g); });
}

// The im2col path of transposed_conv: gy, w, dx dense NCHW / OIHW.
template <typename T>
void transposed_conv_im2col(const Tensor& gy, const Tensor& w, const Tensor& bias_in, Tensor& dx_out,
                            const ConvGeom& g) {
  using Cm = opmath_t<T>;
  const std::vector<Cm> wc = load<T, Cm>(w);
  std::vector<Cm> bias;
  if (bias_in.defined()) bias = load<T, Cm>(dense(bias_in));  // [C]
  const T* gp = static_cast<const T*>(gy.data_ptr());
  T* dxp = static_cast<T*>(dx_out.data_ptr());
  const int64_t K = g.cg() * g.kk(), hw = g.hw_out(), plane = g.H * g.W, chw = g.cg() * plane;
  parallel_for(0, g.N, 1, [&](int64_t b, int64_t e) {
    std::vector<Cm> col(std::size_t(K * hw));
    std::vector<Cm> gc(std::size_t(g.og() * hw));
    std::vector<Cm> dx(static_cast<std::size_t>(chw));  // accumulates in Cm (f32 for f16/bf16)
    for (int64_t n = b; n < e; ++n) {
      for (int64_t gr = 0; gr < g.groups; ++gr) {
        const T* gsrc = gp + (n * g.O + gr * g.og()) * hw;
        for (int64_t i = 0; i < g.og() * hw; ++i) gc[std::size_t(i)] = Cm(gsrc[i]);
        gemm_c<Cm>(K, g.og(), hw, gemm_matrix(wc.data() + gr * g.og() * K, 1, K), gemm_matrix(gc.data(), hw, 1),
                   col.data());
        for (int64_t c = 0; c < g.cg(); ++c) {
          const Cm b0 = bias.empty() ? Cm(0) : bias[std::size_t(gr * g.cg() + c)];
          std::fill(dx.begin() + c * plane, dx.begin() + (c + 1) * plane, b0);
        }
        col2im(col.data(), dx.data(), g);
        T* dst = dxp + (n * g.C + gr * g.cg()) * plane;
        for (int64_t i = 0; i < chw; ++i) dst[i] = T(dx[std::size_t(i)]);  // one rounding
      }
    }
  });
}

// dx[n, g] [cg, H, W] = col2im(w[g]^T [cg*kk, og] @ g[n, g] [og, Ho*Wo]) (+ bias[c], added in the
// compute type before the one rounding). gy [N, O, Ho, Wo], w [O, C/groups, kH, kW], {H, W} the
// input size; attrs.ints[0..6] the conv geometry.
template <typename T>
void transposed_conv(const Tensor& gy_in, const Tensor& w_in, const Tensor& bias_in, int64_t H, int64_t W,
                     Tensor& dx_out, const OpAttrs& attrs) {
  const MemoryFormat fmt = dense_format(dx_out);  // the activations' layout, chosen by the infer rule
  const Tensor gy = dense(gy_in, fmt);
  const Tensor w = dense(w_in);
  ConvGeom g = conv_geom(attrs, gy.size(0), w.size(1) * attrs.ints[6], H, W, w.size(0), w.size(2), w.size(3));
  // gy's own size: with an output_padding not below the stride (conv_transpose2d allows it below
  // the dilation) the formula from {H, W} gives one more row or column than gy has.
  g.Ho = gy.size(2);
  g.Wo = gy.size(3);
  if constexpr (kOnednnConv<T>) {
    if (onednn_conv2d_backward_data(gy, w, bias_in.defined() ? dense(bias_in) : Tensor(), dx_out, g)) return;
  }
  if constexpr (kWidenConv<T>) {
    if (onednn_conv_picks(ConvDir::BackwardData, DType::F32, g)) {
      Tensor dx = empty(dx_out.shape(), {.dtype = DType::F32, .memory_format = fmt});
      const bool ran = onednn_conv2d_backward_data(widen<T>(gy), widen<T>(w),
                                                   bias_in.defined() ? widen<T>(dense(bias_in)) : Tensor(), dx, g);
      MG_ASSERT(ran, "conv2d backward: oneDNN refused an f32 convolution it picked");
      return narrow<T>(dx, dx_out);
    }
  }
  into_nchw(dx_out, [&](Tensor& y) { transposed_conv_im2col<T>(dense(gy_in), w, bias_in, y, g); });
}

// in = (g [N, O, Ho, Wo], w [O, C/groups, kH, kW]); attrs.ints[7..8] = {H, W}.
template <typename T>
void conv2d_backward_input_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  transposed_conv<T>(in[0], in[1], Tensor(), attrs.ints[7], attrs.ints[8], out[0], attrs);
}

// conv_transpose2d: in = (x [N, Cin, H, W], w [Cin, Cout/groups, kH, kW][, bias [Cout]]) is the
// input gradient of a conv from [N, Cout, Hout, Wout] with weight w, plus bias.
template <typename T>
void conv_transpose2d_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  transposed_conv<T>(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), out[0].size(2), out[0].size(3), out[0],
                     attrs);
}

// dw[g] [og, cg*kk] = sum_n g[n, g] [og, Ho*Wo] @ im2col(x[n, g])^T, summed over the batch in
// slices of S = weight_grad_slice(N) images: one GEMM per slice and group, [og, S*Ho*Wo] @ [S*Ho*Wo, cg*kk],
// into its own partial (Cm), the partials combined by the summation rule's pairwise tree. The
// slices run in parallel, each GEMM on one thread, so the result does not depend on the number of
// threads. in = (x [N, C, H, W], g [N, O, Ho, Wo]); attrs.ints[7..8] = {kH, kW}; dw dense OIHW.
template <typename T>
void weight_grad_oihw(const Tensors& in, Tensor& dw_out, const OpAttrs& attrs) {
  using Cm = opmath_t<T>;
  // oneDNN reads both activations in one layout: NHWC when either is channels-last
  const MemoryFormat fmt = layout_of(in[0]) == MemoryFormat::ChannelsLast || layout_of(in[1]) == MemoryFormat::ChannelsLast
                               ? MemoryFormat::ChannelsLast
                               : MemoryFormat::Contiguous;
  const Tensor x = dense(in[0], fmt);
  const Tensor gy = dense(in[1], fmt);
  const ConvGeom g = conv_geom(attrs, x.size(0), x.size(1), x.size(2), x.size(3), gy.size(1),
                               attrs.ints[7], attrs.ints[8]);
  if constexpr (kOnednnConv<T>) {
    if (onednn_conv2d_backward_weights(x, gy, dw_out, g)) return;
  }
  if constexpr (kWidenConv<T>) {
    if (onednn_conv_picks(ConvDir::BackwardWeights, DType::F32, g)) {
      Tensor dw = empty(dw_out.shape(), {.dtype = DType::F32});
      const bool ran = onednn_conv2d_backward_weights(widen<T>(x), widen<T>(gy), dw, g);
      MG_ASSERT(ran, "conv2d weight gradient: oneDNN refused an f32 convolution it picked");
      return narrow<T>(dw, dw_out);
    }
  }
  // the im2col path reads NCHW
  const Tensor xn = dense(in[0]), gn = dense(in[1]);
  const T* xp = static_cast<const T*>(xn.data_ptr());
  const T* gp = static_cast<const T*>(gn.data_ptr());
  T* dwp = static_cast<T*>(dw_out.data_ptr());
  const int64_t K = g.cg() * g.kk(), hw = g.hw_out(), wn = g.og() * K;
  const int64_t S = weight_grad_slice(g.N), parts = g.N == 0 ? 0 : (g.N + S - 1) / S;
  std::vector<Cm> partial(std::size_t(parts * wn));  // [parts, og, cg*kk], f32 accumulation for f16/bf16
  if (parts == 0) {  // an empty batch: a zero gradient
    for (int64_t i = 0; i < dw_out.numel(); ++i) dwp[i] = T(0.0f);
    return;
  }
  for (int64_t gr = 0; gr < g.groups; ++gr) {
    // At least two tasks, so that with several threads every GEMM runs inside the parallel region
    // (on its own thread, never split along k by the GEMM's threading).
    parallel_for(0, std::max<int64_t>(parts, 2), 1, [&](int64_t b, int64_t e) {
      const int64_t Ls = std::min(g.N, S) * hw;
      std::vector<Cm> col(std::size_t(K * Ls));      // [cg*kk, S*Ho*Wo]
      std::vector<Cm> gc(std::size_t(g.og() * Ls));  // [og, S*Ho*Wo]
      for (int64_t p = b; p < std::min(e, parts); ++p) {
        const int64_t n0 = p * S, ns = std::min(g.N, n0 + S) - n0, L = ns * hw;
        for (int64_t n = n0; n < n0 + ns; ++n) {
          im2col(xp + (n * g.C + gr * g.cg()) * g.H * g.W, col.data() + (n - n0) * hw, L, g);
          for (int64_t o = 0; o < g.og(); ++o) {
            const T* src = gp + (n * g.O + gr * g.og() + o) * hw;
            Cm* dst = gc.data() + o * L + (n - n0) * hw;
            for (int64_t i = 0; i < hw; ++i) dst[i] = Cm(src[i]);
          }
        }
        gemm_c<Cm>(g.og(), L, K, gemm_matrix(gc.data(), L, 1), gemm_matrix(col.data(), 1, L), partial.data() + p * wn);
      }
    });
    pairwise_rows(partial.data(), parts, wn);  // the slices' partials, by the rule (in Cm)
    T* dst = dwp + gr * wn;
    for (int64_t i = 0; i < wn; ++i) dst[i] = T(partial[std::size_t(i)]);  // one rounding
  }
}

// dw in the layout inference chose (a channels-last weight's own): OIHW computed, copied once.
template <typename T>
void conv2d_backward_weight_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  into_nchw(out[0], [&](Tensor& dw) { weight_grad_oihw<T>(in, dw, attrs); });
}

template <typename T> struct Conv2dK { static constexpr KernelFn fn = conv2d_kernel<T>; };
template <typename T> struct Conv2dBwInK { static constexpr KernelFn fn = conv2d_backward_input_kernel<T>; };
template <typename T> struct ConvTK { static constexpr KernelFn fn = conv_transpose2d_kernel<T>; };
template <typename T> struct Conv2dBwWK { static constexpr KernelFn fn = conv2d_backward_weight_kernel<T>; };

}  // namespace

void register_pool_kernels();  // ops/cpu/pool_kernels.cpp

void register_conv_kernels() {
  register_pool_kernels();
  register_cpu_floating<Conv2dK>(OpId::conv2d);
  register_cpu_floating<Conv2dBwInK>(OpId::conv2d_backward_input);
  register_cpu_floating<Conv2dBwWK>(OpId::conv2d_backward_weight);
  register_cpu_floating<ConvTK>(OpId::conv_transpose2d);
}

}  // namespace mg::cpu
