// Normalisation layers: BatchNorm1d/2d/3d, LayerNorm, GroupNorm, RMSNorm. Statistics are computed in
// f32 (f64 for f64) whatever the input dtype; batch norm accepts an f16/bf16 input next to f32
// parameters and statistics (keep it f32 with `m.to(DType::F16, nn::is_batch_norm)`).
//
//   auto bn = nn::make<nn::BatchNorm2d>({.features = 16});
//   auto ln = nn::make<nn::LayerNorm>({.shape = {256}, .eps = 1e-12});
#pragma once
#include <optional>

#include "mixgrad/nn/module.h"

namespace mg::nn {

struct BatchNormOptions {
  int64_t features = 0;                // channels C
  double eps = 1e-5;
  std::optional<double> momentum = 0.1;  // nullopt: cumulative average over all batches seen
  bool affine = true;                  // learnable weight (ones) and bias (zeros)
  bool track_running_stats = true;     // false: batch statistics in eval mode too
};

// The training-mode batch normalisation of a BatchNorm whose statistics span more than this
// process's batch. nn knows no processes: distributed/ implements it (SyncBatchNorm,
// convert_sync_batchnorm) and installs it with BatchNorm::set_sync. Same contract as
// mg::batch_norm(x, weight, bias, running_mean, running_var, /*training=*/true, momentum, eps),
// with the statistics taken over the global batch.
class BatchNormSync {
 public:
  virtual ~BatchNormSync() = default;
  // x [N, C, ...] (N may be 0 on some ranks); weight, bias, running_mean, running_var: [C] or undefined.
  virtual Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                            const Tensor& running_var, double momentum, double eps) = 0;
  // Shown in the layer's repr, e.g. "sync=gloo:2".
  virtual std::string describe() const = 0;
};

// Shared body of BatchNorm1d and BatchNorm2d: parameters weight/bias [C], buffers running_mean
// (zeros), running_var (ones) and num_batches_tracked (i64 scalar), as PyTorch's state dict.
// Training normalises with the batch statistics and updates the running ones
// (running = (1 - momentum) running + momentum batch, unbiased variance); eval uses the running ones.
class BatchNorm : public UnaryModule {
 public:
  using Options = BatchNormOptions;
  Tensor forward(const Tensor& x) override;
  // Running statistics back to mean 0, variance 1 and the counter to 0 (no-op without them).
  void reset_running_stats();
  // reset_running_stats, and weight 1, bias 0 (PyTorch's reset_parameters).
  void reset_parameters();
  const Options& options() const { return options_; }
  // Changes the momentum of later training steps (nullopt: cumulative average), as assigning
  // PyTorch's `bn.momentum` does; nn::update_bn uses it.
  void set_momentum(std::optional<double> momentum);
  // Training-mode statistics through `sync` (over every rank's batch) instead of this batch alone;
  // eval mode never uses it. Null restores the local statistics.
  void set_sync(std::shared_ptr<BatchNormSync> sync) { sync_ = std::move(sync); }
  const std::shared_ptr<BatchNormSync>& sync() const { return sync_; }

  Tensor weight, bias;                                      // [C] or undefined
  Tensor running_mean, running_var, num_batches_tracked;    // [C], [C], [] (or undefined)

 protected:
  // `ranks`: the input ranks the layer accepts, e.g. {2, 3} for BatchNorm1d.
  BatchNorm(const char* type_name, Options options, std::vector<int64_t> ranks);
  std::string extra_repr() const override;
  // A state dict without num_batches_tracked (PyTorch before 0.4.1, many converted files) loads
  // and keeps the counter, as PyTorch's _NormBase.
  bool state_may_be_missing(const std::string& name) const override { return name == "num_batches_tracked"; }

 private:
  Options options_;
  std::vector<int64_t> ranks_;
  std::shared_ptr<BatchNormSync> sync_;
};

// Over [N, C] or [N, C, L].
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(Options options) : BatchNorm("BatchNorm1d", options, {2, 3}) {}
};

// Over [N, C, H, W].
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(Options options) : BatchNorm("BatchNorm2d", options, {4}) {}
};

// Over [N, C, D, H, W] (batch_norm is rank-generic: the same kernels and statistics).
class BatchNorm3d : public BatchNorm {
 public:
  explicit BatchNorm3d(Options options) : BatchNorm("BatchNorm3d", options, {5}) {}
};

namespace detail {
// Running statistics back to mean 0, variance 1 and the batch counter to 0, in place, without a
// gradient (the norm layers' reset_running_stats).
void reset_running_stats(Tensor& running_mean, Tensor& running_var, Tensor& num_batches_tracked);
}  // namespace detail

// `keep` predicate for Module::to: true for batch-norm layers (Apex's keep_batchnorm_fp32).
bool is_batch_norm(const Module& m);

struct LayerNormOptions {
  Shape shape;                    // the trailing dims normalised over, e.g. {768}
  double eps = 1e-5;
  bool elementwise_affine = true; // weight (ones) and bias (zeros) of `shape`
  bool bias = true;
};

class LayerNorm : public UnaryModule {
 public:
  using Options = LayerNormOptions;
  explicit LayerNorm(Options options);
  Tensor forward(const Tensor& x) override;
  void reset_parameters();  // weight 1, bias 0
  const Options& options() const { return options_; }

  Tensor weight, bias;  // `shape` or undefined

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

struct GroupNormOptions {
  int64_t groups = 0;    // must divide channels
  int64_t channels = 0;
  double eps = 1e-5;
  bool affine = true;    // per-channel weight (ones) and bias (zeros)
};

// Over [N, C, ...]: C split into `groups` groups, each normalised over its channels and positions.
class GroupNorm : public UnaryModule {
 public:
  using Options = GroupNormOptions;
  explicit GroupNorm(Options options);
  Tensor forward(const Tensor& x) override;
  void reset_parameters();  // weight 1, bias 0

  Tensor weight, bias;  // [C] or undefined

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

struct RMSNormOptions {
  Shape shape;
  std::optional<double> eps;  // unset: the machine epsilon of the math's dtype, as PyTorch's eps=None
  bool elementwise_affine = true;  // weight (ones)
};

// y = x / sqrt(mean(x^2 over `shape`) + eps) * weight.
class RMSNorm : public UnaryModule {
 public:
  using Options = RMSNormOptions;
  explicit RMSNorm(Options options);
  Tensor forward(const Tensor& x) override;
  void reset_parameters();  // weight 1

  Tensor weight;  // `shape` or undefined

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

struct LocalResponseNormOptions {
  int64_t size = 0;    // channels in each window, >= 1
  double alpha = 1e-4;
  double beta = 0.75;
  double k = 1.0;
};

// AlexNet's local response normalisation across channels (mg::local_response_norm): x [N, C, *].
class LocalResponseNorm : public UnaryModule {
 public:
  using Options = LocalResponseNormOptions;
  explicit LocalResponseNorm(Options options);
  Tensor forward(const Tensor& x) override;

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

}  // namespace mg::nn
