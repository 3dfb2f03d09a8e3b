#include "mixgrad/core/memory_format.h"

#include "mixgrad/core/error.h"

namespace mg {

const char* memory_format_name(MemoryFormat f) {
  switch (f) {
    case MemoryFormat::Contiguous: return "contiguous";
    case MemoryFormat::ChannelsLast: return "channels_last";
    case MemoryFormat::Preserve: return "preserve";
  }
  return "?";
}

void check_channels_last_shape(const char* op, const Shape& shape) {
  MG_CHECK(shape.size() == 4, ShapeError, op, ": channels_last needs a 4-D tensor [N, C, H, W], got shape ", shape,
           "\n  hint: use MemoryFormat::Contiguous for other ranks (channels_last_3d is not supported)");
}

Strides memory_format_strides(const Shape& shape, MemoryFormat f) {
  MG_ASSERT(f != MemoryFormat::Preserve, "memory_format_strides: Preserve has no strides of its own");
  if (f == MemoryFormat::Contiguous) return contiguous_strides(shape);
  check_channels_last_shape("memory_format_strides", shape);
  // dims ordered N, H, W, C from outermost to innermost; a zero size counts as 1, as contiguous_strides does
  // (unsigned, as contiguous_strides: an empty shape's huge dims wrap instead of overflowing)
  auto sz = [&](int d) { return uint64_t(shape[d] > 0 ? shape[d] : 1); };
  Strides st(4);
  st[1] = 1;
  st[3] = int64_t(sz(1));
  st[2] = int64_t(sz(1) * sz(3));
  st[0] = int64_t(sz(1) * sz(3) * sz(2));
  return st;
}

bool is_contiguous_as(const Shape& shape, const Strides& strides, MemoryFormat f) {
  MG_ASSERT(f != MemoryFormat::Preserve, "is_contiguous_as: Preserve is not a layout");
  if (f == MemoryFormat::ChannelsLast && shape.size() != 4) return false;
  if (shape_numel(shape) == 0) return true;  // no elements: any strides describe the same layout
  static constexpr int kContiguousOrder[4] = {3, 2, 1, 0};
  static constexpr int kChannelsLastOrder[4] = {1, 3, 2, 0};  // innermost first: C, W, H, N
  int64_t expected = 1;
  for (std::size_t k = 0; k < shape.size(); ++k) {
    const std::size_t d = f == MemoryFormat::ChannelsLast ? std::size_t(kChannelsLastOrder[k])
                          : shape.size() == 4            ? std::size_t(kContiguousOrder[k])
                                                         : shape.size() - 1 - k;
    if (shape[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

MemoryFormat suggest_memory_format(const Shape& shape, const Strides& strides) {
  if (shape.size() != 4) return MemoryFormat::Contiguous;
  // A layout both formats describe (C == 1, or H == W == 1) is told apart by its exact strides,
  // as PyTorch reads them: to(ChannelsLast) gives [N, 1, H, W] the strides {H*W, 1, W, 1}.
  if (strides == memory_format_strides(shape, MemoryFormat::ChannelsLast) && strides != contiguous_strides(shape)) {
    return MemoryFormat::ChannelsLast;
  }
  if (is_contiguous_as(shape, strides, MemoryFormat::Contiguous)) return MemoryFormat::Contiguous;
  if (is_contiguous_as(shape, strides, MemoryFormat::ChannelsLast)) return MemoryFormat::ChannelsLast;
  // A strided (non-dense) view: channels-last when its strides order the dims N, H, W, C, as
  // PyTorch's is_channels_last_strides_2d reads them (size-1 dims skipped).
  int64_t min = 0;
  for (int d : {1, 3, 2, 0}) {
    if (shape[std::size_t(d)] == 1) continue;
    if (strides[std::size_t(d)] < min) return MemoryFormat::Contiguous;
    min = strides[std::size_t(d)] * shape[std::size_t(d)];
  }
  return shape[1] != 1 && strides[1] < strides[3] ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}

}  // namespace mg
