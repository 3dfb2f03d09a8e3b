// Random samplers for a DataLoader (data/sampler.h), as torch.utils.data's, with their randomness
// keyed by (seed, epoch) so a resumed run draws the same batches (PyTorch's draw from a generator
// whose position a checkpoint does not keep):
// - WeightedRandomSampler: num_samples examples drawn with probability proportional to their
//   weights, with replacement (oversampling rare classes) or without (each example at most once).
// - SubsetRandomSampler: the given examples in a new random order every epoch (a train split
//   of one dataset, say).
//
//   // Class-balanced sampling: each example weighted by 1 / (count of its class).
//   auto sampler = std::make_shared<mg::data::WeightedRandomSampler>(
//       weights, mg::data::WeightedRandomSamplerOptions{.num_samples = 10000, .seed = 1});
//   mg::data::DataLoader loader(dataset, {.batch_size = 64, .sampler = sampler});
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "mixgrad/data/sampler.h"

namespace mg::data {

struct WeightedRandomSamplerOptions {
  int64_t num_samples = 0;  // draws per epoch, >= 1; 0: as many as there are weights
  bool replacement = true;  // false: each example at most once (num_samples <= positive weights)
  uint64_t seed = 0;
};

// With replacement, draw k of an epoch picks the example whose cumulative-weight interval holds
// u · total, u a 53-bit uniform number from random_words(seed, epoch, k, kSamplerStream).
// Without, example i gets the key log(u_i) / w_i (u_i from random_words(seed, epoch, i, ...))
// and the epoch is the num_samples largest keys in decreasing order (Efraimidis and Spirakis
// 2006): the distribution of drawing one at a time without putting back, as torch.multinomial.
// Examples of weight 0 are never drawn.
class WeightedRandomSampler final : public Sampler {
 public:
  using Options = WeightedRandomSamplerOptions;
  // Throws mg::Error for no weights, a negative, NaN or infinite weight, weights summing to 0 (or
  // to infinity), num_samples < 0, or, without replacement, more samples than positive weights.
  explicit WeightedRandomSampler(std::vector<double> weights, Options options = {});

  int64_t num_samples() const override { return num_samples_; }
  std::vector<int64_t> indices(int64_t epoch) const override;
  // The weights may not outnumber the dataset's examples (examples past the weights: never drawn).
  void check_dataset_size(int64_t size, const std::string& dataset_name) const override;
  std::string name() const override { return "WeightedRandomSampler"; }
  // num_samples, replacement, seed, weights (their count) and weights_hash (FNV-1a of their bits).
  std::map<std::string, int64_t> settings() const override;
  const std::vector<double>& weights() const { return weights_; }
  const Options& options() const { return options_; }

 private:
  std::vector<double> weights_;
  std::vector<double> cumulative_;  // running sums of weights_, for draws with replacement
  int64_t last_positive_ = 0;       // the last index with a positive weight
  Options options_;
  int64_t num_samples_ = 0;
};

struct SubsetRandomSamplerOptions {
  uint64_t seed = 0;
};

// The examples `subset` (any order, repeats allowed) permuted by epoch_permutation(size, seed,
// epoch), the DataLoader's own shuffle.
class SubsetRandomSampler final : public Sampler {
 public:
  using Options = SubsetRandomSamplerOptions;
  // Throws mg::Error for a negative index.
  explicit SubsetRandomSampler(std::vector<int64_t> subset, Options options = {});

  int64_t num_samples() const override { return int64_t(subset_.size()); }
  std::vector<int64_t> indices(int64_t epoch) const override;
  // Every index of the subset must be an example of the dataset.
  void check_dataset_size(int64_t size, const std::string& dataset_name) const override;
  std::string name() const override { return "SubsetRandomSampler"; }
  // seed, subset (its size) and subset_hash (FNV-1a of the indices).
  std::map<std::string, int64_t> settings() const override;
  const std::vector<int64_t>& subset() const { return subset_; }

 private:
  std::vector<int64_t> subset_;
  Options options_;
};

}  // namespace mg::data
