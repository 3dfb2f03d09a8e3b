// ProcessGroupNccl: the ProcessGroup for CUDA tensors over NCCL (cuda/nccl_comm.h), one device
// per rank. The ranks meet in the TcpStore: rank 0 makes NCCL's unique id and publishes it there.
// Dtypes: all_reduce and reduce_scatter take f64, f32, f16, bf16, i64 and i32, f16/bf16 reduced
// natively by NCCL (one rounding per hop, as Gloo's native path; AllReduceOptions.reduce_in_f32
// widens them first), avg as ncclAvg; broadcast and all_gather take every dtype.
// Decision: collectives are stream-ordered, as NCCL is: each is enqueued on the current CUDA
// stream of the group's device and returns; its result is valid for any later work on that
// stream (the tensor's memory stays reserved until the collective is done). A watchdog thread
// follows every collective in flight (a CUDA event) and the communicator's asynchronous error:
// a collective not done within the timeout, or an NCCL error (a peer died), aborts the
// communicator (ncclCommAbort: the kernels waiting for a peer exit, so nothing hangs) and the
// group's next call throws DistributedTimeoutError / DistributedError. barrier(), shutdown() and
// NcclOptions.blocking_wait wait on the host, bounded by the same timeout.
// No CUDA or NCCL header appears here; a build without NCCL compiles this and throws on creation.
//
//   auto pg = mg::distributed::init_process_group({.backend = "nccl"});  // device LOCAL_RANK
//   mg::Tensor g = mg::ones({1024}, {.dtype = mg::DType::BF16, .device = mg::Device::cuda(pg_device)});
//   pg->all_reduce(g, mg::distributed::ReduceOp::Avg);                   // on current_stream()
#pragma once
#include <functional>
#include <memory>

#include "mixgrad/cuda/host/nccl_types.h"
#include "mixgrad/distributed/call_check.h"
#include "mixgrad/distributed/process_group.h"
#include "mixgrad/distributed/tcp_store.h"

namespace mg::cuda {
struct NcclUniqueId;
}

namespace mg::distributed {

struct NcclOptions {
  // Bound of the rendezvous, of the communicator's creation and of every collective.
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  // The CUDA device of this rank; -1: the calling thread's current device.
  int device = -1;
  // Wait on the host for each collective to finish (an error or timeout then throws from that
  // very call, as PyTorch's TORCH_NCCL_BLOCKING_WAIT); costs a host synchronisation per call.
  bool blocking_wait = false;
  // How often the watchdog looks at the collectives in flight.
  std::chrono::milliseconds poll_interval = std::chrono::milliseconds(2);
  // The prefix of this group's keys in the store. Empty: "mg/pg/nccl/<world_size>/". Groups that
  // share a store need distinct prefixes; new_group chooses them.
  std::string store_prefix;
  // Before each collective the ranks exchange a 32-byte description of their call through the
  // store (distributed/call_check.h) and every rank throws the same DistributedError when they
  // differ, instead of NCCL waiting for the watchdog's timeout (NCCL has no such check: ranks
  // passing different sizes hang, or read past a buffer). Costs a host round trip to the store per
  // collective (1 set, 1 wait, world_size gets) and 32 bytes per rank and call kept in the store,
  // so it is off unless MG_DIST_DEBUG=1 is set in the environment (read when the options are made).
  bool check_consistency = dist_debug_from_environment();
};

// The ReduceOp -> NCCL mapping ProcessGroupNccl uses (one to one; avg is ncclAvg).
cuda::NcclRedOp nccl_red_op(ReduceOp op);

// The unique-id exchange: rank 0 calls make() and publishes the bytes under
// "<prefix><generation>/id" in `store` (prefix: "mg/pg/nccl/<world_size>/" when empty); every
// other rank reads them (waiting up to the store's timeout). The generation counts the NCCL
// groups made on this store under the prefix (so a second group gets a fresh id), agreed through
// store.add.
cuda::NcclUniqueId exchange_nccl_unique_id(TcpStore& store, int rank, int world_size,
                                           const std::function<cuda::NcclUniqueId()>& make,
                                           const std::string& prefix = "");

class ProcessGroupNccl : public ProcessGroup {
 public:
  // Joins the group on options.device: checks the arguments (mg::Error), that NCCL and the
  // device are usable (DeviceError saying why, e.g. in a build without NCCL), exchanges the
  // unique id and creates the communicator, within the timeout (DistributedTimeoutError).
  ProcessGroupNccl(std::shared_ptr<TcpStore> store, int rank, int world_size, NcclOptions options = {});
  ~ProcessGroupNccl() override;  // aborts the communicator unless shutdown() ran (never blocks)

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string backend() const override { return "nccl"; }
  std::chrono::milliseconds timeout() const override { return options_.timeout; }
  int device() const { return device_; }
  Device collective_device() const override { return Device::cuda(device_); }

  using ProcessGroup::all_reduce;
  using ProcessGroup::reduce_scatter;
  void all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum) override;
  void broadcast(Tensor& tensor, int root = 0) override;
  Tensor all_gather(const Tensor& input) override;
  Tensor reduce_scatter(const Tensor& input, ReduceOp op = ReduceOp::Sum) override;
  void barrier() override;
  // A barrier, then ncclCommFinalize (flushes the queue) and ncclCommDestroy, bounded by the
  // timeout (the communicator is aborted when it runs out). Idempotent.
  void shutdown() override;
  // A group with a communicator of its own (a fresh unique id through this group's store, under
  // a prefix unique to this call, see ProcessGroup::new_group) on the same device; options as
  // this group's.
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks = {}) override;

 private:
  struct Impl;
  // Checks the group is usable, then runs `enqueue` and hands the collective to the watchdog;
  // `keep` are the tensors its kernels read or write.
  template <typename F>
  void run(const char* what, std::vector<Tensor> keep, F&& enqueue);
  void check_tensor(const char* what, const Tensor& t) const;
  // check_tensor, plus a dtype and op NCCL reduces (all_reduce, reduce_scatter).
  void check_reducible(const char* what, const Tensor& t, ReduceOp op) const;
  // NcclOptions.check_consistency: compares the ranks' calls through the store.
  // A non-null `refusal` (this rank's checks failed) is rethrown after the exchange (call_check.h).
  void agree(const char* what, const Tensor* t, ReduceOp op, int root, const std::exception_ptr& refusal);

  int rank_;
  int world_size_;
  NcclOptions options_;
  int device_ = 0;
  std::shared_ptr<TcpStore> store_;
  std::string prefix_;        // this group's keys in the store
  uint64_t groups_made_ = 0;  // new_group calls so far (the same count on every rank)
  uint64_t calls_checked_ = 0;  // collectives compared so far (check_consistency)
  std::unique_ptr<Impl> impl_;
};

}  // namespace mg::distributed
