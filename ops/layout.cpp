#include "mixgrad/ops/layout.h"

namespace mg {

MemoryFormat elementwise_layout(const Tensors& inputs, const Shape& out) {
  if (out.size() != 4) return MemoryFormat::Contiguous;
  for (const Tensor& t : inputs) {
    if (!t.defined() || t.shape() != out) continue;  // broadcast operands have no say
    return layout_of(t);
  }
  return MemoryFormat::Contiguous;
}

}  // namespace mg
