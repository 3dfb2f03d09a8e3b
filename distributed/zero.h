// ZeroRedundantOptimizer: ZeRO stage 1 (Rajbhandari et al., 2020; PyTorch's
// torch.distributed.optim.ZeroRedundantOptimizer; Apex's DistributedFusedAdam shards the same
// state). Every rank keeps the optimizer state — and at O2 the f32 master weights — of its own
// shard of the parameters only, steps that shard, and broadcasts the updated parameters to the
// other ranks (those with requires_grad or a gradient: a frozen layer is sent only once, at
// construction). With AdamW at O2 that is 12 of the 14 bytes per parameter (f32 master, two f32
// moments; the bf16 weight stays replicated) divided by the number of ranks.
//
// Gradients are still averaged in full (DistributedDataParallel, or your own all_reduce), so the
// owner of a parameter computes exactly the update an unsharded optimizer computes: the trained
// weights are bitwise those of DDP with the same optimizer, at every opt level — without gradient
// clipping: clip_grad_norm_ here sums the shards' squares in f64, the unsharded clip in f32 chunks,
// so a clipped run differs in the last bits of the norm.
//
// Decision: the shard is an ordinary optimizer of optim/ (any of them), made by a factory from
// this rank's parameter groups, so amp::initialize, GradScaler, amp::scale_loss, LR schedulers and
// the state machine of master weights take `local()` unchanged; the broadcast is a step post-hook
// on it (Optimizer::register_step_post_hook), so every way of stepping it — opt.step(),
// GradScaler::step, a gated amp step — broadcasts. This object adds only what needs the other
// ranks: the partition, the broadcast, a gradient-norm clip over all shards and a state dict in
// the unsharded layout (so a checkpoint moves between ZeRO and plain runs, on any number of ranks).
//
//   auto pg = mg::distributed::init_process_group();
//   mg::distributed::ZeroRedundantOptimizer zero(model->parameters(), pg, [](const auto& shard) {
//     return std::make_unique<mg::optim::AdamW>(shard, mg::optim::AdamWOptions{.lr = 1e-3});
//   });
//   auto [net, opt] = mg::amp::initialize(model, zero.local(), {.opt_level = "O2"});  // after ZeRO
//   mg::distributed::DistributedDataParallel ddp(net, pg);   // no DdpOptions::optimizers: see below
//   for (...) {
//     opt.zero_grad();
//     mg::amp::scale_loss(loss_of(ddp.module()), opt).backward();   // DDP averages the gradients
//     zero.clip_grad_norm_(1.0);                                     // optional: over every shard
//     opt.step();                                                    // the shard, then the broadcast
//   }
//   mg::StateDict s = zero.state_dict(/*to=*/0);   // collective: the unsharded dict, on rank 0
//
// Order: construct it before amp::initialize. It broadcasts rank 0's parameters first, so the
// master weights amp then makes on each rank start from the same values; DistributedDataParallel's
// DdpOptions::optimizers must not list `local()` (it holds one rank's masters only: DDP refuses
// it, naming the difference).
#pragma once
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <vector>

#include "mixgrad/amp/unscale.h"
#include "mixgrad/core/state_dict.h"
#include "mixgrad/core/tensor.h"
#include "mixgrad/distributed/process_group.h"
#include "mixgrad/optim/optimizer.h"

namespace mg::distributed {

struct ZeroOptions {
  // Broadcast rank 0's parameters at construction (as DistributedDataParallel does), so every
  // rank starts from the same weights. Off: they must already be equal (not checked).
  bool broadcast_parameters = true;
};

// Which rank owns each parameter: the greedy partition PyTorch's ZeroRedundantOptimizer uses,
// over all groups together — parameters in decreasing size (ties: lower position first), each to
// the rank with the fewest elements so far (ties: the fewest parameters, then the lower rank).
// Deterministic from the sizes, so every rank computes the same one. owners[i] is the rank of
// parameter i (positions over all groups, in order). With at least world_size parameters every
// rank gets one or more. `trainable` (empty: all are): frozen parameters (requires_grad false) are
// placed after every trainable one, so with at least world_size trainable parameters every rank
// owns a trainable one — a shard of frozen ones only would have no gradient to step or to check
// for inf (GradScaler refuses that on its rank alone, and the others would wait).
std::vector<int> partition_parameters(const std::vector<int64_t>& numels, int world_size,
                                      const std::vector<bool>& trainable = {});

class ZeroRedundantOptimizer {
 public:
  // Makes the optimizer of one rank's shard from its groups (the given groups, in order, with
  // their options and only this rank's parameters; a group may be empty). It must keep the groups
  // and parameters as given: std::make_unique<optim::SGD>(shard, options) does.
  using Factory = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<optim::ParamGroupSpec>& shard)>;

