// (being written) CPU GEMM kernels.
#include "ops/register.h"
namespace mg::cpu {
void register_linalg_kernels() {}
}  // namespace mg::cpu
