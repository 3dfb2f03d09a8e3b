// Pooling windows shared by the pooling rules (ops/pool.cpp) and kernels
// (ops/cpu/pool_kernels.cpp): for output row i, the input rows [begin, end) it reads and, for
// average pooling, the divisor.
#pragma once
#include <algorithm>
#include <cstdint>

namespace mg::cpu {

// One spatial dim of a strided window: k taps, stride s, padding p, dilation d, input size n.
struct Window1d {
  int64_t k, s, p, d, n;
  int64_t out() const { return (n + 2 * p - d * (k - 1) - 1) / s + 1; }
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
