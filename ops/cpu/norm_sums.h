// The sums of the norm kernels (ops/cpu/norm_kernels.cpp) by the summation rule of
// core/cascade_sum.h, for terms that arrive a run at a time: a batch-norm channel is N runs of H·W
// values at stride C·H·W, a group-norm group is C/G runs of H·W. The one decision a reader must know:
// RuleSums numbers the terms in the order they are added, whatever the runs, so the tree — leaves
// of kSumLeaf consecutive terms, each folded in 8 interleaved lanes, combined pairwise by a
// Cascade — depends on the number of terms alone: the same bits at any thread count and any split
// into runs, with an error of (kSumLeaf / 8 + 3 + ceil(log2 L)) · u · Σ|x_i| for L leaves.
//
//   RuleSums<float, 2> s;                                     // Σ g and Σ g·x̂ in one pass
//   for (row ...) s.add(len, [&](int64_t k) { return SumVec<float, 2>{{g[k], g[k] * xh(k)}}; });
//   const SumVec<float, 2> r = s.result();                   // r.v[0] = Σ g, r.v[1] = Σ g·x̂
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "mixgrad/core/cascade_sum.h"

namespace mg::cpu {

// K accumulators carried together through one tree (the same terms' positions, K different sums).
template <typename A, int K>
struct SumVec {
  A v[K] = {};
  SumVec operator+(const SumVec& o) const {
    SumVec r;
    for (int k = 0; k < K; ++k) r.v[k] = v[k] + o.v[k];
    return r;
  }
};

// K sums of A (f32 for f16/bf16/f32, f64 for f64) by the rule. Term t of the whole sequence lies in
// leaf t / kSumLeaf and, inside it, in lane t mod 8 (the leaf's position t mod kSumLeaf is a
// multiple of 8 apart from t mod 8); a full or final leaf folds its lanes as
// ((0+1)+(2+3))+((4+5)+(6+7)) and is pushed into the Cascade.
template <typename A, int K>
class RuleSums {
 public:
  // Adds term(0), ..., term(n - 1) (each a SumVec<A, K>) as the next n terms.
  template <typename Term>
  void add(int64_t n, const Term& term) {
    add(n, term, [&](int64_t i, int64_t m, A (&l)[K][8]) {
      for (int64_t q = i; q < i + m; q += 8) {
        // kept as a loop of 8 for the loop vectorizer (one vector add per sum); the build
        // disables the SLP vectorizer that would otherwise rejoin the unrolled lanes
#pragma GCC unroll 1
        for (int j = 0; j < 8; ++j) {
          const SumVec<A, K> t = term(q + j);
          for (int k = 0; k < K; ++k) l[k][j] += t.v[k];
        }
      }
    });
  }

  // The same with `groups(i, m, l)` adding the terms i, ..., i + m - 1 (m a multiple of 8, term i
  // in lane 0) into the lanes l[k][0..7]: term i + j is added to lane j of each sum, in order, as the
  // loop above does, so a SIMD version (one vector register per sum) gives the same bits.
  template <typename Term, typename Groups>
  void add(int64_t n, const Term& term, const Groups& groups) {
    add(n, term, groups, nullptr);
  }

  // The same with `leaves(i, out)` also given: the lanes of kLeafBatch whole leaves from term i on
  // (out[b][k][0..7], leaf b = terms i + b kSumLeaf, ...), each summed from zero as `groups` would.
  // Leaves are independent until the Cascade, so a SIMD version that fills them together keeps
  // several dependency chains in flight, and the bits are those of one leaf at a time.
  static constexpr int kLeafBatch = 4;
  template <typename Term, typename Groups, typename Leaves>
  void add(int64_t n, const Term& term, const Groups& groups, const Leaves& leaves) {
    A l[K][8];  // local copies, so the loads through `term` cannot alias the lanes
    for (int k = 0; k < K; ++k) std::copy(lanes_[k], lanes_[k] + 8, l[k]);
    int64_t pos = pos_, i = 0;
    while (i < n) {
      if constexpr (!std::is_same_v<Leaves, std::nullptr_t>) {
        if (pos == 0 && n - i >= kLeafBatch * kSumLeaf) {  // l is all zero at a leaf's start
          A batch[kLeafBatch][K][8] = {};
          leaves(i, batch);
          for (int b = 0; b < kLeafBatch; ++b) sums_.push(fold(batch[b]));
          i += kLeafBatch * kSumLeaf;
          continue;
        }
      }
      if ((pos & 7) != 0 || n - i < 8) {  // one term into its lane (run heads and tails)
        const SumVec<A, K> t = term(i);
        for (int k = 0; k < K; ++k) l[k][pos & 7] += t.v[k];
        ++pos;
        ++i;
      } else {  // whole groups of 8 up to the end of the leaf
        const int64_t m = std::min<int64_t>(kSumLeaf - pos, (n - i) & ~int64_t(7));
        groups(i, m, l);
        pos += m;
        i += m;
      }
      if (pos == kSumLeaf) {
        sums_.push(fold(l));
        for (int k = 0; k < K; ++k) std::fill(l[k], l[k] + 8, A(0));
        pos = 0;
      }
    }
    for (int k = 0; k < K; ++k) std::copy(l[k], l[k] + 8, lanes_[k]);
    pos_ = pos;
  }

  // The K sums of everything added so far (0 when nothing was).
  SumVec<A, K> result() const {
    if (pos_ == 0) return sums_.result(SumVec<A, K>{});
    Cascade<SumVec<A, K>> c = sums_;
    c.push(fold(lanes_));
    return c.result(SumVec<A, K>{});
  }

 private:
  static SumVec<A, K> fold(const A (&l)[K][8]) {
    SumVec<A, K> s;
    for (int k = 0; k < K; ++k) s.v[k] = ((l[k][0] + l[k][1]) + (l[k][2] + l[k][3])) + ((l[k][4] + l[k][5]) + (l[k][6] + l[k][7]));
    return s;
  }

  A lanes_[K][8] = {};
  int64_t pos_ = 0;  // terms in the current (unfinished) leaf
  Cascade<SumVec<A, K>> sums_;
};

// One sum of term(0..n-1) by the rule (a contiguous row).
template <typename A, typename Term>
A rule_sum(int64_t n, const Term& term) {
  RuleSums<A, 1> s;
  s.add(n, [&](int64_t i) { return SumVec<A, 1>{{term(i)}}; });
  return s.result().v[0];
}

}  // namespace mg::cpu
