// plan_buckets (ddp_buckets.h): parameters in the given order into per-dtype buckets closed at the cap.
#include "mixgrad/distributed/ddp_buckets.h"

#include <map>

#include "mixgrad/core/error.h"

namespace mg::distributed {

BucketPlan plan_buckets(const std::vector<BucketParam>& params, int64_t cap_bytes, std::optional<DType> reduce_dtype,
                        const std::vector<int>& order_arg) {
  MG_CHECK(cap_bytes > 0, Error, "DistributedDataParallel: bucket_cap_bytes must be positive, got ", cap_bytes);
  std::vector<int> order = order_arg;
  if (order.empty()) {
    for (int i = int(params.size()) - 1; i >= 0; --i) order.push_back(i);
  }
  std::vector<bool> seen(params.size(), false);
  MG_ASSERT(order.size() == params.size(), "plan_buckets: the order lists ", order.size(), " of ", params.size(),
            " parameters");
  for (int i : order) {
    MG_ASSERT(i >= 0 && std::size_t(i) < params.size() && !seen[std::size_t(i)], "plan_buckets: bad order entry ", i);
    seen[std::size_t(i)] = true;
  }
  BucketPlan plan;
  plan.bucket_of.assign(params.size(), -1);
  plan.slot_of.assign(params.size(), -1);
  std::map<DType, int> open;  // grad dtype -> its open bucket
  for (int i : order) {
    const BucketParam& p = params[std::size_t(i)];
    const DType comm = reduce_dtype.value_or(p.dtype);
    const int64_t bytes = p.numel * int64_t(dtype_size(comm));
    auto it = open.find(p.dtype);
    if (it != open.end()) {
      const BucketLayout& b = plan.buckets[std::size_t(it->second)];
      if (b.numel > 0 && (b.numel * int64_t(dtype_size(comm)) + bytes) > cap_bytes) {
        open.erase(it);
        it = open.end();
      }
    }
    if (it == open.end()) {
      plan.buckets.push_back({.grad_dtype = p.dtype, .comm_dtype = comm});
      it = open.emplace(p.dtype, int(plan.buckets.size()) - 1).first;
    }
    BucketLayout& b = plan.buckets[std::size_t(it->second)];
    plan.bucket_of[std::size_t(i)] = it->second;
    plan.slot_of[std::size_t(i)] = int(b.params.size());
    b.params.push_back(i);
    b.offsets.push_back(b.numel);
    b.numel += p.numel;
  }
  return plan;
}

}  // namespace mg::distributed
