// Storage: a reference-counted block of device memory. Tensors are views into a Storage.
// Memory comes from the Allocator registered for the device type: the CPU allocator returns
// 64-byte-aligned blocks (one cache line, full AVX-512 vectors) and caches freed blocks of 128 KiB
// and more for reuse, because a fresh large block from the OS costs a page fault per 4 KiB (it
// made a 2^24-element add run at 40% of memcpy speed; with 1 MiB, glibc's heap trimming handed
// the MLP's 512 KiB activations back to the OS every step: ~180 page faults and ~10% of an O3
// bf16 step); the CUDA backend registers its caching
// allocator from register_cuda_kernels(). A storage also owns the version counter that
// all views of it share, so an in-place write through any view invalidates saved tensors.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "mixgrad/core/device.h"

namespace mg {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns at least `nbytes` bytes on `device` (a valid pointer even for 0 bytes); throws
  // mg::Error on failure (the CUDA allocator: DeviceError for an unusable device,
  // OutOfMemoryError when the device is full).
  virtual void* allocate(std::size_t nbytes, Device device) = 0;
  // Frees a block that allocate(.., device) returned.
  virtual void deallocate(void* ptr, Device device) = 0;
};

// CPU memory statistics: bytes handed out now and at most since the last reset, and bytes kept
// in the CPU allocator's cache of freed large blocks.
struct MemoryStats {
  std::size_t allocated = 0;
  std::size_t peak_allocated = 0;
  std::size_t cached = 0;
};
MemoryStats cpu_memory_stats();
void reset_cpu_peak_memory();
// Frees the cached blocks; set_cpu_cache_limit(0) disables it (default 1 GiB; full: LRU eviction).
void empty_cpu_cache();
void set_cpu_cache_limit(std::size_t bytes);

// The allocator for a device type; throws DeviceError when none is registered (e.g. a CUDA
// tensor in a build without CUDA).
Allocator& allocator_for(DeviceType type);
// The registered allocator or nullptr.
Allocator* find_allocator(DeviceType type);
void set_allocator(DeviceType type, Allocator* allocator);

// Copies `nbytes` between two blocks on any devices (host memcpy on the CPU; the CUDA backend
// registers its copy function). `non_blocking`: a copy between the host and a CUDA device may
// return before it has finished when the host block is pinned (core/pinned_memory.h); the caller
// then synchronises before touching the host block (see docs/cuda.md). Otherwise the copy is
// complete, as far as the host can tell, when the call returns.
using CopyBytesFn = void (*)(void* dst, Device dst_device, const void* src, Device src_device,
                             std::size_t nbytes, bool non_blocking);
void set_copy_bytes_fn(DeviceType type, CopyBytesFn fn);
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t nbytes,
                bool non_blocking = false);

class Storage {
 public:
  // Allocates `nbytes` on `device`.
  Storage(std::size_t nbytes, Device device);
  // Allocates `nbytes` on `device` from `allocator` (which must outlive the storage), e.g. the
  // pinned host allocator of core/pinned_memory.h.
  Storage(std::size_t nbytes, Device device, Allocator& allocator);
  // Wraps memory owned elsewhere; `deleter` (may be empty) runs when the storage dies.
  Storage(void* data, std::size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  // The allocator that made the memory; nullptr for wrapped memory.
  Allocator* allocator() const { return allocator_; }
  // Version counter shared by all tensors viewing this storage; bumped by in-place ops. Atomic
  // (relaxed), as PyTorch's: one thread's optimizer step may bump it while another's backward
  // checks a saved tensor (Hogwild-style training), and no bump may be lost.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  Device device_;
  std::function<void(void*)> deleter_;
  Allocator* allocator_ = nullptr;  // the allocator that made data_ (null when wrapped)
  std::atomic<uint64_t> version_{0};
};

}  // namespace mg
