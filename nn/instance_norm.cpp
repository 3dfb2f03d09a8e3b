#include "mixgrad/nn/instance_norm.h"

#include "mixgrad/core/factory.h"
#include "mixgrad/ops/norm.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn {

InstanceNorm::InstanceNorm(std::string type, int64_t spatial_dims, Options o)
    : UnaryModule(std::move(type)), spatial_dims_(spatial_dims), options_(o) {
  MG_CHECK(o.num_features > 0, Error, type_name(), ": num_features must be positive, got ", o.num_features);
  MG_CHECK(o.eps > 0, Error, type_name(), ": eps must be positive, got ", o.eps);
  MG_CHECK(!o.track_running_stats, NotImplementedError, type_name(),
           ": track_running_stats = true is not supported (instance statistics are used in training and eval)");
  if (o.affine) {
    weight = register_parameter("weight", ones({o.num_features}));
    bias = register_parameter("bias", zeros({o.num_features}));
  }
}

Tensor InstanceNorm::forward(const Tensor& x) {
  const int64_t C = options_.num_features, batched = spatial_dims_ + 2;
  MG_CHECK(x.defined() && (x.dim() == batched || x.dim() == batched - 1), ShapeError, layer_name(), ": expected x ",
           spatial_dims_ == 1 ? "[N, C, L] or [C, L]" : "[N, C, H, W] or [C, H, W]", ", got ",
           x.defined() ? describe(x) : "undefined");
  const bool unbatched = x.dim() == batched - 1;
  const Tensor xb = unbatched ? unsqueeze(x, 0) : x;
  MG_CHECK(xb.size(1) == C, ShapeError, layer_name(), ": expected ", C, " channels, got x ", describe(x));
  MG_CHECK(xb.numel() == 0 || xb.numel() / (xb.size(0) * C) > 1, Error, layer_name(),
           ": expected more than 1 spatial element per channel, got x ", describe(x));
  const Tensor y = group_norm(xb, C, weight, bias, options_.eps);
  return unbatched ? squeeze(y, 0) : y;
}

std::string InstanceNorm::extra_repr() const {
  return str_cat(options_.num_features, ", eps=", options_.eps, ", affine=", options_.affine ? "true" : "false");
}

}  // namespace mg::nn
