// DistributedDataParallel: data-parallel training of one nn::Module replicated on every rank of a
// process group (Apex's and PyTorch's DDP). Each rank runs forward and backward on its own shard
// of the batch; the gradients are averaged across ranks during backward, so every replica's
// optimizer takes the same step as one process would on the whole batch.
//
//   auto pg = mg::distributed::init_process_group();
//   auto model = std::make_shared<Net>();
//   amp::initialize(model, opt, {.opt_level = "O2"});      // before wrapping, as Apex requires
//   mg::distributed::DistributedDataParallel ddp(model, pg);  // rank 0's weights everywhere
//   for (...) {
//     opt.zero_grad();
//     mg::Tensor loss = mg::cross_entropy((*model)(x_shard), y_shard);
//     mg::amp::scale_loss(loss, opt).backward();  // gradients averaged over ranks on return
//     opt.step();
//   }
//   if (pg->rank() == 0) mg::io::save_checkpoint("ckpt.safetensors", *model);  // no prefix
//
// Decisions a reader must know:
// - The wrapper is not a Module: the model is called directly and keeps its own state dict, so a
//   checkpoint saved by rank 0 loads into a single-process model unchanged.
// - Gradients travel in buckets (DdpOptions::bucket_cap_bytes, parameters in reverse order, one
//   dtype per bucket; after the first backward in the order the gradients arrived). A post-accumulate hook (autograd/hooks.h) copies each gradient into its
//   bucket; a full bucket is all-reduced (average) on a background thread (CommWorker) while
//   backward goes on, buckets in the same order on every rank. On CUDA (NCCL) the collectives
//   also run on a stream of their own, ordered after the gradients' kernels by events, so the
//   device overlaps them with the rest of backward too. An engine callback at the end of
//   backward launches what is left, waits for every bucket and writes the averages back into
//   .grad: when backward() returns, the gradients are reduced.
// - DDP communicates on a private group it makes from the user's at construction
//   (ProcessGroup::new_group: its own connections), through one background thread. The user's
//   group stays free for the training thread: SyncBatchNorm's forward and backward collectives
//   on it run while bucket all-reduces proceed on the private one.
// - At the end of each synchronised backward the ranks all-gather one byte per parameter (did it
//   get a gradient in this backward? has it a .grad?), so a parameter that got none on some rank
//   is a clear error on every rank (never a hang), or, with find_unused_parameters, contributes
//   its current .grad or zeros; a parameter without a gradient on every rank keeps none.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mixgrad/amp/unscale.h"
#include "mixgrad/core/tensor.h"
#include "mixgrad/cuda/cuda.h"
#include "mixgrad/distributed/comm_worker.h"
#include "mixgrad/distributed/ddp_buckets.h"
#include "mixgrad/distributed/process_group.h"
#include "mixgrad/nn/module.h"
#include "mixgrad/optim/optimizer.h"

namespace mg::distributed {

struct DdpOptions {
  // Bytes of communicated gradient per bucket (PyTorch's default of 25 MB, in MiB here).
  int64_t bucket_cap_bytes = int64_t(25) << 20;
  // Parameters that get no gradient in a backward contribute their current .grad (or zeros)
  // instead of being an error. Costs nothing extra here (the presence all-gather always runs)
  // except that their buckets are launched only at the end of backward.
  bool find_unused_parameters = false;
  // Reduce in this dtype instead of each gradient's own (f32: f16/bf16 gradients are widened
  // into f32 buckets and rounded back once; twice the bytes on the wire).
  std::optional<DType> reduce_dtype;
  // Install an amp::NonfiniteReducer (amp/unscale.h) while this object lives: the inf/NaN count
  // of every unscale is the maximum over ranks, so all ranks skip or all step, and their loss
  // scales stay equal. One i64 all-reduce per unscale on the host path; on CUDA (GradScaler's
  // sync-free device path) one [1] f32 max all-reduce of the device found-inf flag on DDP's
  // stream, ordered by events, with no host synchronisation.
  bool agree_found_inf = true;
  // The optimizers of the model. Their f32 master weights (O2, created by amp::initialize from
  // each rank's own initial weights) are broadcast from rank 0 too: the f16/bf16 model copies
  // alone cannot restore them. Without them a model with f16/bf16 parameters must already be
  // equal on every rank (checked; an error otherwise).
  std::vector<optim::Optimizer*> optimizers;
  // At the end of every synchronised backward (after the gradients are averaged) rank 0's
  // buffers (batch-norm running statistics) are broadcast, so every rank's next forward sees the
  // same model, as PyTorch's broadcast_buffers (which broadcasts before each forward: the same
  // values, since a training step's buffers change only in its forward). One broadcast per buffer
  // per step; off: each rank keeps its own statistics (sync_buffers() on demand).
  bool broadcast_buffers = true;
  // After the first synchronised backward, plan the buckets once more in the order the gradients
  // arrived in it (rank 0's order, broadcast), as PyTorch does: the first bucket then fills with
  // the first gradients of backward whatever order the model registered its parameters in. The
  // averages are the same either way (each element is averaged on its own).
  bool rebuild_buckets = true;
};

// When the last synchronised backward did what, in seconds since its first gradient hook.
struct BucketTiming {
  int64_t bytes = 0;       // of the communicated flat tensor
  int num_params = 0;
  double ready_s = 0;      // its last gradient arrived (or the end of backward filled it)
  double started_s = 0;    // the all-reduce began on the communication thread
  double finished_s = 0;   // and ended
  bool launched_in_backward = false;  // launched from a gradient hook, before backward ended
};
struct BackwardTimeline {
  std::vector<BucketTiming> buckets;  // in launch order
  double backward_end_s = 0;          // the engine finished the graph (the end callback began)
  double reduced_s = 0;               // every bucket reduced and copied back into .grad
  // Seconds of all-reduce that ran before backward_end_s (communication hidden behind backward)
  // and in total.
  double hidden_comm_s() const;
  double total_comm_s() const;
};

class DistributedDataParallel {
 public:
  // Checks that every rank has the same parameters and buffers (names, shapes, dtypes, in
  // order), then broadcasts rank 0's values of both (and of the optimizers' master weights),
  // plans the buckets and installs the hooks. Every rank of `group` must construct it (the
  // private group is made with group->new_group(): a rendezvous through the group's store).
  // A difference is a DistributedError on every rank, naming each rank's first differing entry,
  // before anything is broadcast. A group whose backend cannot make a new group (a user-defined
  // ProcessGroup) is used itself: then nothing else may use it while a backward runs, and a
  // SyncBatchNorm on it is refused (NotImplementedError).
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group,
                          DdpOptions options = {});
  // Removes the hooks and its found-inf reducer (amp::remove_nonfinite_reducer).
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  nn::Module& module() const { return *module_; }
  const std::shared_ptr<nn::Module>& module_ptr() const { return module_; }
  // The user's group, and the private group the gradients travel on (the same object only when
  // the user's group cannot make a new group).
  ProcessGroup& group() const { return *group_; }
  ProcessGroup& comm_group() const { return *comm_; }
  const DdpOptions& options() const { return options_; }

