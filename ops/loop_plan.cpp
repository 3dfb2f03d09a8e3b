#include "mixgrad/ops/loop_plan.h"

namespace mg {

Strides broadcast_strides(const Tensor& t, const Shape& out_shape) {
  const std::size_t n = out_shape.size(), m = t.shape().size();
  MG_ASSERT(m <= n, "broadcast_strides: ", t.shape(), " to ", out_shape);
  Strides s(n, 0);
  for (std::size_t i = 0; i < m; ++i) {
    const std::size_t d = n - m + i;
    s[d] = t.shape()[i] == 1 && out_shape[d] != 1 ? 0 : t.strides()[i];
  }
  return s;
}

}  // namespace mg
