// The CPU reduction launcher. A reducer describes one reduction:
//   using Acc = ...;                                   // accumulator (f32 for f16/bf16/f32, f64 for f64)
//   Acc init() const;
//   Acc run(Acc acc, const T* p, int64_t n, int64_t stride, int64_t first_index) const;
//                                                      // n elements at p with stride (elements);
//                                                      // first_index = position in the reduced range
//   Acc combine(Acc a, Acc b) const;                   // partial results, a's range before b's
//   O finish(Acc acc, int64_t count) const;            // count = number of reduced elements
// reduce_loop() visits, for every output element, all input elements along the reduced dims in
// order. Many outputs run in parallel over outputs; few outputs split each reduction into chunks
// whose partial accumulators are combined (so a full sum of 2^24 elements uses both cores).
#pragma once
#include <algorithm>
#include <vector>

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
    if (begin < end) f(base, 1, 1, 0);
    return;
  }
  const int64_t inner = g.red_shape[nd - 1];
  std::vector<int64_t> idx(nd);
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
// gradient: the column sums of [N, C]) walk the input row by row for a tile of neighbouring
// outputs, so every load is contiguous and the tile vectorizes; the strided walk one output at a
// time re-read each cache line C times. Each output still folds its elements in order, so the
// result equals the strided walk bit for bit: only reducers whose strided run is such an in-order
// fold (they declare kInOrderStrided) take this path.
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
    constexpr int64_t kTile = 64;
    const int64_t inner = g.kept_shape.back(), tiles_per_row = (inner + kTile - 1) / kTile;
    const int64_t tiles = g.out_numel / inner * tiles_per_row;
    const int64_t grain = std::max<int64_t>(1, kDefaultGrain / (g.red_numel * kTile));
    parallel_for(0, tiles, grain, [&](int64_t t0, int64_t t1) {
      Acc acc[kTile];
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t col = (t % tiles_per_row) * kTile, o0 = (t / tiles_per_row) * inner + col;
        const int64_t w = std::min(kTile, inner - col);
        for (int64_t k = 0; k < w; ++k) acc[k] = r.init();
        for_each_reduced_run(g, kept_offset(g, o0), 0, g.red_numel, [&](int64_t off, int64_t n, int64_t stride, int64_t first) {
          for (int64_t i = 0; i < n; ++i) {
            const T* p = data + off + i * stride;
            for (int64_t k = 0; k < w; ++k) acc[k] = r.run(acc[k], p + k, 1, stride, first + i);
          }
        });
        for (int64_t k = 0; k < w; ++k) out[o0 + k] = r.finish(acc[k], g.red_numel);
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
  auto reduce_range = [&](int64_t base, int64_t b, int64_t e) {
    Acc acc = r.init();
    for_each_reduced_run(g, base, b, e, [&](int64_t off, int64_t n, int64_t stride, int64_t first) {
      acc = r.run(acc, data + off, n, stride, first);
    });
    return acc;
  };
  const int threads = num_threads();
  if (g.out_numel >= threads && reduce_outer_tiles<T>(data, g, out, r)) return;
  if (g.out_numel >= threads || g.red_numel < 4 * kDefaultGrain || in_parallel_region()) {
    const int64_t grain = std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(1, g.red_numel));
    parallel_for(0, g.out_numel, grain, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) out[o] = r.finish(reduce_range(kept_offset(g, o), 0, g.red_numel), g.red_numel);
    });
    return;
  }
  // Few outputs, long reductions: chunk each reduction, then combine the partials in order.
  for (int64_t o = 0; o < g.out_numel; ++o) {
    const int64_t base = kept_offset(g, o);
    std::vector<Acc> partial(threads, r.init());
    parallel_for(0, threads, 1, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) {
        partial[c] = reduce_range(base, g.red_numel * c / threads, g.red_numel * (c + 1) / threads);
      }
    });
    Acc acc = partial[0];
    for (int c = 1; c < threads; ++c) acc = r.combine(acc, partial[c]);
    out[o] = r.finish(acc, g.red_numel);
  }
}

}  // namespace mg::cpu
