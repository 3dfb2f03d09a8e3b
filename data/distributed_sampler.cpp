// DistributedSampler (distributed_sampler.h): the epoch order of the DataLoader's shuffle, padded
// or cut to a multiple of the world size, strided by rank.
#include "mixgrad/data/distributed_sampler.h"

#include <numeric>

#include "mixgrad/core/error.h"
#include "mixgrad/data/loader.h"

namespace mg::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, Options options)
    : dataset_size_(dataset_size), options_(options) {
  MG_CHECK(dataset_size_ >= 0, Error, "DistributedSampler: the dataset size must be >= 0, got ", dataset_size_);
  MG_CHECK(options_.world_size >= 1, Error, "DistributedSampler: world_size must be >= 1, got ",
           options_.world_size);
  MG_CHECK(options_.rank >= 0 && options_.rank < options_.world_size, Error, "DistributedSampler: rank ",
           options_.rank, " is not in [0, ", options_.world_size, ")",
           "\n  hint: pass the process group's rank and world size (distributed_sampler(pg, ...) does)");
  const int64_t w = options_.world_size;
  num_samples_ = dataset_size_ / w + (!options_.drop_last && dataset_size_ % w != 0 ? 1 : 0);  // no overflow near INT64_MAX
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  check_epoch("DistributedSampler::indices", epoch);
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = epoch_permutation(dataset_size_, options_.seed, epoch);  // the loader's shuffle
  } else {
    order.resize(std::size_t(dataset_size_));
    std::iota(order.begin(), order.end(), int64_t(0));
  }
  // Position p of the padded order is order[p mod N]: the padding repeats the first positions.
  const int64_t w = options_.world_size, n = dataset_size_;
  std::vector<int64_t> mine(static_cast<std::size_t>(num_samples_));
  for (int64_t k = 0; k < num_samples_; ++k) mine[std::size_t(k)] = order[std::size_t((k * w + options_.rank) % n)];
  return mine;
}

void DistributedSampler::check_dataset_size(int64_t size, const std::string& dataset_name) const {
  MG_CHECK(size == dataset_size_, Error, "DataLoader: the sampler was made for ", dataset_size_, " examples but ",
           dataset_name, " has ", size);
}

std::map<std::string, int64_t> DistributedSampler::settings() const {
  return {{"world_size", options_.world_size},
          {"shuffle", options_.shuffle},
          {"seed", static_cast<int64_t>(options_.seed)},  // bit for bit
          {"drop_last", options_.drop_last}};
}

void DistributedSampler::set_epoch(int64_t epoch) {
  check_epoch("DistributedSampler::set_epoch", epoch);
  epoch_ = epoch;
}

}  // namespace mg::data
