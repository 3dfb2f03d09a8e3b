// Sorting along a dim, as PyTorch's: argsort, sort and topk. The order is stable (equal elements
// keep their order, ascending or descending) and NaN sorts as the largest value (last ascending,
// first descending); -0 and +0 are equal. One op does the work — `argsort`, the indices that sort
// the last dim (ops/op_list.def), with CPU and CUDA kernels — and the values are gather(x, dim,
// indices), so sort's and topk's values differentiate through gather (the gradient goes back to
// the element each value came from).
//
//   auto [values, indices] = mg::topk(logits, 5);          // the 5 largest per row, largest first
//   mg::Tensor order = mg::argsort(scores, 0, /*descending=*/true);
//
// kthvalue, median and nanmedian pick one position per slice of the same sorted order.
//
// Cost: the CPU sorts each row with std::stable_sort (n log n). The CUDA kernel is a segmented
// merge sort, about n (32 + log2(n)^2 / 2) comparisons per row of n spread over the GPU's
// threads, and two (key, index) buffers of the input's size (cuda/kernels/sort.cu).
#pragma once
#include <cstdint>
#include <utility>

#include "mixgrad/core/tensor.h"

namespace mg {

Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);
std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false);  // (values, indices)
// The k largest (smallest with largest = false) along dim, in order: (values, indices).
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true);

// Order statistics along dim, as PyTorch's, from the same sort: (values, i64 indices), dim kept
// with keepdim. The values differentiate through gather. Among equal values the index is the
// stable sort's (the element at that sorted position, ties in index order; PyTorch leaves it
// unspecified).
// The k-th smallest, k from 1 (NaN the largest).
std::pair<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim = -1, bool keepdim = false);
// The lower median, the ((n - 1) / 2)-th smallest of n (no averaging of the middle two); a slice
// holding NaN gives NaN and its first NaN's index. nanmedian ignores NaN (NaN only for a slice of
// nothing but NaN).
std::pair<Tensor, Tensor> median(const Tensor& x, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> nanmedian(const Tensor& x, int64_t dim, bool keepdim = false);
// Of every element: a 0-d tensor (NaN for an empty floating tensor). Its gradient is split evenly
// among the elements equal to the median (among the NaN ones when it is NaN), as PyTorch's; a
// recorded call reads how many there are on the host (a synchronisation on CUDA).
Tensor median(const Tensor& x);
Tensor nanmedian(const Tensor& x);

}  // namespace mg
