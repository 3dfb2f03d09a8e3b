// The host side of the deferred value checks (cuda/host/device_check_report.h): one report slot
// per device (a claim word in device memory, the report in host-mapped pinned memory), and the
// raise after each host wait. Internal to cuda/.
#pragma once
#include "mixgrad/cuda/host/device_check_report.h"

namespace mg::cuda::detail {

// `device`'s slot as its check kernels address it, allocated on first use and kept for the
// process: the claim word (4 bytes of device memory) and the report (64 bytes of pinned host
// memory mapped into the device).
DeviceCheckSlot device_check_slot(int device);

// After a host wait for `device` (called after the waits a user asks for: blocking copies to the
// host, stream, event and device synchronisation, MG_CUDA_SYNC=1's wait after a launch or a graph
// replay; not after the library's internal waits — the allocator's out-of-memory retry, cuDNN's
// benchmark, a pinned host-to-device copy): throws the device's complete report, if any, as
// IndexError; `raised_at` names the wait.
void raise_device_check(int device, const char* raised_at);

}  // namespace mg::cuda::detail
