// The CUDA device allocator that Storage uses for cuda:N tensors: one CachingAllocator
// (cuda/host/caching_allocator.h, the policy) per device over cudaMalloc/cudaFree and CUDA events
// (this file, the raw operations). Blocks are tagged with the current stream at allocation.
#include <cstdlib>
#include <memory>
#include <string>
#include <mutex>
#include <vector>

#include "mixgrad/core/tensor.h"
#include "mixgrad/cuda/capture.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/cuda.h"
#include "mixgrad/cuda/device_allocator.h"
#include "mixgrad/cuda/host/caching_allocator.h"

namespace mg::cuda {
namespace {

// The raw operations of one device. cudaMalloc's out-of-memory status is returned as nullptr
// (the policy frees its cache and retries); every other failure throws.
class CudaDeviceMemory final : public DeviceMemory {
 public:
  explicit CudaDeviceMemory(int device) : device_(device) {}

  void* raw_alloc(std::size_t bytes) override {
    DeviceGuard guard(device_);
    // A graph pool's new segment during a capture: cudaMalloc is not part of the captured work
    // and the pool keeps the segment while the graph lives, so it is safe here.
    detail::RelaxedCaptureMode relaxed;
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, bytes);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    MG_CUDA_CHECK_NAMED(status, "cudaMalloc(&p, bytes)");
    return p;
  }
  void raw_free(void* p) override {
    DeviceGuard guard(device_);
    MG_CUDA_CHECK(cudaFree(p));
  }
  // A tensor used on a second stream and freed at process exit, after the runtime has unloaded,
  // must not throw from Storage's destructor: there is no work left to wait for, so the block's
  // "event" is kNoEvent, complete at once.
  static constexpr EventHandle kNoEvent = 0;
  static bool runtime_gone(cudaError_t status) {
    return status == cudaErrorCudartUnloading || status == cudaErrorContextIsDestroyed;
  }
  EventHandle record_event(StreamId stream) override {
    DeviceGuard guard(device_);
    cudaEvent_t e = nullptr;
    const cudaError_t created = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (runtime_gone(created)) {
      (void)cudaGetLastError();
      return kNoEvent;
    }
    MG_CUDA_CHECK_NAMED(created, "cudaEventCreateWithFlags");
    MG_CUDA_CHECK(cudaEventRecord(e, reinterpret_cast<cudaStream_t>(stream)));
    return reinterpret_cast<EventHandle>(e);
  }
  bool event_completed(EventHandle event) override {
    if (event == kNoEvent) return true;
    const cudaError_t status = cudaEventQuery(reinterpret_cast<cudaEvent_t>(event));
    if (status == cudaErrorNotReady) {
      if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
      return false;
    }
    MG_CUDA_CHECK_NAMED(status, "cudaEventQuery");
    return true;
  }
  void destroy_event(EventHandle event) override {
    if (event == kNoEvent) return;
    MG_CUDA_CHECK(cudaEventDestroy(reinterpret_cast<cudaEvent_t>(event)));
  }
  bool stream_is_capturing(StreamId stream) override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    const cudaError_t e = cudaStreamIsCapturing(reinterpret_cast<cudaStream_t>(stream), &status);
    if (e != cudaSuccess) {
      // The legacy default stream while another stream captures in global mode
      // (cudaErrorStreamCaptureImplicit): not part of a capture; the error is not sticky.
      (void)cudaGetLastError();
      return false;
    }
    return status == cudaStreamCaptureStatusActive;
  }
  void synchronize() override {
    DeviceGuard guard(device_);
    detail::check_host_wait("the caching allocator's synchronisation (out-of-memory retry, teardown)", HostWait::Device, device_);
    detail::count_sync();
    MG_CUDA_CHECK(cudaDeviceSynchronize());
  }

 private:
  int device_;
};

struct PerDevice {
  std::unique_ptr<CudaDeviceMemory> memory;
  std::unique_ptr<CachingAllocator> allocator;
};

// Made on first use of each device; never destroyed (tensors may be freed during static
// destruction, after a function-local static would be gone).
class DeviceAllocators {
 public:
  CachingAllocator& of(int device) {
    check_device(Device::cuda(device));
    std::lock_guard<std::mutex> lock(mutex_);
    if (devices_.size() < std::size_t(device_count())) devices_.resize(std::size_t(device_count()));
    PerDevice& d = devices_[std::size_t(device)];
    if (!d.allocator) {
      d.memory = std::make_unique<CudaDeviceMemory>(device);
      d.allocator = std::make_unique<CachingAllocator>(*d.memory, device, caching_allocator_enabled());
    }
    return *d.allocator;
  }
  // The allocators made so far.
  std::vector<CachingAllocator*> all() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<CachingAllocator*> r;
    for (PerDevice& d : devices_) {
      if (d.allocator) r.push_back(d.allocator.get());
    }
    return r;
  }

 private:
  std::mutex mutex_;
  std::vector<PerDevice> devices_;
};

DeviceAllocators& allocators() {
  static DeviceAllocators* a = new DeviceAllocators();
  return *a;
}

class CudaAllocator final : public Allocator {
 public:
  void* allocate(std::size_t nbytes, Device device) override {
    return allocators().of(device.index).allocate(nbytes, current_stream(device.index).id());
  }
  void deallocate(void* ptr, Device device) override { allocators().of(device.index).deallocate(ptr); }
};

int resolve(int device) { return device < 0 ? current_device() : device; }

}  // namespace

CachingAllocator& caching_allocator(int device) { return allocators().of(device); }

Allocator& device_allocator() {
  static CudaAllocator* a = new CudaAllocator();
  return *a;
}

void record_stream(const Tensor& t, const Stream& stream) {
  MG_CHECK(t.device().is_cuda() && t.device().index == stream.device(), DeviceError,
           "record_stream: the tensor is on ", t.device().str(), " but the stream on cuda:", stream.device());
  allocators().of(stream.device()).record_stream(t.storage().data(), stream.id());
}

DeviceMemoryStats memory_stats(int device) {
  const AllocatorStats s = allocators().of(resolve(device)).stats();
  DeviceMemoryStats r;
  r.allocated = s.allocated_bytes;
  r.reserved = s.reserved_bytes;
  r.peak_allocated = s.peak_allocated_bytes;
  r.peak_reserved = s.peak_reserved_bytes;
  r.num_device_mallocs = s.num_raw_allocs;
  r.num_device_frees = s.num_raw_frees;
  r.num_allocs = s.num_allocs;
  r.num_frees = s.num_frees;
  r.num_ooms = s.num_ooms;
  r.fragmentation = s.fragmentation();
  return r;
}

void reset_peak_memory(int device) { allocators().of(resolve(device)).reset_peak(); }

void empty_cache() {
  for (CachingAllocator* a : allocators().all()) a->empty_cache();
}

bool caching_allocator_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("MG_CUDA_CACHING_ALLOCATOR");
    const std::string text = v == nullptr ? "" : v;
    MG_CHECK(text.empty() || text == "0" || text == "1", Error, "MG_CUDA_CACHING_ALLOCATOR=", text,
             ": expected 0 (every tensor its own cudaMalloc, for memory checkers) or 1 (the caching allocator, the default)");
    return text != "0";
  }();
  return enabled;
}

}  // namespace mg::cuda
