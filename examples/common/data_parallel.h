// DataParallel: what a training example needs to run unchanged under mixgrad-run. Started
// plainly (no WORLD_SIZE, or WORLD_SIZE=1) it is a single process and does nothing; started by
// `mixgrad-run --nproc-per-node N` it joins the process group, wraps the model in
// DistributedDataParallel, gives each rank a shard of the training set, and sums numbers over
// ranks for the global throughput.
// Decision: the shard is a simple stride (rank r trains on examples r, r + W, r + 2W, ... of the
// training set, each rank shuffling its own shard every epoch with the run's seed), not a
// DistributedSampler's global per-epoch shuffle; the global batch is W x --batch-size. Rank 0
// alone prints the normal logs and writes checkpoints. Builds without the distributed layer
// (no Gloo) run single-process and refuse WORLD_SIZE > 1 with a hint.
//
//   DataParallel dp = DataParallel::from_environment();
//   auto shard = dp.shard(train_set);                      // the whole set when single-process
//   ... amp::initialize(model, opt, ...);
//   dp.wrap(model, {&opt});                                // after amp::initialize
//   if (dp.is_main()) std::printf(...);
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace mg::example {

class DataParallel {
 public:
  // Reads RANK and WORLD_SIZE (set by mixgrad-run); joins the group when WORLD_SIZE > 1.
  static DataParallel from_environment();
  DataParallel();
  ~DataParallel();
  DataParallel(DataParallel&&) noexcept;
  DataParallel& operator=(DataParallel&&) noexcept;

  int rank() const { return rank_; }
  int world_size() const { return world_; }
  bool active() const { return world_ > 1; }
  bool is_main() const { return rank_ == 0; }

  // Rank r's examples r, r + W, ... (floor(N / W) of them, the same count on every rank).
  std::shared_ptr<const data::Dataset> shard(std::shared_ptr<const data::Dataset> dataset) const;
  // Wraps `model` in DistributedDataParallel (after amp::initialize; the optimizers' O2 master
  // weights are broadcast from rank 0 with it); a no-op single-process.
  void wrap(const std::shared_ptr<nn::Module>& model, std::vector<optim::Optimizer*> optimizers = {});
  // While the returned handle lives, backward accumulates gradients locally (gradient
  // accumulation: all micro-batches but the last); null single-process.
  [[nodiscard]] std::shared_ptr<void> no_sync();
  // Rank 0's batch-norm running statistics (and other buffers) on every rank.
  void sync_buffers();
  // The sum of `value` over ranks (value itself single-process).
  double sum(double value);
  // Ranks other than 0 send their standard output to /dev/null (the normal logs and progress
  // come from rank 0); their per-rank lines go to stderr, which mixgrad-run prefixes too.
  void quiet_unless_main() const;
  // "rank 1/2" for per-rank lines.
  std::string label() const;
  // A line on the last backward's communication: buckets, bytes, seconds of all-reduce and the
  // share of it hidden behind backward ("" single-process).
  std::string comm_summary() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, world_ = 1;
};

}  // namespace mg::example
