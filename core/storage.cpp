// CPU allocator (64-byte aligned), the allocator registry and byte copies between devices.
#include "mixgrad/core/storage.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <unordered_map>

#include "mixgrad/core/error.h"

namespace mg {
// Registers every rule, kernel and device backend once (ops/init.cpp; the library is one unit, as
// for the Tensor methods defined in ops/). Called here so that allocating on a device works before
// the first op.
void init();
}  // namespace mg

namespace mg {
namespace {

// Blocks below kCacheMin bytes go straight to aligned_alloc/free (glibc recycles small blocks
// well; from its mmap threshold, 128 KiB, up it returns freed ones to the OS);
// larger freed blocks are kept, keyed by their rounded size, and reused by a request of a size
// between that size and twice it, up to a total of `limit_` cached bytes. A block freed into a
// full cache evicts the blocks that were freed longest ago: the newest sizes are the ones the
// running loop asks for again. (Refusing the new block instead left a cache full of an earlier
// phase's sizes, and every later large allocation went to the OS and its page faults: a chunked
// bf16 step after an f32 one ran 1.4x slower, bench_lm_head on Zen 3.)
class CpuAllocator final : public Allocator {
 public:
  static constexpr std::size_t kCacheMin = std::size_t(1) << 17;
  static constexpr std::size_t kPage = 4096;

  void* allocate(std::size_t nbytes, Device) override {
    const std::size_t rounded = round_up(nbytes);
    void* p = nullptr;
    std::size_t got = rounded;
    if (rounded >= kCacheMin) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.lower_bound(rounded);
      if (it != free_.end() && it->first <= 2 * rounded) {
        got = it->first;
        p = it->second.ptr;
        cached_ -= got;
        by_age_.erase(it->second.age);
        free_.erase(it);
      }
    }
    if (!p) {
      p = std::aligned_alloc(64, rounded);
      if (!p && rounded >= kCacheMin) {  // give the cache back to the OS and retry once
        empty_cache();
        p = std::aligned_alloc(64, rounded);
      }
      MG_CHECK(p != nullptr, Error, "cpu allocator: out of memory allocating ", nbytes, " bytes");
    }
    std::lock_guard<std::mutex> lock(mutex_);
    sizes_[p] = got;
    allocated_ += got;
    peak_ = std::max(peak_, allocated_);
    return p;
  }

  void deallocate(void* ptr, Device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = sizes_.find(ptr);
    MG_ASSERT(it != sizes_.end(), "cpu allocator: freeing an unknown pointer");
    const std::size_t size = it->second;
    sizes_.erase(it);
    allocated_ -= size;
    if (size >= kCacheMin && size <= limit_) {
      while (cached_ + size > limit_) evict_oldest();
      const uint64_t age = next_age_++;
      by_age_.emplace(age, free_.emplace(size, Cached{ptr, age}));
      cached_ += size;
    } else {
      std::free(ptr);
    }
  }

  MemoryStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {allocated_, peak_, cached_};
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = allocated_;
  }
  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [size, block] : free_) std::free(block.ptr);
    free_.clear();
    by_age_.clear();
    cached_ = 0;
  }
  void set_limit(std::size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      limit_ = bytes;
    }
    empty_cache();
  }

 private:
  // Multiple of 64 (aligned_alloc's rule); large blocks to whole pages so sizes repeat.
  static std::size_t round_up(std::size_t n) {
    if (n == 0) return 64;
    const std::size_t unit = n >= kCacheMin ? kPage : 64;
    return (n + unit - 1) / unit * unit;
  }

  // Called with mutex_ held and a block cached.
  void evict_oldest() {
    const auto oldest = by_age_.begin();
    const auto block = oldest->second;
    std::free(block->second.ptr);
    cached_ -= block->first;
    free_.erase(block);
    by_age_.erase(oldest);
  }

  struct Cached {
    void* ptr;
    uint64_t age;  // its key in by_age_
  };
  using FreeBySize = std::multimap<std::size_t, Cached>;

  std::mutex mutex_;
  FreeBySize free_;                                  // cached blocks by size, for reuse
  std::map<uint64_t, FreeBySize::iterator> by_age_;  // the same blocks, oldest free first, for eviction
  uint64_t next_age_ = 0;
  std::unordered_map<void*, std::size_t> sizes_;
  std::size_t allocated_ = 0, peak_ = 0, cached_ = 0;
  std::size_t limit_ = std::size_t(1) << 30;
};

