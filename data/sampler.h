// Sampler: which examples of a dataset a DataLoader reads in an epoch, and in what order
// (PyTorch's DataLoader(sampler=...)). The loader's resume contract — the batches are a pure
// function of the epoch and the position — holds for any sampler whose indices(epoch) is a pure
// function of its own settings and the epoch; every sampler here draws its randomness from
// random_words(seed, epoch, ...), never from state that advances.
//
// Samplers: DistributedSampler (one rank's shard, data/distributed_sampler.h),
// WeightedRandomSampler and SubsetRandomSampler (data/random_samplers.h), or your own subclass.
//
//   auto sampler = std::make_shared<mg::data::WeightedRandomSampler>(class_balanced_weights,
//       mg::data::WeightedRandomSamplerOptions{.seed = 7});
//   mg::data::DataLoader loader(dataset, {.batch_size = 64, .sampler = sampler});
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mg::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // Examples per epoch: the length of indices(epoch).
  virtual int64_t num_samples() const = 0;
  // The epoch's example indices in order (0 <= epoch < 2^32); the same epoch gives the same indices.
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
  // Throws an mg::Error naming `dataset_name` when this sampler cannot serve a dataset of `size`
  // examples (an index at or beyond it, or a sampler made for another size). The DataLoader calls it.
  virtual void check_dataset_size(int64_t size, const std::string& dataset_name) const = 0;
  // The class name, for errors and loader states ("WeightedRandomSampler").
  virtual std::string name() const = 0;
  // The settings that decide the order, by name (a seed, a count, a hash of the weights): a
  // DataLoader's state records them as "sampler_<name>" and its load_state refuses a state saved
  // with other values, as the batches would differ.
  virtual std::map<std::string, int64_t> settings() const = 0;

 protected:
  // Throws an mg::Error naming `where` ("WeightedRandomSampler::indices") unless 0 <= epoch < 2^32
  // (random_words' range).
  static void check_epoch(const char* where, int64_t epoch);
};

}  // namespace mg::data
