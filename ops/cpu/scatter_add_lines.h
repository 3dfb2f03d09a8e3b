// The general floating scatter_add: lines along `dim`, out[target(j)] += src[j] for the k terms
// of each line, every target's sequence (self, its terms in index order) summed by the summation
// rule (core/cascade_sum.h): in-order leaves of kSumLeaf, combined pairwise; fewer than kSumLeaf
// terms per target is the plain in-order sum. Used wherever the row path (scatter_add_rows.h)
// does not apply: index rows with several targets, strided operands, any dim.
//
// Decision: one pass. The index is read once, each term is validated, added and counted in the
// same loop (a byte per (target, line) counts the open leaf; a leaf closes, rarely, when it
// reaches kSumLeaf terms and is pushed into that element's Cascade). The planning pass this
// replaces re-read every line's index to find where leaves close, which cost more than the
// scatter itself. And when adjacent lines are adjacent in memory (dim 0 of a contiguous
// [n, D]: the lines are columns), as many of them as kScatterEntries allows run together, term
// row by term row, so the index and src are read sequentially and the output is reached row by row
// like a plain row-major loop, instead of one strided column at a time (the kernel alone on
// [16384, 256] into 8192 rows, 1 thread: column by column 63 ms, blocks of 16 lines 45, of 256
// lines 27-32: the column walk's strided reads and page misses were the cost). Each element's additions happen in
// exactly the old order, so the result is the same bit for bit, at any thread count.
//
//   scatter_add_lines<float>(out, idx, src, lines, {1, 1, 1}, geom, fix_index);
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "mixgrad/core/cascade_sum.h"
#include "mixgrad/core/dtype.h"

namespace mg::cpu {

// Lines run together when adjacent in memory: as many as keep (targets x lines) <= this.
inline constexpr int64_t kScatterEntries = int64_t(1) << 21;
static_assert(kSumLeaf - 1 < 255, "the open-leaf count must fit a byte with 255 free as 'empty'");

// One line's shape: k terms into `size` targets; element strides along dim of the output, the
// index and src.
struct ScatterLineGeom {
  int64_t k = 0, size = 0;
  int64_t os_d = 0, is_d = 0, ss_d = 0;
};

// Per-thread scratch, kept between calls. Invariant between blocks: count all 0 (every element's
// open leaf holds self alone) and slot_of empty (no tree).
template <typename C>
struct ScatterLineScratch {
  std::vector<uint8_t> count;    // per entry (target v, line t) at v * W + t: terms in the open leaf - 1, mod 256
  std::unordered_map<int64_t, int32_t> slot_of;  // entry -> its Cascade in trees (entries that closed a leaf)
  std::vector<C> buffer;         // f16/bf16: the block's sums in opmath
  std::vector<int64_t> slot_entry;
  std::vector<Cascade<C>> trees;

