// Multi-tensor apply on CUDA (DESIGN §5): one kernel launch walks many tensors, one block per
// chunk of kMtaChunk elements, as cuda/host/multi_tensor_plan.h cuts them (tested on the CPU).
// A launch's parameter block carries up to D lists of kMtaMaxTensors addresses (parameter,
// gradient, state buffers, model copy), each slot's element count and device step counter, and
// the (slot, chunk) of every block; a chunk body (a device functor templated on the shared
// per-element math of optim/functors.h) does the work of one block. Internal to cuda/.
//
// Decision: the plan, not the device, fixes which block handles which elements and the global
// index of every chunk, so per-chunk partial sums written at that index and combined in order
// repeat bit for bit (the deterministic norm of cuda/kernels/multi_tensor.cu).
//
//   MtaLists<2> lists;  lists.add({p.data_ptr(), g.data_ptr()}, p.numel());
//   multi_tensor_apply<2>(device, lists, SgdChunk<float, Half>{...});
#pragma once
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <vector>

#include "mixgrad/core/device.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/host/multi_tensor_plan.h"
#include "mixgrad/cuda/kernels/launch.h"

namespace mg::cuda {

inline constexpr int64_t kMtaChunk = 65536;  // elements per block
inline constexpr int kMtaThreads = 512;      // threads per block
inline constexpr int kMtaMaxTensors = 24;    // 6 lists x 24 addresses: the block stays under 4 KiB
inline constexpr int kMtaMaxBlocks = 320;

// The kernel's parameter block for one launch.
template <int D>
struct MtaArgs {
  void* addr[D][kMtaMaxTensors];  // list l, slot s (null where a list has no tensor for it)
  int64_t numel[kMtaMaxTensors];
  int64_t* step[kMtaMaxTensors];  // device step counter of the slot's tensor, or null
  int32_t tensor[kMtaMaxTensors]; // the slot's index in the launched lists (per-tensor side arrays)
  uint8_t block_slot[kMtaMaxBlocks];
  int32_t block_chunk[kMtaMaxBlocks];  // chunk index within the slot's tensor
  int64_t first_chunk;                 // global chunk index of block 0
};
static_assert(sizeof(MtaArgs<6>) <= 4000, "the multi-tensor parameter block must fit a kernel's 4 KiB");

// The host side's lists: per tensor D addresses, its size and its step counter.
template <int D>
struct MtaLists {
  std::vector<std::array<void*, D>> addr;
  std::vector<int64_t> numel;
  std::vector<int64_t*> step;
  void add(const std::array<void*, D>& a, int64_t n, int64_t* s = nullptr) {
    addr.push_back(a);
    numel.push_back(n);
    step.push_back(s);
  }
  bool empty() const { return addr.empty(); }
};

// A block's view of its chunk: elements [begin, end) of slot `slot`, global chunk `chunk`.
struct MtaChunk {
  int slot;
  int64_t begin, end;
  int64_t chunk;
};

// __grid_constant__: the body reads the parameter block through a reference without a per-thread
// copy of its ~4 KiB into local memory.
template <int D, typename Body>
__global__ void __launch_bounds__(kMtaThreads) multi_tensor_kernel(const __grid_constant__ MtaArgs<D> a, Body body) {
  const int slot = a.block_slot[blockIdx.x];
  const int64_t begin = int64_t(a.block_chunk[blockIdx.x]) * kMtaChunk;
  const int64_t end = begin + kMtaChunk < a.numel[slot] ? begin + kMtaChunk : a.numel[slot];
  body(a, MtaChunk{slot, begin, end, a.first_chunk + blockIdx.x});
}

// Runs `body` over every chunk of the lists on `device`'s current stream; returns the plan (its
// num_chunks sizes a per-chunk partials buffer).
template <int D, typename Body>
MultiTensorPlan multi_tensor_apply(Device device, const MtaLists<D>& lists, const Body& body) {
  MultiTensorPlan plan = plan_multi_tensor(
      lists.numel, {.chunk_size = kMtaChunk, .max_tensors = kMtaMaxTensors, .max_blocks = kMtaMaxBlocks});
  if (plan.launches.empty()) return plan;
  LaunchContext ctx(device);
  static_assert(sizeof(MtaArgs<D>) + sizeof(Body) <= 4096, "a multi-tensor launch's parameters must fit 4 KiB");
  for (const MultiTensorLaunch& l : plan.launches) {
    MG_ASSERT(l.tensors.size() <= std::size_t(kMtaMaxTensors) && l.blocks.size() <= std::size_t(kMtaMaxBlocks),
              "multi_tensor_apply: a launch of ", l.tensors.size(), " tensors and ", l.blocks.size(),
              " chunks exceeds the parameter block");
    MtaArgs<D> a{};
    for (std::size_t s = 0; s < l.tensors.size(); ++s) {
      const int t = l.tensors[s];
      for (int d = 0; d < D; ++d) a.addr[d][s] = lists.addr[t][d];
      a.numel[s] = lists.numel[t];
      a.step[s] = lists.step[t];
      a.tensor[s] = t;
    }
    for (std::size_t b = 0; b < l.blocks.size(); ++b) {
      a.block_slot[b] = uint8_t(l.blocks[b].slot);
      a.block_chunk[b] = int32_t(l.blocks[b].chunk);
    }
    a.first_chunk = l.first_chunk;
    multi_tensor_kernel<D><<<unsigned(l.blocks.size()), kMtaThreads, 0, ctx.stream>>>(a, body);
    MG_CUDA_CHECK_LAUNCH("multi_tensor_kernel");
  }
  return plan;
}

}  // namespace mg::cuda
