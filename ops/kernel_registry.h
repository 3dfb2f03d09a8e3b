// Kernels by (op, device type, dtype). Backends register theirs explicitly from
// register_cpu_kernels() / register_cuda_kernels() (never from static initialisers, which static
// libraries drop). A missing kernel is a clear error, never a silent fallback.
#pragma once
#include "core/tensor.h"
#include "ops/op.h"

namespace mg {

// Writes `outputs` (already allocated with the inferred shapes and dtypes) from `inputs`.
using KernelFn = void (*)(const Tensors& inputs, Tensors& outputs, const OpAttrs& attrs);

void register_kernel(OpId op, DeviceType device, DType dtype, KernelFn fn);
// nullptr when none is registered.
KernelFn find_kernel(OpId op, DeviceType device, DType dtype);
bool has_kernel(OpId op, DeviceType device, DType dtype);

}  // namespace mg
