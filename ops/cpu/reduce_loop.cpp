#include "mixgrad/ops/cpu/reduce_loop.h"

namespace mg::cpu {

ReduceGeometry reduce_geometry(const Tensor& x, const std::vector<int64_t>& dims) {
  ReduceGeometry g;
  const int64_t nd = x.dim();
  std::vector<bool> reduced(nd, false);
  for (int64_t d : dims) reduced[d] = true;
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t size = x.shape()[d], stride = x.strides()[d];
    if (!reduced[d]) {
      g.kept_shape.push_back(size);
      g.kept_strides.push_back(stride);
      g.out_numel *= size;
      continue;
    }
    g.red_numel *= size;
    if (size == 1) continue;
    // Merge with the previous reduced dim when they are contiguous with each other.
    if (!g.red_shape.empty() && g.red_strides.back() == stride * size) {
      g.red_shape.back() *= size;
      g.red_strides.back() = stride;
    } else {
      g.red_shape.push_back(size);
      g.red_strides.push_back(stride);
    }
  }
  return g;
}

}  // namespace mg::cpu
