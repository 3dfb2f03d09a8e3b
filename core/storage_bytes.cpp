#include "mixgrad/core/storage_bytes.h"

#include <limits>

#include "mixgrad/core/error.h"

namespace mg {

std::size_t checked_storage_bytes(const char* who, const Shape& shape, DType dtype) {
  for (int64_t s : shape) {
    MG_CHECK(s >= 0, ShapeError, who, ": negative size in shape ", shape);
  }
  const int64_t n = shape_numel(shape);
  MG_CHECK(n <= std::numeric_limits<int64_t>::max() / int64_t(dtype_size(dtype)), ShapeError, who, ": shape ",
           shape, " of ", dtype_name(dtype), " needs more than 2^63 bytes");
  return std::size_t(n) * dtype_size(dtype);
}

}  // namespace mg
