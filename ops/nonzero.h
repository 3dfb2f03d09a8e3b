// Where a tensor is nonzero, as PyTorch's: nonzero / argwhere (the coordinates), masked_select
// (the selected elements, differentiable) and count_nonzero. NaN counts as nonzero.
//
//   mg::Tensor coords = mg::nonzero(mask);                     // [count, mask.dim()] i64, row-major order
//   mg::Tensor picked = mg::masked_select(logits, is_masked);  // 1-D, the gradient goes back to logits
//
// The size of the result depends on the data, so nonzero and masked_select read the count on the
// host: on CUDA a synchronisation with the device (as PyTorch's), so keep them out of the hot
// path of a sync-free step (a CUDA graph capture refuses them). The positions come from one
// inclusive prefix count (cumsum) and one op, `nonzero_from_prefix`, with a CPU and a CUDA kernel.
#pragma once
#include <cstdint>
#include <vector>

#include "mixgrad/core/tensor.h"

namespace mg {

// The coordinates of x's nonzero elements, one row each in row-major order: i64 [count, x.dim()]
// (a 0-d x gives [count, 0], count 0 or 1).
Tensor nonzero(const Tensor& x);
Tensor argwhere(const Tensor& x);  // the same as nonzero, as numpy's and PyTorch's
// x's elements where `mask` (bool) is true, x and mask broadcast together, in row-major order of
// the broadcast shape: 1-D, x's dtype; the gradient goes back to the selected elements of x.
Tensor masked_select(const Tensor& x, const Tensor& mask);
// The number of nonzero elements over `dims` (every dim when empty): i64.
Tensor count_nonzero(const Tensor& x, const std::vector<int64_t>& dims = {});

}  // namespace mg
