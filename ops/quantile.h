// Quantiles, as PyTorch's torch.quantile / nanquantile: the q-quantile of each slice along dim (of
// every element without one), from the sorted slice at rank q (n - 1), between its two
// neighbours by `interpolation`. quantile gives NaN for a slice holding NaN; nanquantile ranks
// among the others (NaN only for a slice of nothing but NaN). Differentiable: the gradient goes to
// the one or two sorted elements used, split by the interpolation weights.
//
//   mg::Tensor p99 = mg::quantile(latencies, 0.99);                 // 0-d
//   mg::Tensor iqr = mg::quantile(x, mg::from_vector<float>({0.25f, 0.75f}), 1);  // [2, rows]
//
// f16 and bf16 are computed in f32 and rounded once (PyTorch refuses them); integers are refused.
// q must lie in [0, 1]; a q tensor is read on the host (a synchronisation on CUDA).
#pragma once
#include <cstdint>
#include <optional>

#include "mixgrad/core/tensor.h"

namespace mg {

enum class QuantileInterpolation {
  Linear,    // below + (above - below) * frac(rank)  (the default)
  Lower,     // the sorted element at floor(rank)
  Higher,    // ... at ceil(rank)
  Nearest,   // ... at the rank rounded half to even
  Midpoint,  // (below + above) / 2
};

Tensor quantile(const Tensor& x, double q, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                QuantileInterpolation interpolation = QuantileInterpolation::Linear);
// A 1-D (or 0-d) q: one result per q, stacked along a new leading dim (q's shape first).
Tensor quantile(const Tensor& x, const Tensor& q, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                QuantileInterpolation interpolation = QuantileInterpolation::Linear);
Tensor nanquantile(const Tensor& x, double q, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                   QuantileInterpolation interpolation = QuantileInterpolation::Linear);
Tensor nanquantile(const Tensor& x, const Tensor& q, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                   QuantileInterpolation interpolation = QuantileInterpolation::Linear);

}  // namespace mg
