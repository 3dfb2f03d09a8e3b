// Fused scaled-dot-product attention: the ops `attention` / `attention_backward` (ops/op_list.def)
// behind mg::scaled_dot_product_attention where a kernel exists, and the composite pieces shared
// with it. Internal to ops/ (the public API is ops/attention.h).
//
// Decision: one fused op, not the composite's matmul + mask + softmax + dropout + matmul, so that
// the scores, the probabilities and their gradients stay in f32 for f16/bf16 inputs (the
// composite rounded each of them to the input dtype: its matmuls return it) and nothing of size
// [.., Lq, Lk] is saved for the backward (it recomputes the scores from q and k and each row's
// {max, 1/Σexp}). Kernels: ops/cpu/attention_kernels.cpp, cuda/kernels/attention.cu, the row math
// shared (ops/attention_rows.h). The composite stays for what the op does not take — a floating
// mask that needs a gradient, q/k/v of different dtypes or batch shapes — and builds double
// backward (create_graph) from public ops.
//
//   if (fused_attention_applies(q, k, v, mask, p)) return fused_attention(q, k, v, mask, p, causal, s, gen);
#pragma once
#include <optional>

#include "mixgrad/core/generator.h"
#include "mixgrad/core/tensor.h"

namespace mg {

// The scale scaled_dot_product_attention uses: `scale`, else 1/sqrt(E) (1 when E = 0).
double attention_scale(const Tensor& q, std::optional<double> scale);
// softmax(q kᵀ s + mask) with the causal mask, from public ops (autograd and autocast apply); a
// row whose keys are all masked is 0. `op` names the caller in errors. No dropout.
Tensor attention_probs(const char* op, const Tensor& q, const Tensor& k, const Tensor& mask, bool is_causal,
                       double s);

// Whether the fused op takes these operands: q, k and v floating of one dtype and device, with
// equal leading dims; the mask absent, bool, or floating without a gradient to compute; dropout
// p < 1; and a kernel for the device and the dtype autocast leaves them in.
bool fused_attention_applies(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                             double dropout_p);
// scaled_dot_product_attention through the fused op (fused_attention_applies must hold).
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double dropout_p,
                       bool is_causal, double scale, Generator* gen);

}  // namespace mg
