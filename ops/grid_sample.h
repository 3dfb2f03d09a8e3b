// Spatial sampling, PyTorch's F.affine_grid and F.grid_sample (4-D and 5-D): the input read at
// arbitrary normalised (x, y[, z]) positions — spatial transformer networks, warping, deformable
// sampling.
//
//   mg::Tensor grid = mg::affine_grid(theta, {N, C, Ho, Wo});   // theta [N, 2, 3] -> grid [N, Ho, Wo, 2]
//   mg::Tensor y = mg::grid_sample(x, grid);                     // x [N, C, H, W] -> [N, C, Ho, Wo]
//
// Coordinates: -1 and 1 are the centres of the corner pixels with align_corners, their outer
// edges without (PyTorch's rule); grid[..., 0] is x (width), grid[..., 1] is y (height),
// grid[..., 2] z (depth, 5-D). Bilinear reads the four neighbours (trilinear: eight in 5-D), nearest the closest pixel (ties to even, as PyTorch's nearbyint),
// bicubic (4-D only, as PyTorch's) the 4 x 4 around it with Keys' weights (A = -0.75). Padding: Zeros (taps outside read
// 0), Border (coordinates clamped to the edge), Reflection (coordinates reflected at the border,
// then clamped); bicubic pads each tap's coordinate, the others the sampled one (PyTorch's).
//
// Public ops (per tap: a gather of the input over the channels, weights from the grid) under the
// fp32 autocast policy (ops/composite_list.def, as PyTorch's grid_sampler): every device, floating
// dtypes (the input's and the grid's promote; f16/bf16 computed in f32 and rounded once), differentiable in the input
// and in the grid (nearest: the grid's gradient is 0, as PyTorch's), equal to PyTorch 2.15 in f64
// (tests/ops/test_grid_sample.cpp). Costs per tap N·C·Ho·Wo gathered elements and an i64 index of
// N·C·Ho·Wo (16 taps for bicubic). A non-finite grid coordinate reads 0 (PyTorch reads NaN as -1).
#pragma once
#include "mixgrad/core/tensor.h"

namespace mg {

enum class GridSampleMode { Bilinear, Nearest, Bicubic };
enum class GridSamplePadding { Zeros, Border, Reflection };

struct GridSampleOptions {
  GridSampleMode mode = GridSampleMode::Bilinear;
  GridSamplePadding padding_mode = GridSamplePadding::Zeros;
  bool align_corners = false;
};

// input [N, C, H, W], grid [N, Ho, Wo, 2] (floating) -> [N, C, Ho, Wo] in their promoted dtype;
// input [N, C, D, H, W], grid [N, Do, Ho, Wo, 3] -> [N, C, Do, Ho, Wo].
Tensor grid_sample(const Tensor& input, const Tensor& grid, const GridSampleOptions& options = {});

// theta [N, 2, 3] (floating), size {N, C, Ho, Wo} -> grid [N, Ho, Wo, 2]: each output pixel's
// normalised (x, y, 1) times theta^T; theta [N, 3, 4], size {N, C, Do, Ho, Wo} -> [N, Do, Ho, Wo, 3]
// from (x, y, z, 1). Differentiable in theta.
Tensor affine_grid(const Tensor& theta, const Shape& size, bool align_corners = false);

}  // namespace mg
