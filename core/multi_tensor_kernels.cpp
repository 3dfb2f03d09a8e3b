// The per-device-type table of fused multi-tensor kernels (core/multi_tensor_kernels.h).
#include "mixgrad/core/multi_tensor_kernels.h"

namespace mg {
namespace {
const MultiTensorKernels* g_tables[2] = {nullptr, nullptr};  // indexed by DeviceType (CPU, CUDA)
}  // namespace

void set_multi_tensor_kernels(DeviceType type, const MultiTensorKernels* kernels) { g_tables[int(type)] = kernels; }
const MultiTensorKernels* multi_tensor_kernels(DeviceType type) { return g_tables[int(type)]; }

}  // namespace mg
