// CPU kernel of argsort (ops/sort.h): each row of the last dim sorted by std::stable_sort with the
// shared order (fn::sorts_before, ops/functors.h), rows in parallel.
#include <algorithm>
#include <numeric>
#include <vector>

#include "mixgrad/core/parallel.h"
#include "mixgrad/ops/functors.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/register.h"

namespace mg::cpu {
namespace {

template <typename T>
void argsort_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using K = fn::sort_key_t<T>;
  const Tensor x = contiguous(in[0]);
  const int64_t n = x.dim() == 0 ? 1 : x.size(-1);
  if (x.numel() == 0) return;
  const int64_t rows = x.numel() / n;
  const bool descending = a.mode == 1;
  const T* px = x.data<T>();
  int64_t* po = out[0].data<int64_t>();  // dense: the dispatcher allocates it
  parallel_for(0, rows, std::max<int64_t>(1, 4096 / n), [&](int64_t r0, int64_t r1) {
    std::vector<K> keys(static_cast<std::size_t>(n));
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t j = 0; j < n; ++j) keys[std::size_t(j)] = static_cast<K>(px[r * n + j]);
      int64_t* idx = po + r * n;
      std::iota(idx, idx + n, int64_t(0));
      std::stable_sort(idx, idx + n, [&](int64_t i, int64_t j) {
        return fn::sorts_before(keys[std::size_t(i)], i, keys[std::size_t(j)], j, descending);
      });
    }
  });
}

}  // namespace

void register_sort_kernels() {
  register_kernel(OpId::argsort, DeviceType::CPU, DType::F64, argsort_kernel<double>);
  register_kernel(OpId::argsort, DeviceType::CPU, DType::F32, argsort_kernel<float>);
  register_kernel(OpId::argsort, DeviceType::CPU, DType::F16, argsort_kernel<Half>);
  register_kernel(OpId::argsort, DeviceType::CPU, DType::BF16, argsort_kernel<BFloat16>);
  register_kernel(OpId::argsort, DeviceType::CPU, DType::I64, argsort_kernel<int64_t>);
  register_kernel(OpId::argsort, DeviceType::CPU, DType::I32, argsort_kernel<int32_t>);
  register_kernel(OpId::argsort, DeviceType::CPU, DType::U8, argsort_kernel<uint8_t>);
}

}  // namespace mg::cpu
