// The hook through which a device backend fills factory outputs on its device: core/factory.cpp
// describes the fill (a FillSpec, core/fill_values.h) and calls the function registered for the
// output's device type; cuda/kernels/factory.cu registers the CUDA one from
// register_cuda_kernels().
// Decision: a per-DeviceType function pointer set once at init, the pattern of set_allocator and
// set_copy_bytes_fn (core/storage.h), rather than routing the factories through ops: core may not
// use ops (DESIGN §1), the factories have no autograd, cast policy or shape inference for the
// dispatcher to add, and one pointer keeps the whole backend surface in one place. A device with
// no registered function (none today) gets the values filled on the CPU and copied, which is
// slower but the same bits.
//
//   set_device_fill_fn(DeviceType::CUDA, &fill_cuda);   // cuda/kernels/factory.cu
#pragma once
#include "mixgrad/core/device.h"
#include "mixgrad/core/fill_values.h"
#include "mixgrad/core/tensor.h"

namespace mg {

// Fills the dense tensor `out` (on the backend's device) as `spec` says, on the device's current
// stream, without waiting for it. `out` has at least one element.
using DeviceFillFn = void (*)(Tensor& out, const FillSpec& spec);
void set_device_fill_fn(DeviceType type, DeviceFillFn fn);
// The registered function, or nullptr (always nullptr for the CPU: core fills CPU tensors itself).
DeviceFillFn device_fill_fn(DeviceType type);

}  // namespace mg
