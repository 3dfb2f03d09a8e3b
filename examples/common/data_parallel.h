// DataParallel: what a training example needs to run unchanged under mixgrad-run. Started
// plainly (no WORLD_SIZE, or WORLD_SIZE=1) it is a single process and does nothing; started by
// `mixgrad-run --nproc-per-node N` it joins the process group, wraps the model in
// DistributedDataParallel, gives each rank its shard of every epoch through a
// data::DistributedSampler, and sums numbers over ranks for the global throughput.
// Decision: --batch-size is the global batch; each rank's loader takes batch / W examples per
// step from its DistributedSampler shard (the same seeded per-epoch shuffle on every rank, cut to
// a multiple of W so the shards are disjoint; rank r takes positions r, r + W, ... of it). So
// global step k trains on exactly the examples one process's step k would, at any world size:
// the learning rate, the schedule and --train-examples mean the same, and a checkpoint (rank 0's,
// holding the loader position in global steps) resumes on any number of ranks
// (reshard_loader_state). Rank 0 alone prints the normal logs and writes checkpoints. Builds
// without the distributed layer (no Gloo) run single-process and refuse WORLD_SIZE > 1 with a hint.
//
//   DataParallel dp = DataParallel::from_environment();
//   data::DataLoaderOptions o = dp.loader_options(train_set->size(), global_batch, seed);  // [B/W] per rank
//   data::DataLoader loader(train_set, o);
//   optim::Optimizer& opt = dp.make_optimizer(groups, make_sgd, flags.get_bool("zero"));
//   ... amp::initialize(model, opt, ...);
//   dp.wrap(model, {&opt});                                // after amp::initialize
//   if (dp.is_main()) std::printf(...);
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/state_dict.h"
#include "data/distributed_sampler.h"
#include "data/loader.h"
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

  // A DataParallel with rank `rank` of `world` for the sharding only, with no process group
  // (tests, and programs started by a launcher of their own): loader_options() shards, wrap(),
  // no_sync(), sync_buffers() and sum() do what they do single-process.
  static DataParallel sharding_only(int rank, int world);

  // This rank's examples per step: global_batch / W. Throws mg::Error naming `flag` when the
  // global batch does not split evenly over the ranks.
  int64_t rank_batch(int64_t global_batch, const std::string& flag = "--batch-size") const;
  // The training loader of this rank: batch rank_batch(global_batch), its DistributedSampler shard
  // (shuffled by `seed` per epoch, drop_last: every rank has floor(N / W) examples, disjoint from
  // the others'), full batches only, `seed` for the datasets' augmentation. One process: the same
  // order as a loader with .shuffle = true. With a group the sampler comes from
  // distributed::distributed_sampler, which checks that every rank passed the same size and seed
  // (a collective: every rank calls it).
  data::DataLoaderOptions loader_options(int64_t dataset_size, int64_t global_batch, uint64_t seed) const;
  // The training optimizer over `groups`, made by `make` and kept by this object (the reference
  // lives as long as it does). With `zero` under a group (--zero): a
  // distributed::ZeroRedundantOptimizer whose shard make() builds, and the shard is returned —
  // call this before amp::initialize (it broadcasts rank 0's weights). Else make(groups) itself
  // (`zero` on one process: nothing to shard, the plain optimizer).
  using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<optim::ParamGroupSpec>&)>;
  optim::Optimizer& make_optimizer(const std::vector<optim::ParamGroupSpec>& groups, const OptimizerFactory& make,
                                   bool zero);
  // Whether make_optimizer sharded the optimizer (ZeRO).
  bool sharded() const;
  // A line for the run's header on what --zero did ("" when it was not asked for): the shard of
  // rank 0, or that one process has nothing to shard.
  std::string zero_summary(const optim::Optimizer& opt, bool requested) const;
  // The optimizer's state dict in the unsharded layout, for rank 0's checkpoint: under ZeRO
  // gathered from every rank's shard (a collective: every rank calls it, rank 0 gets the dict);
  // else opt.state_dict() on rank 0. Other ranks get an empty dict.
  StateDict optimizer_state(const optim::Optimizer& opt);
  // Loads such a dict (saved on any number of ranks, with or without ZeRO): under ZeRO each rank
  // keeps its shard's part; else opt.load_state_dict(state).
  void load_optimizer_state(optim::Optimizer& opt, const StateDict& state);
  // optim::clip_grad_norm_ of `params` (opt's parameters or amp::master_params(opt)), or under
  // ZeRO the clip over every rank's shard (a collective); returns the total norm (0-d).
  Tensor clip_grad_norm_(const optim::Optimizer& opt, const Tensors& params, double max_norm);
  // Wraps `model` in DistributedDataParallel (after amp::initialize; the optimizers' O2 master
  // weights are broadcast from rank 0 with it, except a ZeRO shard's, which holds its own only);
  // a no-op single-process.
  void wrap(const std::shared_ptr<nn::Module>& model, std::vector<optim::Optimizer*> optimizers = {});
  // While the returned handle lives, backward accumulates gradients locally (gradient
  // accumulation: all micro-batches but the last); null single-process.
  [[nodiscard]] std::shared_ptr<void> no_sync();
  // Rank 0's batch-norm running statistics (and other buffers) on every rank.
  void sync_buffers();
  // The sum of `value` over ranks (value itself single-process).
  double sum(double value);
  // Whether `flag` is set on any rank (a collective: every rank calls it; the flag itself
  // single-process). The examples agree on a Ctrl-C with it, so every rank stops at one step.
  bool any(bool flag);
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

// A loader state saved by rank 0 of a run on W ranks with batch b (DataLoader::state) made
// loadable by `loader`, a loader of loader_options() on W' ranks with batch b': when the global
// batches agree (W·b = W'·b') the position — epoch and global step — is the same, so the batch
// size and sampler world size are rewritten to the loader's; anything else is returned unchanged
// and DataLoader::load_state refuses it with its own message. A state saved by a one-process
// loader with .shuffle = true and no sampler (the examples before they sharded) is read as the
// one-rank sampler's with the same seed, which gives the same order.
StateDict reshard_loader_state(const StateDict& saved, const data::DataLoader& loader);

}  // namespace mg::example
