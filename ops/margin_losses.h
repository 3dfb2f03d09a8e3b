// The margin, embedding and likelihood losses of torch.nn.functional that are not in the op list:
// built from public ops under the fp32 autocast policy (ops/composite.h), differentiable (double
// backward included), on every device. The loss is computed in f32 (f64 for f64 inputs) and
// returned in the inputs' promoted dtype (f32 under autocast), rounded once; as PyTorch's, the
// +-1 targets of hinge_embedding, soft_margin and cosine_embedding do not widen it. Reduction: None,
// Mean (over every element of the per-element loss) or Sum; BatchMean is refused.
//
//   mg::Tensor l = mg::triplet_margin_loss(anchor, positive, negative);  // [N, D] each -> []
//   mg::Tensor m = mg::multi_margin_loss(scores, labels);                // [N, C], i64 [N] -> []
//   mg::Tensor t = mg::triplet_margin_with_distance_loss(a, p, n, [](const mg::Tensor& u, const mg::Tensor& v) {
//     return 1.0 - mg::cosine_similarity(u, v); });
#pragma once
#include <cstdint>
#include <functional>

#include "mixgrad/core/tensor.h"
#include "mixgrad/ops/loss.h"

namespace mg {

// max(0, -y (x1 - x2) + margin), y = 1 or -1 (x1 should rank higher, or lower); x1, x2 and y of
// the same number of dims, broadcast.
Tensor margin_ranking_loss(const Tensor& x1, const Tensor& x2, const Tensor& target, double margin = 0.0,
                           Reduction reduction = Reduction::Mean);
// x where y == 1, max(0, margin - x) where y == -1 (PyTorch's form: a target that is neither
// gets both terms); input and target of the same shape.
Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target, double margin = 1.0,
                            Reduction reduction = Reduction::Mean);
// log(1 + exp(-y x)) (computed without overflow); input and target of the same shape.
Tensor soft_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// Per row: 1 - cos(x1, x2) where y == 1, max(0, cos(x1, x2) - margin) where y == -1, with
// cos = sum(x1 x2) / sqrt((sum(x1^2) + 1e-12) (sum(x2^2) + 1e-12)). x1, x2 [N, D] with y [N], or
// [D] with y []; margin in [-1, 1].
Tensor cosine_embedding_loss(const Tensor& x1, const Tensor& x2, const Tensor& target, double margin = 0.0,
                             Reduction reduction = Reduction::Mean);
// max(0, margin + d(a, p) - d(a, n)) per row, d = pairwise_distance(., ., p, eps); with swap,
// d(a, n) is replaced by min(d(a, n), d(p, n)) (Balntas et al. 2016). anchor, positive and
// negative [N, D], [D] or [N, ..., D] (the same number of dims; the distance along the last);
// margin > 0, any real p (as pairwise_distance); 0-d inputs are single numbers.
Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           double margin = 1.0, double p = 2.0, double eps = 1e-6, bool swap = false,
                           Reduction reduction = Reduction::Mean);
// Per row n of input [N, C] (or [C]) with an i64 target [N] (or [] or [1]) in [0, C):
// sum over i != y of w[y] max(0, margin - x[y] + x[i])^p / C, p = 1 or 2; weight [C] optional.
Tensor multi_margin_loss(const Tensor& input, const Tensor& target, int64_t p = 1, double margin = 1.0,
                         const Tensor& weight = Tensor(), Reduction reduction = Reduction::Mean);
// Per row n of input [N, C] (or [C]) with an i64 target of the same shape listing the row's classes
// and ended by the first -1 (the rest ignored): sum over listed classes j (a class listed twice
// counts twice, as PyTorch's) and unlisted classes i of max(0, 1 - (x[j] - x[i])) / C. Target
// values must be in [-1, C) (checked on the host). Memory: [N, C, C] of the input's opmath.
Tensor multilabel_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// triplet_margin_loss with any distance: max(0, margin + d(a, p) - d(a, n)) per element of d's
// result, with swap min(d(a, n), d(p, n)) for d(a, n); d defaults to pairwise_distance (p = 2).
// anchor, positive and negative of the same number of dims; margin > 0. d runs on the inputs as
// given (under autocast, in its ops' policies), as PyTorch's; the loss is then the fp32 policy's.
Tensor triplet_margin_with_distance_loss(
    const Tensor& anchor, const Tensor& positive, const Tensor& negative,
    const std::function<Tensor(const Tensor&, const Tensor&)>& distance_function = nullptr, double margin = 1.0,
    bool swap = false, Reduction reduction = Reduction::Mean);
// Per row of input [N, C] (or [C], or [N, ..., C]) with targets of the same shape in {0, 1}:
// -mean over classes of w_c (y log sigmoid(x) + (1 - y) log sigmoid(-x)); weight [C] optional.
Tensor multilabel_soft_margin_loss(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                                   Reduction reduction = Reduction::Mean);
// Poisson negative log likelihood: exp(x) - y x (log_input), or x - y log(x + eps); with full,
// plus Stirling's y log y - y + log(2 pi y) / 2 where y > 1. input and target of the same shape.
Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, bool log_input = true, bool full = false,
                        double eps = 1e-8, Reduction reduction = Reduction::Mean);
// Gaussian negative log likelihood: (log(max(var, eps)) + (x - y)^2 / max(var, eps)) / 2 (+ log(2 pi) / 2
// with full). var has the input's shape, or it without the last dim (one variance per row), or it
// with one dim of size 1 (shared along that dim), as PyTorch 2.15; or one number for every element.
// Every var must be >= 0 (checked on the CPU). The clamp at eps passes the gradient straight
// through, as PyTorch's.
Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, const Tensor& var, bool full = false,
                         double eps = 1e-6, Reduction reduction = Reduction::Mean);
Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, double var, bool full = false,
                         double eps = 1e-6, Reduction reduction = Reduction::Mean);

}  // namespace mg
