// distributed_sampler (distributed_sampler.h): rank and world size from the group, the other
// settings checked for agreement across ranks.
#include "mixgrad/distributed/distributed_sampler.h"

#include "mixgrad/core/factory.h"
#include "mixgrad/distributed/error.h"

namespace mg::distributed {

std::shared_ptr<data::DistributedSampler> distributed_sampler(ProcessGroup& pg, int64_t dataset_size,
                                                              data::DistributedSamplerOptions options) {
  const bool unset = options.rank == 0 && options.world_size == 1;
  const bool bad_rank = !(unset || (options.rank == pg.rank() && options.world_size == pg.world_size()));
  const std::string bad_rank_error =
      str_cat("distributed_sampler: options give rank ", options.rank, " of ", options.world_size,
              " but the process group has rank ", pg.rank(), " of ", pg.world_size(),
              "\n  hint: leave .rank and .world_size unset; they come from the group");
  options.rank = pg.rank();
  options.world_size = pg.world_size();
  // Every rank's [dataset_size, shuffle, seed, drop_last, bad rank options], compared on every
  // rank. A rank's own refusal is thrown after the exchange too, so that every rank leaves this
  // call together (thrown before it, the peers' all_gather would pair with that rank's next call).
  const std::vector<int64_t> mine{dataset_size, options.shuffle, static_cast<int64_t>(options.seed),
                                  options.drop_last, bad_rank};
  // [W, 5] i64 on the host, exchanged on the group's device (an NCCL group refuses host tensors).
  const Tensor all = pg.all_gather(from_vector<int64_t>(mine, {5}).to(pg.collective_device())).to(Device::cpu());
  const int64_t* p = all.data<int64_t>();
  MG_CHECK(!bad_rank, Error, bad_rank_error);
  for (int64_t r = 0; r < pg.world_size(); ++r) {
    MG_CHECK(p[r * 5 + 4] == 0, distributed::DistributedError, "distributed_sampler: rank ", pg.rank(), ": rank ", r,
             " passed .rank and .world_size that are not its group's; its own error says which");
  }
  bool same = true;
  for (int64_t r = 1; r < pg.world_size(); ++r) {
    for (int k = 0; k < 4; ++k) same = same && p[r * 5 + k] == p[k];
  }
  if (!same) {
    std::string rows;
    for (int64_t r = 0; r < pg.world_size(); ++r) {
      const int64_t* q = p + r * 5;
      rows += str_cat("\n  rank ", r, ": dataset_size ", q[0], ", shuffle ", q[1] ? "true" : "false", ", seed ",
                      static_cast<uint64_t>(q[2]), ", drop_last ", q[3] ? "true" : "false");
    }
    MG_THROW(distributed::DistributedError, "distributed_sampler: rank ", pg.rank(),
             ": the ranks passed different settings, so their shards would overlap or miss examples:", rows,
             "\n  hint: give every rank the same dataset, seed, shuffle and drop_last");
  }
  return std::make_shared<data::DistributedSampler>(dataset_size, options);
}

}  // namespace mg::distributed
