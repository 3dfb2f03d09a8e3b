// The allocator registered for DeviceType::CUDA (cuda/device_allocator.cpp): a caching allocator
// per device, each block tagged with the stream current at its allocation. Internal to cuda/.
#pragma once
#include "mixgrad/core/storage.h"

namespace mg::cuda {

Allocator& device_allocator();

}  // namespace mg::cuda
