// Adaptive max pooling, PyTorch's F.adaptive_max_pool1d/2d/3d (without return_indices): the
// maximum over the windows [floor(i L / Lo), ceil((i + 1) L / Lo)) of each spatial dim, for
// [N, C, L] / [N, C, H, W] / [N, C, D, H, W] or the unbatched forms.
//
// Public ops (one narrow and max per output position and dim): every dtype and device, any
// autocast (it keeps the input's dtype), differentiable. Max is separable, so the dims are
// pooled one after the other, the last first; the gradient goes to each window's first maximum
// in PyTorch's scan order (row-major), and a NaN in a window gives NaN.
//
//   mg::Tensor y = mg::adaptive_max_pool2d(x, {7, 7});   // [N, C, H, W] -> [N, C, 7, 7]
#pragma once
#include <array>
#include <cstdint>

#include "mixgrad/core/tensor.h"

namespace mg {

Tensor adaptive_max_pool1d(const Tensor& x, int64_t output_size);
Tensor adaptive_max_pool2d(const Tensor& x, std::array<int64_t, 2> output_size);
Tensor adaptive_max_pool3d(const Tensor& x, std::array<int64_t, 3> output_size);

}  // namespace mg
