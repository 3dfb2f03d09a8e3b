#include "mixgrad/nn/activation_more.h"

#include <cmath>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"

namespace mg::nn {

PReLU::PReLU(Options o) : UnaryModule("PReLU"), options_(o) {
  MG_CHECK(o.num_parameters >= 1, Error, "PReLU: num_parameters must be >= 1, got ", o.num_parameters);
  weight = register_parameter("weight", empty({o.num_parameters}));
  reset_parameters();
}

void PReLU::reset_parameters() {
  NoGradGuard no_grad;
  weight.fill_(options_.init);
}

RReLU::RReLU(Options o) : UnaryModule("RReLU"), options_(o) {
  MG_CHECK(std::isfinite(o.lower) && std::isfinite(o.upper) && o.lower <= o.upper, Error,
           "RReLU: expected finite lower <= upper (a negative lower is allowed, as PyTorch's), got lower=", o.lower,
           ", upper=", o.upper);
}

Tensor Softmax2d::forward(const Tensor& x) {
  MG_CHECK(x.defined() && (x.dim() == 3 || x.dim() == 4), ShapeError, "Softmax2d",
           ": expected x [N, C, H, W] or [C, H, W], got ", x.defined() ? describe(x) : "undefined");
  return softmax(x, -3);
}

}  // namespace mg::nn
