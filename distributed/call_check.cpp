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
  if (h.refused) s += " (refused by that rank's checks; its error says why)";
  return s;
}

}  // namespace

CallHeader make_call_header(const char* what, const Tensor* t, ReduceOp op, int root, bool refused) {
  CallHeader h;
  for (uint16_t k = 0; k < 5; ++k) {
    if (std::strcmp(kKinds[k], what) == 0) h.kind = k;
  }
  h.refused = refused ? 1 : 0;
  h.op = uint32_t(op);
  h.root = root;
  if (t && t->defined()) {
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
  std::string calls, refusers;
  for (std::size_t r = 0; r < all.size(); ++r) {
    const CallHeader& h = all[r];
    calls += str_cat("\n  rank ", r, ": ", describe_header(h, h.kind != kBarrier));
    if (r > 0 && h.numel == all[0].numel && h.shape_hash != all[0].shape_hash) calls += " (another shape)";
    if (h.refused) refusers += str_cat(refusers.empty() ? "" : ", ", r);
  }
  if (!refusers.empty()) {
    return str_cat(who, "::", what, ": rank ", rank, ": rank ", refusers,
                   " refused its input, so this call was abandoned on every rank; nothing was sent:", calls,
                   "\n  hint: rank ", refusers, "'s own error says what was wrong");
  }
  return str_cat(who, "::", what, ": rank ", rank,
                 ": the ranks called different collectives or passed different tensors; nothing was sent:", calls,
                 "\n  hint: every rank must call the same collectives in the same order with the same shapes and dtypes");
}

void agree_or_rethrow(const std::vector<CallHeader>& all, const std::exception_ptr& refusal, const char* who,
                      const char* what, int rank) {
  if (refusal) std::rethrow_exception(refusal);
  const std::string error = call_mismatch(all, who, what, rank);
  if (!error.empty()) throw DistributedError(error);
}

void check_calls_through_store(TcpStore& store, const std::string& prefix, uint64_t seq, int rank, int world_size,
                               const CallHeader& mine, const std::exception_ptr& refusal, const char* who,
                               const char* what) {
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
  agree_or_rethrow(all, refusal, who, what, rank);
}

bool dist_debug_from_environment() {
  const char* v = std::getenv("MG_DIST_DEBUG");
  return v != nullptr && std::string(v) == "1";
}

}  // namespace mg::distributed
