// WeightedRandomSampler and SubsetRandomSampler (random_samplers.h).
#include "mixgrad/data/random_samplers.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>

#include "mixgrad/core/error.h"
#include "mixgrad/data/dataset.h"
#include "mixgrad/data/loader.h"

namespace mg::data {

namespace {

// A uniform number in (0, 1) from 53 random bits (never 0, so its log is finite).
double open_unit(const Philox4& r) {
  const uint64_t bits = ((uint64_t(r.v[0]) << 32) | r.v[1]) >> 11;
  return (double(bits) + 0.5) * 0x1p-53;
}

// FNV-1a over the bytes of `values`: a fingerprint a loader state keeps to refuse a resume with
// other weights or another subset. Its 64 bits are stored as an int64 (bit for bit).
template <typename T>
int64_t fnv1a(const std::vector<T>& values) {
  uint64_t h = 14695981039346656037ull;
  for (const T& v : values) {
    unsigned char bytes[sizeof(T)];
    std::memcpy(bytes, &v, sizeof(T));
    for (unsigned char b : bytes) h = (h ^ b) * 1099511628211ull;
  }
  int64_t out;
  std::memcpy(&out, &h, sizeof(out));
  return out;
}

}  // namespace

WeightedRandomSampler::WeightedRandomSampler(std::vector<double> weights, Options options)
    : weights_(std::move(weights)), options_(options) {
  MG_CHECK(!weights_.empty(), Error, "WeightedRandomSampler: no weights");
  int64_t positive = 0;
  double total = 0.0;
  cumulative_.reserve(weights_.size());
  for (std::size_t i = 0; i < weights_.size(); ++i) {
    const double w = weights_[i];
    MG_CHECK(std::isfinite(w) && w >= 0.0, Error, "WeightedRandomSampler: weight ", i, " is ", w,
             "; weights must be finite and >= 0");
    if (w > 0.0) {
      ++positive;
      last_positive_ = int64_t(i);
    }
    total += w;
    cumulative_.push_back(total);
  }
  MG_CHECK(total > 0.0 && std::isfinite(total), Error, "WeightedRandomSampler: the weights sum to ", total,
           "; they must have a finite, positive sum");
  MG_CHECK(options_.num_samples >= 0, Error, "WeightedRandomSampler: num_samples must be >= 0 (0: one per weight), got ",
           options_.num_samples);
  num_samples_ = options_.num_samples == 0 ? int64_t(weights_.size()) : options_.num_samples;
  MG_CHECK(options_.replacement || num_samples_ <= positive, Error, "WeightedRandomSampler: ", num_samples_,
           " samples without replacement, but only ", positive, " of the ", weights_.size(), " weights are positive",
           "\n  hint: draw at most ", positive, ", or set .replacement = true");
}

std::vector<int64_t> WeightedRandomSampler::indices(int64_t epoch) const {
  check_epoch("WeightedRandomSampler::indices", epoch);
  std::vector<int64_t> out(static_cast<std::size_t>(num_samples_));
  if (options_.replacement) {
    const double total = cumulative_.back();
    for (int64_t k = 0; k < num_samples_; ++k) {
      const double target = open_unit(random_words(options_.seed, epoch, k, kSamplerStream)) * total;
      // The first interval ending beyond the target; a weight of 0 has an empty interval.
      const auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), target);
      // u · total may round up to the total itself: the last example with a positive weight.
      out[std::size_t(k)] = it == cumulative_.end() ? last_positive_ : int64_t(it - cumulative_.begin());
    }
    return out;
  }
  std::vector<std::pair<double, int64_t>> keys;
  keys.reserve(weights_.size());
  for (std::size_t i = 0; i < weights_.size(); ++i) {
    if (weights_[i] == 0.0) continue;
    keys.emplace_back(std::log(open_unit(random_words(options_.seed, epoch, int64_t(i), kSamplerStream))) / weights_[i],
                      int64_t(i));
  }
  // The largest keys first; equal keys by index, so the order never depends on the sort.
  const auto larger = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  std::partial_sort(keys.begin(), keys.begin() + num_samples_, keys.end(), larger);
  for (int64_t k = 0; k < num_samples_; ++k) out[std::size_t(k)] = keys[std::size_t(k)].second;
  return out;
}

void WeightedRandomSampler::check_dataset_size(int64_t size, const std::string& dataset_name) const {
  MG_CHECK(int64_t(weights_.size()) <= size, Error, "DataLoader: the WeightedRandomSampler has ", weights_.size(),
           " weights but ", dataset_name, " has ", size, " examples", "\n  hint: one weight per example");
}

std::map<std::string, int64_t> WeightedRandomSampler::settings() const {
  return {{"num_samples", num_samples_},
          {"replacement", options_.replacement},
          {"seed", static_cast<int64_t>(options_.seed)},  // bit for bit
          {"weights", int64_t(weights_.size())},
          {"weights_hash", fnv1a(weights_)}};
}

SubsetRandomSampler::SubsetRandomSampler(std::vector<int64_t> subset, Options options)
    : subset_(std::move(subset)), options_(options) {
  for (std::size_t i = 0; i < subset_.size(); ++i) {
    MG_CHECK(subset_[i] >= 0, Error, "SubsetRandomSampler: index ", i, " of the subset is ", subset_[i],
             "; indices must be >= 0");
  }
}

std::vector<int64_t> SubsetRandomSampler::indices(int64_t epoch) const {
  check_epoch("SubsetRandomSampler::indices", epoch);
  const std::vector<int64_t> order = epoch_permutation(int64_t(subset_.size()), options_.seed, epoch);
  std::vector<int64_t> out(order.size());
  for (std::size_t k = 0; k < order.size(); ++k) out[k] = subset_[std::size_t(order[k])];
  return out;
}

void SubsetRandomSampler::check_dataset_size(int64_t size, const std::string& dataset_name) const {
  for (std::size_t i = 0; i < subset_.size(); ++i) {
    MG_CHECK(subset_[i] < size, Error, "DataLoader: index ", i, " of the SubsetRandomSampler's subset is ",
             subset_[i], ", beyond ", dataset_name, "'s ", size, " examples");
  }
}

std::map<std::string, int64_t> SubsetRandomSampler::settings() const {
  return {{"seed", static_cast<int64_t>(options_.seed)}, {"subset", int64_t(subset_.size())}, {"subset_hash", fnv1a(subset_)}};
}

}  // namespace mg::data
