// Normalisation layers, embedding lookup and dropout (the norm op group).
//
//   mg::Tensor y = mg::layer_norm(x, {768}, w, b);          // x [B, T, 768]
//   mg::Tensor z = mg::batch_norm(h, w, b, rm, rv, /*training=*/true);
//
// The one decision a reader must know: statistics are always computed in f32 (f64 for f64 inputs)
// inside the kernel, whatever the storage dtype; batch_norm keeps its input's dtype (Keep policy)
// and accepts f32 weights and running statistics next to an f16/bf16 input. A first-order backward
// runs the fused *_backward ops below, which reuse the statistics the forward kernel returned; a
// backward with create_graph uses composites of public ops instead, so double backward works.
#pragma once
#include <optional>
#include <cstdint>

#include "mixgrad/core/generator.h"
#include "mixgrad/core/tensor.h"

namespace mg {

// Layer normalisation over the trailing dims `normalized_shape` of x [..., *normalized_shape]:
// y = (x - mean) / sqrt(var + eps) * weight + bias (biased var). weight/bias: normalized_shape
// or undefined. Statistics in f32 (f64 for f64). Returns y with x's shape and dtype.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

// RMS normalisation over the trailing dims: y = x / sqrt(mean(x^2) + eps) * weight. eps unset:
// the machine epsilon of the math's dtype (f64 for an f64 x, else f32: 1.19e-7), as PyTorch's
// eps=None.
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                std::optional<double> eps = std::nullopt);

// Batch normalisation of x [N, C, ...] per channel. weight/bias/running_mean/running_var: [C]
// (any floating dtype, typically f32 next to an f16 x) or undefined. Training: batch statistics
// (biased var normalises), running stats updated in place (no autograd):
//   running = (1 - momentum) * running + momentum * batch_stat  (unbiased var for running_var).
// Eval: normalises with the running stats (required). Returns x's dtype.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);

// Group normalisation of x [N, C, ...]: C split into num_groups groups, each normalised over its
// channels and spatial positions; then per-channel weight/bias [C] (or undefined).
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

// ---- fused first-order backward (one pass over grad and x, f32 accumulation) ----
// The backward rules call these when the backward is not itself recorded (create_graph = false);
// they are not differentiable (their outputs never require grad). mean and rstd are the statistics
// outputs 1 and 2 of the forward op, in f32 (f64 for f64 x). With xhat = (x - mean) * rstd,
// gxhat = grad * weight (grad when weight is undefined) and means over the N elements normalised
// together:
//   dx      = rstd * (gxhat - mean(gxhat) - xhat * mean(gxhat * xhat))
//   dweight = sum(grad * xhat),   dbias = sum(grad)   over every dim but the parameter's
//
//   mg::NormGrads g = mg::layer_norm_backward(gy, x, mean, rstd, {768}, w, /*with_dbias=*/true);
struct NormGrads {
  Tensor dx;       // x's shape and dtype (rounded once from the f32/f64 result)
  Tensor dweight;  // the parameter shape in the statistics dtype (f32, f64 for f64 x); defined iff weight is
  Tensor dbias;    // likewise; defined iff with_dbias
};

// grad, x: [..., *normalized_shape]; mean, rstd: [..., 1, ..., 1] (x's shape with the normalised
// sizes set to 1); weight: normalized_shape or undefined. Means over the normalised elements.
NormGrads layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                              const Shape& normalized_shape, const Tensor& weight = Tensor(),
                              bool with_dbias = false);

// Training mode only (eval statistics are constants: dx = grad * weight * invstd). grad, x: [N, C, ...];
// mean, invstd: [C] (the batch statistics); weight: [C] or undefined. Means per channel over N and
// the trailing dims.
NormGrads batch_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                              const Tensor& weight = Tensor(), bool with_dbias = false);

// grad, x: [N, C, ...]; mean, rstd: [N, num_groups]; weight: [C] or undefined (gxhat = grad * weight
// per channel). Means per (sample, group) over its C / num_groups channels and the trailing dims.
NormGrads group_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                              int64_t num_groups, const Tensor& weight = Tensor(), bool with_dbias = false);

// Rows of weight [V, D] picked by i64/i32 indices [...]: returns [..., D] in weight's dtype.
// The row at padding_idx (unset: none; negative counts from the end, as PyTorch's) receives no
// gradient. Out-of-range indices throw IndexError. scale_grad_by_freq (PyTorch's): each position's
// gradient is divided by how often its index occurs in `indices`, so frequent words do not dominate
// the table's update.
Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx = std::nullopt,
                 bool scale_grad_by_freq = false);

// Zeroes each element with probability p and scales the rest by 1 / (1 - p) while training.
// Element i's decision depends only on (seed, offset, i) of the Philox stream of `gen` (default
// generator when null), so it is reproducible from the seed. Eval or p == 0: x itself; p == 1: zeros.
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);
// dropout's gradient in one pass: grad * keep / (1 - p) with the scale in opmath (f32 for
// f16/bf16), rounded once, so it matches the forward's scaling (a 0-d bf16 scale would round
// 1 / 0.9 to 1.109375). keep: the bool mask dropout saved, grad's shape; p in [0, 1).
Tensor dropout_backward(const Tensor& grad, const Tensor& keep, double p);

}  // namespace mg
