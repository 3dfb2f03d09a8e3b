// make_reduce_plan: merged dims, layout, vector width and grid of a CUDA reduction (see the header).
#include "mixgrad/cuda/host/reduce_plan.h"

#include <algorithm>

#include "mixgrad/core/error.h"

namespace mg::cuda {
namespace {

// Appends (size, stride) to `dims`, merged into the last entry when the two are contiguous with
// each other (the last entry's stride is this one's stride times its size).
void push_dim(ReduceDims& dims, int64_t size, int64_t stride, const char* what, const Shape& shape) {
  if (dims.ndim > 0 && dims.strides[dims.ndim - 1] == stride * size) {
    dims.sizes[dims.ndim - 1] *= size;
    dims.strides[dims.ndim - 1] = stride;
    return;
  }
  MG_CHECK(dims.ndim < kReduceMaxDims, NotImplementedError, "cuda reduction: more than ", kReduceMaxDims, " ",
           what, " dims that cannot be merged; got shape ", shape,
           "\n  hint: call contiguous() on the input first");
  dims.sizes[dims.ndim] = size;
  dims.strides[dims.ndim] = stride;
  ++dims.ndim;
}

}  // namespace

ReducePlan make_reduce_plan(const Shape& shape, const Strides& strides, const std::vector<int64_t>& dims,
                            int64_t elem_size, std::uintptr_t address) {
  ReducePlan p{};
  p.out_numel = 1;
  p.red_numel = 1;
  std::vector<bool> reduced(shape.size(), false);
  for (int64_t d : dims) reduced[std::size_t(d)] = true;
  for (std::size_t d = 0; d < shape.size(); ++d) (reduced[d] ? p.red_numel : p.out_numel) *= shape[d];
  const bool empty = p.out_numel == 0 || p.red_numel == 0;
  for (std::size_t d = 0; d < shape.size() && !empty; ++d) {
    if (shape[d] == 1) continue;
    push_dim(reduced[d] ? p.red : p.kept, shape[d], strides[d], reduced[d] ? "reduced" : "kept", shape);
  }

  if (p.red.ndim == 1 && p.red.strides[0] == 1) {
    p.layout = ReduceLayout::Inner;
  } else if (p.red.ndim >= 1 && p.kept.ndim >= 1 && p.kept.strides[p.kept.ndim - 1] == 1) {
    p.layout = ReduceLayout::Outer;
  } else {
    p.layout = ReduceLayout::General;
  }

  // The vector path: each output's terms start 16-byte aligned (the first element, and every kept
  // stride a multiple of 16 bytes) and there is at least one full vector.
  p.vec = 1;
  const int64_t width = 16 / elem_size;
  if (p.layout == ReduceLayout::Inner && width > 1 && address % 16 == 0 && p.red_numel >= width) {
    bool aligned = true;
    for (int d = 0; d < p.kept.ndim; ++d) aligned = aligned && (p.kept.strides[d] * elem_size) % 16 == 0;
    if (aligned) p.vec = int(width);
  }
  p.units = p.red_numel / p.vec;
  p.tail = p.red_numel - p.units * p.vec;

  // Threads per output: about 8 load units each, up to the whole block (Inner, General) or up to
  // 256 / ox where ox covers up to 32 neighbouring columns (Outer: 128-byte rows of f32).
  int ry_max = kReduceThreads;
  if (p.layout == ReduceLayout::Outer) {
    const int64_t cols = p.kept.sizes[p.kept.ndim - 1];
    int ox_min = 1;
    while (ox_min < 32 && ox_min < cols) ox_min *= 2;
    ry_max = kReduceThreads / ox_min;
  }
  p.ry = 1;
  while (p.ry < ry_max && p.ry * int64_t(8) < p.units) p.ry *= 2;
  p.ox = kReduceThreads / p.ry;
  p.groups = (p.out_numel + p.ox - 1) / p.ox;

  // Few output groups and long reductions: split each output's terms over several blocks (towards
  // kReduceTargetBlocks blocks, each thread keeping at least kReduceMinUnits load units).
  p.splits = 1;
  if (p.groups > 0 && p.groups < kReduceTargetBlocks) {
    const int64_t by_blocks = (kReduceTargetBlocks + p.groups - 1) / p.groups;
    const int64_t by_work = p.units / (int64_t(p.ry) * kReduceMinUnits);
    p.splits = std::clamp<int64_t>(std::min(by_blocks, by_work), 1, kReduceMaxSplits);
  }
  p.blocks = p.groups * p.splits;
  MG_CHECK(p.blocks <= int64_t(0x7fffffff), NotImplementedError, "cuda reduction: ", p.out_numel,
           " outputs need more than 2^31 - 1 blocks; got shape ", shape);

  // Second pass: ry2 threads per output, each combining at most 4 of its `splits` partials.
  p.ry2 = 1;
  p.ox2 = kReduceThreads;
  p.blocks2 = 0;
  if (p.splits > 1) {
    while (p.ry2 < kReduceThreads && p.ry2 * int64_t(4) < p.splits) p.ry2 *= 2;
    p.ox2 = kReduceThreads / p.ry2;
    p.blocks2 = (p.out_numel + p.ox2 - 1) / p.ox2;
  }
  return p;
}

}  // namespace mg::cuda
