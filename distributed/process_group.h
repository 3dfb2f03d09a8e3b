// ProcessGroup: the collectives one process shares with its peers (rank in [0, world_size)).
// The interface every backend implements: ProcessGroupGloo (CPU tensors, TCP) and
// ProcessGroupNccl (CUDA tensors); DistributedDataParallel and SyncBatchNorm are written against it.
// Every rank must call the same collectives in the same order with tensors of the same shape and
// dtype (the shapes differ only where a collective says so).
// Decision: collectives are blocking and work in place on the caller's tensors (the result of
// all_reduce and broadcast overwrites the input on every rank), as torch.distributed's defaults;
// a failure (a peer died, the timeout passed) throws and leaves the group broken: every later
// call throws DistributedError, because peers can no longer agree on which step they are at.
//
//   auto pg = mg::distributed::init_process_group();    // from RANK, WORLD_SIZE, MASTER_*
//   pg->all_reduce(grad, mg::distributed::ReduceOp::Avg);
//   mg::Tensor all = pg->all_gather(local);              // [world_size, *local.shape]
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "mixgrad/core/tensor.h"
#include "mixgrad/distributed/reduce_op.h"

namespace mg::distributed {

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // "gloo" or "nccl".
  virtual std::string backend() const = 0;
  // Where the tensors of this group's collectives live: the CPU (Gloo), or the CUDA device the
  // group's communicator is bound to (NCCL). Library code that exchanges a few host numbers
  // (distributed_sampler's settings) moves them there and back.
  virtual Device collective_device() const { return Device::cpu(); }

  // Combines `tensor` across ranks with `op`; every rank receives the result in `tensor`.
  // f16/bf16 are communicated in their own dtype (one rounding per hop, see reduce_op.h).
  virtual void all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum) = 0;
  // The same with options: options.reduce_in_f32 reduces an f16/bf16 tensor as a widened f32
  // copy (twice the bytes) and rounds once into `tensor`. Backends need not override it.
  virtual void all_reduce(Tensor& tensor, const AllReduceOptions& options);
  // Copies root's `tensor` into every rank's `tensor`.
  virtual void broadcast(Tensor& tensor, int root = 0) = 0;
  // Returns [world_size, *input.shape]: row r is rank r's input. Every rank's input has the same
  // shape and dtype.
  virtual Tensor all_gather(const Tensor& input) = 0;
  // input [world_size * n, ...]: the reduction over ranks of the input's r-th block of n rows
  // lands in rank r's result [n, ...].
  virtual Tensor reduce_scatter(const Tensor& input, ReduceOp op = ReduceOp::Sum) = 0;
  // The same with options (reduce_in_f32 as for all_reduce; the result keeps input's dtype).
  virtual Tensor reduce_scatter(const Tensor& input, const AllReduceOptions& options);
  // Returns once every rank has entered the barrier.
  virtual void barrier() = 0;

  // A barrier, then closes the connections (and, on rank 0, the store). Idempotent; after it,
  // collectives throw DistributedError. The destructor closes without the barrier.
  virtual void shutdown() = 0;

  // Bound of every collective: a peer that does not take part in time is a
  // DistributedTimeoutError.
  virtual std::chrono::milliseconds timeout() const = 0;

  // A new group of `ranks` (ranks of this group, distinct, in [0, world_size); empty: all of
  // them) with connections of its own, so the two groups can be used at the same time from two
  // threads (torch.distributed.new_group). Its ranks are numbered by position in sorted `ranks`.
  // Every rank of this group must call new_group, in the same order and with the same `ranks`,
  // members or not (it meets the other members through the rendezvous store, under a key prefix
  // that the call's position and `ranks` make unique); ranks outside `ranks` get nullptr and
  // communicate nothing. Members that never arrive are a DistributedTimeoutError.
  // The default throws NotImplementedError (a backend that cannot make one).
  //   auto sub = pg->new_group({0, 2});   // rank 0 and 2 of pg: ranks 0 and 1 of sub; nullptr on rank 1
  virtual std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks = {});
};

// new_group's argument checks, shared by the backends: `ranks` sorted (empty: every rank of
// `world_size`); mg::Error naming `who` for a rank out of range or given twice.
std::vector<int> new_group_members(const char* who, const std::vector<int>& ranks, int world_size);
// The store key prefix of the `index`-th group made from the group with prefix `parent`.
std::string new_group_prefix(const std::string& parent, uint64_t index, const std::vector<int>& members);

}  // namespace mg::distributed
