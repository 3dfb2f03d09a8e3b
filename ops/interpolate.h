// Resampling of [N, C, L], [N, C, H, W] and [N, C, D, H, W] tensors, as
// torch.nn.functional.interpolate: modes Nearest (PyTorch's "nearest": floor(i * scale)),
// NearestExact ("nearest-exact": floor((i + 0.5) scale)), Linear ([N, C, L]), Bilinear
// ([N, C, H, W]) and Trilinear ([N, C, D, H, W]) with or without align_corners, Bicubic
// ([N, C, H, W]; Keys' cubic convolution with A = -0.75 over 4 neighbours, clamped at the borders,
// with or without align_corners), Area (adaptive average pooling to the output size) and Lanczos
// ([N, C, H, W], antialias only: Lanczos-3, a windowed sinc over 6 taps). The output
// size is `size`, or floor(input * scale_factor); the source positions use the scale factor itself
// unless recompute_scale_factor (then input / output), with PyTorch's index arithmetic (float
// scales for f32/f16/bf16, double for f64), so the same elements and weights are picked.
//
// A composite (ops/composite.h, "keep" policy in ops/composite_list.def): index_select along each
// spatial dim (linear: the two neighbours weighted, bicubic: the four, W first, then H; area:
// adaptive_avg_pool), computed in f32 (f64 for f64) and rounded once to the input's dtype;
// differentiable on every device (a source element's gradient is the sum of its weighted uses).
//
// antialias (Bilinear, Bicubic, Lanczos over [N, C, H, W]; PyTorch's antialias=True, as PIL's
// resize): when a dim shrinks, its filter is widened by the scale so every source element is
// weighted (triangle for bilinear, Keys' cubic with A = -0.5 for bicubic, Lanczos-3), the weights
// of each output normalised to sum to 1; enlarging uses the unwidened filter. A dim whose size
// stays is left alone, as PyTorch's. ceil(support) * 2 + 1 taps per output: 5 for bilinear at a
// scale of 1/2, 17 for bicubic at 1/4. Equal to PyTorch 2.15 in f64 with the gradient.
//
//   mg::Tensor up = mg::interpolate(x, {.scale_factor = {2.0}, .mode = mg::InterpolateMode::Bilinear});
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "mixgrad/core/tensor.h"

namespace mg {

enum class InterpolateMode { Nearest, NearestExact, Linear, Bilinear, Bicubic, Area, Trilinear, Lanczos };
// The mode's name as printed in errors and layer names ("bilinear").
const char* interpolate_mode_name(InterpolateMode mode);

struct InterpolateOptions {
  std::vector<int64_t> size;          // output length / {H, W} / {D, H, W}; or one value for every spatial dim
  std::vector<double> scale_factor;   // used when size is empty; one value, or one per spatial dim
  InterpolateMode mode = InterpolateMode::Nearest;
  std::optional<bool> align_corners;  // the linear modes and Bicubic only (unset: false, PyTorch's default)
  bool recompute_scale_factor = false;  // positions from input / output instead of the scale factor
  bool antialias = false;             // Bilinear, Bicubic (4-D) and Lanczos (required): see above
};

Tensor interpolate(const Tensor& x, const InterpolateOptions& options);

}  // namespace mg
