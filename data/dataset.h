// Dataset: the interface every dataset implements (Fashion-MNIST images, Bible-verse MLM text,
// in-memory tensors). The one decision a reader must know: a dataset makes a WHOLE BATCH from a
// list of example indices, so an image dataset fills one [B, C, H, W] tensor in a tight loop
// instead of stacking B small tensors; the batch is a list of named tensors ("input", "target",
// "input_ids", ...), so one DataLoader serves every kind of data.
//
//   mg::data::Batch b = dataset.get_batch({3, 1, 4}, {.seed = 42, .epoch = 0});
//   const mg::Tensor& x = b.at("input");    // f32 [3, 1, 28, 28]
//
// Randomness inside get_batch (augmentation, MLM masking) must come from example_words() (random
// words keyed by ctx.seed, ctx.epoch, the example index and its repeat in the epoch): then an
// example looks the same whichever batch, position or thread it is produced in, a repeated draw
// looks different, and a resumed run sees exactly the same data.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mixgrad/core/error.h"
#include "mixgrad/core/philox.h"
#include "mixgrad/core/tensor.h"

namespace mg::data {

// What get_batch needs besides the indices: the loader's seed and the epoch, from which all
// per-example random decisions are derived.
struct BatchContext {
  uint64_t seed = 0;
  int64_t epoch = 0;
  // Per position of the batch: how many times its example was drawn earlier in this epoch (a
  // sampler with replacement, a repeated subset index, a DistributedSampler's padding); empty when
  // no example of the epoch repeats. Datasets key per-example randomness through example_words(),
  // which gives a repeat fresh words, as PyTorch's __getitem__ draws anew.
  std::vector<uint32_t> repeats;
};

// A batch: named tensors whose first dimension is the batch (B = indices.size()), plus where it
// came from. Datasets fill `tensors`; the DataLoader fills indices, epoch and index.
struct Batch {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in the order the dataset added them
  std::vector<int64_t> indices;  // [B] example indices, in batch order
  int64_t epoch = 0;             // the epoch this batch belongs to
  int64_t index = 0;             // its position in the epoch (0 .. num_batches - 1)

  // The number of examples: the indices the loader filled in, or, for a batch a dataset's
  // get_batch made directly (no indices), the first tensor's length.
  int64_t size() const {
    if (!indices.empty() || tensors.empty() || !tensors.front().second.defined() || tensors.front().second.dim() == 0) {
      return int64_t(indices.size());
    }
    return tensors.front().second.size(0);
  }
  bool contains(const std::string& name) const {
    for (const auto& [n, t] : tensors) {
      if (n == name) return true;
    }
    return false;
  }
  // The tensor called `name`; throws mg::Error listing the names the batch has.
  const Tensor& at(const std::string& name) const {
    std::string names;
    for (const auto& [n, t] : tensors) {
      if (n == name) return t;
      names += (names.empty() ? "" : ", ") + n;
    }
    MG_THROW(Error, "Batch: no tensor '", name, "'; the batch has [", names, "]");
  }
  // Adds a tensor; names must be unique.
  void add(std::string name, Tensor t) {
    MG_CHECK(!contains(name), Error, "Batch: tensor '", name, "' added twice");
    tensors.emplace_back(std::move(name), std::move(t));
  }
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  // Number of examples; constant for the lifetime of the dataset.
  virtual int64_t size() const = 0;
  // The examples `indices` (each in [0, size()), repeats allowed) as one batch, in that order.
  // Must be thread-safe and deterministic in (indices, ctx): the DataLoader calls it on its
  // background thread while the caller may use the dataset too. Throws mg::Error (an
  // IndexError for an index out of range).
  virtual Batch get_batch(const std::vector<int64_t>& indices, const BatchContext& ctx) const = 0;
  // Class-style name for error messages ("FashionMnist").
  virtual std::string name() const { return "Dataset"; }
};

// Random streams: each purpose draws from its own stream id so that, say, the shuffle and the
// augmentation never share random words. Pick a new id for a new purpose.
inline constexpr uint32_t kShuffleStream = 1;   // DataLoader's permutation (index = position)
inline constexpr uint32_t kAugmentStream = 2;   // image augmentation (index = example)
inline constexpr uint32_t kMaskStream = 3;      // MLM masking (index = example)
inline constexpr uint32_t kSyntheticExampleStream = 4;  // SyntheticImages: an example's label and look
inline constexpr uint32_t kSyntheticClassStream = 5;    // SyntheticImages: a class's pattern (index = class)
inline constexpr uint32_t kSamplerStream = 6;   // WeightedRandomSampler (index = draw or example)

// Four random 32-bit words for (seed, epoch, index, stream, block): one Philox4x32-10 block with
// key `seed` and counter {block, index[0:32], epoch[0:32], index[32:48] | stream << 16}, so a
// value depends on nothing else. `block` numbers the groups of four words one example needs
// (a 128-token MLM example uses blocks 0..127: one per position). Requires 0 <= index < 2^48, 0 <= epoch < 2^32.
inline Philox4 random_words(uint64_t seed, int64_t epoch, int64_t index, uint32_t stream,
                            uint32_t block = 0) {
  MG_CHECK(index >= 0 && index < (int64_t(1) << 48) && epoch >= 0 && epoch < (int64_t(1) << 32) &&
               stream < (1u << 16),
           Error, "random_words: expected 0 <= index < 2^48, 0 <= epoch < 2^32, stream < 2^16; got "
           "index ", index, ", epoch ", epoch, ", stream ", stream);
  const uint64_t i = uint64_t(index);
  return philox4x32_10(Philox4{{block, uint32_t(i), uint32_t(uint64_t(epoch)),
                                uint32_t(i >> 32) | (stream << 16)}},
                       seed);
}

// random_words for the example `index` at `position` of a batch: its k-th repeat in the epoch
// (ctx.repeats) draws from block + k * 2^16, so a first draw keeps the words of (seed, epoch,
// index) alone and every repeat gets its own. With a repeat, block and k must be < 2^16.
inline Philox4 example_words(const BatchContext& ctx, std::size_t position, int64_t index, uint32_t stream,
                             uint32_t block = 0) {
  const uint32_t repeat = position < ctx.repeats.size() ? ctx.repeats[position] : 0;
  if (repeat == 0) return random_words(ctx.seed, ctx.epoch, index, stream, block);
  MG_CHECK(block < (1u << 16) && repeat < (1u << 16), Error, "example_words: a repeated draw needs block < 2^16 and ",
           "fewer than 2^16 repeats of one example per epoch; got block ", block, ", repeat ", repeat);
  return random_words(ctx.seed, ctx.epoch, index, stream, block + (repeat << 16));
}

// Unbiased enough integer in [0, n) from a 32-bit word (Lemire's multiply-shift; bias < n/2^32).
inline uint32_t random_below(uint32_t word, uint32_t n) {
  return uint32_t((uint64_t(word) * uint64_t(n)) >> 32);
}

}  // namespace mg::data
