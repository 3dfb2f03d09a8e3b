// What the runtime asks before a call that a CUDA graph capture forbids (internal to cuda/): the
// process-wide capture registry (cuda/host/capture_registry.h has the rules) behind one check, and
// a scope that relaxes CUDA's own capture mode for a call that is safe during this thread's
// capture. It includes the CUDA runtime.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "mixgrad/cuda/host/capture_registry.h"

namespace mg::cuda::detail {

// Throws mg::CudaError naming `what` when it may not run now because a CUDA graph is being
// captured. Call it BEFORE the CUDA call (and before counting a synchronisation).
void check_host_wait(const std::string& what, HostWait kind, int device);
// Whether any thread is capturing a CUDA graph now (a cheap test before building a message).
bool any_capture();

// cudaStreamCaptureModeRelaxed for a scope: a graph pool's new segment is a cudaMalloc during the
// capture, which thread-local mode refuses but which is safe (the pool keeps the segment while the
// graph lives).
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode();
  ~RelaxedCaptureMode();
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode previous_;
};

}  // namespace mg::cuda::detail
