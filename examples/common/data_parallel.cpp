// DataParallel (data_parallel.h). The distributed layer exists only in builds with Gloo
// (MG_HAVE_DISTRIBUTED, set by examples/common/CMakeLists.txt); without it WORLD_SIZE > 1 is an
// error naming the build option.
#include "examples/common/data_parallel.h"

#include <iostream>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/factory.h"
#include "optim/clip_grad.h"

#ifdef MG_HAVE_DISTRIBUTED
#include "distributed/ddp.h"
#include "distributed/distributed_sampler.h"
#include "distributed/init.h"
#include "distributed/zero.h"
#endif

namespace mg::example {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

}  // namespace

struct DataParallel::Impl {
  std::unique_ptr<optim::Optimizer> optimizer;  // make_optimizer's, unsharded
#ifdef MG_HAVE_DISTRIBUTED
  std::shared_ptr<distributed::ProcessGroup> group;
  std::unique_ptr<distributed::ZeroRedundantOptimizer> zero;  // make_optimizer's with --zero
  std::unique_ptr<distributed::DistributedDataParallel> ddp;
#endif
};

DataParallel::DataParallel() : impl_(std::make_unique<Impl>()) {}
DataParallel::~DataParallel() {
#ifdef MG_HAVE_DISTRIBUTED
  if (impl_) {
    impl_->ddp.reset();
    impl_->zero.reset();
    // A destructor must not throw (std::terminate would hide the error that is unwinding): a
    // failed shutdown barrier (a peer gone, or in another collective) is reported and dropped.
    if (impl_->group) {
      try {
        impl_->group->shutdown();
      } catch (const std::exception& e) {
        std::cerr << "data parallel: shutting the process group down failed: " << e.what() << "\n";
      }
    }
  }
#endif
}
DataParallel::DataParallel(DataParallel&&) noexcept = default;
DataParallel& DataParallel::operator=(DataParallel&&) noexcept = default;

DataParallel DataParallel::from_environment() {
  DataParallel dp;
  const int world = env_int("WORLD_SIZE", 1);
  if (world <= 1) return dp;
#ifdef MG_HAVE_DISTRIBUTED
  dp.impl_->group = distributed::init_process_group();
  dp.rank_ = dp.impl_->group->rank();
  dp.world_ = dp.impl_->group->world_size();
#else
  MG_THROW(Error, "WORLD_SIZE=", world, " but this build has no distributed layer",
           "\n  hint: install libgloo-dev and configure with -DMG_WITH_GLOO=ON");
#endif
  return dp;
}

DataParallel DataParallel::sharding_only(int rank, int world) {
  MG_CHECK(world >= 1 && rank >= 0 && rank < world, Error, "DataParallel::sharding_only: rank ", rank,
           " is not in [0, ", world, ")");
  DataParallel dp;
  dp.rank_ = rank;
  dp.world_ = world;
  return dp;
}

int64_t DataParallel::rank_batch(int64_t global_batch, const std::string& flag) const {
  const int64_t below = global_batch / world_ * world_, above = below + world_;
  MG_CHECK(global_batch % world_ == 0, Error, "DataParallel: ", flag, " ", global_batch,
           " (the global batch) does not split evenly over ", world_, " ranks", "\n  hint: use a multiple of ", world_,
           ", e.g. ", below > 0 ? std::to_string(below) + " or " : std::string(), above);
  return global_batch / world_;
}

data::DataLoaderOptions DataParallel::loader_options(int64_t dataset_size, int64_t global_batch, uint64_t seed) const {
  // drop_last: the epoch's order is cut to a multiple of W instead of padded with repeats, so the
  // shards are disjoint and global step k holds the examples of one process's step k.
  const data::DistributedSamplerOptions sampling{.rank = rank_, .world_size = world_, .shuffle = true, .seed = seed,
                                                 .drop_last = true};
  std::shared_ptr<const data::DistributedSampler> sampler;
#ifdef MG_HAVE_DISTRIBUTED
  if (impl_->group) {
    sampler = distributed::distributed_sampler(*impl_->group, dataset_size,
                                               {.shuffle = true, .seed = seed, .drop_last = true});
  }
#endif
  if (!sampler) sampler = std::make_shared<data::DistributedSampler>(dataset_size, sampling);
  return {.batch_size = rank_batch(global_batch), .shuffle = false, .drop_last = true, .seed = seed, .sampler = sampler};
}

