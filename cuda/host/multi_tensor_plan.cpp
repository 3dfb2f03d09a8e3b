// The multi-tensor launch plan (cuda/host/multi_tensor_plan.h).
#include "mixgrad/cuda/host/multi_tensor_plan.h"

#include "mixgrad/core/error.h"

namespace mg::cuda {

MultiTensorPlan plan_multi_tensor(const std::vector<int64_t>& numels, const MultiTensorPlanOptions& o) {
  MG_CHECK(o.chunk_size > 0 && o.max_tensors > 0 && o.max_blocks > 0, Error,
           "plan_multi_tensor: chunk_size, max_tensors and max_blocks must be positive, got ", o.chunk_size, ", ",
           o.max_tensors, ", ", o.max_blocks);
  MultiTensorPlan plan;
  plan.tensor_first_chunk.assign(numels.size(), 0);
  plan.tensor_num_chunks.assign(numels.size(), 0);
  MultiTensorLaunch cur;
  auto flush = [&] {
    if (cur.blocks.empty()) return;
    const int64_t next = cur.first_chunk + int64_t(cur.blocks.size());
    plan.launches.push_back(std::move(cur));
    cur = MultiTensorLaunch{};
    cur.first_chunk = next;
  };
  for (std::size_t t = 0; t < numels.size(); ++t) {
    MG_CHECK(numels[t] >= 0, Error, "plan_multi_tensor: tensor ", t, " has ", numels[t], " elements");
    const int64_t chunks = (numels[t] + o.chunk_size - 1) / o.chunk_size;
    plan.tensor_first_chunk[t] = plan.num_chunks;
    plan.tensor_num_chunks[t] = chunks;
    plan.num_chunks += chunks;
    for (int64_t c = 0; c < chunks; ++c) {
      if (cur.blocks.empty() || cur.tensors.back() != int(t)) {
        if (int(cur.tensors.size()) == o.max_tensors) flush();
        cur.tensors.push_back(int(t));
      }
      cur.blocks.push_back({int(cur.tensors.size()) - 1, c});
      if (int(cur.blocks.size()) == o.max_blocks) {
        // The tensor continues in the next launch (if it has chunks left), in slot 0 there.
        flush();
      }
    }
  }
  flush();
  return plan;
}

}  // namespace mg::cuda
