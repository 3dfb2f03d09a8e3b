// The softmax family and the losses: numerically stable fused softmax / log_softmax /
// cross_entropy kernels (max-shifted, f32 accumulation for f16/bf16) with fused *_backward ops of
// their own, and the elementwise losses (mse, l1, smooth_l1, binary cross entropy with logits,
// kl_div, binary cross entropy on probabilities). Every loss runs under the fp32 autocast policy
// (binary_cross_entropy is banned under f16 autocast, DESIGN §4).
//
//   mg::Tensor logits = model(x);                                  // [N, C]
//   mg::Tensor loss = mg::cross_entropy(logits, labels);           // labels i64 [N] -> loss []
//   mg::Tensor p = mg::softmax(logits, -1);                        // [N, C], rows sum to 1
#pragma once
#include <cstdint>

#include "mixgrad/core/tensor.h"

namespace mg {

// How a loss reduces its per-element values. BatchMean (sum / batch size, size(0)) is accepted
// by kl_div only, the one loss for which it is the mathematically right mean.
enum class Reduction : int64_t { None = 0, Mean = 1, Sum = 2, BatchMean = 3 };
const char* reduction_name(Reduction r);

// ---- softmax family (f32 accumulation for f16/bf16; the output keeps the input dtype) ----
// exp(x - max) / sum(exp(x - max)) along `dim`.
Tensor softmax(const Tensor& x, int64_t dim);
// x - max - log(sum(exp(x - max))) along `dim`.
Tensor log_softmax(const Tensor& x, int64_t dim);
// The gradient of softmax: y * (grad - sum(grad * y, dim)), y = softmax(x, dim) [same shape].
Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim);
// The gradient of log_softmax: grad - exp(y) * sum(grad, dim), y = log_softmax(x, dim).
Tensor log_softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim);

// ---- classification losses: logits/log-probs [N, C] or [N, C, d1, ...] (or [C]), i64 target
// [N] or [N, d1, ...] (or []) of class indices in [0, C) or ignore_index ----
// Fused log_softmax + negative log likelihood with PyTorch's label smoothing:
// loss_n = (1 - eps) * (-log p[n, t_n]) + eps * mean_c(-log p[n, c]); targets equal to
// ignore_index contribute 0 and are not counted by Mean (all ignored with Mean gives NaN).
// `weight` (floating [C], on the logits' device; PyTorch's class weights): loss_n is
// w[t_n] (1 - eps) (-log p[n, t_n]) + (eps / C) sum_c w_c (-log p[n, c]) and Mean divides by
// sum_n w[t_n] over the counted targets. The weighted form is composed of public ops in f32
// (ops/weighted_loss.h): the same results on every device, at the cost of the fused kernel's speed.
// A floating target of the logits' shape holds class probabilities (PyTorch's soft targets:
// mixup, distillation): loss_n = -sum_c w_c t'[n, c] log_softmax(logits)[n, c] with
// t' = (1 - eps) t + eps / C; Mean divides by the number of samples; ignore_index must stay -100.
// Composed of public ops in f32 too (detail::probability_cross_entropy); the target gets a gradient.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::Mean,
                     int64_t ignore_index = -100, double label_smoothing = 0.0, const Tensor& weight = Tensor());
// d cross_entropy / d logits for the upstream gradient `grad` ([] for Mean/Sum, the target's
// shape for None): w * (softmax(logits) - (1 - eps) onehot(t) - eps / C), w = grad (/ count).
Tensor cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target,
                              Reduction reduction = Reduction::Mean, int64_t ignore_index = -100,
                              double label_smoothing = 0.0);
// -log_probs[n, t_n], reduced like cross_entropy (log_probs from log_softmax); with `weight`
// [C]: w[t_n] (-log_probs[n, t_n]), Mean dividing by sum_n w[t_n].
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction = Reduction::Mean,
                int64_t ignore_index = -100, const Tensor& weight = Tensor());

// ---- regression losses: input and target of the same shape ----
// (x - y)^2
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// |x - y|
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = x - y); beta = 0 is l1_loss.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                      double beta = 1.0);

// 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta) (d = x - y, delta > 0): smooth_l1_loss
// times delta (with beta = delta), so its gradient keeps the size of d for large errors.
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                  double delta = 1.0);

// ---- binary and distribution losses ----
// Sigmoid + binary cross entropy in the stable form max(x, 0) - x t + log1p(exp(-|x|)); with
// pos_weight (broadcast over the last dim, [C]) PyTorch's
// (1 - t) x + (1 + (pw - 1) t) (log1p(exp(-|x|)) + max(-x, 0)). `weight` (broadcast to the
// input's shape) multiplies each element's loss before the reduction; Mean still divides by the
// number of elements (PyTorch's weight, not a weighted mean).
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const Tensor& pos_weight = Tensor(),
                                        Reduction reduction = Reduction::Mean, const Tensor& weight = Tensor());
// -(t log p + (1 - t) log(1 - p)) on probabilities p, each log clamped to >= -100 (as PyTorch).
// Banned under f16 autocast: use binary_cross_entropy_with_logits. On the CPU a p outside [0, 1]
// is an Error naming the value and its position (NaN passes, as an overflow for the GradScaler);
// on CUDA it is not checked (the loss is NaN). `weight` as binary_cross_entropy_with_logits's.
Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target, Reduction reduction = Reduction::Mean,
                            const Tensor& weight = Tensor());
// Kullback-Leibler divergence with log-probability input: target (log target - input), 0 where
// target == 0 (NaN for a negative or NaN target, as PyTorch's); log_target = true takes
// log-probability targets: exp(t) (t - input). Deliberately, a zero target beside an input of
// -inf (a masked logit's log-probability) contributes 0, where PyTorch's xlogy(t, t) - t x gives
// 0 * -inf = NaN for the whole sum: the term is 0 in the limit, and distillation with masked
// logits stays finite. Floating input and target only (PyTorch refuses integral ones too).
// Reduction::BatchMean divides the sum by size(0).
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
              bool log_target = false);

}  // namespace mg
