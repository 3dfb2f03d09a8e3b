// Max unpooling, PyTorch's F.max_unpool1d / 2d / 3d: the inverse of max pooling with indices.
// Each value of x goes to the position its index names in its (n, c) plane of the output; every
// other output element is 0. With the indices of max_pool1d_indices / max_pool2d_indices /
// max_pool3d_indices (positions h * W + w in the input's plane, d * H * W + h * W + w in its volume) this rebuilds the pooled input's maxima in place
// (SegNet's decoder).
//
//   mg::Tensor y = mg::max_pool2d(x, {2, 2});
//   mg::Tensor i = mg::max_pool2d_indices(x, {2, 2});
//   mg::Tensor up = mg::max_unpool2d(y, i, {x.size(2), x.size(3)});   // x's shape, maxima kept
//
// Two values naming one position (overlapping windows that picked the same maximum): the last in
// x's order is written, on every device, and only it gets a gradient. PyTorch writes one of them
// (on the CPU not always the last: the middle of three in a probe; on CUDA its docs call the
// choice nondeterministic) and its backward gives each of them the position's gradient. An index outside the output plane is an IndexError. Public ops (argsort,
// gather, masked_select, scatter_add): every device and dtype, differentiable in x.
#pragma once
#include <array>
#include <cstdint>

#include "mixgrad/core/tensor.h"

namespace mg {

// x and indices (i64) [N, C, Lin] or [C, Lin] -> [N, C, output_size].
Tensor max_unpool1d(const Tensor& x, const Tensor& indices, int64_t output_size);
// x and indices (i64) [N, C, Hin, Win] or [C, Hin, Win] -> [N, C, H, W] with {H, W} = output_size.
Tensor max_unpool2d(const Tensor& x, const Tensor& indices, std::array<int64_t, 2> output_size);
// x and indices (i64) [N, C, Din, Hin, Win] or [C, Din, Hin, Win] -> [N, C, D, H, W] with
// {D, H, W} = output_size.
Tensor max_unpool3d(const Tensor& x, const Tensor& indices, std::array<int64_t, 3> output_size);

// max_pool1d's window maxima as positions in the input's length: same arguments and output shape
// as max_pool1d (ops/conv1d.h). Not differentiable.
Tensor max_pool1d_indices(const Tensor& x, int64_t kernel, int64_t stride = 0, int64_t padding = 0,
                          int64_t dilation = 1, bool ceil_mode = false);

}  // namespace mg
