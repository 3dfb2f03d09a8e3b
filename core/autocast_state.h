// Thread-local autocast *state* (DESIGN §1: core holds the state, amp/ the Autocast guard and the
// dispatcher applies it). Nothing in core or ops changes this state; amp::Autocast does.
#pragma once
#include "mixgrad/core/dtype.h"

namespace mg {

struct AutocastState {
  bool enabled = false;
  DType dtype = DType::F16;  // the "lower" dtype: f16 or bf16
  bool cache_enabled = true;
  int depth = 0;             // nesting depth of autocast regions on this thread
};

// The calling thread's state (mutable).
AutocastState& autocast_state();

// Turns autocast off on this thread for a scope and restores it, also when an exception unwinds.
// The backward engine runs under it (backward ops run in the dtypes the forward chose, never
// re-cast), and so does a user-defined function's forward (its inputs were cast once on entry).
class AutocastOffGuard {
 public:
  AutocastOffGuard() : prev_(autocast_state().enabled) { autocast_state().enabled = false; }
  ~AutocastOffGuard() { autocast_state().enabled = prev_; }
  AutocastOffGuard(const AutocastOffGuard&) = delete;
  AutocastOffGuard& operator=(const AutocastOffGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace mg
