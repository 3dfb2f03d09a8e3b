// Registering one CUDA kernel template for a family of dtypes, named as in
// ops/elementwise_ops.def: K is a struct with a `template <typename T> static constexpr KernelFn
// fn` member (the kernel for storage type T). Internal to cuda/.
#pragma once
#include <cstdint>

#include "mixgrad/core/half.h"
#include "mixgrad/ops/kernel_registry.h"

namespace mg::cuda {

// f64 f32 f16 bf16
template <typename K>
void register_cuda_Floating(OpId op) {
  register_kernel(op, DeviceType::CUDA, DType::F64, K::template fn<double>);
  register_kernel(op, DeviceType::CUDA, DType::F32, K::template fn<float>);
  register_kernel(op, DeviceType::CUDA, DType::F16, K::template fn<Half>);
  register_kernel(op, DeviceType::CUDA, DType::BF16, K::template fn<BFloat16>);
}
// i64 i32 u8 (the shifts), and with bool (the other bitwise ops)
template <typename K>
void register_cuda_Integer(OpId op) {
  register_kernel(op, DeviceType::CUDA, DType::I64, K::template fn<int64_t>);
  register_kernel(op, DeviceType::CUDA, DType::I32, K::template fn<int32_t>);
  register_kernel(op, DeviceType::CUDA, DType::U8, K::template fn<uint8_t>);
}
template <typename K>
void register_cuda_Bits(OpId op) {
  register_cuda_Integer<K>(op);
  register_kernel(op, DeviceType::CUDA, DType::Bool, K::template fn<bool>);
}
// + i64 i32 u8
template <typename K>
void register_cuda_Numeric(OpId op) {
  register_cuda_Floating<K>(op);
  register_cuda_Integer<K>(op);
}
// Every dtype, bool included.
template <typename K>
void register_cuda_All(OpId op) {
  register_cuda_Numeric<K>(op);
  register_kernel(op, DeviceType::CUDA, DType::Bool, K::template fn<bool>);
}

}  // namespace mg::cuda
