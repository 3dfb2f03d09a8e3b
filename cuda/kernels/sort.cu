// CUDA kernel of argsort (ops/sort.h): each element's rank in its row of the last dim, counted
// against every element of the row with the shared order (fn::sorts_before, ops/functors.h), is
// where its index goes. A stable total order makes the ranks a permutation, so the result is
// exactly the CPU's. n^2 comparisons per row (a warp reads the same element at once): fine for
// rows of classes or a sequence, slow for vocabulary-sized rows (docs/cuda.md).
#include <cuda_runtime.h>

#include "mixgrad/core/half.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/kernels/launch.h"
#include "mixgrad/ops/functors.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/ops.h"

namespace mg::cuda {
namespace {

template <typename T>
__global__ void argsort_rank_kernel(int64_t total, int64_t n, const T* x, int64_t* out, bool descending) {
  using K = fn::sort_key_t<T>;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = e / n, i = e % n;
    const T* r = x + row * n;
    const K v = static_cast<K>(r[i]);
    int64_t rank = 0;
    for (int64_t j = 0; j < n; ++j) rank += fn::sorts_before(static_cast<K>(r[j]), j, v, i, descending) ? 1 : 0;
    out[row * n + rank] = i;
  }
}

template <typename T>
void argsort_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  const Tensor x = contiguous(in[0]);
  const int64_t total = x.numel();
  if (total == 0) return;
  const int64_t n = x.dim() == 0 ? 1 : x.size(-1);
  const LaunchContext ctx(x.device());
  argsort_rank_kernel<T><<<ctx.blocks(total), kThreads, 0, ctx.stream>>>(
      total, n, static_cast<const T*>(x.data_ptr()), static_cast<int64_t*>(out[0].data_ptr()), a.mode == 1);
  MG_CUDA_CHECK_LAUNCH("argsort kernel");
}

}  // namespace

void register_sort_kernels() {
  register_kernel(OpId::argsort, DeviceType::CUDA, DType::F64, argsort_kernel<double>);
  register_kernel(OpId::argsort, DeviceType::CUDA, DType::F32, argsort_kernel<float>);
  register_kernel(OpId::argsort, DeviceType::CUDA, DType::F16, argsort_kernel<Half>);
  register_kernel(OpId::argsort, DeviceType::CUDA, DType::BF16, argsort_kernel<BFloat16>);
  register_kernel(OpId::argsort, DeviceType::CUDA, DType::I64, argsort_kernel<int64_t>);
  register_kernel(OpId::argsort, DeviceType::CUDA, DType::I32, argsort_kernel<int32_t>);
  register_kernel(OpId::argsort, DeviceType::CUDA, DType::U8, argsort_kernel<uint8_t>);
}

}  // namespace mg::cuda
