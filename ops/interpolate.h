// Resampling of [N, C, L], [N, C, H, W] and [N, C, D, H, W] tensors, as
// torch.nn.functional.interpolate: modes Nearest (PyTorch's "nearest": floor(i * scale)),
// NearestExact ("nearest-exact": floor((i + 0.5) scale)), Linear ([N, C, L]), Bilinear
// ([N, C, H, W]) and Trilinear ([N, C, D, H, W]) with or without align_corners, Bicubic
// ([N, C, H, W]; Keys' cubic convolution with A = -0.75 over 4 neighbours, clamped at the borders,
// with or without align_corners) and Area (adaptive average pooling to the output size). The output
// size is `size`, or floor(input * scale_factor); the source positions use the scale factor itself
// unless recompute_scale_factor (then input / output), with PyTorch's index arithmetic (float
// scales for f32/f16/bf16, double for f64), so the same elements and weights are picked.
//
// A composite (ops/composite.h, "keep" policy in ops/composite_list.def): index_select along each
// spatial dim (linear: the two neighbours weighted, bicubic: the four, W first, then H; area:
// adaptive_avg_pool), computed in f32 (f64 for f64) and rounded once to the input's dtype;
// differentiable on every device (a source element's gradient is the sum of its weighted uses).
//
//   mg::Tensor up = mg::interpolate(x, {.scale_factor = {2.0}, .mode = mg::InterpolateMode::Bilinear});
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "mixgrad/core/tensor.h"

namespace mg {

enum class InterpolateMode { Nearest, NearestExact, Linear, Bilinear, Bicubic, Area, Trilinear };
// The mode's name as printed in errors and layer names ("bilinear").
const char* interpolate_mode_name(InterpolateMode mode);

struct InterpolateOptions {
  std::vector<int64_t> size;          // output length / {H, W} / {D, H, W}; or one value for every spatial dim
  std::vector<double> scale_factor;   // used when size is empty; one value, or one per spatial dim
  InterpolateMode mode = InterpolateMode::Nearest;
  std::optional<bool> align_corners;  // the linear modes and Bicubic only (unset: false, PyTorch's default)
  bool recompute_scale_factor = false;  // positions from input / output instead of the scale factor
};

Tensor interpolate(const Tensor& x, const InterpolateOptions& options);

}  // namespace mg
