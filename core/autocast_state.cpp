#include "mixgrad/core/autocast_state.h"

namespace mg {

AutocastState& autocast_state(DeviceType device) {
  // Indexed by DeviceType (CPU, CUDA). Outside any region the dtype is the device's default, as
  // PyTorch's get_autocast_dtype: bf16 on the CPU, f16 on CUDA (amp::default_autocast_dtype reads it).
  thread_local AutocastState states[2] = {default_autocast_state(DeviceType::CPU),
                                          default_autocast_state(DeviceType::CUDA)};
  return states[device == DeviceType::CUDA ? 1 : 0];
}

AutocastState default_autocast_state(DeviceType device) {
  AutocastState s;
  s.dtype = device == DeviceType::CUDA ? DType::F16 : DType::BF16;
  return s;
}

}  // namespace mg
