#include "mixgrad/ops/layout.h"

#include "mixgrad/ops/ops.h"

namespace mg {

MemoryFormat elementwise_layout(const Tensors& inputs, const Shape& out) {
  if (out.size() != 4) return MemoryFormat::Contiguous;
  for (const Tensor& t : inputs) {
    if (!t.defined() || t.shape() != out) continue;  // broadcast operands have no say
    return layout_of(t);
  }
  return MemoryFormat::Contiguous;
}

bool same_memory_order(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (a.shape()[d] > 1 && a.strides()[d] != b.strides()[d]) return false;
  }
  return true;
}

Tensor in_layout_of(const Tensor& x, const Tensor& like) {
  if (is_dense_layout(x) && same_memory_order(x, like)) return x;
  const bool nhwc = like.dim() == 4 && !like.is_contiguous() && like.is_contiguous(MemoryFormat::ChannelsLast);
  return contiguous(x, nhwc ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous);
}

}  // namespace mg
