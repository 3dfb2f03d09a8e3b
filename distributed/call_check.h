// The per-call consistency check of the process groups: before a collective each rank describes
// its call in a fixed 32-byte CallHeader (collective, op, root, dtype, element count, shape hash),
// the ranks exchange the headers, and when they differ every rank throws the same
// DistributedError naming each rank's call, before any data is sent.
// Decision: the description and the verdict are shared; the exchange is the backend's.
// ProcessGroupGloo exchanges through a small Gloo all_gather (GlooOptions.check_consistency, on
// by default); ProcessGroupNccl, whose collectives are asynchronous on the device, through the
// rendezvous store (check_calls_through_store: a host round trip per call, so opt-in with
// NcclOptions.check_consistency or MG_DIST_DEBUG=1).
//
// A rank whose own argument checks refuse its input still takes part in the exchange, with
// `refused` set, and then rethrows its own error; the other ranks throw a DistributedError naming
// it. So a refusal uses up the same call on every rank: without this, the refusing rank's next
// call was matched with its peers' current one, and every later result was silently another
// step's (refusal_of and agree_or_rethrow below).
//
//   const CallHeader h = make_call_header("all_reduce", &t, ReduceOp::Sum, 0);
//   check_calls_through_store(store, "mg/pg/nccl/2/calls/", seq, rank, world, h, "ProcessGroupNccl");
#pragma once
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "mixgrad/core/tensor.h"
#include "mixgrad/distributed/reduce_op.h"
#include "mixgrad/distributed/tcp_store.h"

namespace mg::distributed {

// What one rank passes to a collective (fixed size, so the exchange itself cannot mismatch).
struct CallHeader {
  uint16_t kind = 0;     // all_reduce, broadcast, all_gather, reduce_scatter, barrier
  uint16_t refused = 0;  // 1: this rank's argument checks refused its input
  uint32_t dtype = 0;
  uint32_t op = 0;
  int32_t root = 0;
  int64_t numel = 0;
  uint64_t shape_hash = 0;
};
static_assert(sizeof(CallHeader) == 32);

// `what` is one of the five collective names; `t` null for barrier (an undefined tensor is
// described as empty). `refused`: this rank's checks refused its input.
CallHeader make_call_header(const char* what, const Tensor* t, ReduceOp op, int root, bool refused = false);

// Runs a collective's local argument checks: null when they pass, else the mg::Error they threw.
template <typename Checks>
std::exception_ptr refusal_of(Checks&& checks) {
  try {
    checks();
    return nullptr;
  } catch (const Error&) {
    return std::current_exception();
  }
}

// After the exchange of `all` (every rank's header): rethrows this rank's own refusal, else throws
// call_mismatch's DistributedError when the headers differ (another rank refused, or the calls
// differ). `refusal` null: this rank's checks passed.
void agree_or_rethrow(const std::vector<CallHeader>& all, const std::exception_ptr& refusal, const char* who,
                      const char* what, int rank);

// Empty when every header equals the first; else the "nothing was sent" error every rank throws
// (the same text on every rank but for `rank`), starting with "<who>::<what>: rank <rank>: ".
std::string call_mismatch(const std::vector<CallHeader>& all, const char* who, const char* what, int rank);

// The NCCL group's exchange: sets "<prefix><seq>/<rank>" to `mine`, waits for every rank's key
// (up to the store's timeout: DistributedTimeoutError naming the missing ranks' keys), and throws
// call_mismatch's DistributedError when they differ (agree_or_rethrow). Cost: 1 set, 1 wait and world_size gets per
// call, a round trip to the store's host each; the keys stay in the store (32 bytes per rank and
// call).
void check_calls_through_store(TcpStore& store, const std::string& prefix, uint64_t seq, int rank, int world_size,
                               const CallHeader& mine, const std::exception_ptr& refusal, const char* who,
                               const char* what);

// True when the environment variable MG_DIST_DEBUG is "1" (NcclOptions.check_consistency's default).
bool dist_debug_from_environment();

}  // namespace mg::distributed
