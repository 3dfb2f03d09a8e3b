#include "mixgrad/nn/normalization.h"

#include <algorithm>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/ops/norm.h"
#include "mixgrad/ops/layer_composites.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn {
namespace {

std::string ranks_text(const std::vector<int64_t>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size(); ++i) s += str_cat(i ? " or " : "", ranks[i], "-D");
  return s;
}

// The trailing dims of x must equal `shape` (layer and RMS norm).
void check_trailing(const std::string& layer, const Tensor& x, const Shape& shape) {
  const int64_t k = static_cast<int64_t>(shape.size());
  bool ok = x.defined() && x.dim() >= k;
  for (int64_t i = 0; ok && i < k; ++i) ok = x.size(x.dim() - k + i) == shape[static_cast<std::size_t>(i)];
  MG_CHECK(ok, ShapeError, layer, ": expected input [..., ", str_cat(shape).substr(1), ", got input ", x.defined() ? str_cat(x.shape()) : "undefined");
}

}  // namespace

BatchNorm::BatchNorm(const char* type_name, Options o, std::vector<int64_t> ranks)
    : UnaryModule(type_name), options_(o), ranks_(std::move(ranks)) {
  MG_CHECK(o.features > 0, Error, type_name, ": features must be positive, got ", o.features);
  MG_CHECK(o.eps >= 0, Error, type_name, ": eps must be >= 0, got ", o.eps);  // 0: PyTorch allows it
  MG_CHECK(!o.momentum || (*o.momentum >= 0 && *o.momentum <= 1), Error, type_name,
           ": momentum must be in [0, 1], got ", *o.momentum);
  if (o.affine) {
    weight = register_parameter("weight", ones({o.features}));
    bias = register_parameter("bias", zeros({o.features}));
  }
  if (o.track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({o.features}));
    running_var = register_buffer("running_var", ones({o.features}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, {.dtype = DType::I64}));
  }
}

void detail::reset_running_stats(Tensor& running_mean, Tensor& running_var, Tensor& num_batches_tracked) {
  NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1.0);
  num_batches_tracked.zero_();
}

void BatchNorm::set_momentum(std::optional<double> momentum) {
  MG_CHECK(!momentum || (*momentum >= 0 && *momentum <= 1), Error, layer_name(), ": momentum must be in [0, 1], got ",
           *momentum);
  options_.momentum = momentum;
}

void BatchNorm::reset_running_stats() {
  if (options_.track_running_stats) detail::reset_running_stats(running_mean, running_var, num_batches_tracked);
}

namespace {
// Affine parameters back to the identity (weight 1, bias 0; undefined ones skipped), in place so
// optimizers and captured graphs keep them.
void reset_affine(Tensor& weight, Tensor& bias) {
  NoGradGuard no_grad;
  if (weight.defined()) weight.fill_(1.0);
  if (bias.defined()) bias.zero_();
}
}  // namespace

void BatchNorm::reset_parameters() {
  reset_running_stats();
  reset_affine(weight, bias);
}

void LayerNorm::reset_parameters() { reset_affine(weight, bias); }
void GroupNorm::reset_parameters() { reset_affine(weight, bias); }
void RMSNorm::reset_parameters() {
  Tensor none;
  reset_affine(weight, none);
}

Tensor BatchNorm::forward(const Tensor& x) {
  const Options& o = options_;
  MG_CHECK(x.defined() && std::find(ranks_.begin(), ranks_.end(), x.dim()) != ranks_.end() &&
               x.size(1) == o.features,
           ShapeError, layer_name(), ": expected a ", ranks_text(ranks_), " input [N, ", o.features,
           ", ...] with ", o.features, " channels, got input ", x.defined() ? str_cat(x.shape()) : "undefined");
  const bool use_batch_stats = is_training() || !o.track_running_stats;
  const bool count = is_training() && o.track_running_stats;
  double momentum = o.momentum.value_or(0.0);
  // Cumulative moving average: the k-th batch gets weight 1/k.
  if (count && !o.momentum) momentum = 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>() + 1);
  // Running statistics are only passed when they are to be updated (training) or used (eval).
  const Tensor rm = o.track_running_stats ? running_mean : Tensor();
  const Tensor rv = o.track_running_stats ? running_var : Tensor();
  Tensor y = sync_ && is_training() ? sync_->batch_norm(x, weight, bias, rm, rv, momentum, o.eps)
                                    : batch_norm(x, weight, bias, rm, rv, use_batch_stats, momentum, o.eps);
  if (count) {
    // Counted only once the op accepted the batch, so a refused batch leaves the state unchanged.
    NoGradGuard no_grad;
    num_batches_tracked.add_(1.0);
  }
  return y;
}

