// The two passes of a max-shifted softmax line, shared by the softmax family's kernels
// (ops/cpu/loss_kernels.cpp) and fused attention's (ops/cpu/attention_kernels.cpp): the line's
// maximum, then Σ exp(x - max) by the summation rule (core/cascade_sum.h), with the exps kept
// when asked. Accumulation in Acc (f32 for f16/bf16/f32, f64 for f64).
//
//   const float m = line_max<float>(x, n, 1);
//   const float inv = 1.0f / exp_sum<float>(x, n, 1, m, e);   // e[i] = exp(x[i] - m)
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>

#include "mixgrad/core/cascade_sum.h"
#include "mixgrad/core/fast_math.h"
#include "mixgrad/ops/cpu/reducers.h"

namespace mg::cpu {

// max of x[i * stride], i < n, in Acc (-inf when empty; NaN when any term is NaN). Contiguous
// lines in 16 lanes, so the loop vectorizes (max is exact: the lanes change no value, only which
// NaN or signed zero comes out when there are several; the shift by it is the same).
template <typename Acc, typename T>
Acc line_max(const T* x, int64_t n, int64_t stride) {
  if (stride == 1) return lanes_extremum<true, Acc>(x, n);
  Acc m = -std::numeric_limits<Acc>::infinity();
  for (int64_t i = 0; i < n; ++i) m = extremum_step<true>(m, static_cast<Acc>(x[i * stride]));
  return m;
}

// Σ exp(x[i * stride] - m), i < n, by the summation rule: each leaf's exps are computed into a
// buffer first (fast::exp_rounded: correctly rounded e^x in f32, vectorized; libm for f64), then
// folded in 8 lanes — the same leaves, lanes and tree as line_sum. With `keep`, the exps are also
// stored at keep[i] (softmax reuses them instead of evaluating each exp twice).
template <typename Acc, typename T>
Acc exp_sum(const T* x, int64_t n, int64_t stride, Acc m, Acc* keep = nullptr) {
  Cascade<Acc> tree;
  Acc buf[kSumLeaf];
  for (int64_t b = 0; b < n; b += kSumLeaf) {
    const int64_t len = std::min(kSumLeaf, n - b);
    // The exps go straight to `keep` when it is given (a copy from the buffer was a fifth of
    // this function's time in cross_entropy's backward).
    Acc* e = keep != nullptr ? keep + b : buf;
    if (stride == 1) {
      for (int64_t i = 0; i < len; ++i) e[i] = fast::exp_rounded(static_cast<Acc>(x[b + i]) - m);
    } else {
      for (int64_t i = 0; i < len; ++i) e[i] = fast::exp_rounded(static_cast<Acc>(x[(b + i) * stride]) - m);
    }
    const Acc leaf = lane_fold<Acc>(len, [e](int64_t i) { return e[i]; });
    if (n <= kSumLeaf) return leaf;
    tree.push(leaf);
  }
  return tree.result(Acc(0));
}

}  // namespace mg::cpu
