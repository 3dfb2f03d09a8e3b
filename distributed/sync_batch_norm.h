// SyncBatchNorm: batch normalisation whose training statistics are those of the global batch —
// every rank's examples together — as if one process ran BatchNorm on the concatenated batch.
// Decision: the synchronisation is a strategy installed in nn::BatchNorm (nn::BatchNormSync), not
// a new module that replaces the old one, because C++ models hold their layers in typed members
// (ResNet's std::shared_ptr<BatchNorm2d> bn1) that a replacement in the module tree would not
// reach. convert_sync_batchnorm(model, pg) therefore converts every BatchNorm in place: the same
// objects, parameters, buffers and names, so state dicts, optimizers holding the parameters and
// amp's keep-batch-norm-f32 rule (nn::is_batch_norm) are untouched. SyncBatchNorm is the layer
// for models written from scratch: a BatchNorm (any input [N, C, ...]) born synchronised.
//
// Forward (training): each rank computes its per-channel count, mean and M2 = Σ(x - mean)² in f32
// (f64 for f64 inputs) by the summation rule of docs/numerics.md; one all_gather ([W, 2C+1] f64)
// gives every rank all of them, and Chan's formula combines them in f64, in rank order (the same
// bits on every rank). The output is normalised by the batch_norm kernel with those statistics
// (Keep policy: f16/bf16 in, f16/bf16 out, f32 statistics). Running statistics move exactly as
// BatchNorm's on the global batch (unbiased variance with the global count).
// Backward: the two per-channel sums of the batch-norm backward, Σ dy and Σ dy·(x - mean), are
// all-reduced (one all_reduce of [2C]) and dx uses the global ones; weight and bias get this
// rank's share (Σ over its own examples), which DistributedDataParallel's gradient all-reduce
// completes, as in PyTorch.
// Every rank must call each synchronised layer in the same order, also with an empty batch
// (N = 0), and run its backward; eval mode uses the running statistics and communicates nothing.
//
//   auto pg = mg::distributed::init_process_group();
//   mg::nn::models::ResNet model(mg::nn::models::ResNetConfig::cifar(20));
//   int64_t n = mg::distributed::convert_sync_batchnorm(model, pg);   // 19 BatchNorms, in place
//   auto bn = std::make_shared<mg::distributed::SyncBatchNorm>(mg::nn::BatchNormOptions{.features = 64}, pg);
#pragma once
#include <memory>

#include "mixgrad/distributed/process_group.h"
#include "mixgrad/nn/normalization.h"

namespace mg::distributed {

// The training-mode batch norm of `x` [N, C, ...] over every rank's batch (N may differ between
// ranks and be 0 on some). weight, bias: [C] or undefined; running_mean, running_var: [C] or
// undefined, updated in place. Returns y in x's dtype, differentiable in x, weight and bias.
// Without a group or with world size 1 it is mg::batch_norm(..., training=true, ...).
// Throws ShapeError when all ranks together have at most 1 value per channel (every rank throws).
Tensor sync_batch_norm(const std::shared_ptr<ProcessGroup>& pg, const Tensor& x, const Tensor& weight,
                       const Tensor& bias, const Tensor& running_mean, const Tensor& running_var,
                       double momentum = 0.1, double eps = 1e-5);

// The nn::BatchNormSync that calls sync_batch_norm on `pg`.
std::shared_ptr<nn::BatchNormSync> make_batch_norm_sync(std::shared_ptr<ProcessGroup> pg);
// The group a make_batch_norm_sync strategy communicates on; nullptr for another strategy.
ProcessGroup* batch_norm_sync_group(const nn::BatchNormSync& sync);

// A BatchNorm over [N, C, ...] (2 to 5 dims) synchronised over `pg`; with a null group it is a
// plain BatchNorm. State dict keys as BatchNorm's: weight, bias, running_mean, running_var,
// num_batches_tracked.
class SyncBatchNorm : public nn::BatchNorm {
 public:
  explicit SyncBatchNorm(Options options, std::shared_ptr<ProcessGroup> pg = nullptr);
};

// Synchronises every BatchNorm (BatchNorm1d, BatchNorm2d, SyncBatchNorm) in `model`, the model
// itself included, over `pg`, in place; returns how many it converted. Converting twice
// re-targets the layers to the new group. A null group restores local statistics.
int64_t convert_sync_batchnorm(nn::Module& model, std::shared_ptr<ProcessGroup> pg);

}  // namespace mg::distributed
