// The CUDA backend's public API: devices, streams, events, synchronisation and the device
// allocator's statistics. It includes no CUDA header, so every program can use it; in a build
// without the backend (or on a machine without a driver or a GPU) is_available() is false,
// device_count() is 0, and anything that needs a device throws mg::DeviceError saying why.
//
//   if (mg::cuda::is_available()) {
//     mg::Tensor x = mg::randn({1024, 1024}, {.device = mg::Device::cuda()});
//     mg::cuda::synchronize();
//   } else {
//     std::cout << mg::cuda::unavailable_reason() << "\n";  // e.g. "no CUDA device found"
//   }
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "mixgrad/core/device.h"

namespace mg {
class Tensor;
}

namespace mg::cuda {

// True when libmixgrad was built with the CUDA backend (whether or not a GPU is present).
bool built_with_cuda();
// True when the backend is built, a driver is loaded and at least one device is visible.
bool is_available();
// Number of visible devices; 0 when unavailable (never throws).
int device_count();
// Why is_available() is false ("mixgrad was built without the CUDA backend", "no CUDA driver
// (...)", "no CUDA device found", ...); empty when it is true.
std::string unavailable_reason();
// Throws DeviceError unless `device` is a usable CUDA device: the reason when CUDA is
// unavailable, "cuda:7 is out of range: this machine has 1 CUDA device (cuda:0)" for a bad index.
void check_device(Device device);

// What benchmarks and logs print about a device.
struct DeviceProperties {
  std::string name;            // "NVIDIA H200"
  int major = 0, minor = 0;    // compute capability (9.0 for Hopper)
  int sm_count = 0;
  std::size_t total_memory = 0;
  int driver_version = 0;      // e.g. 13000 for CUDA 13.0
  int runtime_version = 0;
};
DeviceProperties device_properties(int device = -1);

// The calling thread's current device (0 until set_device is called).
int current_device();
void set_device(int index);
// Sets the current device for a scope and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_;
};

// A CUDA stream of one device. The default stream of each device is the legacy default stream
// (handle 0); Stream::create hands out one of a pool of 32 non-blocking streams per device, round
// robin (PyTorch's stream pool: never destroyed, so the 33rd call returns the first one again).
class Stream {
 public:
  Stream() = default;  // the default stream of device 0
  static Stream create(int device);
  static Stream default_stream(int device);
  // The opaque cudaStream_t; 0 for the default stream.
  void* handle() const { return handle_; }
  std::uintptr_t id() const { return reinterpret_cast<std::uintptr_t>(handle_); }
  int device() const { return device_; }
  // Waits until all work queued on this stream is done (a synchronising call).
  void synchronize() const;
  bool operator==(const Stream& o) const { return handle_ == o.handle_ && device_ == o.device_; }

 private:
  Stream(void* handle, int device) : handle_(handle), device_(device) {}
  void* handle_ = nullptr;
  int device_ = 0;
  friend struct StreamAccess;
};

// The calling thread's current stream on `device` (-1: the current device); every op launches
// its kernels there. The default stream until a StreamGuard says otherwise.
Stream current_stream(int device = -1);
// Makes `stream` (and its device) current for a scope and restores the previous ones.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_stream_;
  int previous_device_;
};

// A CUDA event: record on a stream, wait on the host or on another stream, time between two.
class Event {
 public:
  // `timing` = false makes a cheaper event that cannot be used with elapsed_ms.
  explicit Event(bool timing = true);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(const Stream& stream);
  void record() { record(current_stream()); }
  // Makes `stream` wait (on the device, the host does not block) for the recorded work.
  void block(const Stream& stream) const;
  bool query() const;       // true when the recorded work is done
  void synchronize() const; // host waits (a synchronising call)
  // Milliseconds between this event and `end`, both recorded and completed.
  float elapsed_ms(const Event& end) const;

 private:
  void* handle_ = nullptr;
  int device_ = 0;
  bool recorded_ = false;
};

// The CUDA error pending on this thread ("" when none), cleared by the call: tests check that
// nothing leaves an error behind to poison the next call.
std::string take_pending_error();

