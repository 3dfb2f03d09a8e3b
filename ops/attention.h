// Scaled dot-product attention. It runs one fused op (`attention`, ops/attention_fused.h: policy
// lower, as matmul, with the scores, softmax and gradients in f32 for f16/bf16 operands and
// nothing of size [.., Lq, Lk] saved for the backward) on the CPU and CUDA; operands it does not
// take (a floating mask that needs a gradient, different dtypes or leading dims) run the composite
// of public ops (`matmul` in lower precision, `softmax` in f32). Double backward works either way.
//
//   mg::Tensor out = mg::scaled_dot_product_attention(q, k, v, mask);   // q [B, H, L, E]
#pragma once
#include <optional>

#include "mixgrad/core/generator.h"
#include "mixgrad/core/tensor.h"

namespace mg {

// softmax(q k^T * scale + mask) v.
//   q [..., Lq, E], k [..., Lk, E], v [..., Lk, Ev] (leading dims broadcast) -> [..., Lq, Ev].
//   mask (optional) broadcastable to [..., Lq, Lk]: bool (true = attend) or floating (added to
//   the scores, e.g. -inf). is_causal masks key j > query i (top-left aligned, as PyTorch);
//   given with a mask, both apply (PyTorch refuses the pair).
//   scale defaults to 1 / sqrt(E); dropout_p drops attention weights (Philox, `gen`) when > 0.
//   enable_gqa (grouped-query attention, PyTorch's flag): q has Hq heads (dim -3), k has Hk and v
//   Hv, each dividing Hq; key head h serves query heads h*g .. h*g+g-1 (g = Hq / Hk, PyTorch's
//   repeat_interleave), and the value's likewise. Without it unequal head counts must broadcast.
// A query row whose keys are all masked gives 0 (zero weights) and zero gradients, as PyTorch's
// (2.5 on) safe softmax; so does a row whose scores all overflowed to -inf.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& mask = Tensor(), double dropout_p = 0.0,
                                    bool is_causal = false, std::optional<double> scale = std::nullopt,
                                    Generator* gen = nullptr, bool enable_gqa = false);
// The weights scaled_dot_product_attention multiplies v by: softmax(q k^T * scale + mask), after
// dropout when dropout_p > 0 (as PyTorch's MultiheadAttention returns them), [..., Lq, Lk]; the
// same arguments, checks and numerics (the attention above is these weights times v).
Tensor scaled_dot_product_attention_weights(const Tensor& q, const Tensor& k, const Tensor& mask = Tensor(),
                                            double dropout_p = 0.0, bool is_causal = false,
                                            std::optional<double> scale = std::nullopt, Generator* gen = nullptr);

}  // namespace mg
