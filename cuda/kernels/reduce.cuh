// The CUDA reduction launcher: launch_reduce<T>(x, dims, reducer) runs the plan of
// cuda/host/reduce_plan.h with the reducers and per-thread tree of cuda/host/reducers.h (the code
// the CPU tests simulate). First pass: every thread folds its terms (leaves of 128, pairwise
// above), the threads of one output combine pairwise in shared memory; with one block per output
// group the result is stored, otherwise each block writes its partial to a workspace and a second
// kernel combines each output's partials (at most 4 per thread, then pairwise). No atomics.
// Kernels run on the current stream of x's device; the workspace comes from the caching allocator.
#pragma once
#include <cuda_runtime.h>

#include "mixgrad/core/factory.h"
#include "mixgrad/core/tensor.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/host/reduce_plan.h"
#include "mixgrad/cuda/host/reducers.h"
#include "mixgrad/cuda/kernels/launch.h"

namespace mg::cuda {

// The shared tree over the ry (ry2) slots of each output: log2 ry levels, a barrier after each.
template <typename Acc, typename R>
__device__ void reduce_block_tree(Acc* slots, int slot, int red_lane, int ry, const R& r) {
  __syncthreads();
  for (int w = ry / 2; w >= 1; w /= 2) {
    reduce_tree_level(slots, slot, red_lane, w, r);
    __syncthreads();
  }
}

template <typename T, typename R>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_kernel(const ReducePlan p, const T* __restrict__ data, const R r, typename R::Acc* __restrict__ partials) {
  using Acc = typename R::Acc;
  alignas(16) __shared__ unsigned char raw[kReduceThreads * sizeof(Acc)];
  Acc* slots = reinterpret_cast<Acc*>(raw);
  const ReduceLane l = reduce_lane(p, blockIdx.x, int(threadIdx.x));
  slots[l.slot] = l.valid ? reduce_thread<T>(p, r, data, p.kept.offset(l.o), l.g, l.step) : r.init();
  reduce_block_tree(slots, l.slot, l.red_lane, p.ry, r);
  if (l.red_lane != 0 || !l.valid) return;
  if (p.splits == 1) {
    r.store(l.o, slots[l.slot], p.red_numel);
  } else {
    partials[l.o * p.splits + l.s] = slots[l.slot];
  }
}

template <typename R>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_partials_kernel(const ReducePlan p, const R r, const typename R::Acc* __restrict__ partials) {
  using Acc = typename R::Acc;
  alignas(16) __shared__ unsigned char raw[kReduceThreads * sizeof(Acc)];
  Acc* slots = reinterpret_cast<Acc*>(raw);
  const ReduceLane2 l = reduce_lane2(p, blockIdx.x, int(threadIdx.x));
  slots[l.slot] = l.valid ? reduce_partials(p, r, partials, l.o, l.red_lane) : r.init();
  reduce_block_tree(slots, l.slot, l.red_lane, p.ry2, r);
  if (l.red_lane == 0 && l.valid) r.store(l.o, slots[l.slot], p.red_numel);
}

// Reduces x (any strides) over `dims` (sorted, unique; empty: one term per output) into the
// contiguous outputs the reducer writes. An empty reduction stores r.init()'s finish for every
// output.
template <typename T, typename R>
void launch_reduce(const Tensor& x, const std::vector<int64_t>& dims, const R& r) {
  using Acc = typename R::Acc;
  const T* data = static_cast<const T*>(x.data_ptr());
  const ReducePlan p = make_reduce_plan(x.shape(), x.strides(), dims, int64_t(sizeof(T)),
                                        reinterpret_cast<std::uintptr_t>(data));
  if (p.out_numel == 0) return;
  const LaunchContext ctx(x.device());
  Tensor workspace;
  Acc* partials = nullptr;
  if (p.splits > 1) {
    // Freed when this returns: the caching allocator hands the block out again only to work
    // queued after these kernels on the same stream.
    workspace = empty({p.out_numel * p.splits * int64_t(sizeof(Acc))}, {.dtype = DType::U8, .device = x.device()});
    partials = static_cast<Acc*>(workspace.data_ptr());
  }
  reduce_kernel<T, R><<<unsigned(p.blocks), kReduceThreads, 0, ctx.stream>>>(p, data, r, partials);
  MG_CUDA_CHECK_LAUNCH("reduce_kernel");
  if (p.splits > 1) {
    reduce_partials_kernel<R><<<unsigned(p.blocks2), kReduceThreads, 0, ctx.stream>>>(p, r, partials);
    MG_CUDA_CHECK_LAUNCH("reduce_partials_kernel");
  }
}

}  // namespace mg::cuda
