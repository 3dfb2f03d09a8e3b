// The distinct values of a tensor, as PyTorch's torch.unique (sorted) and unique_consecutive
// (runs of equal neighbours): over every element (flattened), or with unique_dim and
// unique_dim_consecutive (torch.unique(x, dim=...), LibTorch's names) the distinct
// slices along a dim (rows of a matrix for dim 0), compared element by element and sorted
// lexicographically. NaN is never equal to anything, so each NaN (each slice holding one) is its
// own value, last as the sort puts them; -0 equals +0.
//
//   auto [labels, inverse, counts] = mg::unique(targets, /*return_inverse=*/true, /*return_counts=*/true);
//   auto rows = mg::unique_dim(pairs, /*dim=*/0).values;   // the distinct rows of an [n, 2] tensor
//
// The results are not differentiable (PyTorch raises in their backward). The number of distinct
// values is read on the host (a synchronisation on CUDA). Built from argsort, cumsum and
// nonzero, so it runs on every device. unique_dim sorts the slices with one stable argsort
// per element of a slice (least significant first), so it costs m sorts of n slices of m elements.
#pragma once

#include "mixgrad/core/tensor.h"

namespace mg {

struct UniqueResult {
  // x's dtype: the distinct values (1-D) or slices (along dim), ascending (unique, unique_dim) or
  // in order of runs (the consecutive forms)
  Tensor values;
  Tensor inverse;  // i64 of x's shape (or [x.size(dim)]): the index in `values` of each element (if asked for)
  Tensor counts;   // i64 [number of distinct values]: how often each occurs (if asked for)
};

UniqueResult unique(const Tensor& x, bool return_inverse = false, bool return_counts = false);
UniqueResult unique_consecutive(const Tensor& x, bool return_inverse = false, bool return_counts = false);

// The same along `dim` (LibTorch's names; an overload of `unique` would make `unique(x, 0)`
// ambiguous with its bool arguments): `values` keeps x's shape but for dim, which holds the distinct slices;
// `inverse` is i64 [x.size(dim)], the slice of `values` that each slice of x equals.
UniqueResult unique_dim(const Tensor& x, int64_t dim, bool return_inverse = false, bool return_counts = false);
UniqueResult unique_dim_consecutive(const Tensor& x, int64_t dim, bool return_inverse = false, bool return_counts = false);

}  // namespace mg
