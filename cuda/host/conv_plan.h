// How the CUDA conv kernels (cuda/conv_kernels.cpp, cuda/kernels/im2col.cu) lower conv2d, its two
// gradient ops and conv_transpose2d onto im2col + cuBLASLt, as plain host code so that every step
// is unit-tested on the CPU (tests/cuda/test_conv_plan.cpp runs the drivers below with a CPU model
// of the device and compares with the CPU ops): the geometry, the per-element index math of
// im2col and of the gathering col2im (host-device), the batch chunks, the GEMM of each direction,
// and the order of the device steps.
//
// Decisions:
// - Numerics as on the CPU (ops/cpu/im2col.h): f32 accumulation for f16/bf16 and one rounding of
//   each output. The forward GEMM writes y directly (bias first filled into y, then D = A B + C in
//   f32, rounded once); the input-gradient columns dcol stay f32 (a GEMM with f16/bf16 inputs and an
//   f32 output) until col2im has summed them and added the bias; the weight gradient sums the batch
//   inside the GEMM's K dimension (K = images x Ho x Wo), chunks adding into an f32 accumulator in
//   chunk order (beta = 1), rounded once at the end.
// - col2im is a gather: each dx element adds its taps (ki, kj ascending, the CPU's scatter order),
//   so there are no atomics and the result repeats bit for bit.
// - Memory: the column buffer of one chunk of images stays within kConvWorkspaceBudget (1 GiB);
//   a chunk holds at least one image, so one image's columns may exceed it.
//
//   const ConvDims g = conv_dims(attrs.ints, N, C, H, W, O, kH, kW);
//   const int64_t nb = conv_chunk_images(g.N, conv_bytes_per_image(ConvDirection::Forward, g, dt));
//   conv_forward_steps(g, dt, x, w, bias, y, col, nb, device);  // device: the CUDA kernels
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "mixgrad/core/dtype.h"
#include "mixgrad/core/macros.h"
#include "mixgrad/ops/gemm_problem.h"

namespace mg::cuda {

// One conv's shapes: x [N, C, H, W], w [O, C/groups, kH, kW], y [N, O, Ho, Wo]; ops/cpu/im2col.h's
// ConvGeom restated for device code.
struct ConvDims {
  int64_t N, C, H, W, O, kH, kW, Ho, Wo;
  int64_t sh, sw, ph, pw, dh, dw, groups;
  MG_HOST_DEVICE int64_t cg() const { return C / groups; }
  MG_HOST_DEVICE int64_t og() const { return O / groups; }
  MG_HOST_DEVICE int64_t kk() const { return kH * kW; }
  MG_HOST_DEVICE int64_t rows() const { return C / groups * kH * kW; }  // K of one group's columns
  MG_HOST_DEVICE int64_t hw_out() const { return Ho * Wo; }
};

// ints = {sh, sw, ph, pw, dh, dw, groups, ...} (the ops' attrs); Ho, Wo by the conv formula.
ConvDims conv_dims(const std::vector<int64_t>& ints, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O,
                   int64_t kH, int64_t kW);

// The column buffer's order of (image n, group g, row r = (c kH + ki) kW + kj, output p = oh Wo + ow):
enum class ColLayout : uint8_t {
  ImageMajor,  // [nb, G, K, Ho*Wo]: one [K, Ho*Wo] matrix per (image, group) (forward, input gradient)
  GroupMajor,  // [G, K, nb*Ho*Wo]: one [K, nb*Ho*Wo] matrix per group (weight gradient: batch in K)
};

// Element e of a column buffer for nb images: the offset of its tap in the images' x [nb, C, H, W]
// (dense), or -1 where the tap falls in the padding (the column holds 0).
MG_HOST_DEVICE int64_t im2col_source(const ConvDims& g, ColLayout layout, int64_t nb, int64_t e) {
  const int64_t hw = g.Ho * g.Wo, K = g.rows();
  int64_t n, gr, r, p;
  if (layout == ColLayout::ImageMajor) {
    p = e % hw;
    r = (e / hw) % K;
    gr = (e / (hw * K)) % g.groups;
    n = e / (hw * K * g.groups);
  } else {
    p = e % hw;
    n = (e / hw) % nb;
    r = (e / (hw * nb)) % K;
    gr = e / (hw * nb * K);
  }
  const int64_t kj = r % g.kW, ki = (r / g.kW) % g.kH, c = r / g.kk();
  const int64_t ow = p % g.Wo, oh = p / g.Wo;
  const int64_t ih = oh * g.sh - g.ph + ki * g.dh, iw = ow * g.sw - g.pw + kj * g.dw;
  if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) return -1;
  return ((n * g.C + gr * g.cg() + c) * g.H + ih) * g.W + iw;
}

// Element e of dx [nb, C, H, W] from the ImageMajor columns dcol [nb, G, K, Ho*Wo] (f32, or f64
// for f64): init (the bias, or 0) plus every tap of the element, ki then kj ascending — the order
// in which ops/cpu/im2col.h's col2im adds them — in the accumulator type A.
template <typename A>
MG_HOST_DEVICE A col2im_gather(const ConvDims& g, int64_t e, const A* dcol, A init) {
  const int64_t iw = e % g.W, ih = (e / g.W) % g.H, ch = (e / (g.W * g.H)) % g.C, n = e / (g.W * g.H * g.C);
  const int64_t gr = ch / g.cg(), c = ch % g.cg(), hw = g.Ho * g.Wo;
  const A* col = dcol + ((n * g.groups + gr) * g.rows() + c * g.kk()) * hw;
  A acc = init;
  for (int64_t ki = 0; ki < g.kH; ++ki) {
    const int64_t th = ih + g.ph - ki * g.dh;  // = oh * sh
    if (th < 0 || th % g.sh != 0 || th / g.sh >= g.Ho) continue;
    const int64_t oh = th / g.sh;
    for (int64_t kj = 0; kj < g.kW; ++kj) {
      const int64_t tw = iw + g.pw - kj * g.dw;
      if (tw < 0 || tw % g.sw != 0 || tw / g.sw >= g.Wo) continue;
      acc += col[(ki * g.kW + kj) * hw + oh * g.Wo + tw / g.sw];
    }
  }
  return acc;
}

