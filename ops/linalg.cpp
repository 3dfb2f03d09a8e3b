// (being written) Linear algebra ops.
#include "ops/register.h"
namespace mg {
void register_linalg_rules() {}
}  // namespace mg
