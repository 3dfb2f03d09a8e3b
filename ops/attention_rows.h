// The per-element math of fused attention's row passes, written once for the CPU kernels
// (ops/cpu/attention_kernels.cpp) and the CUDA ones (cuda/kernels/attention.cu):
//   a dead row (every key masked) has statistics {0, 0}: 1/Σ = 0 marks it (a live row's is in
//   (0, 1], or NaN);
//   the dropout keeps a weight as the dropout op does (cuda/host/dropout_mask.h: element e of the
//   [.., Lq, Lk] weights reads Philox word e) and drops it as w * 0 (a NaN stays NaN, as the
//   dropout op's);
//   the weights' gradient before dropout is the dropout_backward op's (g * keep) * (1 / (1 - p));
//   the scores' gradient is dS = P (dP - Σ P dP) scale.
#pragma once
#include <cstdint>

#include "mixgrad/core/fast_math.h"
#include "mixgrad/core/half.h"
#include "mixgrad/core/macros.h"

namespace mg {

template <typename A>
MG_HOST_DEVICE bool attention_dead_row(A inv) {
  return inv == A(0);
}

// x * (kept ? sc : 0), the dropout op's forward (ops/cpu/norm_kernels.cpp): a dropped NaN stays NaN.
MG_HOST_DEVICE float attention_dropped(float x, bool kept, float sc) { return x * (kept ? sc : 0.0f); }
MG_HOST_DEVICE double attention_dropped(double x, bool kept, double sc) { return x * (kept ? sc : 0.0); }

// The gradient of a weight before dropout from the gradient after it (keep = 1 or 0).
template <typename A>
MG_HOST_DEVICE A attention_undropped_grad(A g, A keep, A sc) {
  return (g * keep) * sc;
}

// The gradient of a score from its weight p, the weight's gradient dp and the row's Σ p dp.
template <typename A>
MG_HOST_DEVICE A attention_score_grad(A p, A dp, A dot, A scale) {
  return p * (dp - dot) * scale;
}

}  // namespace mg
