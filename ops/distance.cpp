#include "mixgrad/ops/distance.h"

#include <cmath>

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
