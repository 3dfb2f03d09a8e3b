// How mixgrad's dtypes and reduction ops map onto NCCL's enums, as plain host code built in
// every build, so the CPU tests check the mapping the NCCL communicator (cuda/nccl_comm.cpp)
// uses; that file static_asserts each code below against nccl.h.
// Decision: reductions take f64, f32, f16, bf16, i64 and i32 (NCCL's float16 and bfloat16 are
// reduced natively, in their own dtype); byte-moving collectives (broadcast, all_gather) take
// every dtype, bool and u8 as NCCL's uint8. Avg is ncclAvg for floating dtypes only.
//
//   int code = mg::cuda::nccl_dtype_code(mg::DType::BF16, /*reduction=*/true);  // 9 (ncclBfloat16)
#pragma once
#include "mixgrad/core/dtype.h"

namespace mg::cuda {

// The reductions a communicator runs (mg::distributed::ReduceOp maps onto it one to one).
enum class NcclRedOp { Sum, Avg, Max, Min };
const char* nccl_red_op_name(NcclRedOp op);  // "sum", "avg", "max", "min"

// ncclDataType_t values (nccl.h, NCCL 2.x).
inline constexpr int kNcclInt8 = 0, kNcclUint8 = 1, kNcclInt32 = 2, kNcclInt64 = 4, kNcclFloat16 = 6,
                     kNcclFloat32 = 7, kNcclFloat64 = 8, kNcclBfloat16 = 9;
// ncclRedOp_t values.
inline constexpr int kNcclSum = 0, kNcclMax = 2, kNcclMin = 3, kNcclAvg = 4;

// The ncclDataType_t for `dtype`, or -1 when NCCL cannot take it: for a reduction, f64 f32 f16
// bf16 i64 i32; for a copy (reduction = false), every dtype.
int nccl_dtype_code(DType dtype, bool reduction);
// The ncclRedOp_t for `op` on `dtype`, or -1 when refused (avg on an integer dtype).
int nccl_op_code(NcclRedOp op, DType dtype);

}  // namespace mg::cuda
