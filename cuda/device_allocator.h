// The allocator registered for DeviceType::CUDA (cuda/device_allocator.cpp): a caching allocator
// per device, each block tagged with the stream current at its allocation. Internal to cuda/.
#pragma once
#include "mixgrad/core/storage.h"

namespace mg::cuda {

class CachingAllocator;

Allocator& device_allocator();
// The caching allocator of `device` (made on first use); cuda/graph.cpp opens its graph pools.
CachingAllocator& caching_allocator(int device);

}  // namespace mg::cuda
