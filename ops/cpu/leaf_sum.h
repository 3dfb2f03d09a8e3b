// Sums by the summation rule (core/cascade_sum.h) for kernels whose terms do not come as one
// index range: line_sum for a line of n terms given by index (short lines skip the Cascade), and
// LeafSum for terms that arrive one at a time (scatter_add's targets, a pooling window walked row
// by row): in-order leaves of kSumLeaf terms, combined pairwise. Both give exactly the rule's tree
// for their n, so they repeat bit for bit wherever the same terms arrive in the same order.
// pairwise_rows combines `count` partial arrays (rows) element by element with the rule's tree of
// `count` leaves (the conv weight gradient's per-slice partials), in parallel over elements.
//
//   float s = line_sum<float>(n, [&](int64_t i) { return std::exp(x[i * stride] - m); });
//   LeafSum<float> acc;  for (...) acc.add(v);  float t = acc.result();
#pragma once
#include <algorithm>
#include <bit>
#include <cstdint>

#include "mixgrad/core/cascade_sum.h"
#include "mixgrad/core/parallel.h"

namespace mg::cpu {

// Σ term(i), i < n, lane-folded leaves; the same value as cascade_sum<Acc>(n, term).
template <typename Acc, typename Term>
inline Acc line_sum(int64_t n, const Term& term) {
  if (n <= kSumLeaf) return lane_fold<Acc>(n, term);
  return cascade_sum<Acc>(n, term);
}

// Streaming sum with in-order leaves.
template <typename Acc>
class LeafSum {
 public:
  void add(Acc v) {
    leaf_ += v;
    if (++in_leaf_ == kSumLeaf) {
      tree_.push(leaf_);
      leaf_ = Acc(0);
      in_leaf_ = 0;
    }
  }
  // Adds term(0..n-1) in order (a contiguous run: the leaf's inner loop has no branch).
  template <typename Term>
  void add_run(int64_t n, const Term& term) {
    for (int64_t i = 0; i < n;) {
      const int64_t m = std::min(n - i, kSumLeaf - in_leaf_);
      Acc leaf = leaf_;
      for (int64_t k = 0; k < m; ++k) leaf += term(i + k);
      leaf_ = leaf;
      in_leaf_ += m;
      i += m;
      if (in_leaf_ == kSumLeaf) {
        tree_.push(leaf_);
        leaf_ = Acc(0);
        in_leaf_ = 0;
      }
    }
  }
  Acc result() const {
    if (tree_.count() == 0) return leaf_;
    if (in_leaf_ == 0) return tree_.result(Acc(0));
    Cascade<Acc> t = tree_;
    t.push(leaf_);
    return t.result(Acc(0));
  }

 private:
  Cascade<Acc> tree_;
  Acc leaf_ = Acc(0);
  int64_t in_leaf_ = 0;
};

// rows[0][i] = the rule's pairwise sum of rows[0..count)[i] for i in [begin, end): the left child
// of a node of c leaves covers the largest power of two below c, as in Cascade.
template <typename Acc>
void pairwise_rows_range(Acc* rows, int64_t count, int64_t stride, int64_t begin, int64_t end) {
  if (count < 2) return;
  const int64_t left = int64_t(std::bit_floor(uint64_t(count - 1)));
  pairwise_rows_range(rows, left, stride, begin, end);
  pairwise_rows_range(rows + left * stride, count - left, stride, begin, end);
  const Acc* right = rows + left * stride;
  for (int64_t i = begin; i < end; ++i) rows[i] += right[i];
}

// rows [count, n] (row stride n): row 0 becomes the pairwise sum of all rows.
template <typename Acc>
void pairwise_rows(Acc* rows, int64_t count, int64_t n) {
  parallel_for(0, n, std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(1, count)),
               [&](int64_t b, int64_t e) { pairwise_rows_range(rows, count, n, b, e); });
}

}  // namespace mg::cpu
