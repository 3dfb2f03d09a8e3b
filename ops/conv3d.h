// 3-D convolution and pooling over [N, C, D, H, W] (or unbatched [C, D, H, W]) tensors, as
// torch.nn.functional's conv3d, max_pool3d, avg_pool3d and adaptive_avg_pool3d, built on the 2-D
// ops so their kernels (oneDNN, cuDNN), autocast policies (conv: lower, pooling: keep) and
// gradients carry over to every device:
//   conv3d (and conv_transpose3d, below): the kd depth taps of each output depth become channels, so one conv2d over a batch of
//     N·Do images of C·kd channels (weight [O, C/g·kd, kh, kw]) computes every output with one
//     accumulation and one rounding. Cost: the depth-gathered input is kd / sd times the input.
//   pooling: separable — the 2-D pool over (H, W), then the 1-D pool over D (max of maxima, mean of
//     means, with each dim's window, padding, ceil_mode and count_include_pad rules as PyTorch's);
//     average pools of f16/bf16 run in f32 and round once. A max window's gradient goes to its
//     first maximum in (d, h, w) order, as PyTorch's (the first over depth of each plane's first).
//   Cost: conv_transpose3d spreads the input by the depth stride (zeros between), so its depth
//     work is sd times the input's and the gathered tensor kd·sd times the input. Outputs are
//     contiguous (PyTorch keeps channels_last_3d); no divisor_override, no padding modes yet.
//
//   mg::Tensor y = mg::conv3d(x, w, b, {.padding = {1, 1, 1}});   // x [N, C, D, H, W], w [O, C, 3, 3, 3]
#pragma once
#include <array>
#include <cstdint>
#include <optional>

#include "mixgrad/core/tensor.h"

namespace mg {

using Int3 = std::array<int64_t, 3>;  // {depth, height, width}

struct Conv3dOptions {
  Int3 stride{1, 1, 1};
  Int3 padding{0, 0, 0};   // zeros on both sides
  Int3 dilation{1, 1, 1};
  int64_t groups = 1;      // must divide C and O
};

// y [N, O, Do, Ho, Wo] = cross-correlation of x [N, C, D, H, W] with w [O, C/groups, kd, kh, kw]
// plus an optional bias [O]; Do = (D + 2 pad_d - dil_d (kd - 1) - 1) / stride_d + 1 (likewise H, W).
Tensor conv3d(const Tensor& x, const Tensor& w, const Tensor& bias = {}, const Conv3dOptions& opt = {});

// Transposed convolution (the input gradient of conv3d, plus bias): x [N, Cin, D, H, W],
// w [Cin, Cout/groups, kd, kh, kw], bias [Cout] -> [N, Cout, Do, Ho, Wo] with
// Do = (D - 1) stride_d - 2 pad_d + dil_d (kd - 1) + output_padding_d + 1 (likewise H, W);
// output_padding must be smaller than the stride or the dilation. In depth it is a convolution
// of the input spread by the stride (zeros between) with the depth-flipped kernel, whose taps
// become channels of one conv_transpose2d over (H, W): one accumulation, one rounding.
Tensor conv_transpose3d(const Tensor& x, const Tensor& w, const Tensor& bias = {}, const Conv3dOptions& opt = {},
                        Int3 output_padding = {0, 0, 0});

// stride {0, 0, 0} means the kernel.
Tensor max_pool3d(const Tensor& x, Int3 kernel, Int3 stride = {0, 0, 0}, Int3 padding = {0, 0, 0},
                  Int3 dilation = {1, 1, 1}, bool ceil_mode = false);
// max_pool3d's window maxima as positions d * H * W + h * W + w in the input's (D, H, W) volume
// (PyTorch's return_indices; ties: the first in (d, h, w) order, as max_pool3d's gradient), i64 of
// max_pool3d's output shape, for max_unpool3d (ops/max_unpool.h). Not differentiable.
Tensor max_pool3d_indices(const Tensor& x, Int3 kernel, Int3 stride = {0, 0, 0}, Int3 padding = {0, 0, 0},
                          Int3 dilation = {1, 1, 1}, bool ceil_mode = false);
// divisor_override (> 0): every window's sum divided by it instead of by a count (PyTorch's).
Tensor avg_pool3d(const Tensor& x, Int3 kernel, Int3 stride = {0, 0, 0}, Int3 padding = {0, 0, 0},
                  bool count_include_pad = true, bool ceil_mode = false,
                  std::optional<int64_t> divisor_override = std::nullopt);
// Mean over the windows [floor(i D / Do), ceil((i + 1) D / Do)) of each dim.
Tensor adaptive_avg_pool3d(const Tensor& x, Int3 output_size);

}  // namespace mg
