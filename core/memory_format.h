// Memory formats of a 4-D [N, C, H, W] tensor, as PyTorch has them: channels-last (NHWC) is a
// stride permutation of the same logical tensor — strides {H*W*C, 1, W*C, C} — not a new tensor
// type. The shape, indexing and every op's meaning stay NCHW; only where the elements sit in
// memory differs. Decision: a format is read from strides (suggest_memory_format), never stored.
//
//   mg::Tensor y = x.to(mg::MemoryFormat::ChannelsLast);   // x [N, C, H, W] -> same values, NHWC
//   y.is_contiguous(mg::MemoryFormat::ChannelsLast);      // true
#pragma once
#include <cstdint>

#include "mixgrad/core/shape.h"

namespace mg {

enum class MemoryFormat : uint8_t {
  Contiguous,    // row-major in the logical dims (NCHW for 4-D)
  ChannelsLast,  // 4-D only: N, H, W, C from outermost to innermost
  Preserve,      // keep the input's format (suggest_memory_format of the input)
};
const char* memory_format_name(MemoryFormat f);  // "contiguous", "channels_last", "preserve"

// Throws ShapeError naming `op` unless `shape` is 4-D (channels-last applies only to [N, C, H, W]).
void check_channels_last_shape(const char* op, const Shape& shape);
// Dense strides of `shape` in format `f` (Contiguous or ChannelsLast; ChannelsLast needs 4-D).
Strides memory_format_strides(const Shape& shape, MemoryFormat f);
// Whether (shape, strides) is dense in format `f`. Size-1 dims may have any stride and an empty
// tensor is contiguous in every format, as in PyTorch. ChannelsLast on a non-4-D shape is false.
bool is_contiguous_as(const Shape& shape, const Strides& strides, MemoryFormat f);
// The format these strides suggest (PyTorch's suggest_memory_format): ChannelsLast for a 4-D
// tensor whose strides order the dims N, H, W, C (C innermost), else Contiguous. A tensor dense in
// both formats (size-1 dims: [N, 1, H, W], [N, C, 1, 1]) is the same bytes either way; it reads
// as ChannelsLast only when its strides are exactly memory_format_strides(shape, ChannelsLast)
// (what to(ChannelsLast) and channels-last outputs get), so a layout survives size-1 dims.
MemoryFormat suggest_memory_format(const Shape& shape, const Strides& strides);

}  // namespace mg
