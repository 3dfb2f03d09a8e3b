// InstanceNorm1d / InstanceNorm2d / InstanceNorm3d: each (sample, channel) normalised over its own positions, as
// PyTorch's with its defaults (affine = false, track_running_stats = false): group_norm with one
// group per channel (ops/norm.h; its fused backward, f32 statistics for f16/bf16, Keep policy).
// Unbatched input ([C, L] / [C, H, W] / [C, D, H, W]) is a batch of one. With track_running_stats, as PyTorch's:
// training normalises with the instance statistics and moves running_mean / running_var toward
// their batch average (running = (1 - momentum) running + momentum mean over samples of each
// instance's mean / unbiased variance, computed in f32, f64 for f64); eval normalises with the
// running statistics (batch_norm's eval path). num_batches_tracked is kept for PyTorch's state
// dict and, as there, never counts. An empty batch leaves them unchanged (PyTorch's become NaN).
//
//   auto norm = nn::make<nn::InstanceNorm2d>({.num_features = 64, .affine = true});
#pragma once
#include <optional>
#include <string>

#include "mixgrad/nn/module.h"

namespace mg::nn {

// PyTorch's F.instance_norm, the layers' computation: x [N, C, *] (at least one spatial dim).
// use_input_stats: each (sample, channel) normalised over its own positions (more than one), and
// running_mean / running_var, where given, moved toward the batch average of the instance
// statistics by `momentum` (0: left alone); otherwise normalised with the running statistics
// (both required). weight, bias: [C] or undefined. The input's dtype is kept.
Tensor instance_norm(const Tensor& x, const Tensor& running_mean = Tensor(), const Tensor& running_var = Tensor(),
                     const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool use_input_stats = true,
                     double momentum = 0.1, double eps = 1e-5);

struct InstanceNormOptions {
  int64_t num_features = 0;          // C
  double eps = 1e-5;
  // The running statistics' update rate, in [0, 1]; std::nullopt: they never change, as PyTorch's
  // InstanceNorm with momentum=None (it passes 0: instance norm counts no batches to average over).
  std::optional<double> momentum = 0.1;
  bool affine = false;               // per-channel weight (ones) and bias (zeros)
  bool track_running_stats = false;  // running_mean (zeros) and running_var (ones) buffers
};

class InstanceNorm : public UnaryModule {
 public:
  using Options = InstanceNormOptions;
  Tensor forward(const Tensor& x) override;
  // Running statistics back to mean 0, variance 1 and the counter to 0 (no-op without them).
  void reset_running_stats();
  // reset_running_stats, and weight 1, bias 0 with affine (PyTorch's reset_parameters).
  void reset_parameters();

  Tensor weight, bias;  // [C] with affine, else undefined
  Tensor running_mean, running_var, num_batches_tracked;  // [C], [C], [] with track_running_stats

 protected:
  InstanceNorm(std::string type, int64_t spatial_dims, Options options);
  std::string extra_repr() const override;
  // As BatchNorm's: a state dict without num_batches_tracked loads and keeps the counter.
  bool state_may_be_missing(const std::string& name) const override { return name == "num_batches_tracked"; }

 private:
  int64_t spatial_dims_;
  Options options_;
};

// x [N, C, L] or [C, L].
class InstanceNorm1d : public InstanceNorm {
 public:
  explicit InstanceNorm1d(Options options) : InstanceNorm("InstanceNorm1d", 1, options) {}
};

// x [N, C, H, W] or [C, H, W].
class InstanceNorm2d : public InstanceNorm {
 public:
  explicit InstanceNorm2d(Options options) : InstanceNorm("InstanceNorm2d", 2, options) {}
};

// x [N, C, D, H, W] or [C, D, H, W].
class InstanceNorm3d : public InstanceNorm {
 public:
  explicit InstanceNorm3d(Options options) : InstanceNorm("InstanceNorm3d", 3, options) {}
};

}  // namespace mg::nn
