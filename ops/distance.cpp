#include "mixgrad/ops/distance.h"

#include <cmath>
#include <string>
#include <vector>

#include "mixgrad/core/error.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/core/shape.h"
#include "mixgrad/ops/composite.h"
#include "mixgrad/ops/infer.h"
#include "mixgrad/ops/ops.h"

namespace mg {

namespace {

// x clamped below at lo in value, with the gradient of x itself (PyTorch clamps these norms in
// place under no_grad, so the clamp passes the gradient straight through).
Tensor clamp_min_straight_through(const Tensor& x, double lo) { return x + (clamp_min(x, lo) - x).detach(); }

}  // namespace

Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim, double eps) {
  const detail::CompositeInputs c = detail::composite_inputs("cosine_similarity", {x1, x2});
  // Both expanded first: a dim broadcast from size 1 counts every copy in the norm, as PyTorch's.
  const Shape shape = broadcast_shapes(x1.shape(), x2.shape(), "cosine_similarity");
  const int64_t d = wrap_dim(dim, int64_t(shape.size()), "cosine_similarity");
  const Tensor a = expand(c.math[0], shape), b = expand(c.math[1], shape);
  // Each tensor divided by its own norm before the product keeps the result within [-1, 1].
  const Tensor na = clamp_min_straight_through(norm(a, 2.0, {d}, true), eps);
  const Tensor nb = clamp_min_straight_through(norm(b, 2.0, {d}, true), eps);
  return detail::round_result(sum((a / na) * (b / nb), {d}), c);
}

Tensor normalize(const Tensor& x, double p, int64_t dim, double eps) {
  const detail::CompositeInputs c = detail::composite_inputs("normalize", {x});
  MG_CHECK(c.math[0].dim() >= 1, ShapeError, "normalize: expected at least one dim, got ", describe(x));
  const int64_t d = wrap_dim(dim, c.math[0].dim(), "normalize");
  return detail::round_result(c.math[0] / clamp_min(norm(c.math[0], p, {d}, true), eps), c);
}

Tensor pdist(const Tensor& x, double p) {
  MG_CHECK(x.defined() && x.dim() == 2, ShapeError, "pdist: expected x [N, M], got ", x.defined() ? describe(x) : "undefined");
  MG_CHECK(p >= 0, Error, "pdist: p must be >= 0, got ", p);
  const detail::CompositeInputs c = detail::composite_inputs("pdist", {x});
  const int64_t n = x.size(0);
  // The pairs (i, j), i < j, row-major: index tables made once per N (and device).
  auto pairs = [n](bool first) {
    std::vector<int64_t> v;
    v.reserve(std::size_t(n > 1 ? n * (n - 1) / 2 : 0));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i + 1; j < n; ++j) v.push_back(first ? i : j);
    return from_vector<int64_t>(v, {int64_t(v.size())});
  };
  const std::string key = str_cat("pdist:", n, ":");
  const Tensor i = detail::host_constant(key + "i", x.device(), [&] { return pairs(true); });
  const Tensor j = detail::host_constant(key + "j", x.device(), [&] { return pairs(false); });
  const Tensor diff = index_select(c.math[0], 0, i) - index_select(c.math[0], 0, j);
  return detail::round_result(norm(diff, p, {1}), c);
}

Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p, double eps, bool keepdim) {
  // Any real p, as PyTorch (p < 0: (sum |d|^p)^(1/p), 0 when an element of d is 0); NaN is norm's
  // error.
  const detail::CompositeInputs c = detail::composite_inputs("pairwise_distance", {x1, x2});
  const int64_t rank = std::max(x1.dim(), x2.dim());
  const Tensor d = c.math[0] - c.math[1] + eps;
  // Two 0-d inputs: the distance of two numbers, |x1 - x2 + eps|, 0-d (PyTorch's).
  return detail::round_result(rank == 0 ? norm(d, p) : norm(d, p, {rank - 1}, keepdim), c);
}

}  // namespace mg
