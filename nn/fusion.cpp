#include "mixgrad/nn/fusion.h"

#include <string>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn {
namespace {

Tensor f64_or(const Tensor& t, const Tensor& like, double fill) {
  return t.defined() ? t.to(DType::F64) : full(like.shape(), fill, {.dtype = DType::F64, .device = like.device()});
}

// The layer's weight and bias (its members) replaced by the folded ones, in their handles.
void fuse_into(Module& layer, Tensor& weight, Tensor& bias, const BatchNorm& bn) {
  MG_CHECK(!layer.is_training() && !bn.is_training(), Error, "fuse_bn_eval_: ", layer.layer_name(), " and ", bn.layer_name(),
           " must be in eval mode (fusion uses the running statistics)");
  NoGradGuard no_grad;
  const auto [w, b] = fuse_bn_weights(weight, bias, bn.running_mean, bn.running_var, bn.options().eps, bn.weight,
                                      bn.bias);
  weight.set_data(w.to(weight.dtype()));
  if (bias.defined()) {
    bias.set_data(b.to(bias.dtype()));
  } else {
    bias = layer.register_parameter("bias", b.to(weight.dtype()), weight.requires_grad());
  }
}

}  // namespace

std::pair<Tensor, Tensor> fuse_bn_weights(const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                                          const Tensor& running_var, double eps, const Tensor& bn_weight,
                                          const Tensor& bn_bias) {
  MG_CHECK(weight.defined() && weight.dim() >= 2 && weight.is_floating_point(), ShapeError,
           "fuse_bn_weights: expected a floating weight [out, ...], got ", weight.defined() ? describe(weight) : "undefined");
  MG_CHECK(running_mean.defined() && running_var.defined(), Error,
           "fuse_bn_weights: the batch norm has no running statistics (track_running_stats = false): its eval "
           "mode normalises with each batch's, which no fixed weight can fold");
  const int64_t c = weight.size(0);
  const Shape channels{c};
  for (const Tensor* t : {&bias, &running_mean, &running_var, &bn_weight, &bn_bias}) {
    MG_CHECK(!t->defined() || t->shape() == channels, ShapeError, "fuse_bn_weights: expected [", c,
             "] for the layer's ", c, " output channels, got ", describe(*t));
  }
  MG_CHECK(eps >= 0, Error, "fuse_bn_weights: eps must be >= 0, got ", eps);
  NoGradGuard no_grad;
  const Tensor s = f64_or(bn_weight, running_mean, 1.0) / sqrt(running_var.to(DType::F64) + eps);  // [C]
  Shape per_channel(std::size_t(weight.dim()), 1);
  per_channel[0] = c;
  const Tensor w = weight.to(DType::F64) * s.reshape(per_channel);
  const Tensor b = (f64_or(bias, running_mean, 0.0) - running_mean.to(DType::F64)) * s + f64_or(bn_bias, running_mean, 0.0);
  return {w, b};
}

void fuse_bn_eval_(Conv1d& conv, const BatchNorm& bn) {
  fuse_into(conv, conv.weight, conv.bias, bn);
}
void fuse_bn_eval_(Conv2d& conv, const BatchNorm& bn) {
  fuse_into(conv, conv.weight, conv.bias, bn);
}
void fuse_bn_eval_(Conv3d& conv, const BatchNorm& bn) {
  fuse_into(conv, conv.weight, conv.bias, bn);
}
void fuse_bn_eval_(Linear& linear, const BatchNorm& bn) {
  fuse_into(linear, linear.weight, linear.bias, bn);
}

}  // namespace mg::nn
