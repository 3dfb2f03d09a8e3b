// DistributedSampler without processes: the shards of W ranks cover the dataset disjointly (padding
// repeats the first positions, drop_last cuts the tail), every rank takes the same per-epoch shuffle
// (the DataLoader's epoch_permutation), the epochs differ, W ranks with batch B see the global
// batches of one process with batch W·B, and a DataLoader over a sampler resumes mid-epoch exactly.
// tests/distributed/test_dist_data.cpp runs distributed_sampler(pg, ...) across real processes.
#include <catch2/catch.hpp>

#include <limits>

#include <algorithm>
#include <map>
#include <set>

#include "core/factory.h"
#include "data/distributed_sampler.h"
#include "data/loader.h"
#include "data/tensor_dataset.h"
#include "test_util.h"

using mg::data::DataLoader;
using mg::data::DistributedSampler;
using mg::data::epoch_permutation;

namespace {

std::shared_ptr<mg::data::TensorDataset> index_dataset(int64_t n) {
  return std::make_shared<mg::data::TensorDataset>(
      std::vector<std::pair<std::string, mg::Tensor>>{{"index", mg::arange(0, n)}});
}

std::vector<int64_t> as_i64(const mg::Tensor& t) {
  const int64_t* p = t.data<int64_t>();
  return std::vector<int64_t>(p, p + t.numel());
}

std::vector<std::vector<int64_t>> run_epoch(DataLoader& loader, int64_t epoch) {
  loader.start_epoch(epoch);
  std::vector<std::vector<int64_t>> out;
  while (auto b = loader.next()) out.push_back(as_i64(b->at("index")));
  return out;
}

}  // namespace

TEST_CASE("DistributedSampler: pinned values without shuffle (padding repeats the first positions)", "[data]") {
  // N = 5, W = 3: the order 0 1 2 3 4 padded to 6 with 0; rank r takes positions r, r + 3.
  const std::vector<std::vector<int64_t>> want{{0, 3}, {1, 4}, {2, 0}};
  for (int64_t r = 0; r < 3; ++r) {
    DistributedSampler s(5, {.rank = r, .world_size = 3, .shuffle = false});
    CHECK(s.num_samples() == 2);
    CHECK(s.total_size() == 6);
    CHECK(s.indices(0) == want[std::size_t(r)]);
    CHECK(s.indices(7) == want[std::size_t(r)]);
  }
  // drop_last cuts to 3: positions 0 1 2.
  CHECK(DistributedSampler(5, {.rank = 1, .world_size = 3, .shuffle = false, .drop_last = true}).indices(0) ==
        std::vector<int64_t>{1});
  // N < W: the order repeats (N = 2, W = 5: 0 1 0 1 0).
  CHECK(DistributedSampler(2, {.rank = 4, .world_size = 5, .shuffle = false}).indices(0) == std::vector<int64_t>{0});
  CHECK(DistributedSampler(2, {.rank = 3, .world_size = 5, .shuffle = false}).indices(0) == std::vector<int64_t>{1});
  CHECK(DistributedSampler(2, {.rank = 3, .world_size = 5, .drop_last = true}).num_samples() == 0);
  // A world size near INT64_MAX does not overflow the rounding up: one sample each.
  const int64_t huge = std::numeric_limits<int64_t>::max();
  CHECK(DistributedSampler(10, {.rank = 0, .world_size = huge, .shuffle = false}).num_samples() == 1);
  CHECK(DistributedSampler(10, {.rank = huge - 1, .world_size = huge, .shuffle = false}).indices(0) ==
        std::vector<int64_t>{(huge - 1) % 10});
}

