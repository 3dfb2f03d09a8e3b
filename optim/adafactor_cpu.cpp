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

// Columns per task of the column sums: at most this many (one ColumnCascade row stays in L1), and
// fewer when that gives every worker thread a block (an embedding's 256 columns were one task).
// Each column's tree does not depend on the width, so neither do the sums.
constexpr int64_t kColumnBlock = 256;
int64_t column_block(int64_t m) {
  const int64_t per_thread = (m + num_threads() - 1) / std::max(1, num_threads());
  return std::clamp<int64_t>((per_thread + 15) / 16 * 16, 16, kColumnBlock);
}

template <typename T>
using Scalars = fn::AdafactorScalars<T>;

// sum p^2 (alpha's RMS, taken before the weight decay).
template <typename P, typename T = opmath_t<P>>
T sum_squares(const P* p, int64_t numel) {
  return cascade_sum<T>(numel, [p](int64_t i) { const T x = T(p[i]); return x * x; }, /*parallel=*/true);
}

// Scratch of the column sums of one task: a leaf row and a ColumnCascade `width` wide.
template <typename T>
struct ColumnScratch {
  explicit ColumnScratch(int64_t width)
      : leaf(static_cast<std::size_t>(width)), sums(static_cast<std::size_t>(width)), cascade(width) {}
  std::vector<T> leaf, sums;
  ColumnCascade<T> cascade;
};

// Row sums of g^2 for rows [r0, r1) of an [n, m] matrix, folded into R: one rule sum per row.
template <typename P, typename T = opmath_t<P>>
void fold_rows(const P* g, int64_t m, int64_t r0, int64_t r1, T* row, const Scalars<T>& c) {
  for (int64_t r = r0; r < r1; ++r) {
    const P* gr = g + r * m;
    const T sum = cascade_sum<T>(m, [gr](int64_t j) { const T x = T(gr[j]); return x * x; });
    row[r] = fn::aten_lerp(row[r], sum / c.n_cols, c.w);
  }
}

// Column sums of g^2 for columns [j0, j0 + width) of an [n, m] matrix (width <= the scratch's),
// folded into C: leaves of kSumLeaf rows (each summed in row order), combined by the rule. A
// column's tree does not depend on j0 or width.
template <typename P, typename T = opmath_t<P>>
void fold_columns(const P* g, int64_t n, int64_t m, int64_t j0, int64_t width, T* col, const Scalars<T>& c,
                  ColumnScratch<T>& s) {
  const auto plus = [](T a, T b) { return a + b; };
  s.cascade.reset();
  for (int64_t r0 = 0; r0 < n; r0 += kSumLeaf) {
    std::fill(s.leaf.begin(), s.leaf.begin() + width, T(0));
    for (int64_t r = r0; r < std::min(n, r0 + kSumLeaf); ++r) {
      const P* gr = g + r * m + j0;
      for (int64_t k = 0; k < width; ++k) {
        const T x = T(gr[k]);
        s.leaf[std::size_t(k)] += x * x;
      }
    }
    s.cascade.push(s.leaf.data(), width, plus);
  }
  s.cascade.result(s.sums.data(), width, T(0), plus);
  for (int64_t k = 0; k < width; ++k) col[j0 + k] = fn::aten_lerp(col[j0 + k], s.sums[std::size_t(k)] / c.n_rows, c.w);
}

// max(mean(R), eps1) of one matrix's folded R.
template <typename T>
T mean_row_floor(const T* row, int64_t n, const Scalars<T>& c) {
  return std::max(cascade_sum<T>(n, [row](int64_t r) { return row[r]; }) / c.n_rows, c.eps1);
}

// The factored second moments of every matrix of a [B, n, m] gradient: R and C folded, and each
// matrix's max(mean(R), eps1) into mean_row. A large matrix runs its rows and its column blocks on
// the worker threads; small ones (a conv weight's 3 x 3 kernels: B = out x in of them) run one
// task per range of matrices with one scratch each. The same sums either way.
template <typename P, typename T = opmath_t<P>>
void fold_factors(const P* g, int64_t batch, int64_t n, int64_t m, T* row, T* col, T* mean_row, const Scalars<T>& c) {
  const int64_t size = n * m;
  if (size >= kDefaultGrain || batch == 1) {
    for (int64_t b = 0; b < batch; ++b) {
      const P* gb = g + b * size;
      T* rb = row + b * n;
      T* cb = col + b * m;
      parallel_for(0, n, std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(m, 1)),
                   [&](int64_t r0, int64_t r1) { fold_rows(gb, m, r0, r1, rb, c); });
      const int64_t block = column_block(m), blocks = (m + block - 1) / block;
      parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
        ColumnScratch<T> s(block);
        for (int64_t k = b0; k < b1; ++k) fold_columns(gb, n, m, k * block, std::min(block, m - k * block), cb, c, s);
      });
      mean_row[b] = mean_row_floor(rb, n, c);
    }
    return;
  }
  const int64_t width = std::min(m, kColumnBlock);
  parallel_for(0, batch, std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(size, 1)), [&](int64_t b0, int64_t b1) {
    ColumnScratch<T> s(width);
    for (int64_t b = b0; b < b1; ++b) {
      const P* gb = g + b * size;
      fold_rows(gb, m, 0, n, row + b * n, c);
      for (int64_t j0 = 0; j0 < m; j0 += width) fold_columns(gb, n, m, j0, std::min(width, m - j0), col + b * m, c, s);
      mean_row[b] = mean_row_floor(row + b * n, n, c);
    }
  });
}

