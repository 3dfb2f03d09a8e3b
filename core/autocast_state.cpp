#include "mixgrad/core/autocast_state.h"

namespace mg {

AutocastState& autocast_state(DeviceType device) {
  thread_local AutocastState states[2];  // indexed by DeviceType (CPU, CUDA)
  return states[device == DeviceType::CUDA ? 1 : 0];
}

}  // namespace mg
