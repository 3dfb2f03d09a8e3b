// Distances and similarities between rows, as torch.nn.functional's: built from public ops under
// the fp32 autocast policy (ops/composite.h), differentiable, on every device. The result keeps
// the inputs' promoted dtype outside autocast (computed in f32 for f16/bf16, rounded once).
//
//   mg::Tensor s = mg::cosine_similarity(a, b);        // a, b [N, D] -> [N]
//   mg::Tensor d = mg::pairwise_distance(a, b, 1.0);   // L1 distance per row -> [N]
//   mg::Tensor u = mg::normalize(a);                   // unit L2 rows -> [N, D]
#pragma once
#include <cstdint>

#include "mixgrad/core/tensor.h"

namespace mg {

// sum(x1 * x2, dim) / max(||x1||_2 * ||x2||_2, eps) along `dim` (x1 and x2 broadcast; each
// norm is clamped to eps separately first, as PyTorch 2.x: sum / (max(||x1||, eps) max(||x2||, eps))).
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim = 1, double eps = 1e-8);
// ||x1 - x2 + eps||_p along the last dim (x1 and x2 broadcast; any real p, ±inf allowed; two
// 0-d inputs give |x1 - x2 + eps|, 0-d); keepdim keeps that dim as size 1.
Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p = 2.0, double eps = 1e-6, bool keepdim = false);
// x / max(||x||_p, eps) along `dim` (PyTorch's F.normalize: unit rows for cosine scores and
// contrastive losses); a norm under eps passes no gradient through it (PyTorch's clamp_min).
Tensor normalize(const Tensor& x, double p = 2.0, int64_t dim = 1, double eps = 1e-12);
// ||x[i] - x[j]||_p for every pair of rows i < j of x [N, M], in row-major pair order ->
// [N (N - 1) / 2] (PyTorch's F.pdist; p >= 0, inf allowed). Materialises the N (N - 1) / 2 row
// differences (PyTorch's kernel does not): fine for the few thousand rows pdist is used on.
Tensor pdist(const Tensor& x, double p = 2.0);

}  // namespace mg