template <typename P>
void matrix_step(P* p, const P* g, int64_t batch, int64_t n, int64_t m, opmath_t<P>* row, opmath_t<P>* col,
                 const Scalars<opmath_t<P>>& c) {
  using T = opmath_t<P>;
  const int64_t numel = batch * n * m;
  const T sum_p2 = sum_squares(p, numel);
  std::vector<T> mean_row(static_cast<std::size_t>(batch));
  fold_factors(g, batch, n, m, row, col, mean_row.data(), c);
  // Row r (of all B n rows): u = g / sqrt(max(V, eps1^2)), V = (R_r C_j) / max(mean(R), eps1) of
  // its matrix, over columns [j0, j0 + len) of g's values gv.
  const auto row_updates = [&](int64_t r, int64_t j0, int64_t len, const auto& gv, T* u) {
    const int64_t b = r / n;
    const T rr = row[r], mr = mean_row[std::size_t(b)];
    const T* cb = col + b * m + j0;
    for (int64_t q = 0; q < len; ++q) u[q] = fn::adafactor_update(T(gv(q)), fn::adafactor_factored_variance(rr, cb[q], mr), c);
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
  const T step = fn::adafactor_step_size(sum_p2, sum_u2, c);
  // Always multiplied by the decay (1 without weight decay: the same bits): a select on it per
  // element keeps g++ from vectorizing the loop.
  parallel_for(0, batch * n, std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(m, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for_each_opmath_block(p, g, r * m, (r + 1) * m, [&](T* pb, const T* gb, int64_t first, int64_t len) {
        alignas(64) T u[kOpmathBlock];
        for (int64_t q0 = 0; q0 < len; q0 += kOpmathBlock) {  // f32/f64 come as one block of the whole row
          const int64_t k = std::min(kOpmathBlock, len - q0);
          row_updates(r, first - r * m + q0, k, [gb, q0](int64_t q) { return gb[q0 + q]; }, u);
          for (int64_t q = 0; q < k; ++q) pb[q0 + q] = pb[q0 + q] * c.decay - u[q] * step;
        }
      });
    }
  });
}

template <typename P>
void vector_step(P* p, const P* g, int64_t numel, opmath_t<P>* var, const Scalars<opmath_t<P>>& c) {
  using T = opmath_t<P>;
  const T sum_p2 = sum_squares(p, numel);
  parallel_for(0, numel, kDefaultGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const T x = T(g[i]);
      var[i] = fn::aten_lerp(var[i], x * x, c.w);
    }
  });
  const T sum_u2 = cascade_sum<T>(numel, [&](int64_t i) { const T u = fn::adafactor_update(T(g[i]), var[i], c); return u * u; },
                                  /*parallel=*/true);
  const T step = fn::adafactor_step_size(sum_p2, sum_u2, c);
  parallel_for(0, numel, kDefaultGrain, [&](int64_t i0, int64_t i1) {
    for_each_opmath_block(p, g, i0, i1, [&](T* pb, const T* gb, int64_t first, int64_t len) {
      for (int64_t q = 0; q < len; ++q) pb[q] = pb[q] * c.decay - fn::adafactor_update(gb[q], var[first + q], c) * step;
    });
  });
}

}  // namespace

void adafactor_cpu_step(const Tensor& param, const Tensor& grad, void* row, void* col, void* var,
                        const AdafactorOptions& o, int64_t t) {
  const int64_t numel = param.numel();
  if (numel == 0) return;
  visit_floating(param.dtype(), "Adafactor", [&]<typename P>() {
    using T = opmath_t<P>;
    const auto scalars = [&](int64_t n, int64_t m) {
      return fn::adafactor_scalars<T>(o.lr, o.beta2_decay, o.eps1, o.eps2, o.d, o.weight_decay, o.maximize,
                                      machine_epsilon(param.dtype()), t, numel, n, m);
    };
    P* p = static_cast<P*>(param.data_ptr());
    const P* g = static_cast<const P*>(grad.data_ptr());
    if (param.dim() > 1) {
      const int64_t m = param.shape().back(), n = param.shape()[std::size_t(param.dim() - 2)];
      matrix_step(p, g, numel / (n * m), n, m, static_cast<T*>(row), static_cast<T*>(col), scalars(n, m));
    } else {
      vector_step(p, g, numel, static_cast<T*>(var), scalars(1, 1));
    }
  });
}

}  // namespace mg::optim::detail
