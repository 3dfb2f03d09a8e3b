// The conv lowering of cuda/host/conv_plan.h: geometry, chunk sizes, the GEMM of each direction and
// the drivers' order of device steps. Plain C++: no CUDA header, built and tested in every build.
#include "mixgrad/cuda/host/conv_plan.h"

#include <algorithm>

#include "mixgrad/core/error.h"

namespace mg::cuda {
namespace {

const char* at(const void* p, int64_t elems, DType dt) {
  return static_cast<const char*>(p) + elems * int64_t(dtype_size(dt));
}
char* at(void* p, int64_t elems, DType dt) { return static_cast<char*>(p) + elems * int64_t(dtype_size(dt)); }

GemmOperand operand(const void* ptr, Strides batch, int64_t rs, int64_t cs) {
  GemmOperand o;
  o.ptr = ptr;
  o.batch_strides = std::move(batch);
  o.rs = rs;
  o.cs = cs;
  return o;
}

// c = out with beta 1: the GEMM adds its product to what out holds (cuBLASLt's C = D).
void accumulate_into_out(GemmProblem& p) {
  p.c = operand(p.out, Strides(p.batch.size(), 0), p.m, 1);  // c is out: the plan's CopyToOut has nothing to copy
  p.beta = 1.0;
}

}  // namespace

ConvDims conv_dims(const std::vector<int64_t>& i, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O,
                   int64_t kH, int64_t kW) {
  MG_ASSERT(i.size() >= 7, "conv_dims: expected the 7 geometry ints, got ", i.size());
  ConvDims g{N, C, H, W, O, kH, kW, 0, 0, i[0], i[1], i[2], i[3], i[4], i[5], i[6]};
  g.Ho = (H + 2 * g.ph - g.dh * (kH - 1) - 1) / g.sh + 1;
  g.Wo = (W + 2 * g.pw - g.dw * (kW - 1) - 1) / g.sw + 1;
  return g;
}

DType conv_acc_dtype(DType dtype) { return dtype == DType::F16 || dtype == DType::BF16 ? DType::F32 : dtype; }

int64_t conv_bytes_per_image(ConvDirection dir, const ConvDims& g, DType dtype) {
  const int64_t cols = g.C * g.kk() * g.hw_out();  // G groups x K rows x Ho*Wo
  switch (dir) {
    case ConvDirection::Forward: return cols * int64_t(dtype_size(dtype));
    case ConvDirection::BackwardInput: return cols * int64_t(dtype_size(conv_acc_dtype(dtype)));
    case ConvDirection::BackwardWeight: return (cols + g.O * g.hw_out()) * int64_t(dtype_size(dtype));
  }
  return 0;
}

int64_t conv_chunk_images(int64_t N, int64_t bytes_per_image, int64_t budget) {
  if (N <= 0) return 0;
  if (bytes_per_image <= 0) return N;
  return std::clamp<int64_t>(budget / bytes_per_image, 1, N);
}

GemmProblem conv_forward_gemm(const ConvDims& g, int64_t nb, const void* w, const void* col, void* y,
                              bool accumulate) {
  const int64_t K = g.rows(), hw = g.hw_out(), og = g.og();
  GemmProblem p;
  p.batch = {nb, g.groups};
  p.n = og;
  p.k = K;
  p.m = hw;
  p.a = operand(w, {0, og * K}, K, 1);                        // w [G, og, K], shared by the images
  p.b = operand(col, {g.groups * K * hw, K * hw}, hw, 1);     // col [nb, G, K, hw]
  p.out = y;                                                  // y [nb, G, og, hw] = [nb, O, Ho, Wo]
  if (accumulate) accumulate_into_out(p);
  return p;
}

GemmProblem conv_backward_input_gemm(const ConvDims& g, int64_t nb, const void* w, const void* gy, void* dcol) {
  const int64_t K = g.rows(), hw = g.hw_out(), og = g.og();
  GemmProblem p;
  p.batch = {nb, g.groups};
  p.n = K;
  p.k = og;
  p.m = hw;
  p.a = operand(w, {0, og * K}, 1, K);                   // w[g]^T: element (r, o) at o K + r
  p.b = operand(gy, {g.O * hw, og * hw}, hw, 1);         // gy [nb, G, og, hw]
  p.out = dcol;                                          // dcol [nb, G, K, hw]
  return p;
}

GemmProblem conv_backward_weight_gemm(const ConvDims& g, int64_t nb, const void* gp, const void* col, void* dw,
                                      bool accumulate) {
  const int64_t K = g.rows(), L = nb * g.hw_out(), og = g.og();
  GemmProblem p;
  p.batch = {g.groups};
  p.n = og;
  p.k = L;
  p.m = K;
  p.a = operand(gp, {og * L}, L, 1);    // gp [G, og, L]
  p.b = operand(col, {K * L}, 1, L);    // col[g]^T: element (l, r) of col [G, K, L] at r L + l
  p.out = dw;                           // dw [G, og, K]
  if (accumulate) accumulate_into_out(p);
  return p;
}

void conv_forward_steps(const ConvDims& g, DType dt, const void* x, const void* w, const void* bias, void* y,
                        void* col, int64_t nb, ConvDevice& dev) {
  if (g.N == 0 || g.O == 0) return;
  if (bias) dev.fill_bias(g, bias, y);
  for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
    const int64_t n = std::min(nb, g.N - n0);
    dev.im2col(g, ColLayout::ImageMajor, n, at(x, n0 * g.C * g.H * g.W, dt), col);
    dev.gemm(conv_forward_gemm(g, n, w, col, at(y, n0 * g.O * g.hw_out(), dt), bias != nullptr), dt, dt);
  }
}

void conv_backward_input_steps(const ConvDims& g, DType dt, const void* gy, const void* w, const void* bias,
                               void* dx, void* dcol, int64_t nb, ConvDevice& dev) {
  if (g.N == 0 || g.C == 0) return;
  const DType acc = conv_acc_dtype(dt);
  for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
    const int64_t n = std::min(nb, g.N - n0);
    dev.gemm(conv_backward_input_gemm(g, n, w, at(gy, n0 * g.O * g.hw_out(), dt), dcol), dt, acc);
    dev.col2im(g, n, dcol, bias, at(dx, n0 * g.C * g.H * g.W, dt));
  }
}

void conv_backward_weight_steps(const ConvDims& g, DType dt, const void* x, const void* gy, void* dw, void* acc,
                                void* col, void* gp, int64_t nb, ConvDevice& dev) {
  const DType acc_dt = conv_acc_dtype(dt);
  const int64_t wn = g.O * g.rows();
  if (wn == 0) return;
  if (g.N == 0) {  // an empty batch: a zero gradient
    dev.convert(dw, dt, nullptr, dt, wn);
    return;
  }
  // Chunks in order: the first writes acc, each later one adds its product to it (f32 for
  // f16/bf16), so the batch is summed in a fixed order whatever the chunk size.
  for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
    const int64_t n = std::min(nb, g.N - n0);
    dev.im2col(g, ColLayout::GroupMajor, n, at(x, n0 * g.C * g.H * g.W, dt), col);
    dev.permute_grad(g, n, at(gy, n0 * g.O * g.hw_out(), dt), gp);
    dev.gemm(conv_backward_weight_gemm(g, n, gp, col, acc, n0 > 0), dt, acc_dt);
  }
  if (acc != dw) dev.convert(dw, dt, acc, acc_dt, wn);  // the one rounding
}

}  // namespace mg::cuda
