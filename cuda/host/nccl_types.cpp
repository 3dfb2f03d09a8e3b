// The dtype and op mapping onto NCCL's enums (see nccl_types.h).
#include "mixgrad/cuda/host/nccl_types.h"

namespace mg::cuda {

const char* nccl_red_op_name(NcclRedOp op) {
  switch (op) {
    case NcclRedOp::Sum: return "sum";
    case NcclRedOp::Avg: return "avg";
    case NcclRedOp::Max: return "max";
    case NcclRedOp::Min: return "min";
  }
  return "?";
}

int nccl_dtype_code(DType dtype, bool reduction) {
  switch (dtype) {
    case DType::F64: return kNcclFloat64;
    case DType::F32: return kNcclFloat32;
    case DType::F16: return kNcclFloat16;
    case DType::BF16: return kNcclBfloat16;
    case DType::I64: return kNcclInt64;
    case DType::I32: return kNcclInt32;
    case DType::U8:
    case DType::Bool: return reduction ? -1 : kNcclUint8;  // a sum of bools is no bool
  }
  return -1;
}

int nccl_op_code(NcclRedOp op, DType dtype) {
  switch (op) {
    case NcclRedOp::Sum: return kNcclSum;
    case NcclRedOp::Max: return kNcclMax;
    case NcclRedOp::Min: return kNcclMin;
    case NcclRedOp::Avg: return is_floating(dtype) ? kNcclAvg : -1;  // an integer mean truncates
  }
  return -1;
}

}  // namespace mg::cuda
