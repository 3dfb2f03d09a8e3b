// Thread-local autocast *state* (DESIGN §1: core holds the state, amp/ the Autocast guard and the
// dispatcher applies it). Nothing in core or ops changes this state; amp::Autocast does.
#pragma once
#include "core/dtype.h"

namespace mg {

struct AutocastState {
  bool enabled = false;
  DType dtype = DType::F16;  // the "lower" dtype: f16 or bf16
  bool cache_enabled = true;
  int depth = 0;             // nesting depth of autocast regions on this thread
};

// The calling thread's state (mutable).
AutocastState& autocast_state();

}  // namespace mg
