// (being written) The remaining reductions.
#include "ops/reduce_common.h"
namespace mg {
void register_reduce_rules_extra() {}
}  // namespace mg