StateDict reshard_loader_state(const StateDict& saved, const data::DataLoader& loader) {
  const auto* sampler = dynamic_cast<const data::DistributedSampler*>(loader.options().sampler.get());
  if (!sampler || !saved.ints.count("batch_size") || !saved.ints.count("shuffle")) return saved;
  StateDict s = saved;
  if (!s.ints.count("sampler_world_size") && s.ints.at("shuffle") == 1 && s.ints.count("seed")) {
    // Saved before the examples sharded through a sampler (one process, .shuffle = true): its order,
    // epoch_permutation(N, seed, epoch), is the one-rank sampler's with that seed.
    s.ints["shuffle"] = 0;
    s.ints["sampler_world_size"] = 1;
    s.ints["sampler_shuffle"] = 1;
    s.ints["sampler_seed"] = s.ints.at("seed");
    s.ints["sampler_drop_last"] = 1;
  }
  const auto world = s.ints.find("sampler_world_size");
  if (world == s.ints.end()) return saved;
  const int64_t here_batch = loader.options().batch_size, here_world = sampler->options().world_size;
  // Another global batch is another position: returned as saved, load_state says why.
  if (s.ints.at("batch_size") * world->second != here_batch * here_world) return saved;
  s.ints["batch_size"] = here_batch;
  s.ints["sampler_world_size"] = here_world;
  return s;
}

optim::Optimizer& DataParallel::make_optimizer(const std::vector<optim::ParamGroupSpec>& groups,
                                               const OptimizerFactory& make, bool zero) {
#ifdef MG_HAVE_DISTRIBUTED
  MG_CHECK(!impl_->optimizer && !impl_->zero, Error, "DataParallel::make_optimizer: called twice");
  if (zero && impl_->group) {
    impl_->zero = std::make_unique<distributed::ZeroRedundantOptimizer>(groups, impl_->group, make);
    return impl_->zero->local();
  }
#else
  MG_CHECK(!impl_->optimizer, Error, "DataParallel::make_optimizer: called twice");
  (void)zero;
#endif
  impl_->optimizer = make(groups);
  MG_CHECK(impl_->optimizer != nullptr, Error, "DataParallel::make_optimizer: the factory returned null");
  return *impl_->optimizer;
}

bool DataParallel::sharded() const {
#ifdef MG_HAVE_DISTRIBUTED
  return impl_->zero != nullptr;
#else
  return false;
#endif
}

std::string DataParallel::zero_summary(const optim::Optimizer& opt, bool requested) const {
  if (!requested) return "";
  if (!sharded()) return "--zero: one process, nothing to shard; the optimizer is not sharded\n";
#ifdef MG_HAVE_DISTRIBUTED
  int64_t mine = 0, all = 0;
  for (const Tensor& p : opt.parameters()) mine += p.numel();
  for (const Tensor& p : impl_->zero->parameters()) all += p.numel();
  char line[256];
  std::snprintf(line, sizeof line,
                "ZeRO stage 1: optimizer state and master weights sharded over %d ranks; rank %d holds %zu of %zu "
                "parameter tensors (%.1f%% of the elements)\n",
                world_, rank_, opt.parameters().size(), impl_->zero->parameters().size(),
                all ? 100.0 * double(mine) / double(all) : 0.0);
  return line;
#else
  return "";
#endif
}

Tensor DataParallel::clip_grad_norm_(const optim::Optimizer& opt, const Tensors& params, double max_norm) {
#ifdef MG_HAVE_DISTRIBUTED
  if (impl_->zero && &impl_->zero->local() == &opt) return impl_->zero->clip_grad_norm_(max_norm);
#endif
  return optim::clip_grad_norm_(params, max_norm);
}

