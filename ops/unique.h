// The distinct values of a tensor, as PyTorch's torch.unique (sorted) and unique_consecutive
// (runs of equal neighbours), over every element (flattened; no `dim` form yet). NaN is never
// equal to anything, so each NaN is its own value (last, as the sort puts them); -0 equals +0.
//
//   auto [labels, inverse, counts] = mg::unique(targets, /*return_inverse=*/true, /*return_counts=*/true);
//
// The results are not differentiable (PyTorch raises in their backward). The number of distinct
// values is read on the host (a synchronisation on CUDA). Built from argsort, cumsum and
// nonzero, so it runs on every device; CUDA's argsort ranks a row in n^2 comparisons, slow for
// millions of elements (ops/sort.h).
#pragma once

#include "mixgrad/core/tensor.h"

namespace mg {

struct UniqueResult {
  Tensor values;   // 1-D, x's dtype: the distinct values, ascending (unique) or in order of runs
  Tensor inverse;  // i64 of x's shape: the index in `values` of each element (if asked for)
  Tensor counts;   // i64 [values.size(0)]: how often each value occurs (if asked for)
};

UniqueResult unique(const Tensor& x, bool return_inverse = false, bool return_counts = false);
UniqueResult unique_consecutive(const Tensor& x, bool return_inverse = false, bool return_counts = false);

}  // namespace mg
