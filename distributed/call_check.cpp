// The per-call consistency check (call_check.h): the header, the verdict, and the store exchange
// of the NCCL group.
#include "mixgrad/distributed/call_check.h"

#include <cstdlib>
#include <cstring>

#include "mixgrad/distributed/error.h"

namespace mg::distributed {
namespace {

constexpr const char* kKinds[] = {"all_reduce", "broadcast", "all_gather", "reduce_scatter", "barrier"};
constexpr uint32_t kBarrier = 4;

std::string describe_header(const CallHeader& h, bool with_tensor) {
  std::string s = kKinds[h.kind < 5 ? h.kind : 0];
  if (h.kind == 0 || h.kind == 3) s += std::string(" ") + reduce_op_name(ReduceOp(h.op));
  if (h.kind == 1) s += " from root " + std::to_string(h.root);
  if (with_tensor) s += str_cat(" of ", h.numel, " ", dtype_name(DType(h.dtype)), " elements");
  return s;
}

}  // namespace

CallHeader make_call_header(const char* what, const Tensor* t, ReduceOp op, int root) {
  CallHeader h;
  for (uint32_t k = 0; k < 5; ++k) {
    if (std::strcmp(kKinds[k], what) == 0) h.kind = k;
  }
  h.op = uint32_t(op);
  h.root = root;
  if (t) {
    h.dtype = uint32_t(t->dtype());
    h.numel = t->numel();
    uint64_t x = 1469598103934665603ull;  // FNV-1a over the dims
    for (int64_t d : t->shape()) x = (x ^ uint64_t(d)) * 1099511628211ull;
    h.shape_hash = x ^ uint64_t(t->dim());
  }
  return h;
}

std::string call_mismatch(const std::vector<CallHeader>& all, const char* who, const char* what, int rank) {
  bool same = true;
  for (const auto& h : all) same = same && std::memcmp(&h, &all[0], sizeof(CallHeader)) == 0;
  if (same) return "";
  std::string calls;
  for (std::size_t r = 0; r < all.size(); ++r) {
    const CallHeader& h = all[r];
    calls += str_cat("\n  rank ", r, ": ", describe_header(h, h.kind != kBarrier));
    if (r > 0 && h.numel == all[0].numel && h.shape_hash != all[0].shape_hash) calls += " (another shape)";
  }
  return str_cat(who, "::", what, ": rank ", rank,
                 ": the ranks called different collectives or passed different tensors; nothing was sent:", calls,
                 "\n  hint: every rank must call the same collectives in the same order with the same shapes and dtypes");
}

void check_calls_through_store(TcpStore& store, const std::string& prefix, uint64_t seq, int rank, int world_size,
                               const CallHeader& mine, const char* who, const char* what) {
  const std::string base = prefix + std::to_string(seq) + "/";
  const char* bytes = reinterpret_cast<const char*>(&mine);
  store.set(base + std::to_string(rank), std::vector<char>(bytes, bytes + sizeof(CallHeader)));
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back(base + std::to_string(r));
  store.wait(keys);
  std::vector<CallHeader> all(static_cast<std::size_t>(world_size));
  for (int r = 0; r < world_size; ++r) {
    const std::vector<char> v = store.get(keys[std::size_t(r)]);
    MG_CHECK(v.size() == sizeof(CallHeader), distributed::DistributedError, who, "::", what, ": rank ", rank,
             " read a call description of ", v.size(), " bytes under '", keys[std::size_t(r)], "'");
    std::memcpy(&all[std::size_t(r)], v.data(), sizeof(CallHeader));
  }
  const std::string error = call_mismatch(all, who, what, rank);
  if (!error.empty()) throw DistributedError(error);
}

bool dist_debug_from_environment() {
  const char* v = std::getenv("MG_DIST_DEBUG");
  return v != nullptr && std::string(v) == "1";
}

}  // namespace mg::distributed
