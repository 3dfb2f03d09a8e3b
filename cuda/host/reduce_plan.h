// The plan of a CUDA reduction (cuda/kernels/reduce.cuh), as host-device code so the CPU tests
// check exactly the index arithmetic the kernels run (tests/cuda/test_reduce_plan.cpp).
//
// Decision: the kernels read any input layout through strides (no contiguous() copy). The input's
// dims are split into kept and reduced ones; size-1 dims are dropped and neighbours of the same
// kind that are contiguous with each other are merged (a kept dim merges with the previous kept
// one even across reduced dims: the output's row-major order is unchanged). Output o (row-major
// over the kept dims) starts at kept.offset(o); its term r (row-major over the reduced dims, in
// the input's dim order) sits at kept.offset(o) + red.offset(r).
//
// Three layouts choose how the 256 threads of a block map onto (output, term):
// - Inner: the reduced dims merged into one of stride 1 (a row sum, or everything). ry threads
//   read consecutive terms of one output (coalesced), 256 / ry outputs per block; 16-byte vector
//   loads when the row starts and the kept strides allow (`vec` elements per load unit, the rest a
//   scalar `tail`).
// - Outer: the innermost kept dim has stride 1 (a column sum). ox consecutive outputs are read by
//   consecutive threads (coalesced), ry = 256 / ox threads share each output's terms.
// - General: anything else: as Inner, with scalar loads through red.offset().
// Each output's terms are shared by ry threads of `splits` blocks; thread lane g (of ry · splits)
// takes load units g, g + ry·splits, ... . The summation tree and its bound are in
// cuda/host/reducers.h. The grid depends on the shape, the layout and whether the data is 16-byte
// aligned (the vector loads), never on the device, so a result repeats bit for bit; the same
// values at another alignment (x[1:] against its contiguous() copy) may differ in the last bits.
//
//   const ReducePlan p = make_reduce_plan(x.shape(), x.strides(), dims, x.element_size(), address);
#pragma once
#include <cstdint>
#include <vector>

#include "mixgrad/core/macros.h"
#include "mixgrad/core/shape.h"

namespace mg::cuda {

inline constexpr int kReduceMaxDims = 8;           // merged kept or reduced dims a plan supports
inline constexpr int kReduceThreads = 256;         // threads per block, both passes
inline constexpr int64_t kReduceLeaf = 128;        // terms a thread folds before they combine pairwise
inline constexpr int64_t kReduceTargetBlocks = 1024;  // blocks a reduction splits towards
inline constexpr int64_t kReduceMaxSplits = 1024;  // blocks per output (second pass: <= 4 per thread)
inline constexpr int64_t kReduceMinUnits = 16;     // load units per thread before splitting further

// Sizes and element strides of merged dims; offset() is the element offset of a row-major index.
struct ReduceDims {
  int ndim;
  int64_t sizes[kReduceMaxDims];
  int64_t strides[kReduceMaxDims];

  // linear < the product of sizes. The outermost dim needs no modulo.
  MG_HOST_DEVICE int64_t offset(int64_t linear) const {
    int64_t off = 0;
    for (int d = ndim - 1; d > 0; --d) {
      off += (linear % sizes[d]) * strides[d];
      linear /= sizes[d];
    }
    return ndim > 0 ? off + linear * strides[0] : 0;
  }
};

enum class ReduceLayout : int { Inner = 0, Outer = 1, General = 2 };

struct ReducePlan {
  int64_t out_numel;  // outputs: the product of the kept sizes
  int64_t red_numel;  // terms of each output: the product of the reduced sizes
  ReduceDims kept;
  ReduceDims red;
  ReduceLayout layout;
  int vec;            // elements per load unit: 16 / element size on the vector path, else 1
  int64_t units;      // load units per output: red_numel / vec
  int64_t tail;       // red_numel - units · vec terms, loaded one at a time (vector path only)
  int ry;             // threads of a block per output (a power of two)
  int ox;             // outputs per block: kReduceThreads / ry
  int64_t splits;     // blocks per group of ox outputs (> 1: partials, then the second pass)
  int64_t groups;     // ceil(out_numel / ox)
  int64_t blocks;     // groups · splits (first pass)
  int ry2;            // second pass: threads per output (each combines <= 4 partials), a power of two
  int ox2;            // second pass: outputs per block
  int64_t blocks2;    // second pass blocks (0 when splits == 1)
};

// The plan of reducing a tensor of `shape` and element `strides` over `dims` (sorted, unique;
// empty = no dim: every output has one term). `address` is the first element's address (the
// vector path needs 16-byte alignment). Throws NotImplementedError past kReduceMaxDims merged dims.
ReducePlan make_reduce_plan(const Shape& shape, const Strides& strides, const std::vector<int64_t>& dims,
                            int64_t elem_size, std::uintptr_t address);

// What one thread of the first pass works on.
struct ReduceLane {
  int64_t o;      // its output
  int64_t s;      // its split (block within the output's group)
  int out_lane;   // output within the block, < ox
  int red_lane;   // thread within the output, < ry
  int slot;       // shared-memory slot: out_lane · ry + red_lane (one output's ry slots adjacent)
  int64_t g;      // its lane among the output's ry · splits: it takes load units g, g + step, ...
  int64_t step;   // ry · splits
  bool valid;     // o < out_numel
};

MG_HOST_DEVICE ReduceLane reduce_lane(const ReducePlan& p, int64_t block, int tid) {
  ReduceLane l;
  const int64_t group = block / p.splits;
  l.s = block % p.splits;
  if (p.layout == ReduceLayout::Outer) {
    l.out_lane = tid % p.ox;  // consecutive threads, consecutive outputs (stride 1 in memory)
    l.red_lane = tid / p.ox;
  } else {
    l.red_lane = tid % p.ry;  // consecutive threads, consecutive terms
    l.out_lane = tid / p.ry;
  }
  l.o = group * p.ox + l.out_lane;
  l.valid = l.o < p.out_numel;
  l.slot = l.out_lane * p.ry + l.red_lane;
  l.g = l.s * p.ry + l.red_lane;
  l.step = int64_t(p.ry) * p.splits;
  return l;
}

// What one thread of the second pass works on: partials j = red_lane + k · ry2 (< splits) of o.
struct ReduceLane2 {
  int64_t o;
  int red_lane;
  int slot;  // out_lane · ry2 + red_lane
  bool valid;
};

MG_HOST_DEVICE ReduceLane2 reduce_lane2(const ReducePlan& p, int64_t block, int tid) {
  ReduceLane2 l;
  l.red_lane = tid % p.ry2;
  const int out_lane = tid / p.ry2;
  l.o = block * p.ox2 + out_lane;
  l.valid = l.o < p.out_numel;
  l.slot = out_lane * p.ry2 + l.red_lane;
  return l;
}

}  // namespace mg::cuda
