#include "mixgrad/ops/rearrange.h"

#include <set>

#include "mixgrad/core/error.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/core/shape.h"
#include "mixgrad/ops/arg_checks.h"
#include "mixgrad/ops/ops.h"

namespace mg {
namespace {

// The dims wrapped and checked distinct.
std::vector<int64_t> distinct_dims(const char* op, const Tensor& x, const std::vector<int64_t>& dims) {
  std::vector<int64_t> out;
  std::set<int64_t> seen;
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, std::max<int64_t>(x.dim(), 1), op);
    MG_CHECK(seen.insert(w).second, Error, op, ": dim ", d, " appears twice in the dims of ", describe(x));
    out.push_back(w);
  }
  return out;
}

// x's elements where column - row (over the last two dims) passes `keep`, 0 elsewhere.
template <typename Keep>
Tensor triangle(const char* op, const Tensor& x, Keep keep) {
  check_defined(op, x);
  MG_CHECK(x.dim() >= 2, ShapeError, op, ": expected a matrix or a batch of them (2 or more dims), got ",
           describe(x));
  const int64_t rows = x.size(-2), cols = x.size(-1);
  const Tensor r = reshape(arange(0, rows, 1, {.dtype = DType::I64, .device = x.device()}), {rows, 1});
  const Tensor c = reshape(arange(0, cols, 1, {.dtype = DType::I64, .device = x.device()}), {1, cols});
  // 0 of x's own dtype (a scalar_like of a bool tensor would be i64, widening the result)
  return where(keep(c - r), x, full({}, 0.0, {.dtype = x.dtype(), .device = x.device()}));
}

}  // namespace

Tensor flip(const Tensor& x, const std::vector<int64_t>& dims) {
  check_defined("flip", x);
  Tensor y = x;
  for (int64_t d : distinct_dims("flip", x, dims)) {
    if (x.dim() == 0) break;  // a scalar is its own reverse
    const int64_t n = x.size(d);
    y = index_select(y, d, arange(n - 1, -1, -1, {.dtype = DType::I64, .device = x.device()}));
  }
  return y.is_same(x) ? x.clone() : y;
}

Tensor roll(const Tensor& x, const std::vector<int64_t>& shifts, const std::vector<int64_t>& dims) {
  check_defined("roll", x);
  if (dims.empty()) {
    MG_CHECK(shifts.size() == 1, Error, "roll: without dims it takes one shift (over the flattened tensor), got ",
             shifts.size());
    return reshape(roll(flatten(x), shifts, {0}), x.shape());
  }
  MG_CHECK(shifts.size() == dims.size(), Error, "roll: ", shifts.size(), " shifts for ", dims.size(),
           " dims; give one shift per dim");
  const std::vector<int64_t> ds = distinct_dims("roll", x, dims);
  Tensor y = x;
  for (std::size_t i = 0; i < ds.size() && x.dim() > 0; ++i) {
    const int64_t n = x.size(ds[i]);
    if (n == 0) continue;
    const int64_t k = ((shifts[i] % n) + n) % n;  // elements that wrap to the front
    if (k == 0) continue;
    y = cat({narrow(y, ds[i], n - k, k), narrow(y, ds[i], 0, n - k)}, ds[i]);
  }
  return y.is_same(x) ? x.clone() : y;
}

Tensor repeat(const Tensor& x, const std::vector<int64_t>& repeats) {
  check_defined("repeat", x);
  const int64_t m = int64_t(repeats.size());
  MG_CHECK(m >= x.dim(), Error, "repeat: ", m, " repeats for ", describe(x),
           "; give at least one per dim (extra leading ones add dims)");
  for (int64_t r : repeats) MG_CHECK(r >= 0, Error, "repeat: repeats must be >= 0, got ", r);
  // [1, s0, 1, s1, ...] expanded to [r0, s0, r1, s1, ...], then merged pairwise.
  Shape sizes(std::size_t(m - x.dim()), 1);
  for (int64_t s : x.shape()) sizes.push_back(s);
  Shape interleaved, expanded, merged;
  for (int64_t i = 0; i < m; ++i) {
    interleaved.insert(interleaved.end(), {1, sizes[std::size_t(i)]});
    expanded.insert(expanded.end(), {repeats[std::size_t(i)], sizes[std::size_t(i)]});
    merged.push_back(repeats[std::size_t(i)] * sizes[std::size_t(i)]);
  }
  return reshape(contiguous(expand(reshape(x, interleaved), expanded)), merged);
}

Tensor tile(const Tensor& x, const std::vector<int64_t>& reps) {
  check_defined("tile", x);
  std::vector<int64_t> r(std::size_t(std::max<int64_t>(0, x.dim() - int64_t(reps.size()))), 1);
  r.insert(r.end(), reps.begin(), reps.end());
  return repeat(x, r);
}

Tensor tril(const Tensor& x, int64_t diagonal) {
  return triangle("tril", x, [&](const Tensor& d) { return le(d, scalar_like(double(diagonal), d)); });
}
Tensor triu(const Tensor& x, int64_t diagonal) {
  return triangle("triu", x, [&](const Tensor& d) { return ge(d, scalar_like(double(diagonal), d)); });
}

}  // namespace mg
