// One line of cumprod, written once for the CPU kernel (ops/cpu/cumprod_kernels.cpp) and the CUDA
// kernel (cuda/kernels/cumprod.cu): the running product in order, in opmath (f32 for f16/bf16,
// f64 for f64), each output rounded once; integers and bool multiply in i64 and wrap, as
// PyTorch's. A sequential product of n terms is within about n rounding errors of the exact one
// (a product has no cancellation).
#pragma once
#include <cstdint>
#include <type_traits>

#include "mixgrad/core/dtype.h"
#include "mixgrad/core/macros.h"
#include "mixgrad/ops/functors.h"

namespace mg::fn {

// The output type: floats keep theirs, integers and bool widen to i64 (as cumsum).
template <typename T>
using cumprod_out_t = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, T, int64_t>;

template <typename T>
MG_HOST_DEVICE void cumprod_line(const T* x, cumprod_out_t<T>* out, int64_t n) {
  using O = cumprod_out_t<T>;
  if constexpr (std::is_floating_point_v<opmath_t<T>>) {
    opmath_t<T> acc = opmath_t<T>(1);
    for (int64_t i = 0; i < n; ++i) {
      acc = i == 0 ? static_cast<opmath_t<T>>(x[0]) : acc * static_cast<opmath_t<T>>(x[i]);  // x[0] as is: -0 stays
      out[i] = static_cast<O>(acc);
    }
  } else {
    int64_t acc = 1;
    for (int64_t i = 0; i < n; ++i) {
      acc = wrapping_mul(acc, static_cast<int64_t>(x[i]));
      out[i] = acc;
    }
  }
}

}  // namespace mg::fn