StateDict DataParallel::optimizer_state(const optim::Optimizer& opt) {
#ifdef MG_HAVE_DISTRIBUTED
  if (impl_->zero && &impl_->zero->local() == &opt) return impl_->zero->state_dict(/*to=*/0);
#endif
  return is_main() ? opt.state_dict() : StateDict{};
}

void DataParallel::load_optimizer_state(optim::Optimizer& opt, const StateDict& state) {
#ifdef MG_HAVE_DISTRIBUTED
  if (impl_->zero && &impl_->zero->local() == &opt) {
    impl_->zero->load_state_dict(state);
    return;
  }
#endif
  opt.load_state_dict(state);
}

void DataParallel::wrap(const std::shared_ptr<nn::Module>& model, std::vector<optim::Optimizer*> optimizers) {
#ifdef MG_HAVE_DISTRIBUTED
  if (impl_->zero) {
    // A shard holds its own masters only; ZeRO broadcast rank 0's weights before amp made them.
    std::erase(optimizers, &impl_->zero->local());
  }
  if (impl_->group) {
    impl_->ddp = std::make_unique<distributed::DistributedDataParallel>(
        model, impl_->group, distributed::DdpOptions{.optimizers = std::move(optimizers)});
  }
#else
  (void)model;
  (void)optimizers;
#endif
}

std::shared_ptr<void> DataParallel::no_sync() {
#ifdef MG_HAVE_DISTRIBUTED
  if (impl_->ddp) return std::make_shared<distributed::DistributedDataParallel::NoSyncGuard>(*impl_->ddp);
#endif
  return nullptr;
}

void DataParallel::sync_buffers() {
#ifdef MG_HAVE_DISTRIBUTED
  if (impl_->ddp) impl_->ddp->sync_buffers();
#endif
}

double DataParallel::sum(double value) {
#ifdef MG_HAVE_DISTRIBUTED
  if (impl_->group) {
    Tensor t = from_vector<double>({value}, {1});
    impl_->group->all_reduce(t, distributed::ReduceOp::Sum);
    return t.data<double>()[0];
  }
#endif
  return value;
}

bool DataParallel::any(bool flag) {
#ifdef MG_HAVE_DISTRIBUTED
  if (impl_->group) {
    Tensor t = from_vector<int64_t>({flag ? 1 : 0}, {1});
    impl_->group->all_reduce(t, distributed::ReduceOp::Max);
    return t.data<int64_t>()[0] != 0;
  }
#endif
  return flag;
}

void DataParallel::quiet_unless_main() const {
  if (active() && !is_main()) {
    std::fflush(stdout);
    MG_CHECK(std::freopen("/dev/null", "w", stdout) != nullptr, Error, "DataParallel: cannot silence rank ", rank_,
             "'s standard output");
  }
}

std::string DataParallel::label() const {
  return "rank " + std::to_string(rank_) + "/" + std::to_string(world_);
}

std::string DataParallel::comm_summary() const {
#ifdef MG_HAVE_DISTRIBUTED
  if (impl_->ddp) {
    const distributed::BackwardTimeline& t = impl_->ddp->last_timeline();
    int64_t bytes = 0;
    for (const auto& b : t.buckets) bytes += b.bytes;
    char line[256];
    std::snprintf(line, sizeof line,
                  "last step: %zu buckets, %.1f MiB all-reduced in %.1f ms, %.0f%% of it behind backward "
                  "(first gradient to end of backward %.1f ms, then %.1f ms waiting)",
                  t.buckets.size(), double(bytes) / double(1 << 20), 1e3 * t.total_comm_s(),
                  t.total_comm_s() > 0 ? 100.0 * t.hidden_comm_s() / t.total_comm_s() : 0.0, 1e3 * t.backward_end_s,
                  1e3 * (t.reduced_s - t.backward_end_s));
    return line;
  }
#endif
  return "";
}

}  // namespace mg::example
