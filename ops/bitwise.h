// Bitwise ops on integer and bool tensors, as PyTorch's: and, or, xor and not (logical on bool),
// and the shifts (integers only: a count outside [0, bits) gives 0 to the left and the sign fill
// to the right; a left shift wraps). Operands broadcast and promote as the arithmetic ops do
// (u8 & i32 is i32); floating operands are refused. The operators ~ & | ^ (ops/logical.h) and
// << >> call these for integers. Not differentiable.
//
//   mg::Tensor bucket = mg::bitwise_and(hash, mg::full({}, 1023, {.dtype = mg::DType::I64}));
//   mg::Tensor flags = (ids << 3) | kinds;
#pragma once
#include <cstdint>

#include "mixgrad/core/tensor.h"

namespace mg {

Tensor bitwise_and(const Tensor& a, const Tensor& b);
Tensor bitwise_or(const Tensor& a, const Tensor& b);
Tensor bitwise_xor(const Tensor& a, const Tensor& b);
Tensor bitwise_not(const Tensor& x);
Tensor bitwise_left_shift(const Tensor& a, const Tensor& b);
Tensor bitwise_right_shift(const Tensor& a, const Tensor& b);
Tensor operator<<(const Tensor& a, const Tensor& b);  // bitwise_left_shift
Tensor operator>>(const Tensor& a, const Tensor& b);  // bitwise_right_shift
Tensor operator<<(const Tensor& a, int64_t b);
Tensor operator>>(const Tensor& a, int64_t b);

}  // namespace mg