std::string BatchNorm::extra_repr() const {
  const Options& o = options_;
  return str_cat(o.features, ", eps=", o.eps, ", momentum=", o.momentum ? str_cat(*o.momentum) : "None",
                 ", affine=", o.affine ? "true" : "false", ", track_running_stats=",
                 o.track_running_stats ? "true" : "false", sync_ ? ", " + sync_->describe() : "");
}

bool is_batch_norm(const Module& m) { return dynamic_cast<const BatchNorm*>(&m) != nullptr; }

LayerNorm::LayerNorm(Options o) : UnaryModule("LayerNorm"), options_(std::move(o)) {
  MG_CHECK(!options_.shape.empty(), Error, "LayerNorm: shape must name at least one dim, e.g. .shape = {768}");
  for (int64_t d : options_.shape) MG_CHECK(d > 0, Error, "LayerNorm: shape dims must be positive, got ", options_.shape);
  MG_CHECK(options_.eps >= 0, Error, "LayerNorm: eps must be >= 0, got ", options_.eps);
  if (options_.elementwise_affine) {
    weight = register_parameter("weight", ones(options_.shape));
    if (options_.bias) bias = register_parameter("bias", zeros(options_.shape));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  check_trailing(layer_name(), x, options_.shape);
  return layer_norm(x, options_.shape, weight, bias, options_.eps);
}

std::string LayerNorm::extra_repr() const {
  return str_cat(options_.shape, ", eps=", options_.eps, ", elementwise_affine=",
                 options_.elementwise_affine ? "true" : "false");
}

GroupNorm::GroupNorm(Options o) : UnaryModule("GroupNorm"), options_(o) {
  MG_CHECK(o.groups > 0 && o.channels > 0 && o.channels % o.groups == 0, Error, "GroupNorm: groups (", o.groups,
           ") must be positive and divide channels (", o.channels, ")");
  MG_CHECK(o.eps >= 0, Error, "GroupNorm: eps must be >= 0, got ", o.eps);
  if (o.affine) {
    weight = register_parameter("weight", ones({o.channels}));
    bias = register_parameter("bias", zeros({o.channels}));
  }
}

Tensor GroupNorm::forward(const Tensor& x) {
  MG_CHECK(x.defined() && x.dim() >= 2 && x.size(1) == options_.channels, ShapeError, layer_name(),
           ": expected input [N, ", options_.channels, ", ...], got input ",
           x.defined() ? str_cat(x.shape()) : "undefined");
  return group_norm(x, options_.groups, weight, bias, options_.eps);
}

std::string GroupNorm::extra_repr() const {
  return str_cat(options_.groups, ", ", options_.channels, ", eps=", options_.eps, ", affine=",
                 options_.affine ? "true" : "false");
}

RMSNorm::RMSNorm(Options o) : UnaryModule("RMSNorm"), options_(std::move(o)) {
  MG_CHECK(!options_.shape.empty(), Error, "RMSNorm: shape must name at least one dim, e.g. .shape = {768}");
  for (int64_t d : options_.shape) MG_CHECK(d > 0, Error, "RMSNorm: shape dims must be positive, got ", options_.shape);
  MG_CHECK(!options_.eps || *options_.eps >= 0, Error, "RMSNorm: eps must be >= 0, got ", *options_.eps);
  if (options_.elementwise_affine) weight = register_parameter("weight", ones(options_.shape));
}

Tensor RMSNorm::forward(const Tensor& x) {
  check_trailing(layer_name(), x, options_.shape);
  return rms_norm(x, options_.shape, weight, options_.eps);
}

std::string RMSNorm::extra_repr() const {
  return str_cat(options_.shape, ", eps=", options_.eps ? str_cat(*options_.eps) : std::string("None"),
                 ", elementwise_affine=", options_.elementwise_affine ? "true" : "false");
}

LocalResponseNorm::LocalResponseNorm(Options o) : UnaryModule("LocalResponseNorm"), options_(o) {
  MG_CHECK(o.size >= 1, Error, "LocalResponseNorm: size must be >= 1, got ", o.size);
}

Tensor LocalResponseNorm::forward(const Tensor& x) {
  try {
    return local_response_norm(x, options_.size, options_.alpha, options_.beta, options_.k);
  } catch (const ShapeError& e) {
    throw ShapeError(str_cat(layer_name(), ": ", e.what()));
  }
}

std::string LocalResponseNorm::extra_repr() const {
  return str_cat(options_.size, ", alpha=", options_.alpha, ", beta=", options_.beta, ", k=", options_.k);
}

}  // namespace mg::nn
