// Whether two tensors' elements share memory, and whether one tensor's do among themselves: the
// in-place ops (ops/dispatcher.cpp) read an input that overlaps the tensor they write from a copy,
// and refuse to write into a tensor whose elements alias each other.
#pragma once
#include "mixgrad/core/tensor.h"

namespace mg {

enum class MemOverlap {
  None,     // no byte in common (different devices or storages, or disjoint address ranges)
  Same,     // the same elements in the same order: equal address, element size, shape and strides
  Partial,  // anything else whose address ranges intersect (conservative: two interleaved views
            // that share no element, x[::2] and x[1::2], count too)
};

// How b's memory relates to a's. Empty tensors overlap nothing.
MemOverlap memory_overlap(const Tensor& a, const Tensor& b);

// Whether two elements of t are one memory location: a dim of size > 1 with stride 0 (expand(),
// broadcast views). Other aliasing layouts cannot be made through mixgrad's view ops.
bool has_internal_overlap(const Tensor& t);

}  // namespace mg
