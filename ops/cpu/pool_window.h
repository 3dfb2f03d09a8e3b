// Pooling windows shared by the pooling rules (ops/pool.cpp) and kernels
// (ops/cpu/pool_kernels.cpp): for output row i, the input rows [begin, end) it reads and, for
// average pooling, the divisor.
#pragma once
#include <algorithm>
#include <cstdint>

namespace mg::cpu {

// One spatial dim of a strided window: k taps, stride s, padding p, dilation d, input size n.
// ceil: PyTorch's ceil_mode — the output size rounds up, so a last window may hang over the end
// (its taps beyond the padded input are skipped), but it must start inside the input or the left
// padding, as PyTorch's rule.
struct Window1d {
  int64_t k, s, p, d, n;
  bool ceil = false;
  int64_t out() const {
    const int64_t span = n + 2 * p - d * (k - 1) - 1;  // >= 0 once validated, or > -s in ceil mode
    if (!ceil) return span / s + 1;
    // PyTorch's div_rtn (rounding toward -inf): a window up to s - 1 longer than the padded input
    // still gives one output in ceil mode, and a longer one none (refused by the caller).
    const int64_t num = span + s - 1;
    const int64_t o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
    return (o - 1) * s >= n + p ? o - 1 : o;
  }
  int64_t start(int64_t i) const { return i * s - p; }  // first tap (may lie in the padding)
};

// Average-pool window along one dim (dilation 1): the real rows [lo, hi) and the padded size.
struct AvgRange {
  int64_t lo, hi, padded;
};
inline AvgRange avg_range(const Window1d& w, int64_t i) {
  const int64_t a = w.start(i);
  const int64_t b = std::min(a + w.k, w.n + w.p);
  return {std::max<int64_t>(a, 0), std::min(b, w.n), b - a};
}

// Adaptive window along one dim: [floor(i n / out), ceil((i + 1) n / out)).
inline AvgRange adaptive_range(int64_t n, int64_t out, int64_t i) {
  const int64_t lo = (i * n) / out;
  const int64_t hi = ((i + 1) * n + out - 1) / out;
  return {lo, hi, hi - lo};
}

}  // namespace mg::cpu
