// The summation rule of every accumulating CPU kernel (docs/numerics.md, "Summation").
//
// A sum of n terms is one fixed binary tree: leaves of kSumLeaf consecutive terms, each folded by
// the kernel (in order, or in 8 interleaved lanes when the data is contiguous), combined pairwise,
// where the left child of every node covers the largest power of two of leaves strictly below the
// node's leaf count. The tree depends on n alone, never on the thread count: parallel code cuts the
// terms at multiples of kSumChunk (a power of two of leaves), and those are nodes of the same tree,
// so a sum repeats bit for bit at any number of threads. Error bound, with u = 2^-24 (f32) or 2^-53
// (f64) and L = ceil(n / kSumLeaf) leaves:
//     |computed - exact| <= (d_leaf + ceil(log2 L)) · u · Σ|x_i|  (+ O(u²))
// where d_leaf = kSumLeaf for an in-order leaf and kSumLeaf / 8 + 3 for an 8-lane leaf — against
// (n - 1) · u · Σ|x_i| for one running total. For n = 10^6 and an 8-lane leaf: 32 u.
//
//   Cascade<float> c;                                  // streaming: push leaf sums in order
//   for (...) c.push(leaf_sum);
//   float s = c.result(0.f);
//   float t = cascade_reduce<float>(n, 0.f, fold, std::plus<>{}, /*parallel=*/true);
#pragma once
#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include "mixgrad/core/parallel.h"

namespace mg {

// Terms per leaf, and leaves per parallel chunk (a power of two, so chunks are nodes of the tree).
inline constexpr int64_t kSumLeaf = 128;
inline constexpr int64_t kSumChunkLeaves = 64;
inline constexpr int64_t kSumChunk = kSumLeaf * kSumChunkLeaves;  // 8192 terms

// Number of leaves of a sum of n terms.
constexpr int64_t sum_leaf_count(int64_t n) { return n <= 0 ? 0 : (n + kSumLeaf - 1) / kSumLeaf; }

// Streaming pairwise combination: push the leaves' values in order, then result(). Holds one
// partial per set bit of the leaf count (a binary counter), so it needs no buffer of leaves.
// combine(left, right) need not be commutative or associative: the grouping and the left/right
// order are exactly those of the tree above.
template <typename Acc, typename Combine = std::plus<>>
class Cascade {
 public:
  explicit Cascade(Combine combine = Combine{}) : combine_(combine) {}

  void push(Acc leaf) {
    int level = 0;
    for (uint64_t c = count_; c & 1u; c >>= 1, ++level) leaf = combine_(levels_[level], leaf);
    levels_[level] = leaf;
    ++count_;
  }

  // The combined value, or `empty` when nothing was pushed. Partials combine from the smallest
  // (rightmost) node up, each as the right child of the next larger one.
  Acc result(Acc empty) const {
    if (count_ == 0) return empty;
    int level = std::countr_zero(count_);
    Acc acc = levels_[level];
    for (uint64_t c = count_ >> (level + 1); c != 0; c >>= 1) {
      ++level;
      if (c & 1u) acc = combine_(levels_[level], acc);
    }
    return acc;
  }

  uint64_t count() const { return count_; }
  // Starts a new sum (a cascade with a capturing-lambda combine cannot be reassigned).
  void reset() { count_ = 0; }

 private:
  Acc levels_[64] = {};
  uint64_t count_ = 0;
  Combine combine_;
};

// One Cascade per column for a block of `width` columns that all sum the same number of leaves
// (column sums: every column's tree is the same), pushed a whole row of leaf values at a time so
// the combines vectorize across columns. Column k's value equals that of a Cascade fed column k's
// leaves, bit for bit.
template <typename Acc>
class ColumnCascade {
 public:
  explicit ColumnCascade(int64_t width) : width_(width) {}
  void reset() { count_ = 0; }

  // Pushes leaf[0..w) (w <= width), one leaf per column; leaf is overwritten (scratch).
  template <typename Combine>
  void push(Acc* leaf, int64_t w, const Combine& combine) {
    int level = 0;
    for (uint64_t c = count_; c & 1u; c >>= 1, ++level) {
      const Acc* left = level_row(level);
      for (int64_t k = 0; k < w; ++k) leaf[k] = combine(left[k], leaf[k]);
    }
    if (int64_t(levels_.size()) < (level + 1) * width_) levels_.resize(std::size_t((level + 1) * width_));
    std::copy(leaf, leaf + w, level_row(level));
    ++count_;
  }

