// The launch plan of the CUDA multi-tensor apply (cuda/multi_tensor_apply.cuh, DESIGN §5): plain
// C++ so the CPU tests check the exact cut the kernels run (tests/cuda/test_multi_tensor_plan.cpp).
//
// Decision: tensors are cut into chunks of `chunk_size` elements, tensor by tensor, and every
// chunk gets a global index (its position in that order). A launch carries at most `max_tensors`
// tensor addresses and `max_blocks` chunks (one block per chunk), the limits of a kernel's
// parameter block; a tensor whose chunks do not fit is continued in the next launch. The cut
// depends only on the sizes, never on the device, so per-chunk partial sums written at their
// global index and combined in that order give the same bits on every run (numerics.md).
//
//   const MultiTensorPlan plan = plan_multi_tensor({1000, 70000, 0, 5}, {});
//   for (const MultiTensorLaunch& l : plan.launches) { /* pack l.tensors, launch l.blocks.size() blocks */ }
#pragma once
#include <cstdint>
#include <vector>

namespace mg::cuda {

struct MultiTensorPlanOptions {
  int64_t chunk_size = 65536;  // elements per chunk (a multiple of every vector width)
  int max_tensors = 24;        // tensor addresses per launch (6 lists x 24 pointers fit in 4 KiB: kMtaMaxTensors)
  int max_blocks = 320;        // chunks (blocks) per launch
};

// One block of a launch: chunk `chunk` (elements [chunk * chunk_size, ...)) of the launch's
// tensor slot `slot`.
struct MultiTensorBlock {
  int slot = 0;
  int64_t chunk = 0;
};

struct MultiTensorLaunch {
  std::vector<int> tensors;               // slot -> index into the planned list of tensors
  std::vector<MultiTensorBlock> blocks;   // one per CUDA block
  int64_t first_chunk = 0;                // global index of blocks[0]; block b is first_chunk + b
};

struct MultiTensorPlan {
  std::vector<MultiTensorLaunch> launches;
  int64_t num_chunks = 0;                 // chunks of all tensors (the size of a partials buffer)
  std::vector<int64_t> tensor_first_chunk;  // global index of each tensor's first chunk
  std::vector<int64_t> tensor_num_chunks;   // chunks of each tensor (0 for an empty tensor)
};

// The plan for tensors of `numels` elements (empty tensors get no chunk). Throws mg::Error when an
// option is not positive.
MultiTensorPlan plan_multi_tensor(const std::vector<int64_t>& numels, const MultiTensorPlanOptions& options);

}  // namespace mg::cuda