TEST_CASE("DistributedSampler: disjoint cover across 2 and 3 ranks, same shuffle on every rank", "[data]") {
  for (int64_t w : {2, 3}) {
    for (int64_t n : {0, 1, 2, 3, 10, 11, 12, 101}) {
      for (bool drop_last : {false, true}) {
        for (bool shuffle : {false, true}) {
          for (int64_t epoch : {0, 3}) {
            INFO("W " << w << " N " << n << " drop_last " << drop_last << " shuffle " << shuffle << " epoch " << epoch);
            std::vector<int64_t> order(static_cast<std::size_t>(n));
            for (int64_t i = 0; i < n; ++i) order[std::size_t(i)] = i;
            if (shuffle) order = epoch_permutation(n, 42, epoch);
            const int64_t per = drop_last ? n / w : (n + w - 1) / w;
            std::map<int64_t, int> seen;
            for (int64_t r = 0; r < w; ++r) {
              DistributedSampler s(n, {.rank = r, .world_size = w, .shuffle = shuffle, .seed = 42, .drop_last = drop_last});
              const std::vector<int64_t> mine = s.indices(epoch);
              REQUIRE(int64_t(mine.size()) == per);  // equal length on every rank
              for (int64_t k = 0; k < per; ++k) {
                // position k·W + r of the one order every rank shares, padded by wrapping around
                REQUIRE(mine[std::size_t(k)] == order[std::size_t((k * w + r) % n)]);
                ++seen[mine[std::size_t(k)]];
              }
            }
            const int64_t total = per * w;
            if (drop_last) {  // disjoint: the first total positions, each once
              CHECK(int64_t(seen.size()) == total);
              for (int64_t p = 0; p < total; ++p) CHECK(seen[order[std::size_t(p)]] == 1);
            } else {  // every example; padded position q >= N repeats position q mod N
              CHECK(int64_t(seen.size()) == n);
              for (int64_t p = 0; p < n; ++p) {
                int want = 1;
                for (int64_t q = n; q < total; ++q) want += q % n == p;
                CHECK(seen[order[std::size_t(p)]] == want);
                if (n >= w) CHECK(want == (p < total - n ? 2 : 1));  // N >= W: the first total - N twice
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("DistributedSampler: a new shuffle every epoch, one rank equals the loader's shuffle", "[data]") {
  DistributedSampler s(100, {.rank = 1, .world_size = 2, .seed = 7});
  CHECK(s.indices(0) != s.indices(1));
  CHECK(s.indices(1) != s.indices(2));
  CHECK(s.indices(1) == s.indices(1));
  CHECK(DistributedSampler(100, {.rank = 1, .world_size = 2, .seed = 8}).indices(1) != s.indices(1));
  // set_epoch drives indices() for loops without a DataLoader.
  s.set_epoch(5);
  CHECK(s.epoch() == 5);
  CHECK(s.indices() == s.indices(5));
  // World size 1: exactly the DataLoader's own shuffle.
  DataLoader plain(index_dataset(37), {.batch_size = 37, .shuffle = true, .seed = 9});
  DataLoader sampled(index_dataset(37),
                     {.batch_size = 37, .seed = 9,
                      .sampler = std::make_shared<DistributedSampler>(37, mg::data::DistributedSamplerOptions{.seed = 9})});
  for (int64_t e : {0, 4}) CHECK(run_epoch(plain, e) == run_epoch(sampled, e));
}

TEST_CASE("DistributedSampler in a DataLoader: W ranks with batch B see the global batches of batch W*B", "[data]") {
  const int64_t n = 120, b = 4;
  for (int64_t w : {2, 3}) {
    DataLoader global(index_dataset(n), {.batch_size = w * b, .shuffle = true, .seed = 3});
    std::vector<std::vector<std::vector<int64_t>>> per_rank;
    for (int64_t r = 0; r < w; ++r) {
      auto s = std::make_shared<DistributedSampler>(n, mg::data::DistributedSamplerOptions{.rank = r, .world_size = w, .seed = 3});
      DataLoader loader(index_dataset(n), {.batch_size = b, .seed = 3, .prefetch = int(r), .sampler = s});
      CHECK(loader.num_batches() == n / (w * b));
      per_rank.push_back(run_epoch(loader, 2));
    }
    const auto want = run_epoch(global, 2);
    REQUIRE(int64_t(want.size()) == n / (w * b));
    for (std::size_t k = 0; k < want.size(); ++k) {
      // global batch k, position j, is rank j mod W's batch k, position j / W
      for (std::size_t j = 0; j < want[k].size(); ++j) {
        CHECK(per_rank[j % std::size_t(w)][k][j / std::size_t(w)] == want[k][j]);
      }
    }
  }
}

TEST_CASE("DistributedSampler in a DataLoader: resume mid-epoch, state checks", "[data]") {
  const int64_t n = 53;
  auto sampler = [&](int64_t rank, int64_t w, uint64_t seed, bool drop_last = false) {
    return std::make_shared<DistributedSampler>(
        n, mg::data::DistributedSamplerOptions{.rank = rank, .world_size = w, .seed = seed, .drop_last = drop_last});
  };
  DataLoader full(index_dataset(n), {.batch_size = 5, .seed = 1, .sampler = sampler(2, 3, 11)});
  CHECK(full.num_batches() == 4);  // ceil(53 / 3) = 18 per rank, ceil(18 / 5) = 4 batches
  const auto e0 = run_epoch(full, 0), e1 = run_epoch(full, 1);
  CHECK(e0 != e1);
  for (int64_t stop : {0, 2, 4}) {
    DataLoader first(index_dataset(n), {.batch_size = 5, .seed = 1, .sampler = sampler(2, 3, 11)});
    first.start_epoch(0);
    for (int64_t k = 0; k < stop; ++k) REQUIRE(first.next());
    // rank 0's state resumes rank 2: the rank is not part of it
    DataLoader rank0(index_dataset(n), {.batch_size = 5, .seed = 1, .sampler = sampler(0, 3, 11)});
    rank0.load_state(first.state());
    CHECK(rank0.next_batch() == stop);
    DataLoader resumed(index_dataset(n), {.batch_size = 5, .seed = 99, .prefetch = 0, .sampler = sampler(2, 3, 11)});
    resumed.load_state(first.state());
    std::vector<std::vector<int64_t>> seen;
    for (int64_t e = resumed.epoch(); e < 2; ++e) {
      resumed.start_epoch(e);
      while (auto batch = resumed.next()) seen.push_back(as_i64(batch->at("index")));
    }
    std::vector<std::vector<int64_t>> want(e0.begin() + stop, e0.end());
    want.insert(want.end(), e1.begin(), e1.end());
    CHECK(seen == want);
  }
  const mg::StateDict st = full.state();
  CHECK(st.ints.at("sampler_world_size") == 3);
  CHECK(st.ints.at("sampler_seed") == 11);
  auto refused = [&](std::shared_ptr<DistributedSampler> s) {
    DataLoader other(index_dataset(n), {.batch_size = 5, .seed = 1, .sampler = std::move(s)});
    return mg::test::error_of([&] { other.load_state(st); });
  };
  CHECK_THAT(refused(sampler(1, 2, 11)), Catch::Contains("saved with sampler_world_size 3 but this loader has 2"));
  CHECK_THAT(refused(sampler(1, 3, 12)), Catch::Contains("sampler_seed 11 but this loader has 12"));
  CHECK_THAT(refused(sampler(1, 3, 11, true)), Catch::Contains("sampler_drop_last 0 but this loader has 1"));
  CHECK_THAT(refused(nullptr), Catch::Contains("saved with a DistributedSampler but this loader has none"));
  DataLoader none(index_dataset(n), {.batch_size = 5});
  DataLoader with(index_dataset(n), {.batch_size = 5, .sampler = sampler(0, 3, 11)});
  CHECK_THAT(mg::test::error_of([&] { with.load_state(none.state()); }),
             Catch::Contains("saved without a sampler but this loader has a DistributedSampler"));
}

TEST_CASE("DistributedSampler: refused arguments", "[data]") {
  using mg::test::error_of;
  CHECK_THAT(error_of([] { DistributedSampler(10, {.rank = 2, .world_size = 2}); }),
             Catch::Contains("DistributedSampler: rank 2 is not in [0, 2)"));
  CHECK_THAT(error_of([] { DistributedSampler(10, {.world_size = 0}); }),
             Catch::Contains("DistributedSampler: world_size must be >= 1, got 0"));
  CHECK_THAT(error_of([] { DistributedSampler(-1, {}); }), Catch::Contains("dataset size must be >= 0"));
  CHECK_THAT(error_of([] { DistributedSampler(10, {}).indices(-1); }),
             Catch::Contains("DistributedSampler::indices: epoch must be in [0, 2^32)"));
  auto s = std::make_shared<DistributedSampler>(10, mg::data::DistributedSamplerOptions{.world_size = 2});
  CHECK_THAT(error_of([&] { DataLoader(index_dataset(10), {.shuffle = true, .sampler = s}); }),
             Catch::Contains("DataLoader: shuffle = true and a sampler exclude each other"));
  CHECK_THAT(error_of([&] { DataLoader(index_dataset(11), {.sampler = s}); }),
             Catch::Contains("DataLoader: the sampler was made for 10 examples but TensorDataset has 11"));
}
