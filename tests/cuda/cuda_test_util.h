// Helpers of the CUDA tests: the device the [gpu] tests run on, and a check that a test left no
// CUDA error behind (a sticky or pending error would poison every following test).
#pragma once
#include <catch2/catch.hpp>

#include <memory>

#include "core/storage.h"
#include "core/tensor.h"
#include "cuda/cuda.h"

namespace mg::test {

inline Device gpu() { return Device::cuda(0); }

// `x` on the GPU with its layout kept (x.to(gpu()) makes a view dense): the whole storage is copied
// and the same view (shape, strides, offset) taken of the copy, so strided kernels see strides.
inline Tensor to_gpu_keep_layout(const Tensor& x) {
  if (x.is_contiguous() && x.offset() == 0) return x.to(gpu());
  const Storage& s = x.storage();
  auto copy = std::make_shared<Storage>(s.nbytes(), gpu());
  copy_bytes(copy->data(), gpu(), s.data(), s.device(), s.nbytes());
  return make_tensor(copy, x.shape(), x.strides(), x.offset(), x.dtype());
}

// Call at the end of every [gpu] test case.
inline void require_no_pending_cuda_error() {
  cuda::synchronize();
  REQUIRE(cuda::take_pending_error() == "");
}

}  // namespace mg::test
