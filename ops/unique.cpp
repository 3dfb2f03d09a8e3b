#include "mixgrad/ops/unique.h"

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/error.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/ops/arg_checks.h"
#include "mixgrad/ops/nonzero.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/sort.h"

namespace mg {
namespace {

// The runs of equal neighbours in a 1-D `line` (n >= 1): values (the first of each run), the run
// of each element (`group`, i64), and the run lengths.
UniqueResult runs(const Tensor& line, bool want_group, bool want_counts) {
  const int64_t n = line.size(0);
  const Tensor first = ones({1}, {.dtype = DType::Bool, .device = line.device()});
  const Tensor starts = cat({first, ne(slice(line, 0, 1, n), slice(line, 0, 0, n - 1))}, 0);  // bool [n]
  UniqueResult r;
  r.values = masked_select(line, starts);
  if (want_group) r.inverse = cumsum(starts, 0) - 1.0;
  if (want_counts) {
    const Tensor begin = reshape(nonzero(starts), {-1});
    const Tensor end = cat({slice(begin, 0, 1, begin.size(0)), full({1}, double(n), {.dtype = DType::I64, .device = line.device()})}, 0);
    r.counts = end - begin;
  }
  return r;
}

UniqueResult unique_impl(const char* op, const Tensor& x, bool sorted, bool return_inverse, bool return_counts) {
  check_defined(op, x);
  NoGradGuard no_grad;  // not differentiable, as PyTorch's
  // bool has no sort of its own: as u8 and back
  const bool is_bool = x.dtype() == DType::Bool;
  const Tensor flat = reshape(is_bool ? to(x, DType::U8) : x, {-1});
  const int64_t n = flat.size(0);
  UniqueResult r;
  if (n == 0) {
    r.values = zeros({0}, {.dtype = x.dtype(), .device = x.device()});
    if (return_inverse) r.inverse = zeros(x.shape(), {.dtype = DType::I64, .device = x.device()});
    if (return_counts) r.counts = zeros({0}, {.dtype = DType::I64, .device = x.device()});
    return r;
  }
  Tensor order;
  const Tensor line = sorted ? (order = argsort(flat), index_select(flat, 0, order)) : flat;
  r = runs(line, return_inverse, return_counts);
  if (is_bool) r.values = to(r.values, DType::Bool);
  if (return_inverse) {
    // group[i] belongs to the element at order[i]: undo the sort with the inverse permutation
    if (sorted) r.inverse = index_select(r.inverse, 0, argsort(order));
    r.inverse = reshape(r.inverse, x.shape());
  }
  return r;
}

}  // namespace

UniqueResult unique(const Tensor& x, bool return_inverse, bool return_counts) {
  return unique_impl("unique", x, /*sorted=*/true, return_inverse, return_counts);
}
UniqueResult unique_consecutive(const Tensor& x, bool return_inverse, bool return_counts) {
  return unique_impl("unique_consecutive", x, /*sorted=*/false, return_inverse, return_counts);
}

}  // namespace mg
