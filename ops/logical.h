// Masks and truth tests, as PyTorch's: logical_not/and/or/xor (any dtypes, broadcast; nonzero is
// true, NaN included) and the operators ~ & | ^ on bool tensors; isnan, isinf, isposinf,
// isneginf, isfinite; nan_to_num; all / any over every element or over dims; isclose / allclose.
// Built from public ops (comparisons, where, sums), so they run on every device and need no
// kernels of their own; the results are bool tensors (nan_to_num keeps the input's dtype and
// passes the gradient where the input was finite).
//
//   mg::Tensor keep = ~padding_mask & mg::isfinite(scores);   // bool masks
//   if (!mg::allclose(got, want, 1e-5, 1e-8)) ...
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "mixgrad/core/tensor.h"

namespace mg {

Tensor logical_not(const Tensor& x);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
// bitwise_not/and/or/xor (ops/bitwise.h): logical on bool masks, bitwise on integers (a bool
// with an integer promotes to the integer), refused for floating operands.
Tensor operator~(const Tensor& m);
Tensor operator&(const Tensor& a, const Tensor& b);
Tensor operator|(const Tensor& a, const Tensor& b);
Tensor operator^(const Tensor& a, const Tensor& b);

// Elementwise tests (all false for integer and bool tensors, isfinite all true).
Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);
Tensor isposinf(const Tensor& x);
Tensor isneginf(const Tensor& x);
Tensor isfinite(const Tensor& x);

// NaN, +inf and -inf replaced by `nan`, `posinf` and `neginf` (default: 0, the dtype's largest and
// lowest finite value), in the input's dtype; other dtypes are returned as a copy. The gradient
// flows where the input was finite, 0 elsewhere (as PyTorch's).
Tensor nan_to_num(const Tensor& x, double nan = 0.0, std::optional<double> posinf = std::nullopt,
                  std::optional<double> neginf = std::nullopt);

// Whether every / some element (over `dims`, every dim when empty) is true (nonzero): a bool
// tensor; over nothing (an empty tensor or dim) all is true and any is false.
Tensor all(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor any(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);

// |a - b| <= atol + rtol |b| elementwise, with broadcasting, in the operands' promoted dtype
// (integers compare exactly); equal infinities are close; NaN is close to NaN only with
// equal_nan. allclose reads the answer on the host (a synchronisation on CUDA).
Tensor isclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);

}  // namespace mg
