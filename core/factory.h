// Tensor factories, filled on the requested device (CUDA: a kernel), the same bits on every device.
// Random factories use the counter-based Philox stream of a Generator (default: the global one),
// so values depend only on (seed, offset, element index).
//
//   mg::Tensor w = mg::randn({784, 10}, {.dtype = mg::DType::F32, .requires_grad = true});
//   mg::Tensor i = mg::arange(0, 10);                       // i64 [0, 1, ..., 9]
//   mg::Tensor v = mg::from_vector<float>({1, 2, 3, 4}, {2, 2});
#pragma once
#include <vector>

#include "mixgrad/core/generator.h"
#include "mixgrad/core/tensor.h"

namespace mg {

Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
// Every element `value`; into an integer dtype truncated toward zero (2.7 -> 2). Throws mg::Error
// when the dtype cannot hold it (NaN, +-inf or out of range for i64/i32/u8), as PyTorch does.
Tensor full(const Shape& shape, double value, TensorOptions options = {});
// [start, end) with `step` (i64 by default; any dtype may be asked for; into a narrower integer
// dtype the values wrap around, as PyTorch's).
Tensor arange(int64_t start, int64_t end, int64_t step = 1, TensorOptions options = {.dtype = DType::I64});
// `steps` evenly spaced values from start to end inclusive (an integer dtype truncates them and
// must hold both ends).
Tensor linspace(double start, double end, int64_t steps, TensorOptions options = {});
Tensor eye(int64_t n, int64_t m = -1, TensorOptions options = {});
// Uniform in [0, 1).
Tensor rand(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);
// Standard normal (Box-Muller on Philox words).
Tensor randn(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);
// Uniform integers in [low, high); the dtype must hold low and high - 1 (bool: [0, 2)).
Tensor randint(int64_t low, int64_t high, const Shape& shape,
               TensorOptions options = {.dtype = DType::I64}, Generator* gen = nullptr);

// The shape, dtype and device of `t`, in its memory format (t.suggest_memory_format(): a
// channels-last `t` gives a channels-last result), as PyTorch's default preserve_format.
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);

// Copies `count` elements of dtype options.dtype from `data` (host memory) into a new tensor.
Tensor from_buffer(const void* data, const Shape& shape, TensorOptions options = {});

// Copies a std::vector into a tensor of the matching dtype (shape defaults to 1-D).
template <typename T>
Tensor from_vector(const std::vector<T>& values, Shape shape = {}, TensorOptions options = {}) {
  if (shape.empty()) shape = {int64_t(values.size())};
  MG_CHECK(shape_numel(shape) == int64_t(values.size()), ShapeError, "from_vector: ",
           values.size(), " values do not fill shape ", shape);
  options.dtype = dtype_v<T>;
  return from_buffer(values.data(), shape, options);
}
// Scalar (0-d) tensor.
Tensor scalar_tensor(double value, TensorOptions options = {});

}  // namespace mg
