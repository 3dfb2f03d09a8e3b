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
//   const CallHeader h = make_call_header("all_reduce", &t, ReduceOp::Sum, 0);
//   check_calls_through_store(store, "mg/pg/nccl/2/calls/", seq, rank, world, h, "ProcessGroupNccl");
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mixgrad/core/tensor.h"
#include "mixgrad/distributed/reduce_op.h"
#include "mixgrad/distributed/tcp_store.h"

namespace mg::distributed {

// What one rank passes to a collective (fixed size, so the exchange itself cannot mismatch).
struct CallHeader {
  uint32_t kind = 0;  // all_reduce, broadcast, all_gather, reduce_scatter, barrier
  uint32_t dtype = 0;
  uint32_t op = 0;
  int32_t root = 0;
  int64_t numel = 0;
  uint64_t shape_hash = 0;
};
static_assert(sizeof(CallHeader) == 32);

// `what` is one of the five collective names; `t` null for barrier.
CallHeader make_call_header(const char* what, const Tensor* t, ReduceOp op, int root);

// Empty when every header equals the first; else the "nothing was sent" error every rank throws
// (the same text on every rank but for `rank`), starting with "<who>::<what>: rank <rank>: ".
std::string call_mismatch(const std::vector<CallHeader>& all, const char* who, const char* what, int rank);

// The NCCL group's exchange: sets "<prefix><seq>/<rank>" to `mine`, waits for every rank's key
// (up to the store's timeout: DistributedTimeoutError naming the missing ranks' keys), and throws
// call_mismatch's DistributedError when they differ. Cost: 1 set, 1 wait and world_size gets per
// call, a round trip to the store's host each; the keys stay in the store (32 bytes per rank and
// call).
void check_calls_through_store(TcpStore& store, const std::string& prefix, uint64_t seq, int rank, int world_size,
                               const CallHeader& mine, const char* who, const char* what);

// True when the environment variable MG_DIST_DEBUG is "1" (NcclOptions.check_consistency's default).
bool dist_debug_from_environment();

}  // namespace mg::distributed
