// Padding, as torch.nn.functional.pad: `pad` lists (before, after) amounts for the last dims,
// last dim first — {left, right} pads W, {left, right, top, bottom} pads W and H, and so on.
// Modes: Constant (fill with `value`; a negative amount crops), Reflect (mirror without repeating
// the edge; each amount < that dim's size), Replicate (repeat the edge), Circular (wrap around;
// each amount <= the size). Built from cat / slice (constant) and index_select (the others), so
// it keeps the input's dtype (any dtype for Constant, floating and integer for the others), runs
// on every device and is differentiable (the gradient of a reflected or wrapped element adds
// into its source). Unlike PyTorch, the non-constant modes pad any number of trailing dims of a
// tensor of any rank.
//
//   mg::Tensor y = mg::pad(x, {1, 1, 2, 2}, mg::PadMode::Reflect);   // x [N, C, H, W] -> [N, C, H+4, W+2]
#pragma once
#include <cstdint>
#include <vector>

#include "mixgrad/core/tensor.h"

namespace mg {

enum class PadMode { Constant, Reflect, Replicate, Circular };
// The mode's name as printed in errors and layer names ("reflect").
const char* pad_mode_name(PadMode mode);

Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, PadMode mode = PadMode::Constant, double value = 0.0);

}  // namespace mg
