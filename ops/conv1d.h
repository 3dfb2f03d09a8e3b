// 1-D convolution and pooling over [N, C, L] tensors, as torch.nn.functional's conv1d,
// conv_transpose1d, max_pool1d, avg_pool1d and adaptive_avg_pool1d: each runs the 2-D op on a
// [N, C, 1, L] view (weights [O, C/g, 1, k]), so the kernels, the autocast policy (conv: lower,
// pooling: keep), the numerics and the gradients are conv2d's and the 2-D pools' on every device.
//
//   mg::Tensor y = mg::conv1d(x, w, b, {.padding = 1});   // x [N, C, L], w [O, C, 3] -> [N, O, L]
#pragma once
#include <cstdint>

#include "mixgrad/core/tensor.h"

namespace mg {

struct Conv1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;   // zeros on both ends
  int64_t dilation = 1;
  int64_t groups = 1;    // must divide C and O
};

// y [N, O, Lo] = cross-correlation of x [N, C, L] with w [O, C/groups, k] plus an optional bias [O],
// Lo = (L + 2 padding - dilation (k - 1) - 1) / stride + 1.
Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& bias = {}, const Conv1dOptions& opt = {});
// PyTorch's padding="same" (stride 1): Lo = L; the total dilation (k - 1) split as conv2d_same's
// (the odd one at the end).
Tensor conv1d_same(const Tensor& x, const Tensor& w, const Tensor& bias = {}, int64_t dilation = 1,
                   int64_t groups = 1);
// x [N, Cin, L], w [Cin, Cout/groups, k], bias [Cout] -> [N, Cout, Lo] with
// Lo = (L - 1) stride - 2 padding + dilation (k - 1) + output_padding + 1.
Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor& bias = {}, const Conv1dOptions& opt = {},
                        int64_t output_padding = 0);

// max_pool2d / avg_pool2d along L (stride 0 means the kernel); see ops/conv.h for the rules.
Tensor max_pool1d(const Tensor& x, int64_t kernel, int64_t stride = 0, int64_t padding = 0, int64_t dilation = 1,
                  bool ceil_mode = false);
Tensor avg_pool1d(const Tensor& x, int64_t kernel, int64_t stride = 0, int64_t padding = 0,
                  bool count_include_pad = true, bool ceil_mode = false);
// Mean over the windows [floor(i L / Lo), ceil((i + 1) L / Lo)): [N, C, L] -> [N, C, Lo].
Tensor adaptive_avg_pool1d(const Tensor& x, int64_t output_size);

}  // namespace mg
