// Functions behind two of PyTorch's layers, as composites of public ops (ops/composite.h): each
// computes in opmath (f32; f64 stays f64) and rounds once, with its autocast policy in
// ops/composite_list.def (bilinear keeps its inputs' dtype, as PyTorch's autocast leaves
// torch.bilinear; local_response_norm is fp32, as its pow is in PyTorch's fp32 list).
//
//   mg::Tensor y = mg::bilinear(x1, x2, weight, bias);           // [*, in1], [*, in2] -> [*, out]
//   mg::Tensor z = mg::local_response_norm(x, 5, 1e-4, 0.75, 1); // x [N, C, ...]
#pragma once
#include <cstdint>

#include "mixgrad/core/tensor.h"

namespace mg {

// y[..., o] = sum_ij x1[..., i] weight[o, i, j] x2[..., j] + bias[o]: x1 [*, in1] and x2 [*, in2]
// with the same leading dims, weight [out, in1, in2], bias [out] or undefined.
Tensor bilinear(const Tensor& x1, const Tensor& x2, const Tensor& weight, const Tensor& bias = Tensor());

// x / (k + alpha / size * sum of x^2 over the `size` channels around each one)^beta, x [N, C, *]
// (at least 3 dims), the window centred as PyTorch's (size / 2 channels before, (size - 1) / 2
// after, zeros past the ends), size >= 1.
Tensor local_response_norm(const Tensor& x, int64_t size, double alpha = 1e-4, double beta = 0.75, double k = 1.0);

}  // namespace mg
