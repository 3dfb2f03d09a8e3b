#include "mixgrad/nn/linear.h"

#include <cmath>

#include "mixgrad/core/factory.h"
#include "mixgrad/nn/init.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn {

Linear::Linear(Options options) : UnaryModule("Linear"), options_(options) {
  // 0 is allowed, as PyTorch: in = 0 gives the bias, out = 0 an empty output.
  MG_CHECK(options_.in >= 0 && options_.out >= 0, Error, "Linear: in and out must not be negative, got in=", options_.in,
           ", out=", options_.out);
  weight = register_parameter("weight", empty({options_.out, options_.in}));
  if (options_.bias) bias = register_parameter("bias", empty({options_.out}));
  reset_parameters();
}

void Linear::reset_parameters() {
  // PyTorch: kaiming_uniform_(a = sqrt(5)) == U(-1/sqrt(in), 1/sqrt(in)); the bias uses the same bound.
  init::kaiming_uniform_(weight, {.a = std::sqrt(5.0)});
  if (bias.defined()) {
    const double bound = options_.in > 0 ? 1.0 / std::sqrt(static_cast<double>(options_.in)) : 0.0;  // PyTorch's
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& x) {
  MG_CHECK(x.defined() && x.dim() >= 1, ShapeError, layer_name(), ": expected an input [..., ", options_.in, "], got ",
           x.defined() ? "a 0-d input" : "an undefined input");
  MG_CHECK(x.size(-1) == options_.in, ShapeError, layer_name(), ": input has ", x.size(-1),
           " features but the layer expects ", options_.in, "; got input ", str_cat(x.shape()), ", weight ",
           weight.shape());
  return linear(x, weight, bias);
}

std::string Linear::extra_repr() const {
  return str_cat("in=", options_.in, ", out=", options_.out, ", bias=", options_.bias ? "true" : "false");
}

Tensor Flatten::forward(const Tensor& x) { return flatten(x, options_.start_dim, options_.end_dim); }

std::string Flatten::extra_repr() const {
  return str_cat("start_dim=", options_.start_dim, ", end_dim=", options_.end_dim);
}

}  // namespace mg::nn
