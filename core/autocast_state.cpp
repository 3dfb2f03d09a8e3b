#include "mixgrad/core/autocast_state.h"

namespace mg {

AutocastState& autocast_state() {
  thread_local AutocastState state;
  return state;
}

}  // namespace mg
