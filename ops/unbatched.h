// PyTorch's unbatched inputs for the layers over [N, C, spatial...]: an input with one dim fewer
// ([C, L] for the 1-d convolutions and pools, [C, H, W] for the 2-d ones) runs as a batch of one,
// and the result comes back without the batch dim. The ops themselves see batched tensors only
// (their errors for other ranks name both forms); an error raised for the batch of one gets a
// note naming the input as the caller passed it.
#pragma once
#include <cstdint>
#include <string>

#include "mixgrad/core/error.h"
#include "mixgrad/core/tensor.h"
#include "mixgrad/ops/ops.h"

namespace mg::detail {

// Rethrows e as its own class with `note` appended to the message.
[[noreturn]] inline void rethrow_with_note(const Error& e, const std::string& note) {
  const std::string m = std::string(e.what()) + note;
  if (dynamic_cast<const ShapeError*>(&e)) throw ShapeError(m);
  if (dynamic_cast<const DTypeError*>(&e)) throw DTypeError(m);
  if (dynamic_cast<const DeviceError*>(&e)) throw DeviceError(m);
  if (dynamic_cast<const IndexError*>(&e)) throw IndexError(m);
  if (dynamic_cast<const NotImplementedError*>(&e)) throw NotImplementedError(m);
  if (dynamic_cast<const AutogradError*>(&e)) throw AutogradError(m);
  if (dynamic_cast<const InternalError*>(&e)) throw InternalError(m);
  if (dynamic_cast<const CudaError*>(&e)) throw CudaError(m);
  if (dynamic_cast<const OutOfMemoryError*>(&e)) throw OutOfMemoryError(m);
  throw Error(m);
}

// f(x), or f(x as [1, ...]) without its batch dim when x has batched_dims - 1 dims.
template <typename F>
Tensor as_batch_of_one(const Tensor& x, int64_t batched_dims, F&& f) {
  if (!x.defined() || x.dim() != batched_dims - 1) return f(x);
  const Tensor batch = unsqueeze(x, 0);
  try {
    return squeeze(f(batch), 0);
  } catch (const Error& e) {
    rethrow_with_note(e, str_cat("\n  note: the unbatched input ", describe(x), " ran as the batch of one ",
                                 batch.shape()));
  }
}

}  // namespace mg::detail
