// Fractional max pooling, PyTorch's F.fractional_max_pool2d / 3d (Graham, 2014): max pooling whose
// windows start at pseudo-random positions, so the output size need not divide the input's. Along
// a dim of input size L pooled to Lo with kernel k, window i starts at
//   floor((i + u) a) - floor(u a)  with a = (L - k) / (Lo - 1),   and the last at L - k,
// u one sample in [0, 1) per (n, c) and dim: PyTorch's rule, in x's dtype for f32/f64 (f32 for
// f16/bf16), so given the same samples the windows equal PyTorch's. 2-D takes the W sample from
// samples[..., 0] and the H one from [..., 1]; 3-D takes D, H, W from [..., 0], [1], [2] (PyTorch's
// order).
//
//   mg::Tensor y = mg::fractional_max_pool2d(x, {2, 2}, {14, 14});   // [N, C, 28, 28] -> [N, C, 14, 14]
//
// Public ops (one gather of every window's elements, then max over the window): every device and
// float dtype, differentiable, the gradient to each window's first maximum in (d,) h, w order (as
// PyTorch's; a window's NaN wins, the first one, where PyTorch takes the last). The gathered
// windows cost N·C·prod(output)·prod(kernel) elements and as many i64 positions, held for backward.
#pragma once
#include <array>
#include <cstdint>
#include <utility>

#include "mixgrad/core/tensor.h"

namespace mg {

// x [N, C, H, W] or [C, H, W]; output_size {Ho, Wo} with Ho + kh - 1 <= H (likewise W).
// random_samples: [N, C, 2] ([1, C, 2] for an unbatched x) in [0, 1), any float dtype, on x's
// device; undefined: drawn with rand() from the default generator. Returns (values, indices): the
// i64 positions h * W + w of the maxima in the input's plane (for max_unpool2d).
std::pair<Tensor, Tensor> fractional_max_pool2d_with_indices(const Tensor& x, std::array<int64_t, 2> kernel,
                                                             std::array<int64_t, 2> output_size,
                                                             const Tensor& random_samples = {});
Tensor fractional_max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> output_size,
                             const Tensor& random_samples = {});

// x [N, C, D, H, W] or [C, D, H, W]; samples [N, C, 3]; positions d * H * W + h * W + w.
std::pair<Tensor, Tensor> fractional_max_pool3d_with_indices(const Tensor& x, std::array<int64_t, 3> kernel,
                                                             std::array<int64_t, 3> output_size,
                                                             const Tensor& random_samples = {});
Tensor fractional_max_pool3d(const Tensor& x, std::array<int64_t, 3> kernel, std::array<int64_t, 3> output_size,
                             const Tensor& random_samples = {});

// PyTorch's output_ratio: each output size int(input size * ratio), ratio in (0, 1).
int64_t fractional_output_size(const char* op, int64_t input_size, double ratio);

}  // namespace mg
