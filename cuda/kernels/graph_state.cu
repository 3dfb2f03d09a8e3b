// The device write of a generator's replay position (cuda/kernels/graph_state.h).
#include <cuda_runtime.h>

#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/kernels/graph_state.h"

namespace mg::cuda {
namespace {

__global__ void write_philox_base_kernel(int64_t* dst, uint64_t seed, uint64_t offset) {
  dst[0] = int64_t(seed);
  dst[1] = int64_t(offset);
}

}  // namespace

void write_philox_base(int64_t* dst, uint64_t seed, uint64_t offset, void* stream) {
  write_philox_base_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(dst, seed, offset);
  MG_CUDA_CHECK_LAUNCH("write_philox_base_kernel");
}

}  // namespace mg::cuda
