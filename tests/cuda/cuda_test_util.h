// Helpers of the CUDA tests: the device the [gpu] tests run on, and a check that a test left no
// CUDA error behind (a sticky or pending error would poison every following test).
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/storage.h"
#include "core/tensor.h"
#include "cuda/cuda.h"
#include "test_util.h"

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

using CpuGpuFn = std::function<Tensor(const std::vector<Tensor>&)>;
struct CpuGpuResults {
  Tensor want, got;  // f on the CPU inputs, f on their GPU copies
};
// Runs f on CPU tensors and on copies of them on the GPU (layouts kept: views stay strided) and
// requires results of the same dtype and shape, the GPU's on the GPU.
inline CpuGpuResults run_on_cpu_and_gpu(const std::string& what, const std::vector<Tensor>& cpu_inputs,
                                        const CpuGpuFn& f) {
  std::vector<Tensor> gpu_inputs;
  for (const Tensor& t : cpu_inputs) gpu_inputs.push_back(to_gpu_keep_layout(t));
  CpuGpuResults r{f(cpu_inputs), f(gpu_inputs)};
  INFO(what << " " << dtype_name(r.want.dtype()) << " " << shape_str(r.want.shape()));
  REQUIRE(r.got.device() == gpu());
  REQUIRE(r.got.dtype() == r.want.dtype());
  REQUIRE(r.got.shape() == r.want.shape());
  return r;
}

// run_on_cpu_and_gpu, then |got - want| <= rel (|want| + scale) + floor element by element (rel = 0:
// bit for bit; NaN matches NaN).
inline void check_same_on_gpu(const std::string& what, const std::vector<Tensor>& cpu_inputs, const CpuGpuFn& f,
                              double rel = 0, double scale = 0, double floor = 0) {
  const CpuGpuResults r = run_on_cpu_and_gpu(what, cpu_inputs, f);
  const std::vector<double> g = values(r.got), w = values(r.want);
  for (std::size_t i = 0; i < w.size(); ++i) {
    const bool same = (std::isnan(g[i]) && std::isnan(w[i])) || g[i] == w[i] ||
                      (rel > 0 && std::abs(g[i] - w[i]) <= rel * (std::abs(w[i]) + scale) + floor);
    if (!same) FAIL(what << " element " << i << ": cuda " << g[i] << " cpu " << w[i]);
  }
}

// Call at the end of every [gpu] test case.
inline void require_no_pending_cuda_error() {
  cuda::synchronize();
  REQUIRE(cuda::take_pending_error() == "");
}

}  // namespace mg::test
