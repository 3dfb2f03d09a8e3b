#include "mixgrad/core/memory_overlap.h"

#include <cstdint>

namespace mg {

namespace {

// The first and one-past-the-last byte address t's elements occupy (t not empty).
struct ByteRange {
  std::uintptr_t begin, end;
};

ByteRange byte_range(const Tensor& t) {
  int64_t lo = 0, hi = 0;  // element offsets from data_ptr(), strides of either sign
  for (std::size_t d = 0; d < t.shape().size(); ++d) {
    const int64_t span = (t.shape()[d] - 1) * t.strides()[d];
    (span < 0 ? lo : hi) += span;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(t.data_ptr());
  const auto size = static_cast<int64_t>(t.element_size());
  return {base + static_cast<std::uintptr_t>(lo * size), base + static_cast<std::uintptr_t>((hi + 1) * size)};
}

}  // namespace

MemOverlap memory_overlap(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.numel() == 0 || b.numel() == 0) return MemOverlap::None;
  if (a.device() != b.device()) return MemOverlap::None;
  if (a.data_ptr() == b.data_ptr() && a.element_size() == b.element_size() && a.shape() == b.shape() &&
      a.strides() == b.strides()) {
    return MemOverlap::Same;
  }
  const ByteRange ra = byte_range(a), rb = byte_range(b);
  return ra.begin < rb.end && rb.begin < ra.end ? MemOverlap::Partial : MemOverlap::None;
}

bool has_internal_overlap(const Tensor& t) {
  if (!t.defined() || t.numel() == 0) return false;  // no element, no two sharing one (PyTorch's)
  for (std::size_t d = 0; d < t.shape().size(); ++d) {
    if (t.shape()[d] > 1 && t.strides()[d] == 0) return true;
  }
  return false;
}

}  // namespace mg
