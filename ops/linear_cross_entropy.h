// Fused, chunked linear + cross-entropy (PyTorch 2.15's F.linear_cross_entropy): the loss of
// cross_entropy(linear(input, weight, bias), target) without ever holding the whole [N, V] logits.
// The rows are processed in chunks; each chunk's logits give its loss and, right away, its share of
// the input, weight and bias gradients, which are kept (the size of the input and the weight) and
// scaled by the upstream gradient in backward. So a language-model head over a vocabulary of V
// classes holds chunk_rows x V logits at a time instead of N x V (the logits and their gradient
// are most of a BERT or GPT step's peak memory), at the unfused path's three GEMMs.
//
//   mg::Tensor loss = mg::linear_cross_entropy(hidden, decoder_weight, target,
//                                              {.bias = decoder_bias, .ignore_index = -100});
//
// Numerics: the same ops as the unfused path (linear, then the fused cross_entropy and its
// backward in f32 for f16/bf16), so autocast treats it as the two ops (the GEMMs in the low dtype,
// the softmax in f32). The difference: the weight and bias gradients are summed over chunks in
// f32 (f64 for f64) and rounded once at the end — one more rounding of each chunk's partial
// weight product in f16/bf16. The gradients are computed in the forward whenever an
// input needs one; a backward through them (double backward) is not offered.
#pragma once
#include <cstdint>

#include "mixgrad/core/tensor.h"
#include "mixgrad/ops/loss.h"

namespace mg {

struct LinearCrossEntropyOptions {
  Tensor bias;                            // [V] or undefined
  Reduction reduction = Reduction::Mean;  // Mean and Sum are chunked; None runs linear + cross_entropy unchunked
  int64_t ignore_index = -100;            // rows with this target add nothing and are not counted by Mean
  double label_smoothing = 0.0;           // in [0, 1], as cross_entropy's
  // Rows per chunk; 0 picks as many as keep a chunk's f32 logits near 32 MiB, but at least twice
  // the input features (smaller GEMMs run slower).
  int64_t chunk_rows = 0;
};

// input [..., in] (any leading dims), weight [V, in], target the leading dims of i64/i32 class
// indices -> a 0-d loss (Mean, Sum) or the target's shape (None). Errors name the operands.
Tensor linear_cross_entropy(const Tensor& input, const Tensor& weight, const Tensor& target,
                            const LinearCrossEntropyOptions& options = {});

}  // namespace mg
