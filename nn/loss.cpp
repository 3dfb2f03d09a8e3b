#include "mixgrad/nn/loss.h"

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

CrossEntropyLoss::CrossEntropyLoss(Options o) : Loss("CrossEntropyLoss"), options_(o) {
  MG_CHECK(o.label_smoothing >= 0 && o.label_smoothing <= 1, Error,
           "CrossEntropyLoss: label_smoothing must be in [0, 1], got ", o.label_smoothing);
}

Tensor CrossEntropyLoss::forward(const Tensor& input, const Tensor& target) {
  return with_layer_context(layer_name(), target, [&] {
    return cross_entropy(input, target, options_.reduction, options_.ignore_index, options_.label_smoothing);
  });
}

std::string CrossEntropyLoss::extra_repr() const {
  return str_cat("reduction=", reduction_name(options_.reduction), ", ignore_index=", options_.ignore_index,
                 ", label_smoothing=", options_.label_smoothing);
}

Tensor NLLLoss::forward(const Tensor& input, const Tensor& target) {
  return with_layer_context(layer_name(), target,
                            [&] { return nll_loss(input, target, options_.reduction, options_.ignore_index); });
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

BCEWithLogitsLoss::BCEWithLogitsLoss(Options options) : Loss("BCEWithLogitsLoss"), options_(std::move(options)) {
  // The registered handle: Module::to and load_state_dict replace its data in place. A buffer has
  // no gradient, so a pos_weight that requires one is refused (as PyTorch's module refuses it)
  // rather than silently detached; binary_cross_entropy_with_logits() takes a learned one.
  if (options_.pos_weight.defined()) {
    MG_CHECK(!options_.pos_weight.requires_grad(), Error, "BCEWithLogitsLoss: pos_weight ", describe(options_.pos_weight),
             " requires grad, but the module keeps it as a buffer (no gradient)",
             "\n  hint: call binary_cross_entropy_with_logits(input, target, pos_weight) for a learned pos_weight");
    options_.pos_weight = register_buffer("pos_weight", options_.pos_weight);
  }
}

Tensor BCEWithLogitsLoss::forward(const Tensor& input, const Tensor& target) {
  return binary_cross_entropy_with_logits(input, target, options_.pos_weight, options_.reduction);
}

Tensor BCELoss::forward(const Tensor& input, const Tensor& target) {
  return binary_cross_entropy(input, target, options_.reduction);
}

Tensor KLDivLoss::forward(const Tensor& input, const Tensor& target) {
  return kl_div(input, target, options_.reduction, options_.log_target);
}

}  // namespace mg::nn
