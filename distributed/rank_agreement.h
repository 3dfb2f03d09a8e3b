// compare_across_ranks: whether every rank of a group holds the same description of something
// (a model's parameters, an optimizer's parameter groups), and where they differ when they do.
// DistributedDataParallel and ZeroRedundantOptimizer check their inputs with it before the first
// broadcast, so a rank built differently gets an error naming the difference, never a hang or a
// silent mix of two models.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mixgrad/core/tensor.h"
#include "mixgrad/distributed/process_group.h"

namespace mg::distributed {

// Collective. One all_gather of a summary of `lines` ({count, bytes, hash, note}); only when some
// rank's differs, a second all_gather of the texts. Returns "" when every rank has the same lines
// and note, else (on every rank) a report: a line "\n  rank R: N entries (<note> <note_label>)" per
// rank, then "\n  first difference, entry i:" and each rank's line i ("(none)" past its end).
// `device`: the device the group communicates on.
std::string compare_across_ranks(ProcessGroup& group, Device device, const std::vector<std::string>& lines,
                                 int64_t note, const std::string& note_label);

}  // namespace mg::distributed
