// AdaptiveLogSoftmaxWithLoss (Grave et al., "Efficient softmax approximation for GPUs"), PyTorch's
// layer of the same name: a large vocabulary split by `cutoffs` into a shortlist of frequent
// classes, predicted by the head together with one logit per tail cluster, and tail clusters whose
// classes are predicted by smaller projections (in / div_value^(i+1) features) — so most rows never
// touch most of the vocabulary.
//
//   nn::AdaptiveLogSoftmaxWithLoss asm_({.in = 512, .n_classes = 50000, .cutoffs = {2000, 10000}});
//   auto [logprob, loss] = asm_.forward(hidden, target);  // hidden [N, 512], target [N] -> [N], scalar
//   mg::Tensor full = asm_.log_prob(hidden);              // [N, 50000], rows sum to 1 in probability
//
// Parameters are named as PyTorch's (head.weight, head.bias, tail.0.0.weight, tail.0.1.weight, ...),
// so a PyTorch state dict loads as is.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "mixgrad/nn/container.h"
#include "mixgrad/nn/linear.h"
#include "mixgrad/nn/module.h"

namespace mg::nn {

struct AdaptiveLogSoftmaxWithLossOptions {
  int64_t in = 0;                // input features
  int64_t n_classes = 0;         // vocabulary size
  std::vector<int64_t> cutoffs;  // increasing, each in [1, n_classes - 1]: the cluster boundaries
  double div_value = 4.0;        // cluster i projects to floor(in / div_value^(i+1)) features (>= 1)
  bool head_bias = false;        // a bias on the head's Linear
};

// forward's result, PyTorch's _ASMoutput: each row's log-probability of its target ([N], or 0-d
// for an unbatched input) and the mean negative log-likelihood.
struct AdaptiveLogSoftmaxOutput {
  Tensor output;
  Tensor loss;
};

class AdaptiveLogSoftmaxWithLoss : public Module {
 public:
  using Options = AdaptiveLogSoftmaxWithLossOptions;
  explicit AdaptiveLogSoftmaxWithLoss(Options options);
  // input [N, in] with target [N] of class indices (i64/i32), or input [in] with a 0-d target.
  // A target outside [0, n_classes) throws IndexError (one host read of the targets' range).
  AdaptiveLogSoftmaxOutput forward(const Tensor& input, const Tensor& target);
  // Every class's log-probability: [N, in] -> [N, n_classes] (or [in] -> [n_classes]).
  Tensor log_prob(const Tensor& input);
  // The most likely class of each row: [N, in] -> i64 [N] (or [in] -> 0-d), the argmax of log_prob.
  Tensor predict(const Tensor& input);
  void reset_parameters();

  std::shared_ptr<Linear> head;      // in -> shortlist + number of clusters
  std::shared_ptr<ModuleList> tail;  // one Sequential(Linear(in, h_i, no bias), Linear(h_i, size_i, no bias)) each

 protected:
  std::string extra_repr() const override;

 private:
  // input as a batch [N, in], checked; `unbatched` set when it was [in].
  Tensor batched(const Tensor& input, bool& unbatched, const char* method) const;
  Options options_;
  int64_t shortlist_ = 0;
};

}  // namespace mg::nn
