// Argument checks shared by the public ops, so that every op words the same mistake the same way.
#pragma once
#include <cstdint>
#include <type_traits>
#include <utility>

#include "mixgrad/core/error.h"
#include "mixgrad/core/tensor.h"

namespace mg {

// "<op>: got an undefined tensor" (an Error) unless every tensor is defined.
template <typename... Ts>
void check_defined(const char* op, const Ts&... tensors) {
  static_assert((std::is_same_v<Ts, Tensor> && ...), "check_defined takes tensors");
  MG_CHECK((tensors.defined() && ...), Error, op, ": got an undefined tensor");
}

// The smallest and largest value of a non-empty integer tensor (indices, class targets), read from
// its device in one transfer and without recording, for an op's range check of its index argument.
std::pair<int64_t, int64_t> index_bounds(const Tensor& indices);

}  // namespace mg
