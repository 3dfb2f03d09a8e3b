// The CPU reduction launcher. A reducer describes one reduction:
//   using Acc = ...;                                   // accumulator (f32 for f16/bf16/f32, f64 for f64)
//   Acc init() const;
//   Acc run(Acc acc, const T* p, int64_t n, int64_t stride, int64_t first_index) const;
//                                                      // folds n elements at p with stride (elements)
//                                                      // into acc; first_index = position in the
//                                                      // reduced range; n <= kSumLeaf
//   Acc combine(Acc a, Acc b) const;                   // partial results, a's range before b's
//   O finish(Acc acc, int64_t count) const;            // count = number of reduced elements
// reduce_loop() reduces every output by the summation rule of core/cascade_sum.h: the reduced
// positions, in order, form leaves of kSumLeaf that the reducer folds, and the leaves combine
// pairwise in a tree fixed by the reduced size alone. Many outputs run in parallel over outputs;
// few long ones split each reduction into chunks that are nodes of that tree, so the result is
// the same bit for bit at any thread count, with an error of O(log n) ulps instead of O(n).
#pragma once
#include <algorithm>
#include <vector>

#include "mixgrad/core/cascade_sum.h"
#include "mixgrad/core/parallel.h"
#include "mixgrad/core/tensor.h"

