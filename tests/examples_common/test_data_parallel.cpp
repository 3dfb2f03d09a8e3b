// The examples' data sharding (examples/common/data_parallel.h) without processes: the training
// loaders DataParallel::loader_options builds for every rank of W are disjoint, cover the epoch's
// shuffle, and global step k holds exactly one process's step k; a loader state saved on W ranks
// resumes on W' ranks (reshard_loader_state) with the batches an uninterrupted run would see.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <set>
#include <vector>

#include "core/factory.h"
#include "data/loader.h"
#include "data/tensor_dataset.h"
#include "examples/common/data_parallel.h"

using namespace mg;
using mg::example::DataParallel;

namespace {

std::shared_ptr<const data::Dataset> dataset(int64_t n) {
  return std::make_shared<data::TensorDataset>(
      std::vector<std::pair<std::string, Tensor>>{{"input", arange(0, n, 1, {.dtype = DType::F32}).reshape({n, 1})}});
}

// One loader per rank of `world`, as the examples build them.
std::vector<std::unique_ptr<data::DataLoader>> rank_loaders(const std::shared_ptr<const data::Dataset>& ds, int world,
                                                            int64_t global_batch, uint64_t seed) {
  std::vector<std::unique_ptr<data::DataLoader>> loaders;
  for (int r = 0; r < world; ++r) {
    const DataParallel dp = DataParallel::sharding_only(r, world);
    loaders.push_back(std::make_unique<data::DataLoader>(ds, dp.loader_options(ds->size(), global_batch, seed)));
  }
  return loaders;
}

std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

TEST_CASE("examples data parallel: the ranks' shards are disjoint and global step k is one process's step k",
          "[examples][data]") {
  for (const int64_t n : {23, 96, 100, 257}) {
    for (const int world : {2, 3, 4}) {
      const int64_t global_batch = 12;  // splits over 2, 3 and 4 ranks
      INFO("N " << n << ", W " << world);
      const auto ds = dataset(n);
      const auto ranks = rank_loaders(ds, world, global_batch, 7);
      const data::DataLoader one(ds, DataParallel::sharding_only(0, 1).loader_options(n, global_batch, 7));
      // One process: the loader order of .shuffle = true, the examples' order before sharding.
      const data::DataLoader plain(ds, {.batch_size = global_batch, .shuffle = true, .drop_last = true, .seed = 7});
      REQUIRE(one.num_batches() == n / global_batch);
      for (int64_t epoch : {0, 1, 5}) {
        std::set<int64_t> seen;
        int64_t count = 0;
        for (int64_t b = 0; b < one.num_batches(); ++b) {
          REQUIRE(one.batch_indices(epoch, b) == plain.batch_indices(epoch, b));
          std::vector<int64_t> step;
          for (const auto& l : ranks) {
            REQUIRE(l->num_batches() == one.num_batches());
            const std::vector<int64_t> mine = l->batch_indices(epoch, b);
            REQUIRE(int64_t(mine.size()) == global_batch / world);
            step.insert(step.end(), mine.begin(), mine.end());
          }
          CHECK(sorted(step) == sorted(one.batch_indices(epoch, b)));
          for (int64_t i : step) seen.insert(i);
          count += int64_t(step.size());
        }
        CHECK(int64_t(seen.size()) == count);  // no example twice in an epoch: disjoint shards
        CHECK(count == n / global_batch * global_batch);
      }
      // The next epoch is another shuffle.
      CHECK(ranks[0]->batch_indices(0, 0) != ranks[0]->batch_indices(1, 0));
    }
  }
}

TEST_CASE("examples data parallel: a global batch that does not split over the ranks is refused",
          "[examples][data]") {
  const DataParallel dp = DataParallel::sharding_only(1, 3);
  CHECK(dp.rank_batch(12) == 4);
  CHECK_THROWS_WITH(dp.rank_batch(128), Catch::Matchers::Contains("--batch-size 128 (the global batch) does not split "
                                                                  "evenly over 3 ranks") &&
                                            Catch::Matchers::Contains("hint: use a multiple of 3, e.g. 126 or 129"));
  CHECK_THROWS_WITH(DataParallel::sharding_only(1, 4).rank_batch(2), Catch::Matchers::EndsWith("hint: use a multiple of 4, e.g. 4"));
  CHECK_THROWS_WITH(DataParallel::sharding_only(2, 2), Catch::Matchers::Contains("rank 2 is not in [0, 2)"));
}

TEST_CASE("examples data parallel: a loader state saved on W ranks resumes on any number of ranks",
          "[examples][data]") {
  const int64_t n = 240, global_batch = 8;
  const auto ds = dataset(n);
  // Rank 0's position after 5 batches of epoch 2 (every rank is at the same position).
  for (const int saved_world : {1, 2, 4}) {
    for (const int resumed_world : {1, 2, 4}) {
      INFO("saved on " << saved_world << " ranks, resumed on " << resumed_world);
      auto saved = rank_loaders(ds, saved_world, global_batch, 3);
      saved[0]->start_epoch(2);
      for (int k = 0; k < 5; ++k) REQUIRE(saved[0]->next().has_value());
      const StateDict state = saved[0]->state();
      // The uninterrupted one-process run: the examples of global steps 5, 6, ... of epoch 2.
      const data::DataLoader one(ds, DataParallel::sharding_only(0, 1).loader_options(n, global_batch, 3));
      auto resumed = rank_loaders(ds, resumed_world, global_batch, 3);
      std::vector<int64_t> step_5;
      for (auto& l : resumed) {
        l->load_state(mg::example::reshard_loader_state(state, *l));
        l->start_epoch(2);  // the training loop's call keeps the restored position
        REQUIRE(l->epoch() == 2);
        REQUIRE(l->next_batch() == 5);
        const std::optional<data::Batch> b = l->next();
        REQUIRE(b.has_value());
        const Tensor x = b->at("input");  // [B / W, 1] f32: the example indices
        for (int64_t i = 0; i < x.numel(); ++i) step_5.push_back(int64_t(x.data<float>()[i]));
      }
      CHECK(sorted(step_5) == sorted(one.batch_indices(2, 5)));
    }
  }
  // Another global batch is not the same position: load_state refuses it with its own message.
  auto saved = rank_loaders(ds, 2, 8, 3);
  const auto other = rank_loaders(ds, 2, 16, 3);
  const StateDict state = saved[0]->state();
  CHECK_THROWS_WITH(other[0]->load_state(mg::example::reshard_loader_state(state, *other[0])),
                    Catch::Matchers::Contains("saved with batch_size 4 but this loader has 8"));
  // Another seed is refused too.
  const auto reseeded = rank_loaders(ds, 1, 8, 4);
  CHECK_THROWS_WITH(reseeded[0]->load_state(mg::example::reshard_loader_state(state, *reseeded[0])),
                    Catch::Matchers::Contains("sampler_seed"));
}

TEST_CASE("examples data parallel: a one-process state saved without a sampler resumes on 2 ranks",
          "[examples][data]") {
  const int64_t n = 100, global_batch = 10;
  const auto ds = dataset(n);
  // The examples' loader before they sharded: .shuffle = true, no sampler.
  data::DataLoader old(ds, {.batch_size = global_batch, .shuffle = true, .drop_last = true, .seed = 9});
  old.start_epoch(1);
  for (int k = 0; k < 3; ++k) REQUIRE(old.next().has_value());
  const StateDict state = old.state();
  REQUIRE(state.ints.count("sampler_world_size") == 0);
  std::vector<int64_t> step_3;
  for (auto& l : rank_loaders(ds, 2, global_batch, 9)) {
    l->load_state(mg::example::reshard_loader_state(state, *l));
    REQUIRE(l->next_batch() == 3);
    const std::vector<int64_t> mine = l->batch_indices(1, 3);
    step_3.insert(step_3.end(), mine.begin(), mine.end());
  }
  CHECK(sorted(step_3) == sorted(old.batch_indices(1, 3)));
}
