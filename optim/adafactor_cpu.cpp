// Adafactor's fused CPU step. Passes, for a parameter viewed as [B, n, m] (or a vector):
//   1. sum p^2 (the RMS in alpha);
//   2. the row and column sums of g^2 (each row by the rule with 8-lane leaves; each column by the
//      rule over leaves of kSumLeaf rows, ColumnCascade), folded into R and C, and mean(R);
//   3. sum u^2 over the whole tensor (u recomputed from g, R and C: nothing of size n m is stored);
//   4. p = p (1 - lr wd) - (alpha / clip) u, u recomputed again, in opmath blocks.
// Each value is rounded as the generic path's ops round it (this file is compiled without FMA
// contraction); the sums follow the summation rule, in another tree than the sum op's for the
// columns and the whole-tensor sums, so the two paths agree to a few ulps, not bit for bit.
#include "mixgrad/optim/adafactor_cpu.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "mixgrad/core/cascade_sum.h"
#include "mixgrad/core/parallel.h"
#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/optim/functors.h"
#include "mixgrad/optim/opmath_blocks.h"

namespace mg::optim::detail {

namespace {

// Columns per task of the column sums: one ColumnCascade row of this width stays in L1.
constexpr int64_t kColumnBlock = 256;

// The per-parameter scalars in opmath, as the generic path's scalar ops produce them.
template <typename T>
struct Scalars {
  T w, rho, eps1, eps1_sq, eps2, decay, root_numel, root_numel_d, n_cols, n_rows, sign;
};

template <typename T>
Scalars<T> scalars_of(const AdafactorOptions& o, const AdafactorStepScalars& s, int64_t numel, int64_t n, int64_t m) {
  const double root_numel = std::sqrt(double(numel));
  return {T(s.w),          T(s.rho),       T(s.eps1),
          T(s.eps1 * s.eps1), T(o.eps2),   T(1.0 - o.lr * o.weight_decay),
          T(root_numel),   T(root_numel * o.d), T(double(m)),
          T(double(n)),    T(o.maximize ? -1.0 : 1.0)};
}

// alpha = max(sqrt(sum p^2) / sqrt(numel), eps2) * rho.
template <typename P, typename T = opmath_t<P>>
T alpha_of(const P* p, int64_t numel, const Scalars<T>& c) {
  const T sum = cascade_sum<T>(numel, [p](int64_t i) { const T x = T(p[i]); return x * x; }, /*parallel=*/true);
  return std::max(std::sqrt(sum) / c.root_numel, c.eps2) * c.rho;
}

// u = g / sqrt(max(v, eps1^2)), with g's sign flipped to maximize.
template <typename T>
inline T update_of(T g, T v, const Scalars<T>& c) {
  return (c.sign * g) * (T(1) / std::sqrt(std::max(v, c.eps1_sq)));
}

// The factored second moments of matrix b ([n, m] at g): R and C folded, and max(mean(R), eps1).
template <typename P, typename T = opmath_t<P>>
T fold_factors(const P* g, int64_t n, int64_t m, T* row, T* col, const Scalars<T>& c) {
  // Row sums: one rule sum per row.
  parallel_for(0, n, std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(m, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const P* gr = g + r * m;
      const T sum = cascade_sum<T>(m, [gr](int64_t j) { const T x = T(gr[j]); return x * x; });
      row[r] = fn::aten_lerp(row[r], sum / c.n_cols, c.w);
    }
  });
  // Column sums: leaves of kSumLeaf rows (each summed in row order), combined by the rule.
  const int64_t blocks = (m + kColumnBlock - 1) / kColumnBlock;
  parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    std::vector<T> leaf(kColumnBlock), sums(kColumnBlock);
    ColumnCascade<T> cascade(kColumnBlock);
    const auto plus = [](T a, T b) { return a + b; };
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t j0 = b * kColumnBlock, width = std::min(kColumnBlock, m - j0);
      cascade.reset();
      for (int64_t r0 = 0; r0 < n; r0 += kSumLeaf) {
        std::fill(leaf.begin(), leaf.begin() + width, T(0));
        for (int64_t r = r0; r < std::min(n, r0 + kSumLeaf); ++r) {
          const P* gr = g + r * m + j0;
          for (int64_t k = 0; k < width; ++k) {
            const T x = T(gr[k]);
            leaf[std::size_t(k)] += x * x;
          }
        }
        cascade.push(leaf.data(), width, plus);
      }
      cascade.result(sums.data(), width, T(0), plus);
      for (int64_t k = 0; k < width; ++k) col[j0 + k] = fn::aten_lerp(col[j0 + k], sums[std::size_t(k)] / c.n_rows, c.w);
    }
  });
  const T mean = cascade_sum<T>(n, [row](int64_t r) { return row[r]; }) / c.n_rows;
  return std::max(mean, c.eps1);
}

