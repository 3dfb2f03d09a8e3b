#include "mixgrad/nn/linear.h"

#include <cmath>

#include "mixgrad/core/factory.h"
#include "mixgrad/nn/init.h"
#include "mixgrad/ops/layer_composites.h"
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

Bilinear::Bilinear(Options o) : Module("Bilinear"), options_(o) {
  MG_CHECK(o.in1 > 0 && o.in2 > 0 && o.out > 0, Error, "Bilinear: in1, in2 and out must be positive, got in1=", o.in1,
           ", in2=", o.in2, ", out=", o.out);
  weight = register_parameter("weight", empty({o.out, o.in1, o.in2}));
  if (o.bias) bias = register_parameter("bias", empty({o.out}));
  reset_parameters();
}

void Bilinear::reset_parameters() {
  const double bound = 1.0 / std::sqrt(static_cast<double>(options_.in1));  // PyTorch's
  init::uniform_(weight, -bound, bound);
  if (bias.defined()) init::uniform_(bias, -bound, bound);
}

Tensor Bilinear::forward(const Tensor& x1, const Tensor& x2) {
  auto scope = module_scope(*this);
  try {
    return bilinear(x1, x2, weight, bias);
  } catch (const ShapeError& e) {
    throw ShapeError(str_cat(layer_name(), ": ", e.what()));
  }
}

std::string Bilinear::extra_repr() const {
  return str_cat("in1_features=", options_.in1, ", in2_features=", options_.in2, ", out_features=", options_.out,
                 ", bias=", options_.bias ? "True" : "False");
}

}  // namespace mg::nn
