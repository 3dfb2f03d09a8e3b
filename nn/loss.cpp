#include "mixgrad/nn/loss.h"

#include <cmath>
#include <utility>

namespace mg::nn {
namespace {

// A target out of range is reported by the op (IndexError, with the input); the layer puts its
// name in front and the target next to the input, before the hint line.
template <typename F>
Tensor with_layer_context(const std::string& layer, const Tensor& target, F&& op) {
  try {
    return op();
  } catch (const IndexError& e) {
    std::string msg = e.what();
    const std::size_t hint = msg.find("\n  hint:");
    msg.insert(hint == std::string::npos ? msg.size() : hint, str_cat(", target ", describe(target)));
    throw IndexError(str_cat(layer, ": ", msg));
  }
}

}  // namespace

Tensor Loss::weight_buffer(const char* name, const Tensor& w) {
  if (!w.defined()) return w;
  // Module::to and load_state_dict replace a buffer's data in place through this handle. A
  // buffer has no gradient, so a weight that requires one is refused (as PyTorch's modules
  // refuse it) rather than silently detached.
  MG_CHECK(!w.requires_grad(), Error, type_name(), ": ", name, " ", describe(w),
           " requires grad, but the module keeps it as a buffer (no gradient)",
           "\n  hint: call the loss function (e.g. cross_entropy(..., weight)) for a learned weight");
  return register_buffer(name, w);
}

CrossEntropyLoss::CrossEntropyLoss(Options o) : Loss("CrossEntropyLoss"), options_(std::move(o)) {
  MG_CHECK(options_.label_smoothing >= 0 && options_.label_smoothing <= 1, Error,
           "CrossEntropyLoss: label_smoothing must be in [0, 1], got ", options_.label_smoothing);
  options_.weight = weight_buffer("weight", options_.weight);
}

Tensor CrossEntropyLoss::forward(const Tensor& input, const Tensor& target) {
  return with_layer_context(layer_name(), target, [&] {
    return cross_entropy(input, target, options_.reduction, options_.ignore_index, options_.label_smoothing,
                         options_.weight);
  });
}

std::string CrossEntropyLoss::extra_repr() const {
  return str_cat("reduction=", reduction_name(options_.reduction), ", ignore_index=", options_.ignore_index,
                 ", label_smoothing=", options_.label_smoothing);
}

NLLLoss::NLLLoss(Options o) : Loss("NLLLoss"), options_(std::move(o)) {
  options_.weight = weight_buffer("weight", options_.weight);
}

Tensor NLLLoss::forward(const Tensor& input, const Tensor& target) {
  return with_layer_context(layer_name(), target, [&] {
    return nll_loss(input, target, options_.reduction, options_.ignore_index, options_.weight);
  });
}

Tensor MSELoss::forward(const Tensor& input, const Tensor& target) {
  return mse_loss(input, target, options_.reduction);
}

Tensor L1Loss::forward(const Tensor& input, const Tensor& target) { return l1_loss(input, target, options_.reduction); }

SmoothL1Loss::SmoothL1Loss(Options o) : Loss("SmoothL1Loss"), options_(o) {
  MG_CHECK(o.beta >= 0, Error, "SmoothL1Loss: beta must be non-negative, got ", o.beta);
}

Tensor SmoothL1Loss::forward(const Tensor& input, const Tensor& target) {
  return smooth_l1_loss(input, target, options_.reduction, options_.beta);
}

HuberLoss::HuberLoss(Options o) : Loss("HuberLoss"), options_(o) {
  MG_CHECK(o.delta > 0 && std::isfinite(o.delta), Error, "HuberLoss: delta must be finite and > 0, got ", o.delta);
}

Tensor HuberLoss::forward(const Tensor& input, const Tensor& target) {
  return huber_loss(input, target, options_.reduction, options_.delta);
}

BCEWithLogitsLoss::BCEWithLogitsLoss(Options options) : Loss("BCEWithLogitsLoss"), options_(std::move(options)) {
  options_.pos_weight = weight_buffer("pos_weight", options_.pos_weight);
  options_.weight = weight_buffer("weight", options_.weight);
}

Tensor BCEWithLogitsLoss::forward(const Tensor& input, const Tensor& target) {
  return binary_cross_entropy_with_logits(input, target, options_.pos_weight, options_.reduction, options_.weight);
}

BCELoss::BCELoss(Options o) : Loss("BCELoss"), options_(std::move(o)) {
  options_.weight = weight_buffer("weight", options_.weight);
}

Tensor BCELoss::forward(const Tensor& input, const Tensor& target) {
  return binary_cross_entropy(input, target, options_.reduction, options_.weight);
}

Tensor KLDivLoss::forward(const Tensor& input, const Tensor& target) {
  return kl_div(input, target, options_.reduction, options_.log_target);
}

}  // namespace mg::nn
