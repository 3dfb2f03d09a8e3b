// distributed_sampler(pg, ...): the data::DistributedSampler of this rank of a process group.
// Decision: the sampler itself lives in data/ and takes plain integers (data/ sits below
// distributed/); this wrapper fills rank and world size from the group and checks, with one
// small all_gather, that every rank passed the same dataset size, shuffle, seed and drop_last —
// ranks that disagree would read overlapping shards and silently train on the wrong data.
//
//   auto sampler = mg::distributed::distributed_sampler(*pg, dataset->size(), {.seed = 42});
//   mg::data::DataLoader loader(dataset, {.batch_size = 64, .sampler = sampler});
#pragma once
#include <memory>

#include "mixgrad/data/distributed_sampler.h"
#include "mixgrad/distributed/process_group.h"

namespace mg::distributed {

// `options.rank` and `options.world_size` are taken from `pg` (leave them unset; other values are an
// mg::Error). Every rank must call it (a collective). Throws DistributedError on every rank, listing
// each rank's values, when the ranks passed different sizes, seeds or flags.
std::shared_ptr<data::DistributedSampler> distributed_sampler(ProcessGroup& pg, int64_t dataset_size,
                                                              data::DistributedSamplerOptions options = {});

}  // namespace mg::distributed
