// Byte copies that touch a CUDA device (core's copy_bytes hook): host to device, device to host,
// device to device (peer copies between GPUs). Each is queued on the current stream of the
// device involved. What the host waits for:
// - host -> device from pageable memory: nothing more than the driver's staging (cudaMemcpyAsync
//   returns once it has copied the host buffer aside), with or without non_blocking;
// - host -> device from pinned memory: non_blocking returns at once (an event on the pinned block
//   keeps it from being reused before the copy has read it); blocking waits for the copy (a
//   counted synchronisation), since the DMA reads the buffer after the call returns;
// - device -> host: waits (counted), so item(), to(cpu) and printing see finished results, except
//   non_blocking into pinned memory, which returns at once (event on the block; the caller
//   synchronises before reading);
// - device -> device: never.
// Decision: pinned-ness is the pinned cache's answer (contains/record_use). Memory page-locked
// outside mixgrad (cudaHostRegister, another library's cudaMallocHost) is not in the cache, and
// the driver does not stage it: cudaMemcpyAsync returns before the DMA has read it, so a host ->
// device copy from it waits for the copy (cudaPointerGetAttributes tells it from pageable memory).
#include "mixgrad/core/error.h"
#include "mixgrad/core/storage.h"
#include "mixgrad/cuda/capture.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/copy.h"
#include "mixgrad/cuda/cuda.h"
#include "mixgrad/cuda/device_checks.h"
#include "mixgrad/cuda/pinned_allocator.h"

namespace mg::cuda {
namespace {

// Whether host memory that is not in the pinned cache is page-locked all the same (registered or
// allocated by someone else): then an asynchronous copy really is asynchronous.
bool page_locked_elsewhere(const void* host) {
  cudaPointerAttributes a{};
  const cudaError_t st = cudaPointerGetAttributes(&a, host);
  if (st != cudaSuccess) {
    (void)cudaGetLastError();  // plain pageable memory on old drivers: not an error to keep
    return false;
  }
  return a.type == cudaMemoryTypeHost;
}

}  // namespace

void copy_bytes_cuda(void* dst, Device dst_device, const void* src, Device src_device, std::size_t nbytes,
                     bool non_blocking) {
  if (nbytes == 0) return;
  if (dst_device.is_cuda()) check_device(dst_device);
  if (src_device.is_cuda()) check_device(src_device);
  if ((src_device.is_cpu() || dst_device.is_cpu()) && detail::any_capture()) {
    // Refused on a thread that captures a CUDA graph, before any CUDA call: a wait cannot happen
    // there and a host copy would be frozen into the graph.
    const bool to_host = dst_device.is_cpu();
    const void* host = to_host ? dst : src;
    const bool waits = to_host ? !(non_blocking && pinned_cache().contains(host)) : (pinned_cache().contains(host) && !non_blocking);
    detail::check_host_wait(str_cat(waits ? "a blocking " : "an asynchronous ", to_host ? "device-to-host" : "host-to-device",
                                    " copy of ", nbytes, " bytes", to_host && waits ? " (item(), to(cpu), printing a device tensor)" : ""),
                            waits ? HostWait::Stream : HostWait::HostCopy, to_host ? src_device.index : dst_device.index);
  }
  if (src_device.is_cpu()) {  // host -> device
    DeviceGuard guard(dst_device.index);
    const Stream stream = current_stream(dst_device.index);
    auto s = static_cast<cudaStream_t>(stream.handle());
    const bool pinned = pinned_cache().contains(src);
    MG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, s));
    if (!pinned && !page_locked_elsewhere(src)) return;  // staged by the driver: the host buffer has been read
    if (non_blocking && pinned_cache().record_use(src, dst_device.index, stream.id())) return;
    detail::count_sync();
    MG_CUDA_CHECK(cudaStreamSynchronize(s));
    return;
  }
  DeviceGuard guard(src_device.index);
  const Stream src_stream = current_stream(src_device.index);
  auto stream = static_cast<cudaStream_t>(src_stream.handle());
  if (dst_device.is_cpu()) {  // device -> host: the caller reads dst next, so wait unless told not to
    MG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, stream));
    if (non_blocking && pinned_cache().record_use(dst, src_device.index, src_stream.id())) return;
    detail::count_sync();
    MG_CUDA_CHECK(cudaStreamSynchronize(stream));
    detail::raise_device_check(src_device.index, "a blocking device-to-host copy: item(), to(cpu), printing");
  } else if (dst_device == src_device) {
    MG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, stream));
  } else {
    // Between GPUs: the copy is queued on the source's stream. That stream first waits for the
    // destination's current stream (dst may be a block just freed there, which earlier work on
    // that stream may still read or write), and afterwards the destination's stream waits for the
    // copy before any later work there reads dst.
    cudaEvent_t dst_ready = nullptr;
    {
      DeviceGuard dst_guard(dst_device.index);
      MG_CUDA_CHECK(cudaEventCreateWithFlags(&dst_ready, cudaEventDisableTiming));
      MG_CUDA_CHECK(cudaEventRecord(dst_ready, static_cast<cudaStream_t>(current_stream(dst_device.index).handle())));
    }
    MG_CUDA_CHECK(cudaStreamWaitEvent(stream, dst_ready, 0));
    {
      DeviceGuard dst_guard(dst_device.index);
      MG_CUDA_CHECK(cudaEventDestroy(dst_ready));  // released once the wait is satisfied
    }
    MG_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, nbytes, stream));
    cudaEvent_t done = nullptr;
    MG_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    MG_CUDA_CHECK(cudaEventRecord(done, stream));
    {
      DeviceGuard dst_guard(dst_device.index);
      MG_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(current_stream(dst_device.index).handle()), done, 0));
    }
    MG_CUDA_CHECK(cudaEventDestroy(done));  // released once the wait is satisfied
  }
}

}  // namespace mg::cuda