// Waits for all work on `device` (-1: the current device). A synchronising call.
void synchronize(int device = -1);

// Every call that makes the host wait for a device (stream/device/event synchronise, blocking
// device-to-host copies) adds one; a training step that must not synchronise is checked with it.
uint64_t sync_count();

// The caching device allocator's statistics for one device (-1: the current device). Sizes are
// the rounded block sizes the allocator hands out. See cuda/host/caching_allocator.h.
struct DeviceMemoryStats {
  std::size_t allocated = 0;       // bytes in blocks handed out now
  std::size_t reserved = 0;        // bytes obtained from cudaMalloc and not yet returned
  std::size_t peak_allocated = 0;  // since the start or reset_peak_memory()
  std::size_t peak_reserved = 0;
  uint64_t num_device_mallocs = 0; // cudaMalloc calls
  uint64_t num_device_frees = 0;   // cudaFree calls
  uint64_t num_allocs = 0;         // blocks handed out
  uint64_t num_frees = 0;          // blocks given back
  uint64_t num_ooms = 0;           // requests that failed after emptying the cache
  double fragmentation = 0;        // 1 - largest free cached block / all free cached bytes
};
DeviceMemoryStats memory_stats(int device = -1);
void reset_peak_memory(int device = -1);
// Tells the allocator that `t`'s memory is used by work queued on `stream` (not the stream it was
// allocated on): when the tensor is freed, its block is reused only after that work is done.
void record_stream(const Tensor& t, const Stream& stream);
// Returns every cached, entirely free segment of every device to the driver.
void empty_cache();
// False when the environment has MG_CUDA_CACHING_ALLOCATOR=0: every device tensor is then its own
// cudaMalloc of exactly its bytes, freed at once (for memory checkers: an access past a tensor's
// end leaves its allocation; see CachingAllocator's caching flag). Read once; any value other than
// 0 or 1 throws mg::Error naming it.
bool caching_allocator_enabled();

// The pinned (page-locked) host memory cache behind Tensor::pin_memory(), to(cpu, true) and the
// DataLoader's pin_memory option (cuda/host/pinned_cache.h has the policy). Sizes are the rounded
// block sizes (powers of two, at least 512 bytes). All zero in a build without the backend.
struct PinnedMemoryStats {
  std::size_t allocated = 0;       // bytes in pinned blocks held by tensors now
  std::size_t cached = 0;          // bytes in freed blocks ready for reuse
  std::size_t pending = 0;         // bytes in freed blocks still read or written by copies in flight
  std::size_t reserved = 0;        // bytes pinned now (cudaHostAlloc'ed, not yet cudaFreeHost'd)
  std::size_t peak_allocated = 0;  // since the start or reset_peak_pinned_memory()
  uint64_t num_host_allocs = 0;    // cudaHostAlloc calls
  uint64_t num_host_frees = 0;     // cudaFreeHost calls
  uint64_t num_allocs = 0;         // blocks handed out (reuses included)
  uint64_t num_frees = 0;          // blocks given back
  uint64_t num_ooms = 0;           // requests that failed after emptying the cache
};
PinnedMemoryStats pinned_memory_stats();
void reset_peak_pinned_memory();
// Returns every cached free pinned block to the system (cudaFreeHost). Blocks still waiting for
// their copies stay until those complete; never synchronises.
void empty_pinned_cache();

// The cuBLASLt library GEMMs run on, as "cuBLASLt 13.1.0 (/usr/local/cuda/lib64/libcublasLt.so.13,
// loaded on first use)". A CUDA build does not link cuBLASLt (mapping it costs every process about
// 210 MiB of resident memory at start); the first GEMM on a GPU, or this call, opens it. The
// emulator's: "cuBLASLt emulated on the CPU (cuda/emulator)"; without the CUDA backend: "none
// (built without CUDA)". Throws CudaError naming the reason when the library cannot be loaded.
std::string blas_library();

// Whether f32 GEMMs may use TF32 Tensor Cores (PyTorch's allow_tf32); false: strict f32.
void set_allow_tf32(bool allow);
bool allow_tf32();

}  // namespace mg::cuda
