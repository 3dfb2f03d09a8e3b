// Loss modules for the margin, embedding and likelihood losses of ops/margin_losses.h (fp32
// autocast policy, computed in f32 and returned in the inputs' dtype; see that header for the
// formulas and shapes). Options are checked when the loss is called.
//
//   nn::TripletMarginLoss triplet({.margin = 0.5});
//   mg::Tensor loss = triplet(anchor, positive, negative);   // [N, D] each -> []
//   nn::MultiMarginLoss svm({.weight = class_weights});       // the buffer "weight"
#pragma once
#include <functional>
#include <utility>

#include "mixgrad/nn/loss.h"
#include "mixgrad/ops/margin_losses.h"

namespace mg::nn {

// The shape of the losses with three tensor arguments (PyTorch's MarginRankingLoss,
// CosineEmbeddingLoss, TripletMarginLoss, GaussianNLLLoss): forward(a, b, c) and operator().
class ThreeInputLoss : public Loss {
 public:
  using Loss::Loss;
  virtual Tensor forward(const Tensor& a, const Tensor& b, const Tensor& c) = 0;
  Tensor operator()(const Tensor& a, const Tensor& b, const Tensor& c) {
    auto scope = module_scope(*this);
    return forward(a, b, c);
  }

 private:
  // The two-argument form does not apply: an error naming the missing argument.
  Tensor forward(const Tensor& input, const Tensor& target) final;
  using Loss::operator();
};

struct MarginRankingLossOptions {
  double margin = 0.0;
  Reduction reduction = Reduction::Mean;
};
// forward(x1, x2, y): max(0, -y (x1 - x2) + margin), y = 1 or -1.
class MarginRankingLoss : public ThreeInputLoss {
 public:
  using Options = MarginRankingLossOptions;
  explicit MarginRankingLoss(Options options = {}) : ThreeInputLoss("MarginRankingLoss"), options_(options) {}
  Tensor forward(const Tensor& x1, const Tensor& x2, const Tensor& target) override;

 private:
  Options options_;
};

struct HingeEmbeddingLossOptions {
  double margin = 1.0;
  Reduction reduction = Reduction::Mean;
};
// forward(x, y): x where y == 1, max(0, margin - x) where y == -1.
class HingeEmbeddingLoss : public Loss {
 public:
  using Options = HingeEmbeddingLossOptions;
  explicit HingeEmbeddingLoss(Options options = {}) : Loss("HingeEmbeddingLoss"), options_(options) {}
  Tensor forward(const Tensor& input, const Tensor& target) override;

 private:
  Options options_;
};

struct SoftMarginLossOptions {
  Reduction reduction = Reduction::Mean;
};
// forward(x, y): log(1 + exp(-y x)).
class SoftMarginLoss : public Loss {
 public:
  using Options = SoftMarginLossOptions;
  explicit SoftMarginLoss(Options options = {}) : Loss("SoftMarginLoss"), options_(options) {}
  Tensor forward(const Tensor& input, const Tensor& target) override;

 private:
  Options options_;
};

struct CosineEmbeddingLossOptions {
  double margin = 0.0;  // in [-1, 1]; 0 to 0.5 is usual
  Reduction reduction = Reduction::Mean;
};
// forward(x1, x2, y): 1 - cos(x1, x2) where y == 1, max(0, cos - margin) where y == -1, per row.
class CosineEmbeddingLoss : public ThreeInputLoss {
 public:
  using Options = CosineEmbeddingLossOptions;
  explicit CosineEmbeddingLoss(Options options = {}) : ThreeInputLoss("CosineEmbeddingLoss"), options_(options) {}
  Tensor forward(const Tensor& x1, const Tensor& x2, const Tensor& target) override;

 private:
  Options options_;
};

struct TripletMarginLossOptions {
  double margin = 1.0;  // > 0
  double p = 2.0;       // the norm of the pairwise distance (any real p, as pairwise_distance)
  double eps = 1e-6;
  bool swap = false;    // use min(d(a, n), d(p, n)) as the negative distance
  Reduction reduction = Reduction::Mean;
};
// forward(anchor, positive, negative): max(0, margin + d(a, p) - d(a, n)) per row.
class TripletMarginLoss : public ThreeInputLoss {
 public:
  using Options = TripletMarginLossOptions;
  explicit TripletMarginLoss(Options options = {}) : ThreeInputLoss("TripletMarginLoss"), options_(options) {}
  Tensor forward(const Tensor& anchor, const Tensor& positive, const Tensor& negative) override;

