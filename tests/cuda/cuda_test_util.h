// Helpers of the CUDA tests: the device the [gpu] tests run on, and a check that a test left no
// CUDA error behind (a sticky or pending error would poison every following test).
#pragma once
#include <catch2/catch.hpp>

#include "cuda/cuda.h"

namespace mg::test {

inline Device gpu() { return Device::cuda(0); }

// Call at the end of every [gpu] test case.
inline void require_no_pending_cuda_error() {
  cuda::synchronize();
  REQUIRE(cuda::take_pending_error() == "");
}

}  // namespace mg::test