namespace mg::cpu {

struct ReduceGeometry {
  Shape kept_shape;
  Strides kept_strides;  // elements
  Shape red_shape;       // coalesced reduced dims
  Strides red_strides;
  int64_t red_numel = 1;
  int64_t out_numel = 1;
};

// Splits x's dims into kept and reduced (sorted `dims`), merging contiguous reduced dims.
ReduceGeometry reduce_geometry(const Tensor& x, const std::vector<int64_t>& dims);

// Visits reduced positions [begin, end) of one output: calls f(offset, n, stride, first) for runs
// along the innermost reduced dim.
template <typename F>
void for_each_reduced_run(const ReduceGeometry& g, int64_t base, int64_t begin, int64_t end, F&& f) {
  if (begin >= end) return;  // also covers reductions over an empty dim
  const int64_t nd = int64_t(g.red_shape.size());
  if (nd == 0) {
    f(base, 1, 1, 0);
    return;
  }
  const int64_t inner = g.red_shape[nd - 1];
  if (nd == 1) {  // the common case, and the one called once per leaf: no index vector
    f(base + begin * g.red_strides[0], end - begin, g.red_strides[0], begin);
    return;
  }
  // The odometer: on the stack (this runs once per leaf of 128 elements), on the heap past 16 dims.
  int64_t idx_stack[16];
  std::vector<int64_t> idx_heap(nd > 16 ? nd : 0);
  int64_t* idx = nd > 16 ? idx_heap.data() : idx_stack;
  int64_t rem = begin;
  for (int64_t d = nd - 1; d >= 0; --d) {
    idx[d] = rem % g.red_shape[d];
    rem /= g.red_shape[d];
  }
  int64_t pos = begin;
  while (pos < end) {
    int64_t off = base;
    for (int64_t d = 0; d < nd; ++d) off += idx[d] * g.red_strides[d];
    const int64_t n = std::min(end - pos, inner - idx[nd - 1]);
    f(off, n, g.red_strides[nd - 1], pos);
    pos += n;
    idx[nd - 1] += n;
    for (int64_t d = nd - 1; d > 0 && idx[d] == g.red_shape[d]; --d) {
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

// Element offset of kept (output) index `o`.
inline int64_t kept_offset(const ReduceGeometry& g, int64_t o) {
  int64_t off = 0;
  for (int64_t d = int64_t(g.kept_shape.size()) - 1; d >= 0; --d) {
    off += (o % g.kept_shape[d]) * g.kept_strides[d];
    o /= g.kept_shape[d];
  }
  return off;
}

// Reductions over the outer dims of a tensor whose innermost kept dim is contiguous (a bias
// gradient: the column sums of [N, C]) take a block of neighbouring outputs (columns) at a time and
// fold each leaf of kSumLeaf rows in register tiles of kTile columns, so every load is contiguous,
// the fold vectorizes across columns, and a leaf of the block is read once, row after row; the
// strided walk one output at a time re-read each cache line C times. Each output still folds each
// leaf in order and combines the leaves by the same tree (ColumnCascade: one Cascade per column,
// run for the whole block at once), so the result equals the strided walk bit for bit: only
// reducers whose strided run is such an in-order fold (they declare kInOrderStrided) take this path.
template <typename T, typename O, typename R>
bool reduce_outer_tiles(const T* data, const ReduceGeometry& g, O* out, const R& r) {
  using Acc = typename R::Acc;
  if constexpr (!requires { R::kInOrderStrided; }) {
    return false;
  } else {
    if (g.kept_shape.empty() || g.red_shape.empty() || g.kept_strides.back() != 1 || g.red_strides.back() == 1 ||
        g.kept_shape.back() < 16 || g.red_numel == 0) {
      return false;
    }
    // Blocks of up to kMaxBlock columns, at least one per thread. Measured on [4096, 1024] f32, 1
    // thread, as a standalone loop: each leaf of whole rows in 64-column tiles 0.66 ms; 512-column
    // blocks walked over all rows 0.80; 64-column tiles over all rows (the walk before) 0.93.
    constexpr int64_t kTile = 64, kMaxBlock = 2048;
    const int64_t inner = g.kept_shape.back();
    const int64_t per_thread = (inner + num_threads() - 1) / num_threads();
    const int64_t width = std::min(kMaxBlock, std::max<int64_t>(kTile, (per_thread + kTile - 1) / kTile * kTile));
    const int64_t blocks_per_row = (inner + width - 1) / width;
    const int64_t blocks = g.out_numel / inner * blocks_per_row;
    const int64_t grain = std::max<int64_t>(1, kDefaultGrain / (g.red_numel * width));
    auto combine = [&r](Acc a, Acc b) { return r.combine(a, b); };
    parallel_for(0, blocks, grain, [&](int64_t t0, int64_t t1) {
      ColumnCascade<Acc> sums(width);
      std::vector<Acc> leaves(static_cast<std::size_t>(width));
      Acc* lv = leaves.data();
      // lv[c0 + k] = column (c0 + k)'s fold of rows [leaf, leaf_end) for k < w (<= kTile); a full
      // tile has a constant width, so its partials stay in registers.
      auto fold_tile = [&]<bool kFull>(int64_t base, int64_t c0, int64_t leaf, int64_t leaf_end, int64_t w) {
        Acc t[kTile];
        const int64_t n_cols = kFull ? kTile : w;
        for (int64_t k = 0; k < n_cols; ++k) t[k] = r.init();
        for_each_reduced_run(g, base + c0, leaf, leaf_end, [&](int64_t off, int64_t n, int64_t stride, int64_t first) {
          for (int64_t i = 0; i < n; ++i) {
            const T* p = data + off + i * stride;
            for (int64_t k = 0; k < n_cols; ++k) t[k] = r.run(t[k], p + k, 1, stride, first + i);
          }
        });
        for (int64_t k = 0; k < n_cols; ++k) lv[c0 + k] = t[k];
      };
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t col = (t % blocks_per_row) * width, o0 = (t / blocks_per_row) * inner + col;
        const int64_t w = std::min(width, inner - col), base = kept_offset(g, o0);
        sums.reset();
        for (int64_t leaf = 0; leaf < g.red_numel; leaf += kSumLeaf) {
          const int64_t leaf_end = std::min(g.red_numel, leaf + kSumLeaf);
          int64_t c0 = 0;
          for (; c0 + kTile <= w; c0 += kTile) fold_tile.template operator()<true>(base, c0, leaf, leaf_end, kTile);
          if (c0 < w) fold_tile.template operator()<false>(base, c0, leaf, leaf_end, w - c0);
          sums.push(lv, w, combine);
        }
        sums.result(lv, w, r.init(), combine);
        for (int64_t k = 0; k < w; ++k) out[o0 + k] = r.finish(lv[k], g.red_numel);
      }
    });
    return true;
  }
}

template <typename T, typename O, typename R>
void reduce_loop(const Tensor& x, const std::vector<int64_t>& dims, O* out, const R& r) {
  using Acc = typename R::Acc;
  const ReduceGeometry g = reduce_geometry(x, dims);
  const T* data = static_cast<const T*>(x.data_ptr());
  auto combine = [&r](Acc a, Acc b) { return r.combine(a, b); };
  // One output by the summation rule; `parallel` splits it into chunks (same result).
  auto reduce_one = [&](int64_t base, bool parallel) {
    auto fold = [&](int64_t b, int64_t e) {
      Acc acc = r.init();
      for_each_reduced_run(g, base, b, e, [&](int64_t off, int64_t n, int64_t stride, int64_t first) {
        acc = r.run(acc, data + off, n, stride, first);
      });
      return acc;
    };
    return cascade_reduce<Acc>(g.red_numel, r.init(), fold, combine, parallel);
  };
  const int threads = num_threads();
  if (g.out_numel >= threads && reduce_outer_tiles<T>(data, g, out, r)) return;
  if (g.out_numel >= threads || g.red_numel < 4 * kDefaultGrain || in_parallel_region()) {
    const int64_t grain = std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(1, g.red_numel));
    parallel_for(0, g.out_numel, grain, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) out[o] = r.finish(reduce_one(kept_offset(g, o), false), g.red_numel);
    });
    return;
  }
  // Few outputs, long reductions: each one in chunks on all threads.
  for (int64_t o = 0; o < g.out_numel; ++o) out[o] = r.finish(reduce_one(kept_offset(g, o), true), g.red_numel);
}

}  // namespace mg::cpu
