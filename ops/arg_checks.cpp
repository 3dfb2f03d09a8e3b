#include "mixgrad/ops/arg_checks.h"

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/ops/ops.h"

namespace mg {

std::pair<int64_t, int64_t> index_bounds(const Tensor& indices) {
  MG_CHECK(indices.defined() && indices.numel() > 0, Error, "index_bounds: expected a non-empty tensor, got ",
           indices.defined() ? describe(indices) : "undefined");
  NoGradGuard no_grad;
  const Tensor bounds = stack({amin(indices), amax(indices)}).to(DType::I64).to(Device::cpu());  // one device read
  return {bounds.data<int64_t>()[0], bounds.data<int64_t>()[1]};
}

}  // namespace mg