  static ScatterLineScratch& of_thread(int64_t entries, bool lowp) {
    thread_local ScatterLineScratch s;
    if (int64_t(s.count.size()) < entries) s.count.assign(std::size_t(entries), 0);
    if (lowp && int64_t(s.buffer.size()) < entries) s.buffer.resize(std::size_t(entries));
    return s;
  }
  // Gives the memory back when it is large (a huge scatter should not stay resident per thread).
  void trim() {
    if (count.size() > (std::size_t(1) << 20)) *this = ScatterLineScratch();
  }
};

// lines lines; line t's operands start at out + t * line_stride[0], index + t * line_stride[1],
// src + t * line_stride[2] (elements). out (T, already holding self) += the scattered src, each
// element's sum by the rule in C = opmath_t<T> (f32 for f16/bf16, one rounding on store).
// fix(v) handles a raw index v outside [0, size): it throws (every caller refuses such an index,
// negative ones included, as PyTorch's). On a throw the lines written so far keep their sums; the scratch is reset.
template <typename T, typename I, typename Fix>
void scatter_add_lines(T* out, const I* index, const T* src, int64_t lines, const std::array<int64_t, 3>& line_stride,
                       const ScatterLineGeom& g, const Fix& fix) {
  using C = opmath_t<T>;
  constexpr bool kLow = !std::is_same_v<C, T>;
  const bool adjacent = line_stride[0] == 1 && line_stride[1] == 1 && line_stride[2] == 1;
  const int64_t W = adjacent ? std::clamp<int64_t>(kScatterEntries / std::max<int64_t>(g.size, 1), 1, lines) : 1;
  ScatterLineScratch<C>& sc = ScatterLineScratch<C>::of_thread(g.size * W, kLow);
  // Resetting the counts: by walking the block's terms again when there are few of them, else at once.
  const bool walk_reset = g.k * 8 < g.size;
  for (int64_t l0 = 0; l0 < lines; l0 += W) {
    const int64_t w = std::min(W, lines - l0);
    T* ob = out + l0 * line_stride[0];
    const I* ib = index + l0 * line_stride[1];
    const T* sb = src + l0 * line_stride[2];
    auto target = [&](int64_t j, int64_t t) {
      const int64_t v = int64_t(ib[j * g.is_d + t * line_stride[1]]);
      return v >= 0 && v < g.size ? v : fix(v);
    };
    try {
      if constexpr (kLow) {
        for (int64_t v = 0; v < g.size; ++v) {
          for (int64_t t = 0; t < w; ++t) sc.buffer[std::size_t(v * W + t)] = static_cast<C>(ob[v * g.os_d + t * line_stride[0]]);
        }
      }
      // The running sum of entry (v, t): the output element itself, or its opmath copy.
      auto acc = [&](int64_t v, int64_t t) -> C& {
        if constexpr (kLow) {
          return sc.buffer[std::size_t(v * W + t)];
        } else {
          return ob[v * g.os_d + t * line_stride[0]];
        }
      };
      uint8_t* count = sc.count.data();
      for (int64_t j = 0; j < g.k; ++j) {
        const T* sr = sb + j * g.ss_d;
        for (int64_t t = 0; t < w; ++t) {
          const int64_t v = target(j, t);
          C& a = acc(v, t);
          a += static_cast<C>(sr[t * line_stride[2]]);
          uint8_t& c = count[v * W + t];
          if (++c == kSumLeaf - 1) [[unlikely]] {  // the leaf holds kSumLeaf terms: close it
            const int64_t e = v * W + t;
            const auto [it, fresh] = sc.slot_of.try_emplace(e, int32_t(sc.trees.size()));
            if (fresh) {
              sc.trees.emplace_back();
              sc.slot_entry.push_back(e);
            }
            sc.trees[std::size_t(it->second)].push(a);
            a = C(0);
            c = 255;  // empty: the next term makes it 0 (one term)
          }
        }
      }
      // Elements that closed a leaf: push the open one (if it holds terms), take the tree's sum.
      for (std::size_t s = 0; s < sc.trees.size(); ++s) {
        const int64_t e = sc.slot_entry[s];
        C& a = acc(e / W, e % W);
        if (count[e] != 255) sc.trees[s].push(a);
        a = sc.trees[s].result(C(0));
      }
      sc.slot_of.clear();
      sc.trees.clear();
      sc.slot_entry.clear();
      if (walk_reset) {
        for (int64_t j = 0; j < g.k; ++j) {
          for (int64_t t = 0; t < w; ++t) count[target(j, t) * W + t] = 0;
        }
      } else {
        std::memset(count, 0, std::size_t(g.size * W));
      }
      if constexpr (kLow) {
        for (int64_t v = 0; v < g.size; ++v) {
          for (int64_t t = 0; t < w; ++t) ob[v * g.os_d + t * line_stride[0]] = static_cast<T>(sc.buffer[std::size_t(v * W + t)]);
        }
      }
    } catch (...) {
      sc = ScatterLineScratch<C>();  // the counts of the failed block are not all 0
      throw;
    }
  }
  sc.trim();
}

}  // namespace mg::cpu
