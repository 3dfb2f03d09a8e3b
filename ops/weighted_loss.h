// The weighted forms of the class and binary losses (ops/loss.h's `weight` arguments), built from
// public ops in f32 (f64 for f64 input) after the loss op's own autocast policy, so they run on
// every device, differentiate (double backward included) and return the dtype the unweighted op
// would. Called by the public functions in ops/loss.cpp when a weight is given.
#pragma once
#include <cstdint>

#include "mixgrad/ops/loss.h"

namespace mg::detail {

// PyTorch's weighted nll / cross entropy: loss_n = w[t_n] (-lp[n, t_n]) (1 - eps) +
// (eps / C) sum_c w_c (-lp[n, c]), 0 where t_n == ignore_index; Mean divides by sum_n w[t_n].
Tensor weighted_class_loss(const char* op, const Tensor& input, const Tensor& target, const Tensor& weight,
                           Reduction reduction, int64_t ignore_index, double label_smoothing, bool from_logits);
// cross_entropy with class probabilities: `target` floating, of the input's shape (any floating
// dtype, converted to the input's opmath). loss_n = -sum_c w_c t'[n, c] log_softmax(x)[n, c]
// with t' = (1 - eps) t + eps / C, w = 1 without weight; Mean divides by the number of samples
// (N times the trailing positions). ignore_index must be the default -100 (PyTorch refuses
// others). The target gets a gradient too (distillation with a learned teacher).
Tensor probability_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction,
                                 int64_t ignore_index, double label_smoothing);
// The elementwise binary loss times `weight` (broadcast to the input's shape), then reduced;
// Mean divides by the number of elements, as PyTorch.
Tensor weighted_binary_loss(const char* op, const Tensor& input, const Tensor& target, const Tensor& pos_weight,
                            const Tensor& weight, Reduction reduction, bool from_logits);

}  // namespace mg::detail
