#include "mixgrad/nn/instance_norm.h"

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/nn/normalization.h"
#include "mixgrad/ops/norm.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn {

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
  if (options_.track_running_stats && !is_training()) {  // the running statistics: any spatial size
    const Tensor y = batch_norm(xb, weight, bias, running_mean, running_var, /*training=*/false, 0.0, options_.eps);
    return unbatched ? squeeze(y, 0) : y;
  }
  MG_CHECK(xb.numel() == 0 || xb.numel() / (xb.size(0) * C) > 1, Error, layer_name(),
           ": expected more than 1 spatial element per channel, got x ", describe(x));
  // group_norm has the fp32 policy; instance norm keeps the input's dtype (PyTorch lists it under
  // no autocast policy), as the eval path's batch_norm does, so train and eval agree.
  Tensor y = group_norm(xb, C, weight, bias, options_.eps);
  if (y.dtype() != xb.dtype() && is_floating(xb.dtype())) y = y.to(xb.dtype());
  if (options_.track_running_stats && xb.numel() > 0) update_running_stats(xb);
  return unbatched ? squeeze(y, 0) : y;
}

void InstanceNorm::update_running_stats(const Tensor& x) {
  NoGradGuard no_grad;
  const DType acc = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  const Tensor per_instance = x.detach().to(acc).reshape({x.size(0), x.size(1), -1});  // [N, C, S]
  const double m = options_.momentum.value_or(0.0);
  if (m == 0.0) return;  // momentum None (or 0): the statistics stay
  const Tensor mean_of = mean(mean(per_instance, {2}), {0});
  const Tensor var_of = mean(var(per_instance, {2}, /*correction=*/1), {0});
  running_mean.copy_(running_mean.to(acc) * (1 - m) + mean_of * m);
  running_var.copy_(running_var.to(acc) * (1 - m) + var_of * m);
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
