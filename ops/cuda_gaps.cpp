// The table behind ops/cuda_gaps.h, generated from ops/cuda_gaps.def (one entry per line there).
// Decision: the dtypes of a line are bare DType names (F32, F16, ...) read under `using enum`, so
// the .def stays one short line per op.
#include "mixgrad/ops/cuda_gaps.h"

#include <algorithm>

namespace mg {

const std::vector<CudaGap>& cuda_gaps() {
  static const std::vector<CudaGap> gaps = [] {
    using enum DType;
    return std::vector<CudaGap>{
#define MG_CUDA_GAP(op, reason, ...) CudaGap{OpId::op, reason, {__VA_ARGS__}},
#include "mixgrad/ops/cuda_gaps.def"
#undef MG_CUDA_GAP
    };
  }();
  return gaps;
}

const CudaGap* find_cuda_gap(OpId op) {
  const std::vector<CudaGap>& gaps = cuda_gaps();
  const auto it = std::find_if(gaps.begin(), gaps.end(), [op](const CudaGap& g) { return g.op == op; });
  return it == gaps.end() ? nullptr : &*it;
}

const char* cuda_gap_reason(OpId op, DType dtype) {
  const CudaGap* gap = find_cuda_gap(op);
  if (!gap) return nullptr;
  const bool listed = std::find(gap->dtypes.begin(), gap->dtypes.end(), dtype) != gap->dtypes.end();
  return listed ? gap->reason : nullptr;
}

const char* cuda_gap_reason(OpId op) {
  const CudaGap* gap = find_cuda_gap(op);
  return gap ? gap->reason : nullptr;
}

std::string missing_kernel_message(OpId op, const std::string& device, DeviceType kernel_device, DType dtype,
                                   const char* reason) {
  const bool cuda = kernel_device == DeviceType::CUDA;
  std::string msg = std::string(op_name(op)) + ": no " + device + " kernel for " + dtype_name(dtype);
  if (cuda && reason) msg += std::string(" (a known gap of the CUDA backend: ") + reason + ")";
  if (cuda) msg += "\n  hint: the CUDA backend has no such kernel yet; compute this op on the CPU (.to(Device::cpu()))";
  return msg;
}

}  // namespace mg