  // out[0..w) = each column's combined value (`empty` when nothing was pushed), as Cascade::result.
  template <typename Combine>
  void result(Acc* out, int64_t w, Acc empty, const Combine& combine) const {
    if (count_ == 0) {
      std::fill(out, out + w, empty);
      return;
    }
    int level = std::countr_zero(count_);
    std::copy(level_row(level), level_row(level) + w, out);
    for (uint64_t c = count_ >> (level + 1); c != 0; c >>= 1) {
      ++level;
      if (!(c & 1u)) continue;
      const Acc* left = level_row(level);
      for (int64_t k = 0; k < w; ++k) out[k] = combine(left[k], out[k]);
    }
  }

 private:
  Acc* level_row(int level) { return levels_.data() + int64_t(level) * width_; }
  const Acc* level_row(int level) const { return levels_.data() + int64_t(level) * width_; }

  int64_t width_;
  std::vector<Acc> levels_;  // level l's partials at [l * width_, (l + 1) * width_)
  uint64_t count_ = 0;
};

// Pairwise combination of an array of partials (leaves or chunk results) with the tree above.
template <typename Acc, typename Combine = std::plus<>>
Acc pairwise_combine(const Acc* values, int64_t count, Acc empty, Combine combine = Combine{}) {
  Cascade<Acc, Combine> c(combine);
  for (int64_t i = 0; i < count; ++i) c.push(values[i]);
  return c.result(empty);
}

// The sum of terms [0, n) by the rule: fold(begin, end) returns the fold of one leaf (end - begin
// <= kSumLeaf terms, starting from the identity); combine joins two partials. With `parallel`,
// chunks of kSumChunk terms run on the worker threads (nested calls run inline); the result is
// the same bit for bit either way.
template <typename Acc, typename Fold, typename Combine>
Acc cascade_reduce(int64_t n, Acc empty, const Fold& fold, const Combine& combine, bool parallel) {
  auto chunk = [&](int64_t begin, int64_t end) {
    Cascade<Acc, Combine> c(combine);
    for (int64_t b = begin; b < end; b += kSumLeaf) c.push(fold(b, std::min(end, b + kSumLeaf)));
    return c.result(empty);
  };
  const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  if (n <= 0) return empty;
  if (!parallel || chunks < 2 || num_threads() < 2 || in_parallel_region()) return chunk(0, n);
  std::vector<Acc> partial(chunks, empty);
  parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) partial[c] = chunk(c * kSumChunk, std::min(n, (c + 1) * kSumChunk));
  });
  return pairwise_combine(partial.data(), chunks, empty, combine);
}

// The fold of one contiguous leaf of up to kSumLeaf values in 8 interleaved lanes (vectorizes):
// lane k adds terms k, k + 8, ... — the tail's (n mod 8) terms too — and the lanes then combine
// as ((0+1)+(2+3))+((4+5)+(6+7)): docs/numerics.md's rule (term t in lane t mod 8, leaf depth at
// most 16 + 3), bit for bit the norm kernels' RuleSums. term(i) gives the i-th term in the
// accumulator type.
template <typename Acc, typename Term>
inline Acc lane_fold(int64_t n, const Term& term) {
  Acc lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    // A loop, not unrolled: the build turns off the SLP vectorizer (CMakeLists.txt), and the loop
    // vectorizer makes this one vector add (measured 0.26 vs 0.45 ns per f32 element unrolled).
#pragma GCC unroll 1
    for (int k = 0; k < 8; ++k) lanes[k] += term(i + k);
  }
  for (int k = 0; i < n; ++i, ++k) lanes[k] += term(i);  // i is a multiple of 8 here: term i in lane i mod 8
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// Sum of term(0..n-1) by the rule with lane-folded leaves. For kernels whose terms are a cheap
// function of the index: sum of squares, dot products, Σ dy·x̂ in a norm's backward.
template <typename Acc, typename Term>
Acc cascade_sum(int64_t n, const Term& term, bool parallel = false) {
  return cascade_reduce<Acc>(
      n, Acc(0),
      [&](int64_t b, int64_t e) { return lane_fold<Acc>(e - b, [&](int64_t i) { return term(b + i); }); },
      [](Acc a, Acc b) { return a + b; }, parallel);
}

}  // namespace mg
