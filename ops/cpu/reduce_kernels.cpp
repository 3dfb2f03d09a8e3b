// CPU kernels of sum and mean. Accumulators: f32 for f16/bf16/f32, f64 for f64, i64 for integers
// and bool; the summation rule of core/cascade_sum.h (leaves of 128, 8 lanes when contiguous,
// pairwise above), applied by reduce_loop.
#include "mixgrad/ops/cpu/reduce_loop.h"
#include "mixgrad/ops/cpu/reducers.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/register.h"

namespace mg::cpu {
namespace {

template <typename T>
struct SumReducer {
  using Acc = acc_t<T>;  // f32 for f16/bf16/f32, f64 for f64, i64 for integers
  static constexpr bool kInOrderStrided = true;  // the strided run below is a plain in-order sum
  Acc init() const { return Acc(0); }
  Acc run(Acc acc, const T* p, int64_t n, int64_t stride, int64_t) const {
    if constexpr (std::is_integral_v<Acc>) {
      // Integers wrap around (two's complement, as PyTorch's) instead of overflowing (UB); their
      // sum is the same in any order, so no lanes.
      for (int64_t i = 0; i < n; ++i) acc = wrapping_add(acc, static_cast<Acc>(p[i * stride]));
      return acc;
    } else {
      if (stride != 1) {
        for (int64_t i = 0; i < n; ++i) acc += static_cast<Acc>(p[i * stride]);
        return acc;
      }
      // A contiguous leaf: 8 lanes (core/cascade_sum.h's lane_fold), then added to the leaf's total.
      return acc + lane_fold<Acc>(n, [p](int64_t i) { return static_cast<Acc>(p[i]); });
    }
  }
  Acc combine(Acc a, Acc b) const { return wrapping_add(a, b); }
};

template <typename T, typename O>
struct SumFinish : SumReducer<T> {
  O finish(typename SumReducer<T>::Acc acc, int64_t) const { return static_cast<O>(acc); }
};

template <typename T>
struct MeanReducer : SumReducer<T> {
  T finish(typename SumReducer<T>::Acc acc, int64_t count) const {
    return static_cast<T>(acc / static_cast<typename SumReducer<T>::Acc>(count));
  }
};

template <typename T>
void sum_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using O = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, T, int64_t>;
  reduce_loop<T>(in[0], a.dims, out[0].data<O>(), SumFinish<T, O>{});
}

template <typename T>
void mean_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  reduce_loop<T>(in[0], a.dims, out[0].data<T>(), MeanReducer<T>{});
}

}  // namespace

void register_reduce_kernels() {
#define MG_REG_SUM(E, n, T) register_kernel(OpId::sum, DeviceType::CPU, DType::E, sum_kernel<T>);
  MG_FORALL_DTYPES(MG_REG_SUM)
#undef MG_REG_SUM
  register_kernel(OpId::mean, DeviceType::CPU, DType::F64, mean_kernel<double>);
  register_kernel(OpId::mean, DeviceType::CPU, DType::F32, mean_kernel<float>);
  register_kernel(OpId::mean, DeviceType::CPU, DType::F16, mean_kernel<Half>);
  register_kernel(OpId::mean, DeviceType::CPU, DType::BF16, mean_kernel<BFloat16>);
  register_reduce_kernels_extra();
}

}  // namespace mg::cpu
