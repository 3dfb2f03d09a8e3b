#include "mixgrad/nn/parameter_vector.h"

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn {

Tensor parameters_to_vector(const Tensors& params) {
  MG_CHECK(!params.empty(), Error, "parameters_to_vector: got no parameters");
  Tensors flat;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    MG_CHECK(p.defined(), Error, "parameters_to_vector: parameter ", i, " is undefined");
    MG_CHECK(p.device() == params[0].device() && p.dtype() == params[0].dtype(), DTypeError,
             "parameters_to_vector: parameter ", i, " is ", describe(p), ", but parameter 0 is ", describe(params[0]),
             " (one device and dtype)");
    flat.push_back(p.reshape({-1}));
  }
  return cat(flat);
}

void vector_to_parameters(const Tensor& vec, const Tensors& params) {
  MG_CHECK(vec.defined() && vec.dim() == 1, ShapeError, "vector_to_parameters: expected a 1-D vector, got ",
           vec.defined() ? describe(vec) : "undefined");
  int64_t total = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    MG_CHECK(params[i].defined(), Error, "vector_to_parameters: parameter ", i, " is undefined");
    total += params[i].numel();
  }
  MG_CHECK(vec.numel() == total, ShapeError, "vector_to_parameters: the vector has ", vec.numel(),
           " elements, the parameters ", total);
  NoGradGuard no_grad;
  int64_t at = 0;
  for (const Tensor& p : params) {
    const int64_t n = p.numel();
    Tensor(p).copy_(vec.narrow(0, at, n).reshape(p.shape()));
    at += n;
  }
}

}  // namespace mg::nn
