// The pinned host allocator: cudaHostAlloc'ed blocks cached by PinnedHostCache, events per
// asynchronous copy recorded on the copy's device and stream. Also the public statistics of
// cuda/cuda.h (pinned_memory_stats, reset_peak_pinned_memory, empty_pinned_cache).
// Decision: blocks are allocated with cudaHostAllocPortable, so a block pinned while one device was
// current is pinned for every device (a DataLoader thread pins on device 0; training may run on 1).
#include "mixgrad/cuda/pinned_allocator.h"

#include "mixgrad/core/error.h"
#include "mixgrad/cuda/capture.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/graph.h"
#include "mixgrad/cuda/cuda.h"

namespace mg::cuda {
namespace {

// The raw operations. A pinned tensor freed at process exit, after the CUDA runtime has unloaded,
// must not throw from Storage's destructor: there is no copy left in flight then, so a query
// answers "completed" and frees and destroys are skipped (the process is ending anyway).
class CudaHostMemory final : public HostMemory {
 public:
  static constexpr EventHandle kNoEvent = 0;
  static bool runtime_gone(cudaError_t status) {
    return status == cudaErrorCudartUnloading || status == cudaErrorContextIsDestroyed;
  }
  void* raw_alloc(std::size_t bytes) override {
    // On a thread that captures a CUDA graph, cudaHostAlloc would invalidate the capture with a
    // bare CUDA error: the registry's refusal instead, whatever the cache holds (a pinned output of
    // to(cpu, non_blocking) is allocated before its copy asks the registry).
    detail::check_host_wait(str_cat("an allocation of ", bytes,
                                    " bytes of pinned host memory (to(cpu, non_blocking), pin_memory(), empty_pinned())"),
                            HostWait::HostCopy, current_device());
    void* p = nullptr;
    const cudaError_t status = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    MG_CUDA_CHECK_NAMED(status, "cudaHostAlloc(&p, bytes, cudaHostAllocPortable)");
    return p;
  }
  void raw_free(void* p) override {
    const cudaError_t status = cudaFreeHost(p);
    if (runtime_gone(status)) {
      (void)cudaGetLastError();
      return;
    }
    MG_CUDA_CHECK_NAMED(status, "cudaFreeHost");
  }
  EventHandle record_event(int device, StreamId stream) override {
    DeviceGuard guard(device);
    cudaEvent_t e = nullptr;
    const cudaError_t created = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (runtime_gone(created)) {  // nothing runs any more: an event that is complete at once
      (void)cudaGetLastError();
      return kNoEvent;
    }
    MG_CUDA_CHECK_NAMED(created, "cudaEventCreateWithFlags");
    MG_CUDA_CHECK(cudaEventRecord(e, reinterpret_cast<cudaStream_t>(stream)));
    return reinterpret_cast<EventHandle>(e);
  }
  bool can_query_events() override { return !is_capturing(); }
  bool event_completed(EventHandle event) override {
    if (event == kNoEvent) return true;
    const cudaError_t status = cudaEventQuery(reinterpret_cast<cudaEvent_t>(event));
    if (status == cudaErrorNotReady) {
      if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
      return false;
    }
    if (runtime_gone(status)) {
      (void)cudaGetLastError();
      return true;
    }
    MG_CUDA_CHECK_NAMED(status, "cudaEventQuery");
    return true;
  }
  void destroy_event(EventHandle event) override {
    if (event == kNoEvent) return;
    const cudaError_t status = cudaEventDestroy(reinterpret_cast<cudaEvent_t>(event));
    if (runtime_gone(status)) {
      (void)cudaGetLastError();
      return;
    }
    MG_CUDA_CHECK_NAMED(status, "cudaEventDestroy");
  }
};

class CudaPinnedAllocator final : public Allocator {
 public:
  void* allocate(std::size_t nbytes, Device device) override {
    MG_ASSERT(device.is_cpu(), "pinned allocator asked for memory on ", device.str());
    MG_CHECK(is_available(), DeviceError,
             "pin_memory: pinned host memory needs a usable CUDA device: ", unavailable_reason(),
             "\n  hint: leave the memory pageable (no pin_memory) on a machine without a GPU");
    return pinned_cache().allocate(nbytes);
  }
  void deallocate(void* ptr, Device) override { pinned_cache().deallocate(ptr); }
};

}  // namespace

PinnedHostCache& pinned_cache() {
  static CudaHostMemory* memory = new CudaHostMemory();
  static PinnedHostCache* cache = new PinnedHostCache(*memory);
  return *cache;
}

Allocator& pinned_allocator() {
  static CudaPinnedAllocator* a = new CudaPinnedAllocator();
  return *a;
}

PinnedMemoryStats pinned_memory_stats() {
  const PinnedCacheStats s = pinned_cache().stats();
  PinnedMemoryStats r;
  r.allocated = s.allocated_bytes;
  r.cached = s.cached_bytes;
  r.pending = s.pending_bytes;
  r.reserved = s.reserved_bytes;
  r.peak_allocated = s.peak_allocated_bytes;
  r.num_host_allocs = s.num_raw_allocs;
  r.num_host_frees = s.num_raw_frees;
  r.num_allocs = s.num_allocs;
  r.num_frees = s.num_frees;
  r.num_ooms = s.num_ooms;
  return r;
}

void reset_peak_pinned_memory() { pinned_cache().reset_peak(); }
void empty_pinned_cache() { pinned_cache().empty_cache(); }

}  // namespace mg::cuda
