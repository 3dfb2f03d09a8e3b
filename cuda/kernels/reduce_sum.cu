// CUDA kernels of sum, mean and prod (cuda/kernels/reduce.cuh over cuda/host/reducers.h), and
// register_reduce_kernels(), which registers every reduction. Accumulation: f32 for
// f16/bf16/f32, f64 for f64, i64 for integers and bool (whose sum and prod are i64).
#include "mixgrad/cuda/kernels/reduce.cuh"
#include "mixgrad/ops/kernel_registry.h"

namespace mg::cuda {

void register_reduce_minmax_kernels();
void register_reduce_stats_kernels();
void register_cumsum_kernels();

namespace {

// Output of sum and prod: the input's dtype for floats, i64 for integers and bool.
template <typename T>
using int_widened_t = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, T, int64_t>;

// out[0] [kept] = Σ x over a.dims
template <typename T>
void sum_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using O = int_widened_t<T>;
  launch_reduce<T>(in[0], a.dims, SumOp<T, O>{out[0].data<O>(), false});
}

// out[0] [kept] = Σ x / N (NaN for N = 0, as the CPU)
template <typename T>
void mean_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  launch_reduce<T>(in[0], a.dims, SumOp<T, T>{out[0].data<T>(), true});
}

// out[0] [kept] = Π x over a.dims (1 for an empty product)
template <typename T>
void prod_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using O = int_widened_t<T>;
  launch_reduce<T>(in[0], a.dims, ProdOp<T, O>{out[0].data<O>()});
}

}  // namespace

void register_reduce_kernels() {
#define MG_REG_SUM_PROD(E, n, T)                                            \
  register_kernel(OpId::sum, DeviceType::CUDA, DType::E, sum_kernel<T>);   \
  register_kernel(OpId::prod, DeviceType::CUDA, DType::E, prod_kernel<T>);
  MG_FORALL_DTYPES(MG_REG_SUM_PROD)
#undef MG_REG_SUM_PROD
  register_kernel(OpId::mean, DeviceType::CUDA, DType::F64, mean_kernel<double>);
  register_kernel(OpId::mean, DeviceType::CUDA, DType::F32, mean_kernel<float>);
  register_kernel(OpId::mean, DeviceType::CUDA, DType::F16, mean_kernel<Half>);
  register_kernel(OpId::mean, DeviceType::CUDA, DType::BF16, mean_kernel<BFloat16>);
  register_reduce_minmax_kernels();
  register_reduce_stats_kernels();
  register_cumsum_kernels();
}

}  // namespace mg::cuda
