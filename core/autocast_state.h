// Thread-local autocast *state* (DESIGN §1: core holds the state, amp/ the Autocast guard and the
// dispatcher applies it). Nothing in core or ops changes this state; amp::Autocast does.
// Each device type has its own state, as in PyTorch: a CUDA region casts only ops whose inputs are
// on a CUDA device, a CPU region only CPU ops, and the two nest independently.
#pragma once
#include "mixgrad/core/device.h"
#include "mixgrad/core/dtype.h"

namespace mg {

struct AutocastState {
  bool enabled = false;
  DType dtype = DType::F16;  // the "lower" dtype: f16 or bf16
  bool cache_enabled = true;
  int depth = 0;             // nesting depth of autocast regions of this device type on this thread
  // A replayed region's state (mg::checkpoint's recomputation, at depth 0 in backward): `dtype` was
  // chosen by a region, so a nested region without a dtype inherits it as it did the first time.
  bool dtype_from_region = false;
};

// The calling thread's state for ops on devices of type `device` (mutable).
AutocastState& autocast_state(DeviceType device = DeviceType::CPU);
// The state outside any region: disabled, with the device's default dtype (bf16 on the CPU, f16
// on CUDA, as PyTorch's get_autocast_dtype).
AutocastState default_autocast_state(DeviceType device);

// Turns autocast off on this thread for a scope and restores it, also when an exception unwinds.
// The backward engine runs under it (backward ops run in the dtypes the forward chose, never
// re-cast), and so does a user-defined function's forward (its inputs were cast once on entry).
// Both device types' regions are switched off.
class AutocastOffGuard {
 public:
  AutocastOffGuard()
      : prev_cpu_(autocast_state(DeviceType::CPU).enabled), prev_cuda_(autocast_state(DeviceType::CUDA).enabled) {
    autocast_state(DeviceType::CPU).enabled = false;
    autocast_state(DeviceType::CUDA).enabled = false;
  }
  ~AutocastOffGuard() {
    autocast_state(DeviceType::CPU).enabled = prev_cpu_;
    autocast_state(DeviceType::CUDA).enabled = prev_cuda_;
  }
  AutocastOffGuard(const AutocastOffGuard&) = delete;
  AutocastOffGuard& operator=(const AutocastOffGuard&) = delete;

 private:
  bool prev_cpu_, prev_cuda_;
};

}  // namespace mg
