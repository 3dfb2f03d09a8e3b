// The byte size of a new tensor's storage, checked once for every allocating factory (empty(),
// empty_pinned()), so a negative or overflowing shape is a ShapeError, never a wrapped size that
// allocates a small block behind a huge tensor.
#pragma once
#include <cstddef>

#include "mixgrad/core/dtype.h"
#include "mixgrad/core/shape.h"

namespace mg {

// shape's element count times dtype's size. A negative size, or more than 2^63 elements or bytes,
// is a ShapeError whose message starts with `who`.
std::size_t checked_storage_bytes(const char* who, const Shape& shape, DType dtype);

}  // namespace mg
