// CTCLoss, PyTorch's nn.CTCLoss on mg::ctc_loss (ops/ctc_loss.h: formula, shapes, cost):
//
//   nn::CTCLoss ctc({.blank = 0, .zero_infinity = true});
//   mg::Tensor loss = ctc(log_softmax(logits, 2), targets, input_lengths, target_lengths);
#pragma once
#include <vector>

#include "mixgrad/nn/module.h"
#include "mixgrad/ops/ctc_loss.h"

namespace mg::nn {

struct CTCLossOptions {
  int64_t blank = 0;
  Reduction reduction = Reduction::Mean;
  bool zero_infinity = false;  // an impossible alignment's inf loss (and its gradient) becomes 0
};

class CTCLoss : public Module {
 public:
  using Options = CTCLossOptions;
  explicit CTCLoss(Options options = {}) : Module("CTCLoss"), options_(options) {}
  Tensor forward(const Tensor& log_probs, const Tensor& targets, const std::vector<int64_t>& input_lengths,
                 const std::vector<int64_t>& target_lengths);
  Tensor forward(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                 const Tensor& target_lengths);
  template <typename Lengths>
  Tensor operator()(const Tensor& log_probs, const Tensor& targets, const Lengths& input_lengths,
                    const Lengths& target_lengths) {
    auto scope = module_scope(*this);
    return forward(log_probs, targets, input_lengths, target_lengths);
  }

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

}  // namespace mg::nn
