// The CUDA gaps of the op list, generated from ops/cuda_gaps.def: which (op, dtype) pairs
// deliberately have no CUDA kernel yet, and why. Decision: the gaps live in a companion .def read
// by one .cpp (not in op_list.def), so marking or filling a gap rebuilds one file, not the tree;
// the registry test keeps the list and the registered kernels in step in both directions.
//
//   if (const char* why = mg::cuda_gap_reason(mg::OpId::conv2d, mg::DType::F16)) std::puts(why);
#pragma once
#include <string>
#include <vector>

#include "mixgrad/core/device.h"
#include "mixgrad/core/dtype.h"
#include "mixgrad/ops/op.h"

namespace mg {

// One line of ops/cuda_gaps.def: `op` has no CUDA kernel for `dtypes`, because of `reason`.
struct CudaGap {
  OpId op;
  const char* reason;
  std::vector<DType> dtypes;
};

// Every marked gap, in the order of ops/cuda_gaps.def.
const std::vector<CudaGap>& cuda_gaps();
// The marked gap of `op`, or nullptr when the op list marks none.
const CudaGap* find_cuda_gap(OpId op);
// The reason marked for op's missing CUDA kernel of `dtype`; nullptr when that dtype is not marked.
const char* cuda_gap_reason(OpId op, DType dtype);
// The reason marked for any dtype of `op`; nullptr when the op has no marked gap.
const char* cuda_gap_reason(OpId op);

// The text of the NotImplementedError for a missing kernel of `op` on `device` (run on kernels of
// `kernel_device`) for `dtype`: "<op>: no <device> kernel for <dtype>", then on CUDA the marked
// reason "(a known gap of the CUDA backend: <reason>)" when `reason` is given, and a hint.
// The dispatcher throws it with reason = cuda_gap_reason(op, dtype).
std::string missing_kernel_message(OpId op, const std::string& device, DeviceType kernel_device, DType dtype,
                                   const char* reason);

}  // namespace mg