// The three GEMM shapes (DESIGN: one lowering per direction).
enum class ConvDirection : uint8_t { Forward, BackwardInput, BackwardWeight };

// Bytes of device workspace per image in each direction (what conv_chunk_images bounds):
// Forward: the columns in T; BackwardInput: dcol in the accumulator dtype (f32 for f16/bf16);
// BackwardWeight: the columns plus g permuted to [G, og, nb*Ho*Wo], both in T.
int64_t conv_bytes_per_image(ConvDirection dir, const ConvDims& g, DType dtype);

inline constexpr int64_t kConvWorkspaceBudget = int64_t(1) << 30;  // 1 GiB

// Images per chunk: as many as fit in `budget` bytes, at least 1, at most N (0 when N == 0).
int64_t conv_chunk_images(int64_t N, int64_t bytes_per_image, int64_t budget = kConvWorkspaceBudget);

// The accumulator dtype of dcol and of the weight gradient: f32 for f16/bf16, else `dtype`.
DType conv_acc_dtype(DType dtype);

// Forward, for nb images: y[n, g] [og, Ho*Wo] (+)= w[g] [og, K] @ col[n, g] [K, Ho*Wo];
// batch [nb, G]; `accumulate`: c = y, beta 1 (y holds the bias).
GemmProblem conv_forward_gemm(const ConvDims& g, int64_t nb, const void* w, const void* col, void* y, bool accumulate);
// Input gradient, for nb images: dcol[n, g] [K, Ho*Wo] = w[g]^T [K, og] @ gy[n, g] [og, Ho*Wo];
// batch [nb, G].
GemmProblem conv_backward_input_gemm(const ConvDims& g, int64_t nb, const void* w, const void* gy, void* dcol);
// Weight gradient, for nb images: dw[g] [og, K] (+)= gp[g] [og, L] @ col[g]^T [L, K] with
// L = nb*Ho*Wo (gp: gy permuted to [G, og, nb, Ho*Wo]); batch [G]; `accumulate`: c = dw, beta 1.
GemmProblem conv_backward_weight_gemm(const ConvDims& g, int64_t nb, const void* gp, const void* col, void* dw,
                                      bool accumulate);

// The device work the drivers ask for, in stream order (the CUDA kernels; a CPU model in tests).
// Pointers are device pointers of the dtype named; "T" is the conv's dtype.
class ConvDevice {
 public:
  virtual ~ConvDevice() = default;
  // col (T, `layout`) for the nb images x [nb, C, H, W] (T).
  virtual void im2col(const ConvDims& g, ColLayout layout, int64_t nb, const void* x, void* col) = 0;
  // dx [nb, C, H, W] (T) = round(bias[c] (T, or none) + the gathered taps of dcol (acc dtype)).
  virtual void col2im(const ConvDims& g, int64_t nb, const void* dcol, const void* bias, void* dx) = 0;
  // y [N, O, Ho, Wo] (T) = bias[o] (T) broadcast.
  virtual void fill_bias(const ConvDims& g, const void* bias, void* y) = 0;
  // gp [G, og, nb, Ho*Wo] = gy [nb, G, og, Ho*Wo] (T, a permutation).
  virtual void permute_grad(const ConvDims& g, int64_t nb, const void* gy, void* gp) = 0;
  // The GEMM with inputs of `dtype` and an output of `out_dtype`, on the stream.
  virtual void gemm(const GemmProblem& p, DType dtype, DType out_dtype) = 0;
  // dst (`dst_dtype`, n elements) = src (`src_dtype`) converted (zero: src == nullptr).
  virtual void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n) = 0;
};

// y [N, O, Ho, Wo] = conv2d(x [N, C, H, W], w [O, C/groups, kH, kW]) + bias [O] (nullptr: none),
// all dense of dtype `dtype`; `col` holds nb images' columns (ImageMajor, dtype).
void conv_forward_steps(const ConvDims& g, DType dtype, const void* x, const void* w, const void* bias, void* y,
                        void* col, int64_t nb, ConvDevice& dev);
// dx [N, C, H, W] = col2im(w^T gy) + bias [C] (nullptr: none): the input gradient of conv2d and
// conv_transpose2d's output; gy [N, O, Ho, Wo], w [O, C/groups, kH, kW]; `dcol` holds nb images'
// columns in conv_acc_dtype(dtype).
void conv_backward_input_steps(const ConvDims& g, DType dtype, const void* gy, const void* w, const void* bias,
                               void* dx, void* dcol, int64_t nb, ConvDevice& dev);
// dw [O, C/groups, kH, kW] = Σ_n gy[n] im2col(x[n])^T; `col` (GroupMajor) and `gp` hold nb images
// (dtype); `acc` [O, C/groups * kH * kW] in conv_acc_dtype(dtype) (may be dw itself when that is
// dtype), rounded once into dw at the end.
void conv_backward_weight_steps(const ConvDims& g, DType dtype, const void* x, const void* gy, void* dw, void* acc,
                                void* col, void* gp, int64_t nb, ConvDevice& dev);

}  // namespace mg::cuda
