// ProcessGroup's option overloads, shared by every backend: reduce_in_f32 widens an f16/bf16
// tensor to f32, runs the backend's own reduction on it and rounds once on the way back; and
// new_group's argument checks and store key prefixes, shared by both backends.
#include "mixgrad/distributed/process_group.h"

#include <algorithm>

#include "mixgrad/autograd/grad_mode.h"

namespace mg::distributed {

void ProcessGroup::all_reduce(Tensor& tensor, const AllReduceOptions& options) {
  if (!options.reduce_in_f32 || !tensor.defined() || !is_low_precision(tensor.dtype())) {
    all_reduce(tensor, options.op);
    return;
  }
  NoGradGuard no_grad;
  Tensor wide = tensor.to(DType::F32);  // same shape, f32: the accumulation dtype
  all_reduce(wide, options.op);
  tensor.copy_(wide);                   // the one rounding
}

Tensor ProcessGroup::reduce_scatter(const Tensor& input, const AllReduceOptions& options) {
  if (!options.reduce_in_f32 || !input.defined() || !is_low_precision(input.dtype())) {
    return reduce_scatter(input, options.op);
  }
  NoGradGuard no_grad;
  return reduce_scatter(input.to(DType::F32), options.op).to(input.dtype());
}

std::shared_ptr<ProcessGroup> ProcessGroup::new_group(const std::vector<int>&) {
  MG_THROW(NotImplementedError, "ProcessGroup::new_group: the ", backend(), " process group cannot make subgroups");
}

std::vector<int> new_group_members(const char* who, const std::vector<int>& ranks, int world_size) {
  std::vector<int> members = ranks;
  if (members.empty()) {
    for (int r = 0; r < world_size; ++r) members.push_back(r);
  }
  std::sort(members.begin(), members.end());
  for (std::size_t i = 0; i < members.size(); ++i) {
    MG_CHECK(members[i] >= 0 && members[i] < world_size, Error, who, "::new_group: rank ", members[i],
             " is not a rank of this group, [0, ", world_size, ")");
    MG_CHECK(i == 0 || members[i] != members[i - 1], Error, who, "::new_group: rank ", members[i],
             " is listed twice");
  }
  return members;
}

std::string new_group_prefix(const std::string& parent, uint64_t index, const std::vector<int>& members) {
  std::string list;
  for (int r : members) {
    if (!list.empty()) list += ',';
    list += std::to_string(r);
  }
  // The ranks in the key: members that passed different lists never meet (they time out naming
  // the ranks that did not come) instead of joining a group of another shape.
  return parent + "group" + std::to_string(index) + "[" + list + "]/";
}

}  // namespace mg::distributed