// Never destroyed: tensors in static storage may be freed after main returns.
CpuAllocator& cpu_allocator() {
  static CpuAllocator* allocator = new CpuAllocator();
  return *allocator;
}
Allocator* g_allocators[2] = {nullptr, nullptr};  // CPU: cpu_allocator() unless replaced

void cpu_copy_bytes(void* dst, Device, const void* src, Device, std::size_t nbytes, bool) {
  if (nbytes) std::memcpy(dst, src, nbytes);
}
CopyBytesFn g_copy_fns[2] = {&cpu_copy_bytes, nullptr};

}  // namespace

Allocator& allocator_for(DeviceType type) {
  Allocator* a = find_allocator(type);
  if (a == nullptr && type != DeviceType::CPU) {
    // A device tensor before any op ran (e.g. randn(..., cuda) first thing in main): the backends
    // register their allocators in init(), which the dispatcher otherwise calls on the first op.
    init();
    a = find_allocator(type);
  }
  MG_CHECK(a != nullptr, DeviceError, "allocator: no allocator for device ",
           Device{type, 0}.str(), "; this build of mixgrad has no CUDA support",
           "\n  hint: configure with -DMG_WITH_CUDA=ON on a machine with nvcc");
  return *a;
}

MemoryStats cpu_memory_stats() { return cpu_allocator().stats(); }
void reset_cpu_peak_memory() { cpu_allocator().reset_peak(); }
void empty_cpu_cache() { cpu_allocator().empty_cache(); }
void set_cpu_cache_limit(std::size_t bytes) { cpu_allocator().set_limit(bytes); }

Allocator* find_allocator(DeviceType type) {
  Allocator* a = g_allocators[int(type)];
  return a == nullptr && type == DeviceType::CPU ? &cpu_allocator() : a;
}

void set_allocator(DeviceType type, Allocator* allocator) { g_allocators[int(type)] = allocator; }

void set_copy_bytes_fn(DeviceType type, CopyBytesFn fn) { g_copy_fns[int(type)] = fn; }

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device,
                std::size_t nbytes, bool non_blocking) {
  // Any copy touching a CUDA device goes through the CUDA backend's function.
  const DeviceType t = dst_device.is_cuda() || src_device.is_cuda() ? DeviceType::CUDA : DeviceType::CPU;
  CopyBytesFn fn = g_copy_fns[int(t)];
  MG_CHECK(fn != nullptr, DeviceError, "copy: cannot copy from ", src_device.str(), " to ",
           dst_device.str(), "; this build of mixgrad has no CUDA support");
  fn(dst, dst_device, src, src_device, nbytes, non_blocking);
}

Storage::Storage(std::size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), allocator_(&allocator_for(device.type)) {
  data_ = allocator_->allocate(nbytes, device);
}

Storage::Storage(std::size_t nbytes, Device device, Allocator& allocator)
    : nbytes_(nbytes), device_(device), allocator_(&allocator) {
  data_ = allocator_->allocate(nbytes, device);
}

Storage::Storage(void* data, std::size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  // A destructor must not throw. After a sticky CUDA error (an illegal address) every event query
  // fails, so freeing a block with pending stream uses would throw here, during the unwinding from
  // the failing op, and std::terminate would replace the CudaError the user should see. Such a
  // block is leaked instead (the device context is lost anyway), and the first failure is reported.
  try {
    if (allocator_) {
      allocator_->deallocate(data_, device_);
    } else if (deleter_) {
      deleter_(data_);
    }
  } catch (const std::exception& e) {
    static std::atomic<bool> reported{false};
    if (!reported.exchange(true)) {
      std::fprintf(stderr, "mixgrad: freeing %zu bytes on %s failed, the memory is leaked: %s\n", nbytes_,
                   device_.str().c_str(), e.what());
    }
  }
}

}  // namespace mg
