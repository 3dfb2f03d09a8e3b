// Pinned (page-locked) host memory as core sees it: CPU tensors whose storage a GPU can read and
// write by DMA, so a host<->device copy can run asynchronously (Tensor::to(device, true)).
// Decision: core only holds a hook, filled by the CUDA backend when it registers its kernels
// (cuda/pinned_allocator.cpp, the caching policy in cuda/host/pinned_cache.h); a pinned tensor is
// a CPU tensor whose Storage was made by that allocator, so is_pinned() is one comparison and every
// CPU kernel reads pinned tensors unchanged. Without the hook (a build without CUDA) nothing is
// pinned and asking for pinned memory throws DeviceError with the reason.
//
//   mg::Tensor x = mg::randn({256, 1024}).pin_memory();       // throws without a CUDA device
//   mg::Tensor g = x.to(mg::Device::cuda(), /*non_blocking=*/true);  // no host wait
#pragma once
#include <string>

#include "mixgrad/core/storage.h"
#include "mixgrad/core/tensor.h"

namespace mg {

// Why pinned memory cannot be allocated now ("" when it can); the CUDA backend's reason.
using PinnedUnavailableFn = std::string (*)();
// Registers the pinned host allocator (allocate(n, Device::cpu())) and its availability query.
void set_pinned_allocator(Allocator* allocator, PinnedUnavailableFn unavailable_reason);
// The registered pinned allocator or nullptr.
Allocator* find_pinned_allocator();
// "" when pinned memory can be allocated, else the reason ("mixgrad was built without the CUDA
// backend", "no CUDA device found", ...). Only meaningful once mg::init() has registered the
// backends; check_pin_memory_available() and empty_pinned() make sure of that.
std::string pinned_unavailable_reason();

// Throws DeviceError "<who>: pinned host memory needs a usable CUDA device: <reason>" with a hint
// unless pinned memory can be allocated. Defined in ops/pin_memory.cpp: it runs mg::init() first,
// so a caller in a lower layer (the DataLoader) gets the registered backends' answer.
void check_pin_memory_available(const std::string& who);
// An uninitialised dense CPU tensor in pinned memory laid out in `format` (Contiguous or
// ChannelsLast, 4-D only); throws as check_pin_memory_available ("pin_memory: ..."). Defined in
// ops/pin_memory.cpp (runs mg::init() first).
Tensor empty_pinned(const Shape& shape, DType dtype, MemoryFormat format = MemoryFormat::Contiguous);

}  // namespace mg
