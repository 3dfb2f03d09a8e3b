// CUDA kernel of nonzero_from_prefix (ops/nonzero.h): one thread per position; where the prefix
// count steps, the position is unravelled over the sizes into row prefix - 1 of the output. No
// two positions write the same row, so the result is the CPU's exactly.
#include <cuda_runtime.h>

#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/kernels/launch.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/ops.h"

namespace mg::cuda {
namespace {

constexpr int kMaxDims = 16;

struct Sizes {
  int64_t v[kMaxDims];
};

__global__ void nonzero_from_prefix_kernel_impl(int64_t n, const int64_t* prefix, int64_t* out, int d, Sizes sizes) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t prev = i == 0 ? 0 : prefix[i - 1];
    if (prefix[i] == prev) continue;
    int64_t* row = out + (prefix[i] - 1) * d;
    int64_t rest = i;
    for (int j = d - 1; j >= 0; --j) {
      row[j] = rest % sizes.v[j];
      rest /= sizes.v[j];
    }
  }
}

void nonzero_from_prefix_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  const Tensor p = contiguous(in[0]);
  const int64_t n = p.size(0);
  const int d = int(a.ints.size()) - 1;
  MG_CHECK(d <= kMaxDims, NotImplementedError, "nonzero on CUDA: at most ", kMaxDims, " dims, got ", d);
  if (n == 0 || a.ints[0] == 0) return;
  Sizes sizes{};
  for (int j = 0; j < d; ++j) sizes.v[j] = a.ints[std::size_t(j) + 1];
  const LaunchContext ctx(p.device());
  nonzero_from_prefix_kernel_impl<<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(
      n, static_cast<const int64_t*>(p.data_ptr()), static_cast<int64_t*>(out[0].data_ptr()), d, sizes);
  MG_CUDA_CHECK_LAUNCH("nonzero_from_prefix kernel");
}

}  // namespace

void register_nonzero_kernels() {
  register_kernel(OpId::nonzero_from_prefix, DeviceType::CUDA, DType::I64, nonzero_from_prefix_kernel);
}

}  // namespace mg::cuda
