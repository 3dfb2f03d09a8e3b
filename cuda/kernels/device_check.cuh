// The device side of the deferred value checks (cuda/host/device_check_report.h): a check kernel
// finds the first bad value of its launch in row-major order and publishes it to the device's
// report slot, with no host wait. Internal to cuda/.
//
// Every thread walks its positions in increasing order (grid-stride) and stops at its first bad
// one; the launch's first is the minimum over threads, kept as the maximum of ~position in a
// zeroed per-launch scratch word (so a memset to zero initialises it). The last block to finish
// (an atomic count of finished blocks, after a fence: the classic threadfence-reduction pattern)
// reads the value at that position and publishes it.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "mixgrad/cuda/host/device_check_report.h"

namespace mg::cuda {

// Per-launch scratch of a check kernel, zeroed before the launch (16 bytes).
struct CheckScratch {
  unsigned long long first_key;  // ~(first bad position), 0 while none
  unsigned int blocks_done;
  unsigned int pad;
};
static_assert(sizeof(CheckScratch) == 2 * sizeof(int64_t), "a CheckScratch is two zeroed i64 words");
// i64 words of a zeroed CheckScratch (a caller may append words of its own, e.g. a count).
inline constexpr int64_t kCheckScratchWords = 2;

// Publishes one report unless the device's slot already holds one (the first error wins until
// the host takes it; a later one only marks that it happened). The claim is a device-memory
// atomic; the report is host memory, written with plain stores only.
__device__ inline void publish_device_check(DeviceCheckSlot slot, DeviceCheck check, int64_t value, int64_t bound,
                                            int64_t extra, int64_t d0 = 0, int64_t d1 = 0, int64_t d2 = 0) {
  volatile DeviceCheckReport* r = slot.report;
  if (atomicCAS(slot.claimed, 0u, 1u) != 0u) {
    r->dropped = 1u;  // the pending report's message says that others followed
    return;
  }
  r->check = int32_t(check);
  r->value = value;
  r->bound = bound;
  r->extra = extra;
  r->detail[0] = d0;
  r->detail[1] = d1;
  r->detail[2] = d2;
  __threadfence_system();  // the fields reach host memory before `complete` does
  r->complete = 1u;
}

// A thread's first bad position (call once per thread, after its loop, with -1 for none).
__device__ inline void note_first_bad(CheckScratch* scratch, int64_t position) {
  if (position >= 0) atomicMax(&scratch->first_key, ~static_cast<unsigned long long>(position));
}

// Called by every thread of every block after note_first_bad: the last block to finish calls
// publish_at(position) with the launch's first bad position (a device functor that reads the
// checked tensor there and calls publish_device_check).
template <typename PublishAt>
__device__ void publish_first_bad(CheckScratch* scratch, PublishAt publish_at) {
  __shared__ bool last;
  __threadfence();  // this block's atomicMax is visible device-wide before blocks_done counts it
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) last = atomicAdd(&scratch->blocks_done, 1u) == gridDim.x * gridDim.y - 1;
  __syncthreads();
  if (!last || threadIdx.x != 0 || threadIdx.y != 0) return;
  const unsigned long long key = atomicAdd(&scratch->first_key, 0ull);  // a coherent read
  if (key == 0) return;
  publish_at(static_cast<int64_t>(~key));
}

}  // namespace mg::cuda
