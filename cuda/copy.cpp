// Byte copies that touch a CUDA device (core's copy_bytes hook): host to device, device to host,
// device to device (peer copies between GPUs). Each is queued on the current stream of the
// device involved; a copy to the host then waits for it (a counted synchronising call), so
// item(), to(cpu) and printing see finished results.
#include "mixgrad/core/error.h"
#include "mixgrad/core/storage.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/copy.h"
#include "mixgrad/cuda/cuda.h"

namespace mg::cuda {

void copy_bytes_cuda(void* dst, Device dst_device, const void* src, Device src_device, std::size_t nbytes) {
  if (nbytes == 0) return;
  if (dst_device.is_cuda()) check_device(dst_device);
  if (src_device.is_cuda()) check_device(src_device);
  if (src_device.is_cpu()) {  // host -> device: returns once the host buffer has been read
    DeviceGuard guard(dst_device.index);
    MG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice,
                                  static_cast<cudaStream_t>(current_stream(dst_device.index).handle())));
    return;
  }
  DeviceGuard guard(src_device.index);
  auto stream = static_cast<cudaStream_t>(current_stream(src_device.index).handle());
  if (dst_device.is_cpu()) {  // device -> host: the caller reads dst next, so wait
    MG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, stream));
    detail::count_sync();
    MG_CUDA_CHECK(cudaStreamSynchronize(stream));
  } else if (dst_device == src_device) {
    MG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, stream));
  } else {
    // Between GPUs: the copy is queued on the source's stream, so the destination's current stream
    // waits for it (through an event) before any later work there reads dst.
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
