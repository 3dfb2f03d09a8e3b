// DataParallel (data_parallel.h). The distributed layer exists only in builds with Gloo
// (MG_HAVE_DISTRIBUTED, set by examples/common/CMakeLists.txt); without it WORLD_SIZE > 1 is an
// error naming the build option.
#include "examples/common/data_parallel.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/factory.h"

#ifdef MG_HAVE_DISTRIBUTED
#include "distributed/ddp.h"
#include "distributed/init.h"
#endif

namespace mg::example {
namespace {

// Examples rank, rank + W, ... of a dataset.
class StrideShard final : public data::Dataset {
 public:
  StrideShard(std::shared_ptr<const data::Dataset> base, int rank, int world)
      : base_(std::move(base)), rank_(rank), world_(world) {}
  int64_t size() const override { return base_->size() / world_; }
  data::Batch get_batch(const std::vector<int64_t>& indices, const data::BatchContext& ctx) const override {
    std::vector<int64_t> mapped;
    mapped.reserve(indices.size());
    for (int64_t i : indices) {
      MG_CHECK(i >= 0 && i < size(), IndexError, name(), ": index ", i, " is out of range [0, ", size(), ")");
      mapped.push_back(i * world_ + rank_);
    }
    return base_->get_batch(mapped, ctx);
  }
  std::string name() const override { return "StrideShard(" + base_->name() + ")"; }

 private:
  std::shared_ptr<const data::Dataset> base_;
  int rank_, world_;
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

}  // namespace

struct DataParallel::Impl {
#ifdef MG_HAVE_DISTRIBUTED
  std::shared_ptr<distributed::ProcessGroup> group;
  std::unique_ptr<distributed::DistributedDataParallel> ddp;
#endif
};

DataParallel::DataParallel() : impl_(std::make_unique<Impl>()) {}
DataParallel::~DataParallel() {
#ifdef MG_HAVE_DISTRIBUTED
  if (impl_) {
    impl_->ddp.reset();
    if (impl_->group) impl_->group->shutdown();
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

std::shared_ptr<const data::Dataset> DataParallel::shard(std::shared_ptr<const data::Dataset> dataset) const {
  if (!active()) return dataset;
  return std::make_shared<StrideShard>(std::move(dataset), rank_, world_);
}

void DataParallel::wrap(const std::shared_ptr<nn::Module>& model, std::vector<optim::Optimizer*> optimizers) {
#ifdef MG_HAVE_DISTRIBUTED
  if (active()) {
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
  if (active()) {
    Tensor t = from_vector<double>({value}, {1});
    impl_->group->all_reduce(t, distributed::ReduceOp::Sum);
    return t.data<double>()[0];
  }
#endif
  return value;
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
