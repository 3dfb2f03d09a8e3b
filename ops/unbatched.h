// PyTorch's unbatched inputs for the layers over [N, C, spatial...]: an input with one dim fewer
// ([C, L] for the 1-d convolutions and pools, [C, H, W] for the 2-d ones) runs as a batch of one,
// and the result comes back without the batch dim. The ops themselves see batched tensors only
// (their errors for other ranks name both forms).
#pragma once
#include <cstdint>

#include "mixgrad/core/tensor.h"
#include "mixgrad/ops/ops.h"

namespace mg::detail {

// f(x), or f(x as [1, ...]) without its batch dim when x has batched_dims - 1 dims.
template <typename F>
Tensor as_batch_of_one(const Tensor& x, int64_t batched_dims, F&& f) {
  if (!x.defined() || x.dim() != batched_dims - 1) return f(x);
  return squeeze(f(unsqueeze(x, 0)), 0);
}

}  // namespace mg::detail
