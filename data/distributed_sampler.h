// DistributedSampler: which examples of an epoch one rank of a data-parallel job reads. Every
// rank draws the same epoch order — the DataLoader's own shuffle, epoch_permutation(N, seed,
// epoch), or 0..N-1 — pads it to a multiple of the world size by repeating its first positions
// (or, with drop_last, cuts the tail), and keeps positions rank, rank + W, rank + 2W, ...
// Decision: it lives in data/ and takes plain integers (rank, world size), because data/ sits
// below distributed/ (DESIGN §1) and the sharding needs nothing else; distributed/'s
// distributed_sampler(pg, ...) fills them from a process group and checks that every rank passed
// the same size, seed and flags. Strided shards make W ranks with batch B see, batch for batch,
// the same examples as one process with batch W·B (the global batch of data parallelism).
//
//   auto sampler = std::make_shared<mg::data::DistributedSampler>(
//       dataset->size(), mg::data::DistributedSamplerOptions{.rank = 1, .world_size = 4, .seed = 42});
//   mg::data::DataLoader loader(dataset, {.batch_size = 32, .sampler = sampler});
//   loader.start_epoch(e);   // the sampler's epoch is the loader's: no set_epoch to forget
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "mixgrad/data/sampler.h"

namespace mg::data {

struct DistributedSamplerOptions {
  int64_t rank = 0;
  int64_t world_size = 1;
  bool shuffle = true;     // epoch_permutation(N, seed, epoch), the same on every rank; else 0..N-1
  uint64_t seed = 0;       // must be the same on every rank
  bool drop_last = false;  // cut the order to floor(N / W) · W instead of padding it to ceil(N / W) · W
};

class DistributedSampler final : public Sampler {
 public:
  using Options = DistributedSamplerOptions;
  // Throws mg::Error for a negative dataset size, a world size < 1 or a rank outside [0, W).
  DistributedSampler(int64_t dataset_size, Options options = {});

  // Examples per rank and epoch: ceil(N / W), or floor(N / W) with drop_last.
  int64_t num_samples() const override { return num_samples_; }
  // num_samples() · W: the padded (or cut) length of the epoch's order.
  int64_t total_size() const { return num_samples_ * options_.world_size; }
  int64_t dataset_size() const { return dataset_size_; }
  const Options& options() const { return options_; }

  // This rank's examples in `epoch` (0 <= epoch < 2^32), in order: positions rank, rank + W, ...
  // of the epoch's order padded with its own first positions (repeated when N < W).
  std::vector<int64_t> indices(int64_t epoch) const override;
  // The dataset must have the size this sampler was made for.
  void check_dataset_size(int64_t size, const std::string& dataset_name) const override;
  std::string name() const override { return "DistributedSampler"; }
  // world_size, shuffle, seed (its 64 bits), drop_last; not the rank: every rank is at the same
  // position, so rank 0's loader state resumes every rank.
  std::map<std::string, int64_t> settings() const override;

  // For loops without a DataLoader (PyTorch's sampler.set_epoch(e); for i in sampler):
  // indices() is indices(epoch()). A DataLoader ignores this: it passes its own epoch.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }
  std::vector<int64_t> indices() const { return indices(epoch_); }

 private:
  int64_t dataset_size_;
  Options options_;
  int64_t num_samples_ = 0;
  int64_t epoch_ = 0;
};

}  // namespace mg::data
