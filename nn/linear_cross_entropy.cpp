#include "mixgrad/nn/linear_cross_entropy.h"

#include "mixgrad/ops/linear_cross_entropy.h"

namespace mg::nn {

LinearCrossEntropyLoss::LinearCrossEntropyLoss(Options o) : Loss("LinearCrossEntropyLoss"), options_(o) {
  MG_CHECK(o.in > 0 && o.num_classes > 0, Error, "LinearCrossEntropyLoss: in and num_classes must be positive, got ",
           o.in, " and ", o.num_classes);
  linear = register_module<Linear>("linear", {.in = o.in, .out = o.num_classes, .bias = o.bias});
}

Tensor LinearCrossEntropyLoss::forward(const Tensor& input, const Tensor& target) {
  return detail::with_layer_name(*this, [&] {  // a shape error names the layer
    return linear_cross_entropy(input, linear->weight, target,
                                {.bias = linear->bias,
                                 .reduction = options_.reduction,
                                 .ignore_index = options_.ignore_index,
                                 .label_smoothing = options_.label_smoothing,
                                 .chunk_rows = options_.chunk_rows});
  });
}

std::string LinearCrossEntropyLoss::extra_repr() const {
  const Options& o = options_;
  return str_cat("in_features=", o.in, ", num_classes=", o.num_classes, o.bias ? ", bias=true" : "",
                 ", reduction=", reduction_name(o.reduction),
                 o.ignore_index != -100 ? str_cat(", ignore_index=", o.ignore_index) : std::string(),
                 o.label_smoothing != 0.0 ? str_cat(", label_smoothing=", o.label_smoothing) : std::string());
}

}  // namespace mg::nn
