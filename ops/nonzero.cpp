#include "mixgrad/ops/nonzero.h"

#include "mixgrad/core/error.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/core/shape.h"
#include "mixgrad/ops/arg_checks.h"
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/infer.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/register.h"

namespace mg {
namespace {

// nonzero_from_prefix: an inclusive prefix count [n] (i64) of a flat 0/1 mask and
// attrs.ints = {count, sizes...} -> the coordinates [count, sizes.size()] (i64) of the positions
// where the count steps, each unravelled over `sizes` (row-major).
InferResult infer_nonzero_from_prefix(const Tensors& in, const OpAttrs& a) {
  const Tensor& p = in[0];
  MG_CHECK(p.dtype() == DType::I64 && p.dim() == 1, DTypeError,
           "nonzero_from_prefix: expected a 1-D i64 prefix count, got ", describe(p));
  MG_CHECK(!a.ints.empty() && a.ints[0] >= 0 && a.ints[0] <= p.size(0), ShapeError,
           "nonzero_from_prefix: the count must be in [0, ", p.size(0), "], got ", a.ints.empty() ? -1 : a.ints[0]);
  int64_t n = 1;
  for (std::size_t d = 1; d < a.ints.size(); ++d) n *= a.ints[d];
  MG_CHECK(n == p.size(0), ShapeError, "nonzero_from_prefix: the sizes hold ", n, " elements, the prefix ", p.size(0));
  return {{{Shape{a.ints[0], int64_t(a.ints.size()) - 1}, DType::I64}}, DType::I64};
}

// The inclusive prefix count of x's nonzero elements in row-major order, and the count (read on
// the host).
std::pair<Tensor, int64_t> prefix_count(const Tensor& x) {
  const Tensor flags = x.dtype() == DType::Bool ? x : ne(x, zeros({}, {.dtype = x.dtype(), .device = x.device()}));
  const Tensor prefix = cumsum(reshape(flags, {-1}), 0);  // i64 for bool
  const int64_t n = prefix.size(0);
  const int64_t count = n == 0 ? 0 : select(prefix, 0, n - 1).to(Device::cpu()).item<int64_t>();
  return {prefix, count};
}

}  // namespace

void register_nonzero_rules() { set_op_rule(OpId::nonzero_from_prefix, {.infer = infer_nonzero_from_prefix}); }

Tensor nonzero(const Tensor& x) {
  check_defined("nonzero", x);
  const auto [prefix, count] = prefix_count(x);
  OpAttrs a{.ints = {count}};
  for (int64_t s : x.shape()) a.ints.push_back(s);
  return dispatch1(OpId::nonzero_from_prefix, {prefix}, a);
}

Tensor argwhere(const Tensor& x) { return nonzero(x); }

Tensor masked_select(const Tensor& x, const Tensor& mask) {
  check_defined("masked_select", x, mask);
  MG_CHECK(mask.dtype() == DType::Bool, DTypeError, "masked_select: expected a bool mask, got ", describe(mask),
           "\n  hint: make one with a comparison, e.g. ne(m, zeros_like(m))");
  MG_CHECK(x.device() == mask.device(), DeviceError, "masked_select: x is ", describe(x), " but the mask is ",
           describe(mask));
  const Shape shape = broadcast_shapes(x.shape(), mask.shape(), "masked_select");
  const auto [prefix, count] = prefix_count(expand(mask, shape));
  const Tensor flat_index =
      reshape(dispatch1(OpId::nonzero_from_prefix, {prefix}, {.ints = {count, prefix.size(0)}}), {-1});
  return index_select(reshape(expand(x, shape), {-1}), 0, flat_index);
}

Tensor count_nonzero(const Tensor& x, const std::vector<int64_t>& dims) {
  check_defined("count_nonzero", x);
  const Tensor flags = x.dtype() == DType::Bool ? x : ne(x, zeros({}, {.dtype = x.dtype(), .device = x.device()}));
  return sum(flags, dims);  // i64 for bool
}

}  // namespace mg
