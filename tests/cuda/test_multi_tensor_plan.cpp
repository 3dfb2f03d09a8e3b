// The CUDA multi-tensor apply's launch plan (cuda/host/multi_tensor_plan.h), on the CPU: every
// element of every tensor is covered by exactly one block, in tensor order; launches respect the
// tensor and block limits; a tensor split across launches continues where it stopped; global
// chunk indices count 0, 1, 2, ... and each tensor's first chunk and chunk count are right; empty
// tensors get nothing; bad options are errors.
#include <catch2/catch.hpp>

#include <vector>

#include "cuda/host/multi_tensor_plan.h"
#include "test_util.h"

using namespace mg;
using namespace mg::cuda;

namespace {

// Replays the plan as the kernel would and checks coverage and limits.
void check_plan(const std::vector<int64_t>& numels, const MultiTensorPlanOptions& o) {
  const MultiTensorPlan plan = plan_multi_tensor(numels, o);
  std::vector<std::vector<int>> hits(numels.size());
  for (std::size_t t = 0; t < numels.size(); ++t) hits[t].assign(std::size_t(numels[t]), 0);
  int64_t next_global = 0;
  int last_tensor = -1;
  int64_t last_chunk = -1;
  for (const MultiTensorLaunch& l : plan.launches) {
    REQUIRE(!l.blocks.empty());
    REQUIRE(int(l.tensors.size()) <= o.max_tensors);
    REQUIRE(int(l.blocks.size()) <= o.max_blocks);
    REQUIRE(l.first_chunk == next_global);
    for (std::size_t b = 0; b < l.blocks.size(); ++b) {
      const MultiTensorBlock& blk = l.blocks[b];
      REQUIRE(blk.slot >= 0);
      REQUIRE(blk.slot < int(l.tensors.size()));
      const int t = l.tensors[std::size_t(blk.slot)];
      // Blocks walk tensors in order, chunks in order within a tensor.
      if (t == last_tensor) REQUIRE(blk.chunk == last_chunk + 1);
      else REQUIRE((t > last_tensor && blk.chunk == 0));
      REQUIRE(plan.tensor_first_chunk[std::size_t(t)] + blk.chunk == l.first_chunk + int64_t(b));
      last_tensor = t;
      last_chunk = blk.chunk;
      const int64_t begin = blk.chunk * o.chunk_size;
      const int64_t end = std::min(begin + o.chunk_size, numels[std::size_t(t)]);
      REQUIRE(begin < end);
      for (int64_t i = begin; i < end; ++i) ++hits[std::size_t(t)][std::size_t(i)];
    }
    next_global += int64_t(l.blocks.size());
  }
  REQUIRE(plan.num_chunks == next_global);
  for (std::size_t t = 0; t < numels.size(); ++t) {
    REQUIRE(plan.tensor_num_chunks[t] == (numels[t] + o.chunk_size - 1) / o.chunk_size);
    for (int h : hits[t]) REQUIRE(h == 1);
  }
}

}  // namespace

TEST_CASE("multi-tensor plan covers every element once within the launch limits", "[cuda][plan]") {
  const MultiTensorPlanOptions small{.chunk_size = 4, .max_tensors = 3, .max_blocks = 5};
  check_plan({}, small);
  check_plan({0, 0}, small);
  check_plan({1}, small);
  check_plan({4, 5, 0, 3, 17, 1, 1, 1, 1, 8}, small);
  check_plan({40}, small);                     // one tensor over several launches
  check_plan({3, 3, 3, 3, 3, 3, 3}, small);    // the tensor limit cuts launches
  check_plan({65536 * 3 + 7, 10, 1000000}, {});  // the kernels' own options
}

TEST_CASE("multi-tensor plan numbers chunks globally and continues split tensors", "[cuda][plan]") {
  const MultiTensorPlan p = plan_multi_tensor({9, 0, 2}, {.chunk_size = 4, .max_tensors = 8, .max_blocks = 2});
  // Chunks: t0 {0, 1, 2}, t2 {0}; two blocks per launch.
  REQUIRE(p.num_chunks == 4);
  REQUIRE(p.tensor_first_chunk == std::vector<int64_t>{0, 3, 3});
  REQUIRE(p.tensor_num_chunks == std::vector<int64_t>{3, 0, 1});
  REQUIRE(p.launches.size() == 2);
  CHECK(p.launches[0].tensors == std::vector<int>{0});
  CHECK(p.launches[0].blocks[1].chunk == 1);
  CHECK(p.launches[1].tensors == std::vector<int>{0, 2});
  CHECK(p.launches[1].first_chunk == 2);
  CHECK(p.launches[1].blocks[0].slot == 0);
  CHECK(p.launches[1].blocks[0].chunk == 2);
  CHECK(p.launches[1].blocks[1].slot == 1);
  CHECK(p.launches[1].blocks[1].chunk == 0);
}

TEST_CASE("multi-tensor plan rejects bad options", "[cuda][plan]") {
  MG_REQUIRE_ERROR(plan_multi_tensor({4}, {.chunk_size = 0}), "plan_multi_tensor: chunk_size, max_tensors and max_blocks must be positive");
  MG_REQUIRE_ERROR(plan_multi_tensor({-1}, {}), "plan_multi_tensor: tensor 0 has -1 elements");
}