 private:
  Options options_;
};

struct TripletMarginWithDistanceLossOptions {
  // d(u, v) per row; nullptr: pairwise_distance (the 2-norm).
  std::function<Tensor(const Tensor&, const Tensor&)> distance_function;
  double margin = 1.0;  // > 0
  bool swap = false;    // use min(d(a, n), d(p, n)) as the negative distance
  Reduction reduction = Reduction::Mean;
};
// forward(anchor, positive, negative): max(0, margin + d(a, p) - d(a, n)) with any distance d.
class TripletMarginWithDistanceLoss : public ThreeInputLoss {
 public:
  using Options = TripletMarginWithDistanceLossOptions;
  explicit TripletMarginWithDistanceLoss(Options options = {})
      : ThreeInputLoss("TripletMarginWithDistanceLoss"), options_(std::move(options)) {}
  Tensor forward(const Tensor& anchor, const Tensor& positive, const Tensor& negative) override;

 private:
  Options options_;
};

struct MultiMarginLossOptions {
  int64_t p = 1;        // 1 or 2
  double margin = 1.0;
  Tensor weight;        // [C] class weights (the buffer "weight"), or undefined
  Reduction reduction = Reduction::Mean;
};
// forward(x [N, C], y i64 [N]): the multi-class hinge loss.
class MultiMarginLoss : public Loss {
 public:
  using Options = MultiMarginLossOptions;
  explicit MultiMarginLoss(Options options = {});
  Tensor forward(const Tensor& input, const Tensor& target) override;

 private:
  Options options_;
};

struct MultiLabelMarginLossOptions {
  Reduction reduction = Reduction::Mean;
};
// forward(x [N, C], y i64 [N, C]: each row's classes, ended by -1): the multi-label hinge loss.
class MultiLabelMarginLoss : public Loss {
 public:
  using Options = MultiLabelMarginLossOptions;
  explicit MultiLabelMarginLoss(Options options = {}) : Loss("MultiLabelMarginLoss"), options_(options) {}
  Tensor forward(const Tensor& input, const Tensor& target) override;

 private:
  Options options_;
};

struct MultiLabelSoftMarginLossOptions {
  Tensor weight;  // [C] class weights (the buffer "weight"), or undefined
  Reduction reduction = Reduction::Mean;
};
// forward(x [N, C], y [N, C] in {0, 1}): the mean over classes of the binary cross entropies.
class MultiLabelSoftMarginLoss : public Loss {
 public:
  using Options = MultiLabelSoftMarginLossOptions;
  explicit MultiLabelSoftMarginLoss(Options options = {});
  Tensor forward(const Tensor& input, const Tensor& target) override;

 private:
  Options options_;
};

struct PoissonNLLLossOptions {
  bool log_input = true;  // the input is log(rate)
  bool full = false;      // add Stirling's term
  double eps = 1e-8;      // log(x + eps) when log_input is false
  Reduction reduction = Reduction::Mean;
};
// forward(x, y): exp(x) - y x (log_input), or x - y log(x + eps).
class PoissonNLLLoss : public Loss {
 public:
  using Options = PoissonNLLLossOptions;
  explicit PoissonNLLLoss(Options options = {}) : Loss("PoissonNLLLoss"), options_(options) {}
  Tensor forward(const Tensor& input, const Tensor& target) override;

 private:
  Options options_;
};

struct GaussianNLLLossOptions {
  bool full = false;  // add log(2 pi) / 2
  double eps = 1e-6;  // variances are clamped to at least eps
  Reduction reduction = Reduction::Mean;
};
// forward(x, y, var): (log var + (x - y)^2 / var) / 2.
class GaussianNLLLoss : public ThreeInputLoss {
 public:
  using Options = GaussianNLLLossOptions;
  explicit GaussianNLLLoss(Options options = {}) : ThreeInputLoss("GaussianNLLLoss"), options_(options) {}
  Tensor forward(const Tensor& input, const Tensor& target, const Tensor& var) override;

 private:
  Options options_;
};

}  // namespace mg::nn
