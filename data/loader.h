// DataLoader: batches of a Dataset in a seeded order, prepared ahead by background threads.
// The one decision a reader must know: the order is a pure function of (seed, epoch, dataset
// size, batch size, drop_last) — epoch_permutation(), or a DistributedSampler's shard of it — and every random decision inside a batch
// is keyed by (seed, epoch, example index), so the batches do not depend on thread timing or on
// the prefetch depth, and a checkpoint of (seed, epoch, next batch) resumes mid-epoch with
// exactly the batches an uninterrupted run would have seen.
//
//   mg::data::DataLoader loader(dataset, {.batch_size = 128, .shuffle = true, .seed = 42});
//   for (int64_t epoch = loader.epoch(); epoch < epochs; ++epoch) {
//     loader.start_epoch(epoch);              // keeps a position restored by load_state()
//     while (auto batch = loader.next()) {    // std::optional<Batch>; empty at the epoch's end
//       const mg::Tensor& x = batch->at("input");   // [B, 1, 28, 28]
//       ...
//     }
//   }
//
// With .pin_memory = true the batches come out pinned, for asynchronous copies to the GPU:
//   const mg::Tensor x = batch->at("input").to(mg::Device::cuda(), /*non_blocking=*/true);
//
// Threading: with prefetch > 0 a background thread (num_workers threads) computes the next
// `prefetch` batches into a bounded buffer (condition variables, no polling) while the caller
// trains; batches still come out in order. The threads start at the first next() and are stopped
// and joined by the destructor, also mid-epoch or while an exception unwinds (each finishes the
// one get_batch call it may be inside first). An exception thrown by get_batch is rethrown by
// next() on the caller's thread, in batch order, as an mg::Error naming the dataset, epoch and
// batch; the position stays at that batch, so a later next() retries it. A DataLoader is used
// from one thread at a time.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "mixgrad/core/state_dict.h"
#include "mixgrad/data/dataset.h"
#include "mixgrad/data/distributed_sampler.h"
#include "mixgrad/data/random_samplers.h"
#include "mixgrad/data/sampler.h"

namespace mg::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;    // a new permutation every epoch (from seed and epoch); else 0..N-1
  bool drop_last = false;  // drop the last batch when it has fewer than batch_size examples
  uint64_t seed = 0;       // the shuffle and the datasets' augmentation derive from it
  int prefetch = 2;        // batches prepared ahead on a background thread; 0: none, in next()
  // Background threads that make batches (with prefetch > 0), one batch each at a time: for a
  // dataset whose examples are expensive (decoding, heavy augmentation). The batches still come out
  // in order and are the same bits for any count (each is a function of seed, epoch and batch).
  // Above 1, get_batch runs on several threads at once, so it must be thread-safe (the bundled
  // datasets are: their get_batch reads only). Up to max(prefetch, num_workers) batches are made
  // ahead of the caller.
  int num_workers = 1;
  // Copies every tensor of each batch into pinned host memory (Tensor::pin_memory) on the
  // background thread, so the training loop's to(cuda, /*non_blocking=*/true) runs asynchronously
  // and overlaps compute. Needs a usable CUDA device: the constructor throws DeviceError otherwise.
  bool pin_memory = false;
  // Which examples an epoch reads (data/sampler.h): the epoch's examples are
  // sampler->indices(epoch) (start_epoch(e) is the sampler's epoch) instead of the whole dataset,
  // and num_batches() counts the sampler's num_samples(). A DistributedSampler gives one rank's
  // shard of a data-parallel job; WeightedRandomSampler and SubsetRandomSampler
  // (data/random_samplers.h) draw by weight or from a subset. The sampler decides the order, so
  // `shuffle` must stay false; `seed` still keys the datasets' augmentation (the same seed on every
  // rank gives each example the augmentation a single process would). Null: the whole dataset.
  std::shared_ptr<const Sampler> sampler;
};

// The order of the N examples in `epoch`: a Fisher-Yates shuffle whose step i (i = N-1 .. 1)
// swaps position i with position r % (i + 1), r the first 64 bits of
// random_words(seed, epoch, i, kShuffleStream).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Batches per epoch: M / batch_size with drop_last, else ceil(M / batch_size), M the examples
  // per epoch (the dataset size, or the sampler's num_samples()).
  int64_t num_batches() const { return num_batches_; }
  const Dataset& dataset() const { return *dataset_; }
  const DataLoaderOptions& options() const { return options_; }
  uint64_t seed() const { return options_.seed; }
  // The current epoch and the index of the batch next() returns next (num_batches() at the end).
  int64_t epoch() const { return epoch_; }
  int64_t next_batch() const { return next_batch_; }

  // Positions the loader at batch 0 of `epoch` (0 <= epoch < 2^32). Exception: right after
  // load_state() of a state in this same epoch it keeps that batch, so the usual loop resumes.
  void start_epoch(int64_t epoch);
  // The next batch of the current epoch, or std::nullopt when the epoch is over (it stays over
  // until start_epoch). Without a start_epoch call it serves epoch 0 (or the loaded position).
  std::optional<Batch> next();

  // The example indices of batch `b` of `epoch`, as next() would produce them.
  std::vector<int64_t> batch_indices(int64_t epoch, int64_t b) const;

  // Position for a checkpoint: ints seed, epoch, next_batch (batches the caller has received,
  // not the ones prefetched) and, for checking on load, dataset_size, batch_size, shuffle,
  // drop_last; with a sampler also the string "sampler" (its name) and its settings() as ints
  // "sampler_<name>" (a DistributedSampler's: sampler_world_size, sampler_shuffle, sampler_seed,
  // sampler_drop_last — not the rank: every rank is at the same position, so rank 0's state
  // resumes them all).
  StateDict state() const;
  // Restores seed, epoch and next_batch; throws mg::Error when the state was saved with another
  // dataset size, batch size, shuffle or drop_last, another kind of sampler or other sampler
  // settings, or with a sampler where this loader has none or the reverse (the batches would
  // differ). A state without the "sampler" string but with sampler_world_size (saved before other
  // samplers existed) is a DistributedSampler's.
  void load_state(const StateDict& state);

 private:
  struct Prefetcher;  // the background thread and its queue (loader.cpp)

  void reposition(int64_t epoch, int64_t next_batch);
  // The examples of `epoch` in order: the sampler's, the shuffle, or 0..N-1.
  std::vector<int64_t> epoch_order(int64_t epoch) const;

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  int64_t size_ = 0;         // dataset size, read once
  int64_t samples_ = 0;      // examples per epoch: size_, or the sampler's num_samples()
  int64_t num_batches_ = 0;
  int64_t epoch_ = 0;
  int64_t next_batch_ = 0;
  bool resumed_ = false;     // load_state() was the last positioning call
  bool armed_ = false;       // the prefetch thread's job starts at (epoch_, next_batch_)
  std::shared_ptr<const std::vector<int64_t>> order_;  // the current epoch's permutation
  // Per position of order_: how many times its example came earlier in the epoch; null when no
  // example repeats (BatchContext::repeats).
  std::shared_ptr<const std::vector<uint32_t>> repeats_;
  uint64_t order_seed_ = 0;  // the seed order_ was made with
  std::unique_ptr<Prefetcher> prefetcher_;
};

}  // namespace mg::data
