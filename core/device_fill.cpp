// The per-device-type table of factory fill functions (core/device_fill.h).
#include "mixgrad/core/device_fill.h"

namespace mg {
namespace {
DeviceFillFn g_fill_fns[2] = {nullptr, nullptr};  // indexed by DeviceType (CPU, CUDA)
}  // namespace

void set_device_fill_fn(DeviceType type, DeviceFillFn fn) { g_fill_fns[int(type)] = fn; }
DeviceFillFn device_fill_fn(DeviceType type) { return g_fill_fns[int(type)]; }

}  // namespace mg
