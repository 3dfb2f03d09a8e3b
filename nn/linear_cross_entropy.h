// LinearCrossEntropyLoss: PyTorch 2.15's nn.LinearCrossEntropyLoss, a classifier layer and its
// cross-entropy in one module, computed by mg::linear_cross_entropy (ops/linear_cross_entropy.h):
// chunked over the rows, so the [N, num_classes] logits are never held whole.
//
//   nn::LinearCrossEntropyLoss head({.in = 256, .num_classes = 30522});
//   mg::Tensor loss = head(hidden, target);   // hidden [..., 256], target [...] -> 0-d
#pragma once
#include <memory>

#include "mixgrad/nn/linear.h"
#include "mixgrad/nn/loss.h"

namespace mg::nn {

struct LinearCrossEntropyLossOptions {
  int64_t in = 0;           // input features
  int64_t num_classes = 0;  // C
  bool bias = false;        // PyTorch's default
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  int64_t chunk_rows = 0;   // 0: linear_cross_entropy's default
};

// `linear` (weight [C, in], bias [C]; PyTorch's names linear.weight, linear.bias and init).
class LinearCrossEntropyLoss : public Loss {
 public:
  using Options = LinearCrossEntropyLossOptions;
  explicit LinearCrossEntropyLoss(Options options);
  Tensor forward(const Tensor& input, const Tensor& target) override;

  std::shared_ptr<Linear> linear;

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

}  // namespace mg::nn
