// Checked CUDA calls (DESIGN §7): every runtime call goes through MG_CUDA_CHECK, which throws
// mg::CudaError naming the call, the status and the current device:
//
//   CUDA error: cudaMalloc(&p, bytes) returned cudaErrorMemoryAllocation (out of memory) on cuda:0
//
// Every kernel launch is followed by MG_CUDA_CHECK_LAUNCH(), which reads the launch status and,
// when MG_CUDA_SYNC=1 is set in the environment, synchronises so that a failing kernel is named
// at its launch (like CUDA_LAUNCH_BLOCKING). Internal to cuda/: it includes the CUDA runtime.
#pragma once
#include <cuda_runtime.h>

namespace mg::cuda::detail {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) throw_cuda_error(status, call, file, line);
}
// After a launch: the launch status, and with MG_CUDA_SYNC=1 the kernel's own outcome.
void check_launch(const char* kernel, const char* file, int line);
// True when MG_CUDA_SYNC=1 (read once).
bool sync_after_launch();
// Counts one host wait for the device (see mg::cuda::sync_count()).
void count_sync();

}  // namespace mg::cuda::detail

#define MG_CUDA_CHECK(call) ::mg::cuda::detail::check_cuda((call), #call, __FILE__, __LINE__)
// A status kept in a variable (checked after other handling): `name` is the call that returned it.
#define MG_CUDA_CHECK_NAMED(status, name) ::mg::cuda::detail::check_cuda((status), name, __FILE__, __LINE__)
#define MG_CUDA_CHECK_LAUNCH(kernel) ::mg::cuda::detail::check_launch(kernel, __FILE__, __LINE__)
