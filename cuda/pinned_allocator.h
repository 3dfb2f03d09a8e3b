// The pinned host allocator registered into core (core/pinned_memory.h): one process-wide
// PinnedHostCache (cuda/host/pinned_cache.h, the policy) over cudaHostAlloc/cudaFreeHost and CUDA
// events (cuda/pinned_allocator.cpp, the raw operations). The byte copies (cuda/copy.cpp) ask it
// whether a host pointer is pinned and record their events on its blocks. Internal to cuda/.
#pragma once
#include "mixgrad/core/storage.h"
#include "mixgrad/cuda/host/pinned_cache.h"

namespace mg::cuda {

// The Allocator for pinned CPU storages; allocate() throws DeviceError with the reason when no
// CUDA device can be used.
Allocator& pinned_allocator();
// The cache behind it (made on first use; never destroyed).
PinnedHostCache& pinned_cache();

}  // namespace mg::cuda
