#include "mixgrad/nn/margin_loss.h"

namespace mg::nn {

Tensor ThreeInputLoss::forward(const Tensor&, const Tensor&) {
  MG_THROW(Error, type_name(), " takes three tensors; call it as loss(a, b, c)");
}

Tensor MarginRankingLoss::forward(const Tensor& x1, const Tensor& x2, const Tensor& target) {
  return margin_ranking_loss(x1, x2, target, options_.margin, options_.reduction);
}

Tensor HingeEmbeddingLoss::forward(const Tensor& input, const Tensor& target) {
  return hinge_embedding_loss(input, target, options_.margin, options_.reduction);
}

Tensor SoftMarginLoss::forward(const Tensor& input, const Tensor& target) {
  return soft_margin_loss(input, target, options_.reduction);
}

Tensor CosineEmbeddingLoss::forward(const Tensor& x1, const Tensor& x2, const Tensor& target) {
  return cosine_embedding_loss(x1, x2, target, options_.margin, options_.reduction);
}

Tensor TripletMarginLoss::forward(const Tensor& anchor, const Tensor& positive, const Tensor& negative) {
  return triplet_margin_loss(anchor, positive, negative, options_.margin, options_.p, options_.eps, options_.swap,
                             options_.reduction);
}

Tensor TripletMarginWithDistanceLoss::forward(const Tensor& anchor, const Tensor& positive, const Tensor& negative) {
  return triplet_margin_with_distance_loss(anchor, positive, negative, options_.distance_function, options_.margin,
                                           options_.swap, options_.reduction);
}

Tensor MultiLabelMarginLoss::forward(const Tensor& input, const Tensor& target) {
  return multilabel_margin_loss(input, target, options_.reduction);
}

MultiMarginLoss::MultiMarginLoss(Options o) : Loss("MultiMarginLoss"), options_(std::move(o)) {
  options_.weight = weight_buffer("weight", options_.weight);
}

Tensor MultiMarginLoss::forward(const Tensor& input, const Tensor& target) {
  return multi_margin_loss(input, target, options_.p, options_.margin, options_.weight, options_.reduction);
}

MultiLabelSoftMarginLoss::MultiLabelSoftMarginLoss(Options o)
    : Loss("MultiLabelSoftMarginLoss"), options_(std::move(o)) {
  options_.weight = weight_buffer("weight", options_.weight);
}

Tensor MultiLabelSoftMarginLoss::forward(const Tensor& input, const Tensor& target) {
  return multilabel_soft_margin_loss(input, target, options_.weight, options_.reduction);
}

Tensor PoissonNLLLoss::forward(const Tensor& input, const Tensor& target) {
  return poisson_nll_loss(input, target, options_.log_input, options_.full, options_.eps, options_.reduction);
}

Tensor GaussianNLLLoss::forward(const Tensor& input, const Tensor& target, const Tensor& var) {
  return gaussian_nll_loss(input, target, var, options_.full, options_.eps, options_.reduction);
}

}  // namespace mg::nn
