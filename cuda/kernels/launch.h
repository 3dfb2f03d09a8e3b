// What every CUDA launcher needs: the device made current for the launch, its current stream,
// and the grid size of a grid-stride loop (a few waves of the device's SMs). Internal to cuda/.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "mixgrad/core/device.h"
#include "mixgrad/cuda/cuda.h"
#include "mixgrad/cuda/index_math.h"

namespace mg::cuda {

inline constexpr int kThreads = 256;      // threads per block of the elementwise launchers
inline constexpr int kBlocksPerSm = 8;    // grid-stride waves: 8 blocks of 256 per SM

// Streaming multiprocessors of `device` (cached).
int sm_count(int device);

class LaunchContext {
 public:
  explicit LaunchContext(Device device)
      : guard_(device.index),
        stream(static_cast<cudaStream_t>(current_stream(device.index).handle())),
        max_blocks(int64_t(sm_count(device.index)) * kBlocksPerSm) {}
  // Blocks for `work` grid-stride items of kThreads threads.
  unsigned blocks(int64_t work) const { return unsigned(grid_stride_blocks(work, kThreads, max_blocks)); }

 private:
  DeviceGuard guard_;

 public:
  const cudaStream_t stream;
  const int64_t max_blocks;
};

}  // namespace mg::cuda
