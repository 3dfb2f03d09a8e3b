// Shapes and strides (in elements) and the helpers every op uses: contiguous strides, dim
// wrapping with the standard error text, and broadcasting.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mg {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

// The product of the sizes (1 for a 0-d shape, 0 when any size is 0); a ShapeError when it
// overflows int64.
int64_t shape_numel(const Shape& shape);
// Row-major strides of a dense tensor of this shape.
Strides contiguous_strides(const Shape& shape);
// "[2, 3]".
std::string shape_str(const Shape& shape);
// Maps a possibly negative dim into [0, ndim); throws IndexError naming `op` when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
// Broadcast shape of a and b (numpy rules); throws ShapeError naming `op` when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace mg
