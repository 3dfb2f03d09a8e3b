// Convolution and pooling ops (NCHW). On the CPU conv2d and its gradients run on oneDNN's
// convolutions for f32 and bf16 (AMX for bf16) and as im2col + the shared GEMM for f64, f16 and
// first layers with few input channels (ops/cpu/conv_onednn.cpp has the measurements), always with
// f32 accumulation for f16/bf16 and one rounding of the output. On CUDA all four conv ops run
// through cuDNN (NCHW or channels-last strides; f64 and a few declared cases as im2col + cuBLASLt)
// under the same contract (cuda/conv_kernels.cpp, docs/cuda.md "Convolution").
//
//   mg::Tensor y = mg::conv2d(x, w, b, {.stride = {2, 2}, .padding = {1, 1}});  // x [N,C,H,W], w [O,C,3,3]
//   mg::Tensor p = mg::max_pool2d(y, {3, 3}, {2, 2}, {1, 1});                   // [N, O, Ho/2, Wo/2]
#pragma once
#include <array>
#include <cstdint>
#include <optional>

#include "mixgrad/core/tensor.h"

namespace mg {

// Geometry of a 2-D convolution; each pair is {height, width}.
struct Conv2dOptions {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};   // zeros added on both sides
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;                      // must divide C and O
};

// y [N, O, Ho, Wo] = cross-correlation of x [N, C, H, W] with w [O, C/groups, kH, kW] plus an
// optional bias [O] (pass an undefined Tensor for none), where
// Ho = (H + 2 pad_h - dil_h (kH - 1) - 1) / stride_h + 1 (likewise Wo). Lower autocast policy.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias = {}, const Conv2dOptions& opt = {});

// PyTorch's padding="same" (stride 1): the output keeps H and W. Each dim is padded by
// dil (k - 1) in total, half on each side and the odd one at the bottom/right, as PyTorch; that
// case runs as conv2d with the larger padding on both sides and drops the first output row/col
// (the same numbers, no padded copy of the input). Differentiable through conv2d and slice.
Tensor conv2d_same(const Tensor& x, const Tensor& w, const Tensor& bias = {},
                   std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1);

// The input gradient of conv2d (a transposed convolution without bias): dx [N, C, H, W] from the
// output gradient g [N, O, Ho, Wo] and the weight w [O, C/groups, kH, kW]; `input_hw` = {H, W}.
Tensor conv2d_backward_input(const Tensor& g, const Tensor& w, std::array<int64_t, 2> input_hw,
                             const Conv2dOptions& opt = {});

// The weight gradient of conv2d: dw [O, C/groups, kH, kW] from the input x [N, C, H, W] and the
// output gradient g [N, O, Ho, Wo]; `kernel_hw` = {kH, kW}. `weight_format` is the memory layout
// dw is written in — the weight's own, so a channels-last parameter's gradient becomes its .grad
// with no copy (cuDNN writes it in place; the CPU kernels compute NCHW and copy once).
Tensor conv2d_backward_weight(const Tensor& x, const Tensor& g, std::array<int64_t, 2> kernel_hw,
                              const Conv2dOptions& opt = {}, MemoryFormat weight_format = MemoryFormat::Contiguous);

// Transposed convolution (the input gradient of conv2d, plus bias): x [N, Cin, H, W],
// w [Cin, Cout/groups, kH, kW], bias [Cout] optional -> [N, Cout, Hout, Wout] with
// Hout = (H - 1) stride_h - 2 pad_h + dil_h (kH - 1) + output_padding_h + 1 (likewise W);
// output_padding must be smaller than the stride or the dilation. Lower autocast policy.
Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& bias = {}, const Conv2dOptions& opt = {},
                        std::array<int64_t, 2> output_padding = {0, 0});


// Max over each (dilated) window of x [N, C, H, W] -> [N, C, Ho, Wo] with
// Ho = (H + 2 pad_h - dil_h (kH - 1) - 1) / stride_h + 1; padding counts as -inf (at most half the
// kernel), NaN propagates. `stride` {0, 0} means stride = kernel. Gradient to the first maximum.
// Every window must hold an input element: a dilation and padding whose taps all miss the input
// for some window is a ShapeError naming it.
// ceil_mode (PyTorch's): Ho rounds up instead of down, so a last window may hang over the end of
// the input (its taps there are skipped), but it must start inside the input or the left padding.
Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                  std::array<int64_t, 2> padding = {0, 0}, std::array<int64_t, 2> dilation = {1, 1},
                  bool ceil_mode = false);
// The i64 position (h * W + w, in x's plane) of each window's first maximum: same arguments and
// output shape as max_pool2d. Not differentiable.
Tensor max_pool2d_indices(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                          std::array<int64_t, 2> padding = {0, 0}, std::array<int64_t, 2> dilation = {1, 1},
                          bool ceil_mode = false);

// max_pool2d's input gradient from the indices of the window maxima (max_pool2d_indices with the
// same kernel, stride, padding and dilation): each g [N, C, Ho, Wo] goes to its window's first
// maximum of the [N, C, H, W] input (`input_hw` = {H, W}); an input element that is the maximum of
// several windows gets their sum, in opmath in output order, rounded once (the scatter_add it
// replaced summed the same way up to 127 windows per element, in leaves of 128 beyond: only
// kernels of 128+ taps get there). Each index must be a tap of its own window: IndexError (on
// CUDA at the host's next wait, where another index adds nothing: docs/cuda.md's deferred checks).
// Differentiable in g.
Tensor max_pool2d_backward(const Tensor& g, const Tensor& indices, std::array<int64_t, 2> input_hw,
                           std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                           std::array<int64_t, 2> padding = {0, 0}, std::array<int64_t, 2> dilation = {1, 1},
                           bool ceil_mode = false);

// Mean over each window of x [N, C, H, W]; zeros padding (at most half the kernel). With
// count_include_pad the divisor is the window size clipped to the padded input, else the number
// of real elements. `stride` {0, 0} means stride = kernel. ceil_mode as max_pool2d's; a window
// hanging over the end divides by its size clipped to the padded input (PyTorch's divisor).
// divisor_override (> 0): every window's sum is divided by it instead (PyTorch's).
Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                  std::array<int64_t, 2> padding = {0, 0}, bool count_include_pad = true, bool ceil_mode = false,
                  std::optional<int64_t> divisor_override = std::nullopt);
// Its input gradient: g [N, C, Ho, Wo] spread back over the windows -> [N, C, H, W].
Tensor avg_pool2d_backward(const Tensor& g, std::array<int64_t, 2> input_hw, std::array<int64_t, 2> kernel,
                           std::array<int64_t, 2> stride = {0, 0}, std::array<int64_t, 2> padding = {0, 0},
                           bool count_include_pad = true, bool ceil_mode = false,
                           std::optional<int64_t> divisor_override = std::nullopt);

// Mean over the windows [floor(i H / Ho), ceil((i + 1) H / Ho)) (likewise along W), so any
// [N, C, H, W] becomes [N, C, Ho, Wo] with `output_hw` = {Ho, Wo}.
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_hw);
// Its input gradient: g [N, C, Ho, Wo] -> [N, C, H, W] with `input_hw` = {H, W}.
Tensor adaptive_avg_pool2d_backward(const Tensor& g, std::array<int64_t, 2> input_hw);

}  // namespace mg
