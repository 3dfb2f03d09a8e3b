// The CUDA backend's byte copy, registered as core's copy_bytes function for any copy that
// touches a CUDA device. Internal to cuda/.
#pragma once
#include <cstddef>

#include "mixgrad/core/device.h"

namespace mg::cuda {

void copy_bytes_cuda(void* dst, Device dst_device, const void* src, Device src_device, std::size_t nbytes,
                     bool non_blocking);

}  // namespace mg::cuda
