// The oneDNN path of the CPU conv kernels (ops/cpu/conv_kernels.cpp): conv2d forward (with bias),
// backward-data (conv2d_backward_input and conv_transpose2d) and backward-weights for f32 and
// bf16, on NCHW or channels-last (NHWC) activations, with primitives cached by shape, dtype and layout. Which directions and shapes run
// here rather than through im2col + GEMM is decided by measurement: see conv_onednn.cpp.
//
//   mg::cpu::ConvPathGuard path(mg::cpu::ConvPath::Im2col);  // tests: force the peer path
#pragma once
#include "mixgrad/core/tensor.h"
#include "mixgrad/ops/cpu/im2col.h"

namespace mg::cpu {

// Which implementation the conv kernels use. Auto: the measured choice per direction and shape.
// OnednnPlain / OnednnBlocked force oneDNN (where it supports the dtype and geometry) on plain
// nchw/oihw memory, or on the layouts oneDNN prefers (format_tag::any) with reorders from and to
// NCHW around the primitive. Process-wide; meant for tests and benchmarks.
enum class ConvPath { Auto, Im2col, OnednnPlain, OnednnBlocked };
void set_conv_path(ConvPath path);
ConvPath conv_path();

// Sets the path for a scope and restores the previous one.
class ConvPathGuard {
 public:
  explicit ConvPathGuard(ConvPath path) : prev_(conv_path()) { set_conv_path(path); }
  ~ConvPathGuard() { set_conv_path(prev_); }
  ConvPathGuard(const ConvPathGuard&) = delete;
  ConvPathGuard& operator=(const ConvPathGuard&) = delete;

 private:
  ConvPath prev_;
};

// How many convs this process has run on oneDNN (tests check which path ran).
int64_t onednn_conv_calls();

enum class ConvDir { Forward, BackwardData, BackwardWeights };

// Whether the current path runs this direction, dtype and geometry on oneDNN (f16 asks with f32:
// its convolutions run on the f32 primitives, see conv_kernels.cpp).
bool onednn_conv_picks(ConvDir dir, DType dt, const ConvGeom& g);

// Each returns false, having written nothing, when the current path does not pick oneDNN for
// this direction, dtype and geometry (or oneDNN has no implementation of it); the caller then
// runs im2col. All tensors are of one dtype (f32 or bf16): weights dense OIHW, activations dense
// NCHW or all dense NHWC (channels-last; oneDNN reads and writes them as nhwc); g is the geometry
// of the convolution whose input is [N, C, H, W] and output [N, O, Ho, Wo].
//
// y [N, O, Ho, Wo] = conv(x [N, C, H, W], w [O, C/groups, kH, kW]) + bias [O] (may be undefined).
bool onednn_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const ConvGeom& g);
// dx [N, C, H, W] = conv^T(gy [N, O, Ho, Wo], w [O, C/groups, kH, kW]) + bias [C] (may be
// undefined; conv_transpose2d), the bias added in f32 before the one rounding.
bool onednn_conv2d_backward_data(const Tensor& gy, const Tensor& w, const Tensor& bias, Tensor& dx,
                                 const ConvGeom& g);
// dw [O, C/groups, kH, kW] = sum over n, Ho, Wo of gy [N, O, Ho, Wo] (x) x [N, C, H, W] patches,
// accumulated in f32 and rounded once to dw's dtype.
bool onednn_conv2d_backward_weights(const Tensor& x, const Tensor& gy, Tensor& dw, const ConvGeom& g);

}  // namespace mg::cpu