  // While the returned guard lives, backward only accumulates into .grad locally (gradient
  // accumulation); the first backward after it reduces the accumulated gradients.
  //   { auto guard = ddp.no_sync(); loss1.backward(); }   loss2.backward();  // reduces both
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.sync_) { ddp.sync_ = false; }
    ~NoSyncGuard() { ddp_.sync_ = previous_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }
  bool sync_enabled() const { return sync_; }

  // Broadcasts rank 0's buffers (batch-norm running statistics) to every rank: call before an
  // evaluation that every rank runs. Checkpoints need none (rank 0 writes its own).
  void sync_buffers();

  // The buckets as planned: parameter names per bucket, in launch order.
  std::vector<std::vector<std::string>> bucket_names() const;
  const BackwardTimeline& last_timeline() const { return timeline_; }
  int64_t reduced_backwards() const { return reduced_backwards_; }

 private:
  struct Param {
    Tensor tensor;
    std::string name;
    int bucket = 0;
    int64_t offset = 0;  // in the bucket's flat tensor
    uint64_t hook_id = 0;
    bool ready = false;  // its gradient of this backward is in the bucket
  };
  struct Bucket {
    BucketLayout layout;
    Tensor flat;  // [numel] comm_dtype
    int pending = 0;
    bool launched = false;
  };

  // A SyncBatchNorm on the group DDP communicates on would call collectives from the training
  // thread while the communication thread owns the group during backward: refused (only when
  // DDP could not make a private group).
  void check_no_sync_batch_norm_on_group() const;
  // Queue `job` on the communication thread (submit_comm), wait for the queued jobs (wait_comm),
  // or both (run_comm). On a CUDA model a job runs on comm_stream_, after the work queued on the
  // calling thread's current stream when it was submitted (an event), and wait_comm makes that
  // stream wait for comm_stream_ on the device: collectives are ordered after the kernels that
  // produced their inputs and before what follows, and overlap the backward kernels in between.
  void submit_comm(std::function<void()> job);
  void wait_comm();
  void run_comm(std::function<void()> job);
  // Sets buckets_ and each parameter's bucket and offset from plan_buckets(..., order).
  void plan(const std::vector<int>& order);
  void rebuild_buckets();
  void check_models_match();
  void check_low_precision_values();
  void broadcast_state();
  void on_grad_ready(int index);
  void copy_into_bucket(Param& p, const Tensor& grad);
  void launch_ready_buckets();
  void launch(int bucket, bool in_backward);
  void finish_backward();
  void reset_iteration();
  double since_start() const;

  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;  // the user's
  std::shared_ptr<ProcessGroup> comm_;   // DDP's own (group_->new_group()), or group_
  DdpOptions options_;
  Device device_;  // of every parameter, the buckets and the collectives' tensors
  cuda::Stream comm_stream_;  // CUDA models: the collectives' own stream (a side stream, as PyTorch's DDP)
  std::vector<Param> params_;
  std::vector<Bucket> buckets_;
  int next_launch_ = 0;
  std::vector<int> arrival_;  // parameters in the order their gradients arrived (until rebuilt)
  bool rebuilt_ = false;
  bool sync_ = true;
  bool in_iteration_ = false;  // a gradient hook fired in the running backward
  std::chrono::steady_clock::time_point start_;
  BackwardTimeline timeline_;
  int64_t reduced_backwards_ = 0;
  int64_t reducer_handle_ = -1;  // amp::push_nonfinite_reducer's, or -1
  CommWorker worker_;  // last: destroyed (joined) first, while everything its jobs touch exists
};

}  // namespace mg::distributed