template <typename P>
void matrix_step(P* p, const P* g, int64_t batch, int64_t n, int64_t m, opmath_t<P>* row, opmath_t<P>* col,
                 const Scalars<opmath_t<P>>& c) {
  using T = opmath_t<P>;
  const int64_t numel = batch * n * m;
  const T alpha = alpha_of(p, numel, c);
  std::vector<T> mean_row(static_cast<std::size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) mean_row[std::size_t(b)] = fold_factors(g + b * n * m, n, m, row + b * n, col + b * m, c);
  // Row r (of all B n rows): u = g / sqrt(max(V, eps1^2)), V = (R_r C_j) / max(mean(R), eps1) of
  // its matrix, over columns [j0, j0 + len) of g's values gv.
  const auto row_updates = [&](int64_t r, int64_t j0, int64_t len, const auto& gv, T* u) {
    const int64_t b = r / n;
    const T rr = row[r], mr = mean_row[std::size_t(b)];
    const T* cb = col + b * m + j0;
    for (int64_t q = 0; q < len; ++q) u[q] = update_of(T(gv(q)), (rr * cb[q]) / mr, c);
  };
  // sum u^2 by the rule over the flat index: each leaf's u into a buffer, row run by row run.
  const T sum_u2 = cascade_reduce<T>(
      numel, T(0),
      [&](int64_t i0, int64_t i1) {
        T buf[kSumLeaf];
        int64_t r = i0 / m, j = i0 - r * m, k = 0;
        while (k < i1 - i0) {
          const int64_t run = std::min(m - j, (i1 - i0) - k);
          const P* gr = g + r * m + j;
          row_updates(r, j, run, [gr](int64_t q) { return gr[q]; }, buf + k);
          k += run;
          j = 0;
          ++r;
        }
        return lane_fold<T>(i1 - i0, [&](int64_t q) { return buf[q] * buf[q]; });
      },
      [](T a, T b) { return a + b; }, /*parallel=*/true);
  const T step = alpha / std::max(std::sqrt(sum_u2) / c.root_numel_d, T(1));
  const bool decay = c.decay != T(1);
  parallel_for(0, batch * n, std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(m, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for_each_opmath_block(p, g, r * m, (r + 1) * m, [&](T* pb, const T* gb, int64_t first, int64_t len) {
        alignas(64) T u[kOpmathBlock];
        for (int64_t q0 = 0; q0 < len; q0 += kOpmathBlock) {  // f32/f64 come as one block of the whole row
          const int64_t k = std::min(kOpmathBlock, len - q0);
          row_updates(r, first - r * m + q0, k, [gb, q0](int64_t q) { return gb[q0 + q]; }, u);
          for (int64_t q = 0; q < k; ++q) pb[q0 + q] = (decay ? pb[q0 + q] * c.decay : pb[q0 + q]) - u[q] * step;
        }
      });
    }
  });
}

template <typename P>
void vector_step(P* p, const P* g, int64_t numel, opmath_t<P>* var, const Scalars<opmath_t<P>>& c) {
  using T = opmath_t<P>;
  const T alpha = alpha_of(p, numel, c);
  parallel_for(0, numel, kDefaultGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const T x = T(g[i]);
      var[i] = fn::aten_lerp(var[i], x * x, c.w);
    }
  });
  const T sum_u2 = cascade_sum<T>(numel, [&](int64_t i) { const T u = update_of(T(g[i]), var[i], c); return u * u; },
                                  /*parallel=*/true);
  const T step = alpha / std::max(std::sqrt(sum_u2) / c.root_numel_d, T(1));
  const bool decay = c.decay != T(1);
  parallel_for(0, numel, kDefaultGrain, [&](int64_t i0, int64_t i1) {
    for_each_opmath_block(p, g, i0, i1, [&](T* pb, const T* gb, int64_t first, int64_t len) {
      for (int64_t q = 0; q < len; ++q) {
        const T pv = decay ? pb[q] * c.decay : pb[q];
        pb[q] = pv - update_of(gb[q], var[first + q], c) * step;
      }
    });
  });
}

}  // namespace

void adafactor_cpu_step(const Tensor& param, const Tensor& grad, void* row, void* col, void* var,
                        const AdafactorOptions& o, const AdafactorStepScalars& s) {
  const int64_t numel = param.numel();
  if (numel == 0) return;
  visit_floating(param.dtype(), "Adafactor", [&]<typename P>() {
    using T = opmath_t<P>;
    P* p = static_cast<P*>(param.data_ptr());
    const P* g = static_cast<const P*>(grad.data_ptr());
    if (param.dim() > 1) {
      const int64_t m = param.shape().back(), n = param.shape()[std::size_t(param.dim() - 2)];
      matrix_step(p, g, numel / (n * m), n, m, static_cast<T*>(row), static_cast<T*>(col), scalars_of<T>(o, s, numel, n, m));
    } else {
      vector_step(p, g, numel, static_cast<T*>(var), scalars_of<T>(o, s, numel, 1, 1));
    }
  });
}

}  // namespace mg::optim::detail
