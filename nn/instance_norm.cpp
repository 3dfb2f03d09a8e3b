#include "mixgrad/nn/instance_norm.h"

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/nn/normalization.h"
#include "mixgrad/ops/norm.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn {

namespace {

// running = (1 - m) running + m · (the batch average of each instance's mean / unbiased variance),
// computed in f32 (f64 for f64). An empty batch leaves them unchanged.
void update_running_stats(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, double m) {
  if (m == 0.0 || x.numel() == 0) return;  // momentum None (or 0): the statistics stay
  NoGradGuard no_grad;
  const DType acc = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  const Tensor per_instance = x.detach().to(acc).reshape({x.size(0), x.size(1), -1});  // [N, C, S]
  if (running_mean.defined())
    Tensor(running_mean).copy_(running_mean.to(acc) * (1 - m) + mean(mean(per_instance, {2}), {0}) * m);
  if (running_var.defined())
    Tensor(running_var).copy_(running_var.to(acc) * (1 - m) + mean(var(per_instance, {2}, /*correction=*/1), {0}) * m);
}

}  // namespace

Tensor instance_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                     const Tensor& bias, bool use_input_stats, double momentum, double eps) {
  MG_CHECK(x.defined() && x.dim() >= 3 && x.is_floating_point(), ShapeError,
           "instance_norm: expected a floating x [N, C, *] with at least one spatial dim, got ",
           x.defined() ? describe(x) : "undefined");
  const int64_t c = x.size(1);
  for (const Tensor* t : {&running_mean, &running_var, &weight, &bias})
    MG_CHECK(!t->defined() || t->shape() == Shape{c}, ShapeError, "instance_norm: expected [", c, "] for x ",
             describe(x), ", got ", describe(*t));
  MG_CHECK(momentum >= 0 && momentum <= 1, Error, "instance_norm: momentum must be in [0, 1], got ", momentum);
  if (!use_input_stats) {  // the running statistics: any spatial size
    MG_CHECK(running_mean.defined() && running_var.defined(), Error,
             "instance_norm: use_input_stats = false needs running_mean and running_var");
    return batch_norm(x, weight, bias, running_mean, running_var, /*training=*/false, 0.0, eps);
  }
  MG_CHECK(x.numel() == 0 || x.numel() / (x.size(0) * c) > 1, Error,
           "instance_norm: expected more than 1 spatial element per channel, got x ", describe(x));
  // group_norm has the fp32 policy; instance norm keeps the input's dtype (PyTorch lists it under
  // no autocast policy), as the running-statistics path's batch_norm does, so train and eval agree.
  Tensor y = group_norm(x, c, weight, bias, eps);
  if (y.dtype() != x.dtype()) y = y.to(x.dtype());
  update_running_stats(x, running_mean, running_var, momentum);
  return y;
}

InstanceNorm::InstanceNorm(std::string type, int64_t spatial_dims, Options o)
    : UnaryModule(std::move(type)), spatial_dims_(spatial_dims), options_(o) {
  MG_CHECK(o.num_features > 0, Error, type_name(), ": num_features must be positive, got ", o.num_features);
  MG_CHECK(o.eps >= 0, Error, type_name(), ": eps must be >= 0, got ", o.eps);
  MG_CHECK(!o.momentum || (*o.momentum >= 0 && *o.momentum <= 1), Error, type_name(), ": momentum must be in [0, 1], got ",
           o.momentum.value_or(0.0));
  // Registration order is PyTorch's, so state dicts list the same names in the same order.
  if (o.affine) {
    weight = register_parameter("weight", ones({o.num_features}));
    bias = register_parameter("bias", zeros({o.num_features}));
  }
  if (o.track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({o.num_features}));
    running_var = register_buffer("running_var", ones({o.num_features}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, {.dtype = DType::I64}));
  }
}

Tensor InstanceNorm::forward(const Tensor& x) {
  const int64_t C = options_.num_features, batched = spatial_dims_ + 2;
  MG_CHECK(x.defined() && (x.dim() == batched || x.dim() == batched - 1), ShapeError, layer_name(), ": expected x ",
           spatial_dims_ == 1   ? "[N, C, L] or [C, L]"
           : spatial_dims_ == 2 ? "[N, C, H, W] or [C, H, W]"
                                : "[N, C, D, H, W] or [C, D, H, W]",
           ", got ",
           x.defined() ? describe(x) : "undefined");
  const bool unbatched = x.dim() == batched - 1;
  const Tensor xb = unbatched ? unsqueeze(x, 0) : x;
  MG_CHECK(xb.size(1) == C, ShapeError, layer_name(), ": expected ", C, " channels, got x ", describe(x));
  const bool use_input_stats = !options_.track_running_stats || is_training();
  MG_CHECK(!use_input_stats || xb.numel() == 0 || xb.numel() / (xb.size(0) * C) > 1, Error, layer_name(),
           ": expected more than 1 spatial element per channel, got x ", describe(x));
  const Tensor y = instance_norm(xb, running_mean, running_var, weight, bias, use_input_stats,
                                 options_.momentum.value_or(0.0), options_.eps);
  return unbatched ? squeeze(y, 0) : y;
}

void InstanceNorm::reset_running_stats() {
  if (options_.track_running_stats) detail::reset_running_stats(running_mean, running_var, num_batches_tracked);
}

void InstanceNorm::reset_parameters() {
  reset_running_stats();
  NoGradGuard no_grad;
  if (weight.defined()) weight.fill_(1.0);
  if (bias.defined()) bias.zero_();
}

std::string InstanceNorm::extra_repr() const {
  return str_cat(options_.num_features, ", eps=", options_.eps, ", momentum=",
                 options_.momentum ? str_cat(*options_.momentum) : std::string("None"),
                 ", affine=", options_.affine ? "true" : "false", ", track_running_stats=",
                 options_.track_running_stats ? "true" : "false");
}

}  // namespace mg::nn
