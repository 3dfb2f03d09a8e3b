// Kernels by (op, device type, dtype). Backends register theirs explicitly from
// register_cpu_kernels() / register_cuda_kernels() (never from static initialisers, which static
// libraries drop). A missing kernel is a clear error, never a silent fallback.
#pragma once
#include "mixgrad/core/tensor.h"
#include "mixgrad/ops/op.h"

namespace mg {

// Writes `outputs` (already allocated with the inferred shapes and dtypes) from `inputs`.
using KernelFn = void (*)(const Tensors& inputs, Tensors& outputs, const OpAttrs& attrs);

void register_kernel(OpId op, DeviceType device, DType dtype, KernelFn fn);
// nullptr when none is registered.
KernelFn find_kernel(OpId op, DeviceType device, DType dtype);
bool has_kernel(OpId op, DeviceType device, DType dtype);

// Registers K<T>::fn as the CPU kernel of `op` for f64, f32, f16 and bf16, where K is a template
// exposing a KernelFn: template <typename T> struct MyK { static constexpr KernelFn fn = my_kernel<T>; };
template <template <typename> class K>
void register_cpu_floating(OpId op) {
  register_kernel(op, DeviceType::CPU, DType::F64, K<double>::fn);
  register_kernel(op, DeviceType::CPU, DType::F32, K<float>::fn);
  register_kernel(op, DeviceType::CPU, DType::F16, K<Half>::fn);
  register_kernel(op, DeviceType::CPU, DType::BF16, K<BFloat16>::fn);
}

}  // namespace mg
