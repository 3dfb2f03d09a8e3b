#include "mixgrad/core/shape.h"

#include "mixgrad/core/error.h"

namespace mg {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t s : shape) {
    if (s == 0) return 0;  // empty, however large the other dims
    overflow = __builtin_mul_overflow(n, s, &n) || overflow;
  }
  MG_CHECK(!overflow, ShapeError, "shape ", shape, " has more than 2^63 - 1 elements",
           "\n  hint: a size was probably computed wrongly (one_hot's num_classes, a view's or expand's sizes)");
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides st(shape.size());
  // Unsigned: an empty shape's other dims may be huge ([2^62, 2^62, 0]); its strides then wrap
  // (no element is ever addressed through them) instead of overflowing, which C++ leaves undefined.
  uint64_t s = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    st[i] = int64_t(s);
    s *= uint64_t(shape[i] > 0 ? shape[i] : 1);
  }
  return st;
}

std::string shape_str(const Shape& shape) { return str_cat(shape); }

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t lo = ndim == 0 ? -1 : -ndim;
  const int64_t hi = ndim == 0 ? 0 : ndim - 1;
  MG_CHECK(dim >= lo && dim <= hi, IndexError, op, ": dim ", dim, " is out of range for a ", ndim,
           "-d tensor (expected a dim in [", lo, ", ", hi, "])");
  return dim < 0 ? dim + (ndim == 0 ? 1 : ndim) : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const int64_t sa = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t sb = i < n - b.size() ? 1 : b[i - (n - b.size())];
    MG_CHECK(sa == sb || sa == 1 || sb == 1, ShapeError, op, ": shapes ", a, " and ", b,
             " cannot be broadcast together (dim ", int64_t(i), ": ", sa, " vs ", sb, ")");
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

}  // namespace mg
