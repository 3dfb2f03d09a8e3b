// (being written) CPU kernels of the remaining reductions.
#include "ops/register.h"
namespace mg::cpu {
void register_reduce_kernels_extra() {}
}  // namespace mg::cpu
