// ProcessGroupGloo: the ProcessGroup for CPU tensors over Gloo's TCP transport (a full mesh of
// connections between the ranks, set up through the TcpStore rendezvous).
// Dtypes: all_reduce and reduce_scatter take f64, f32, f16, bf16, i64 and i32; broadcast and
// all_gather copy bytes and take every dtype.
// Decision: f16 and bf16 travel in their own dtype (half the bytes of f32): Gloo's ring calls
// reduce16 at every hop, which adds in f32 and rounds once (DESIGN §3: storage type != compute
// type), so W ranks round W-1 times. AllReduceOptions.reduce_in_f32 widens to f32 instead and
// rounds once, at twice the bytes. Either way the result is bitwise identical on every rank
// (Gloo's ring reduces each chunk once and then circulates it).
// No Gloo header appears here: users of the library need only mixgrad's headers.
//
//   auto store = std::make_shared<TcpStore>(TcpStoreOptions{.host = addr, .port = port, .is_server = rank == 0});
//   ProcessGroupGloo pg(store, rank, world_size, {.timeout = std::chrono::seconds(60)});
//   pg.all_reduce(t, ReduceOp::Sum);
#pragma once
#include <memory>

#include "mixgrad/distributed/process_group.h"
#include "mixgrad/distributed/tcp_store.h"

namespace mg::distributed {

struct GlooOptions {
  // Bound of the rendezvous and of every collective.
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  // The address peers reach this rank at. Empty: 127.0.0.1 when the store's host is a loopback
  // address, otherwise this machine's hostname.
  std::string hostname;
  // Or a network interface to bind ("eth0"); overrides hostname. Empty: not used.
  std::string iface;
  // Before each collective the ranks exchange a 32-byte description of their call (collective,
  // op, root, dtype, element count, shape) and every rank throws the same DistributedError when
  // they differ, instead of Gloo aborting the process (a size mismatch is an EnforceNotMet thrown
  // on Gloo's I/O thread) or a broadcast silently copying a prefix. Costs one small all_gather
  // per collective; the group stays usable after such an error.
  bool check_consistency = true;
  // The prefix of this group's keys in the store. Empty: "mg/pg/gloo/<world_size>/". Groups that
  // share a store need distinct prefixes; new_group chooses them.
  std::string store_prefix;
};

class ProcessGroupGloo : public ProcessGroup {
 public:
  // Joins the group: announces this rank in `store`, waits (up to the timeout) for every rank to
  // arrive, then connects to each peer. Throws DistributedTimeoutError naming the ranks that
  // never arrived, mg::Error for a bad rank or world size.
  ProcessGroupGloo(std::shared_ptr<TcpStore> store, int rank, int world_size, GlooOptions options = {});
  ~ProcessGroupGloo() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string backend() const override { return "gloo"; }
  std::chrono::milliseconds timeout() const override { return options_.timeout; }

  using ProcessGroup::all_reduce;      // the AllReduceOptions overloads
  using ProcessGroup::reduce_scatter;
  void all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum) override;
  void broadcast(Tensor& tensor, int root = 0) override;
  Tensor all_gather(const Tensor& input) override;
  Tensor reduce_scatter(const Tensor& input, ReduceOp op = ReduceOp::Sum) override;
  void barrier() override;
  void shutdown() override;
  // A group of its own Gloo context (a second full mesh of connections), rendezvoused in this
  // group's store under a prefix unique to this call (see ProcessGroup::new_group); options as
  // this group's.
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks = {}) override;

 private:
  struct Impl;
  // Runs one collective: checks the group is usable, translates Gloo's errors, marks the group
  // broken on failure.
  template <typename F>
  void run(const char* what, F&& body);
  // Exchanges and compares the ranks' call descriptions (GlooOptions.check_consistency).
  // A non-null `refusal` (this rank's checks failed) is rethrown after the exchange (call_check.h).
  void agree(const char* what, const Tensor* t, ReduceOp op, int root, const std::exception_ptr& refusal);
  // Reduces a contiguous CPU tensor of a reducible dtype (f64 f32 f16 bf16 i64 i32) in place.
  void reduce_in_place(Tensor& t, ReduceOp op);

  int rank_;
  int world_size_;
  GlooOptions options_;
  std::shared_ptr<TcpStore> store_;
  std::unique_ptr<Impl> impl_;
  std::string prefix_;       // this group's keys in the store
  uint64_t groups_made_ = 0;  // new_group calls so far (the same count on every rank)
  uint32_t next_tag_ = 0;
  std::string broken_;  // why the group is unusable ("" while it works)
};

}  // namespace mg::distributed
