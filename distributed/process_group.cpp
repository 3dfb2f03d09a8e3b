// ProcessGroup's option overloads, shared by every backend: reduce_in_f32 widens an f16/bf16
// tensor to f32, runs the backend's own reduction on it and rounds once on the way back.
#include "mixgrad/distributed/process_group.h"

#include "mixgrad/autograd/grad_mode.h"

namespace mg::distributed {

void ProcessGroup::all_reduce(Tensor& tensor, const AllReduceOptions& options) {
  if (!options.reduce_in_f32 || !tensor.defined() || !is_low_precision(tensor.dtype())) {
    all_reduce(tensor, options.op);
    return;
  }
  NoGradGuard no_grad;
  Tensor wide = tensor.to(DType::F32);  // same shape, f32: the accumulation dtype
  all_reduce(wide, options.op);
  tensor.copy_(wide);                   // the one rounding
}

Tensor ProcessGroup::reduce_scatter(const Tensor& input, const AllReduceOptions& options) {
  if (!options.reduce_in_f32 || !input.defined() || !is_low_precision(input.dtype())) {
    return reduce_scatter(input, options.op);
  }
  NoGradGuard no_grad;
  return reduce_scatter(input.to(DType::F32), options.op).to(input.dtype());
}

}  // namespace mg::distributed
