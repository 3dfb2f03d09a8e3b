// Normalisation layers, embedding lookup and dropout (the norm op group).
//
//   mg::Tensor y = mg::layer_norm(x, {768}, w, b);          // x [B, T, 768]
//   mg::Tensor z = mg::batch_norm(h, w, b, rm, rv, /*training=*/true);
//
// The one decision a reader must know: statistics are always computed in f32 (f64 for f64 inputs)
// inside the kernel, whatever the storage dtype; batch_norm keeps its input's dtype (Keep policy)
// and accepts f32 weights and running statistics next to an f16/bf16 input. Backward rules are
// composites of public ops (so double backward works).
#pragma once
#include <cstdint>

#include "core/generator.h"
#include "core/tensor.h"

namespace mg {

// Layer normalisation over the trailing dims `normalized_shape` of x [..., *normalized_shape]:
// y = (x - mean) / sqrt(var + eps) * weight + bias (biased var). weight/bias: normalized_shape
// or undefined. Statistics in f32 (f64 for f64). Returns y with x's shape and dtype.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

// RMS normalisation over the trailing dims: y = x / sqrt(mean(x^2) + eps) * weight.
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                double eps = 1e-5);

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

// Rows of weight [V, D] picked by i64/i32 indices [...]: returns [..., D] in weight's dtype.
// Rows at padding_idx (-1: none) receive no gradient. Out-of-range indices throw IndexError.
Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx = -1);

// Zeroes each element with probability p and scales the rest by 1 / (1 - p) while training.
// Element i's decision depends only on (seed, offset, i) of the Philox stream of `gen` (default
// generator when null), so it is reproducible from the seed. Eval or p == 0: x itself; p == 1: zeros.
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);

}  // namespace mg
