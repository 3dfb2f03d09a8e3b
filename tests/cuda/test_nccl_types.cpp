// The dtype and op mapping onto NCCL's enums (cuda/host/nccl_types.h), checked in every build;
// cuda/nccl_comm.cpp static_asserts the same numbers against nccl.h where NCCL is built.
#include <catch2/catch.hpp>

#include "core/error.h"
#include "cuda/host/nccl_types.h"
#include "cuda/nccl_comm.h"

using namespace mg;
using namespace mg::cuda;

TEST_CASE("NCCL dtype codes: reductions take the six numeric dtypes, copies take every dtype", "[cuda]") {
  // ncclFloat64 8, ncclFloat32 7, ncclFloat16 6, ncclBfloat16 9, ncclInt64 4, ncclInt32 2, ncclUint8 1.
  CHECK(nccl_dtype_code(DType::F64, true) == 8);
  CHECK(nccl_dtype_code(DType::F32, true) == 7);
  CHECK(nccl_dtype_code(DType::F16, true) == 6);
  CHECK(nccl_dtype_code(DType::BF16, true) == 9);
  CHECK(nccl_dtype_code(DType::I64, true) == 4);
  CHECK(nccl_dtype_code(DType::I32, true) == 2);
  CHECK(nccl_dtype_code(DType::U8, true) == -1);
  CHECK(nccl_dtype_code(DType::Bool, true) == -1);
  CHECK(nccl_dtype_code(DType::U8, false) == 1);
  CHECK(nccl_dtype_code(DType::Bool, false) == 1);
  CHECK(nccl_dtype_code(DType::BF16, false) == 9);
}

TEST_CASE("NCCL op codes: avg is ncclAvg for floating dtypes and refused for integers", "[cuda]") {
  // ncclSum 0, ncclMax 2, ncclMin 3, ncclAvg 4 (ncclProd 1 is not used).
  CHECK(nccl_op_code(NcclRedOp::Sum, DType::F16) == 0);
  CHECK(nccl_op_code(NcclRedOp::Max, DType::I64) == 2);
  CHECK(nccl_op_code(NcclRedOp::Min, DType::BF16) == 3);
  CHECK(nccl_op_code(NcclRedOp::Avg, DType::F32) == 4);
  CHECK(nccl_op_code(NcclRedOp::Avg, DType::BF16) == 4);
  CHECK(nccl_op_code(NcclRedOp::Avg, DType::I64) == -1);
  CHECK(nccl_op_code(NcclRedOp::Avg, DType::I32) == -1);
  CHECK(std::string(nccl_red_op_name(NcclRedOp::Avg)) == "avg");
}

TEST_CASE("NCCL availability is reported, and without it every entry point says why", "[cuda]") {
  if (nccl_built()) {
    CHECK(nccl_version() >= 21000);  // NCCL 2.10 or newer (2.x.y is 2xxyy from 2.9 on)
    CHECK(nccl_unavailable_reason() == unavailable_reason());  // only the device can be missing
    return;
  }
  CHECK(nccl_version() == 0);
  const std::string why = nccl_unavailable_reason();
  CHECK_THAT(why, Catch::Contains(built_with_cuda() ? "built without NCCL" : "built without the CUDA backend"));
  try {
    (void)nccl_unique_id();
    FAIL("nccl_unique_id did not throw");
  } catch (const DeviceError& e) {
    CHECK_THAT(e.what(), Catch::StartsWith("nccl_unique_id: NCCL is not available: ") && Catch::Contains("hint: use the gloo backend"));
  }
  CHECK_THROWS_AS(NcclComm(NcclUniqueId{}, 1, 0, 0), DeviceError);
}
