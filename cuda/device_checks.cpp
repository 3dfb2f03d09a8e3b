// Report slots of the deferred value checks (cuda/device_checks.h). The report is pinned host
// memory mapped into the device, so a check kernel writes it without a copy and the host reads it
// after any wait at the cost of a few loads; the claim word is device memory (device atomics on
// host memory are not portable across interconnects). Each device also gets a private
// non-blocking stream, used only to zero the claim word (at allocation and to re-arm it after a
// raise): it never waits for, nor is waited for by, the user's streams or a graph capture.
#include "mixgrad/cuda/device_checks.h"

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>

#include "mixgrad/core/error.h"
#include "mixgrad/cuda/capture.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/cuda.h"

namespace mg::cuda::detail {
namespace {

constexpr int kMaxDevices = 64;

struct Slot {
  std::atomic<DeviceCheckReport*> host{nullptr};  // null until the device's first check
  DeviceCheckSlot device{};                       // as the kernels address it
  cudaStream_t rearm = nullptr;                   // the private stream that zeroes the claim word
};
std::array<Slot, kMaxDevices> g_slots;
std::mutex g_slots_mutex;

}  // namespace

DeviceCheckSlot device_check_slot(int device) {
  MG_CHECK(device >= 0 && device < kMaxDevices, DeviceError, "cuda: device index ", device,
           " is beyond the ", kMaxDevices, " devices the value checks support");
  Slot& s = g_slots[std::size_t(device)];
  if (s.host.load(std::memory_order_acquire) != nullptr) return s.device;
  std::lock_guard<std::mutex> lock(g_slots_mutex);
  if (s.host.load(std::memory_order_relaxed) != nullptr) return s.device;
  DeviceGuard guard(device);
  // The first check may come inside a graph capture on this thread: none of this is work on the
  // capturing stream, and relaxed mode lets the allocations through.
  RelaxedCaptureMode relaxed;
  void* host = nullptr;
  MG_CUDA_CHECK(cudaHostAlloc(&host, sizeof(DeviceCheckReport), cudaHostAllocMapped | cudaHostAllocPortable));
  std::memset(host, 0, sizeof(DeviceCheckReport));
  void* report = nullptr;
  MG_CUDA_CHECK(cudaHostGetDevicePointer(&report, host, 0));
  void* claimed = nullptr;
  MG_CUDA_CHECK(cudaMalloc(&claimed, sizeof(unsigned int)));
  MG_CUDA_CHECK(cudaStreamCreateWithFlags(&s.rearm, cudaStreamNonBlocking));
  MG_CUDA_CHECK(cudaMemsetAsync(claimed, 0, sizeof(unsigned int), s.rearm));
  MG_CUDA_CHECK(cudaStreamSynchronize(s.rearm));  // zeroed before any kernel may claim it
  s.device = {static_cast<unsigned int*>(claimed), static_cast<DeviceCheckReport*>(report)};
  s.host.store(static_cast<DeviceCheckReport*>(host), std::memory_order_release);
  return s.device;
}

void raise_device_check(int device, const char* raised_at) {
  if (device < 0 || device >= kMaxDevices) return;
  Slot& s = g_slots[std::size_t(device)];
  DeviceCheckReport* host = s.host.load(std::memory_order_acquire);
  if (host == nullptr) return;  // no check has run on this device
  const std::optional<DeviceCheckReport> report = take_device_check_report(host);
  if (!report) return;
  // Re-arm the claim word and wait for it (4 bytes on the private stream, on the error path only):
  // the private stream is not ordered with the user's, so without the wait a check launched next
  // could still find the slot claimed and drop its error.
  std::string note;
  {
    DeviceGuard guard(device);
    RelaxedCaptureMode relaxed;  // another thread may be capturing; this stream is not part of it
    cudaError_t st = cudaMemsetAsync(s.device.claimed, 0, sizeof(unsigned int), s.rearm);
    if (st == cudaSuccess) st = cudaStreamSynchronize(s.rearm);
    if (st != cudaSuccess) {
      (void)cudaGetLastError();
      note = str_cat("\n  note: the device's check slot could not be re-armed (", cudaGetErrorName(st),
                     "): later index and target errors on cuda:", device, " may go unreported");
    }
  }
  const bool later = take_dropped_flag(host);
  throw IndexError(device_check_message(*report, device, raised_at, later) + note);
}

}  // namespace mg::cuda::detail
