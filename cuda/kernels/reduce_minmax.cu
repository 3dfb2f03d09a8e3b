// CUDA kernels of amax, amin, max_dim, min_dim, argmax and argmin (cuda/kernels/reduce.cuh over
// cuda/host/reducers.h): the values are exact (no accumulation); NaN wins; the first index of the
// max (min) wins ties. Empty reductions never get here (the shared inference rejects them).
#include "mixgrad/cuda/kernels/reduce.cuh"
#include "mixgrad/ops/kernel_registry.h"

namespace mg::cuda {
namespace {

// out[0] [kept] = max (is_max) or min of x over a.dims
template <typename T, bool kMax>
void extremum_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  launch_reduce<T>(in[0], a.dims, ExtremumOp<T>{out[0].data<T>(), kMax});
}

// The dims of an op along attrs.dim: {dim}, none for a 0-d input.
std::vector<int64_t> dim_as_dims(const Tensor& x, const OpAttrs& a) {
  return x.dim() == 0 ? std::vector<int64_t>{} : std::vector<int64_t>{a.dim};
}

// out[0] values [kept] T, out[1] indices [kept] i64, along a.dim
template <typename T, bool kMax>
void max_dim_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  launch_reduce<T>(in[0], dim_as_dims(in[0], a), ArgOp<T>{out[0].data<T>(), out[1].data<int64_t>(), kMax});
}

// out[0] indices [kept] i64, along a.dim
template <typename T, bool kMax>
void arg_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  launch_reduce<T>(in[0], dim_as_dims(in[0], a), ArgOp<T>{nullptr, out[0].data<int64_t>(), kMax});
}

template <typename T>
void reg_ordered() {
  constexpr DType t = dtype_v<T>;
  register_kernel(OpId::amax, DeviceType::CUDA, t, extremum_kernel<T, true>);
  register_kernel(OpId::amin, DeviceType::CUDA, t, extremum_kernel<T, false>);
  register_kernel(OpId::max_dim, DeviceType::CUDA, t, max_dim_kernel<T, true>);
  register_kernel(OpId::min_dim, DeviceType::CUDA, t, max_dim_kernel<T, false>);
  register_kernel(OpId::argmax, DeviceType::CUDA, t, arg_kernel<T, true>);
  register_kernel(OpId::argmin, DeviceType::CUDA, t, arg_kernel<T, false>);
}

}  // namespace

void register_reduce_minmax_kernels() {
  // Floating and integer dtypes, as the CPU (no bool).
  reg_ordered<double>();
  reg_ordered<float>();
  reg_ordered<Half>();
  reg_ordered<BFloat16>();
  reg_ordered<int64_t>();
  reg_ordered<int32_t>();
  reg_ordered<uint8_t>();
}

}  // namespace mg::cuda