  // Collective: every rank of `group` constructs it with the same parameters (number, shapes and
  // dtypes, in the same groups; checked: a DistributedError naming the difference), then rank 0's
  // values are broadcast (ZeroOptions::broadcast_parameters), the parameters are partitioned and
  // `make` builds this rank's optimizer. Refused: fewer parameters than ranks, a parameter given
  // twice, an undefined, non-floating or non-leaf one.
  // While it lives, an amp::NonfiniteReducer (amp/unscale.h) takes the maximum of every unscale's
  // inf/NaN count over the ranks: each rank unscales only its own shard's gradients, so an
  // overflow in one shard must skip the step on every rank (else the owner alone would skip, and
  // the others would wait in its broadcast). DistributedDataParallel installs an equivalent one.
  ZeroRedundantOptimizer(const std::vector<optim::ParamGroupSpec>& groups, std::shared_ptr<ProcessGroup> group,
                         Factory make, ZeroOptions options = {});
  ZeroRedundantOptimizer(const Tensors& params, std::shared_ptr<ProcessGroup> group, Factory make,
                         ZeroOptions options = {});
  // Removes the step hook and its non-finite reducer (amp::remove_nonfinite_reducer).
  ~ZeroRedundantOptimizer();
  ZeroRedundantOptimizer(const ZeroRedundantOptimizer&) = delete;
  ZeroRedundantOptimizer& operator=(const ZeroRedundantOptimizer&) = delete;

  // This rank's optimizer: step it, zero its gradients, hand it to amp, a GradScaler or a scheduler.
  optim::Optimizer& local() { return *local_; }
  const optim::Optimizer& local() const { return *local_; }
  ProcessGroup& group() const { return *group_; }
  // Every parameter, in the constructor's order (the model's tensors, also after amp casts them).
  const Tensors& parameters() const { return params_; }
  // The owner rank of each parameter (parallel to parameters()).
  const std::vector<int>& owners() const { return owners_; }
  // The positions (in parameters()) this rank owns, in order.
  const std::vector<int64_t>& owned_positions() const { return owned_; }

  // Sends every rank's shard of the parameters to the other ranks (collective; one broadcast per
  // rank and dtype). local().step() calls it; call it yourself after changing owned parameters
  // outside a step.
  void broadcast_parameters();

  // torch.nn.utils.clip_grad_norm_ over the gradients of every rank's shard: the norm of all
  // local() gradients together (the f32 master gradients at O2), each rank's sum of |g|^p (or
  // max |g|) in f64, all-reduced; every gradient scaled by min(1, max_norm / (total + 1e-6)), by 1
  // when the total is inf or NaN. Collective; returns the total (0-d f64 on the gradients' device).
  // With error_if_nonfinite a non-finite total throws (on every rank) and changes nothing. The
  // O2 checks of optim::clip_grad_norm_ (master gradients not synced yet) run on each shard and
  // are agreed: when one rank refuses, every rank throws.
  Tensor clip_grad_norm_(double max_norm, double norm_type = 2.0, bool error_if_nonfinite = false);

  // Collective: the state dict an unsharded optimizer of the same kind over parameters() would
  // have (optim::Optimizer::state_dict's layout, positions over all parameters), gathered from
  // every rank's shard, its tensors in host memory. On rank `to`, or on every rank when
  // to == -1; the others get an empty dict.
  StateDict state_dict(int to = -1);
  // Collective: loads an unsharded state dict (from state_dict() here, or from a plain optimizer
  // of the same kind, saved with any number of ranks): each rank keeps its positions' state and
  // masters, which local().load_state_dict checks, after the layout (the number of groups and
  // each group's positions). If any rank refuses, every rank throws (the refusing rank its own
  // error, the others a DistributedError naming it) and none has changed.
  void load_state_dict(const StateDict& state);

 private:
  std::vector<optim::ParamGroupSpec> specs_;  // the constructor's groups (all parameters)
  std::shared_ptr<ProcessGroup> group_;
  ZeroOptions options_;
  Tensors params_;              // every parameter, over all groups
  std::vector<int> owners_;     // parallel to params_
  std::vector<int64_t> owned_;  // positions of this rank's parameters, in order
  std::unique_ptr<optim::Optimizer> local_;
  int64_t hook_ = -1;
  int64_t reducer_handle_ = -1;  // amp::push_nonfinite_reducer's, or -1

  void check_same_parameters() const;
  Device comm_device() const;
  // Collective: the lowest rank with `failed` set, or -1.
  int first_failed_rank(bool failed) const;
  // Collective: rethrows `error` where it is set, and throws a DistributedError naming the first
  // failing rank on the others, when any rank failed `what`.
  void throw_if_any_failed(const std::exception_ptr& error, const char* what) const;
  // load_state_dict's rank-local part: this rank's positions, loaded into local().
  void load_local_part(const StateDict& state);
};

}  // namespace mg::distributed
