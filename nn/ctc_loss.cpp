#include "mixgrad/nn/ctc_loss.h"

namespace mg::nn {

Tensor CTCLoss::forward(const Tensor& log_probs, const Tensor& targets, const std::vector<int64_t>& input_lengths,
                        const std::vector<int64_t>& target_lengths) {
  return ctc_loss(log_probs, targets, input_lengths, target_lengths, options_.blank, options_.reduction,
                  options_.zero_infinity);
}

Tensor CTCLoss::forward(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                        const Tensor& target_lengths) {
  return ctc_loss(log_probs, targets, input_lengths, target_lengths, options_.blank, options_.reduction,
                  options_.zero_infinity);
}

std::string CTCLoss::extra_repr() const {
  return str_cat("blank=", options_.blank, ", reduction=", reduction_name(options_.reduction),
                 options_.zero_infinity ? ", zero_infinity=true" : "");
}

}  // namespace mg::nn
