// CPU kernels of sum and mean. Accumulators: f32 for f16/bf16/f32, f64 for f64, i64 for integers
// and bool; dense runs are summed in blocks of 8 lanes (a two-level sum, far tighter than one
// running total).
#include "mixgrad/ops/cpu/reduce_loop.h"
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
    if (stride != 1) {
      for (int64_t i = 0; i < n; ++i) acc += static_cast<Acc>(p[i * stride]);
      return acc;
    }
    constexpr int64_t kBlock = 1024;
    for (int64_t b = 0; b < n; b += kBlock) {
      const int64_t e = std::min(n, b + kBlock);
      Acc lanes[8] = {};
      int64_t i = b;
      for (; i + 8 <= e; i += 8) {
        for (int k = 0; k < 8; ++k) lanes[k] += static_cast<Acc>(p[i + k]);
      }
      Acc block = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
      for (; i < e; ++i) block += static_cast<Acc>(p[i]);
      acc += block;
    }
    return acc;
  }
  Acc combine(Acc a, Acc b) const { return a + b; }
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
