// The optimizers' CPU element loops in opmath: a chunk's parameter and gradient are handed to the
// loop body as arrays of opmath_t<P>. f32 and f64 tensors are passed in place; f16 and bf16 ones
// are converted a block at a time with the SIMD bulk conversions of core/convert.h into stack
// buffers, and the parameter block is rounded back after the body. The values are the ones of
// converting each element on its own (the conversions are exact one way and round to nearest even
// the other, bit for bit as the scalar code), but the body becomes a loop over plain floats that
// the compiler vectorizes: converting element by element kept pure-bf16 SGD scalar (15% of an
// MLP O3 bf16 step on one core, perf).
//
//   for_each_opmath_block(p, g, b, e, [&](float* pb, const float* gb, int64_t first, int64_t n) {
//     for (int64_t j = 0; j < n; ++j) f(pb[j], gb[j], state[first + j]);
//   });
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "mixgrad/core/convert.h"
#include "mixgrad/core/dtype.h"

namespace mg::optim {

// Elements per converted block: two 4 KiB float buffers, well inside L1.
inline constexpr int64_t kOpmathBlock = 1024;

// Runs body(p_block, g_block, first, n) over elements [b, e) of p and g, in blocks; p_block and
// g_block hold elements [first, first + n) in opmath_t<P>, and p_block's values are written back
// to p (rounded once to P) after the body. g may be null (the body then gets null).
template <typename P, typename Body>
void for_each_opmath_block(P* p, const P* g, int64_t b, int64_t e, Body&& body) {
  using T = opmath_t<P>;
  if constexpr (std::is_same_v<P, T>) {
    body(p + b, g ? g + b : nullptr, b, e - b);
  } else {
    alignas(64) T pb[kOpmathBlock];
    alignas(64) T gb[kOpmathBlock];
    for (int64_t first = b; first < e; first += kOpmathBlock) {
      const int64_t n = std::min(kOpmathBlock, e - first);
      load_f32(p + first, pb, n);  // P is f16 or bf16 here (core/convert.h)
      if (g) load_f32(g + first, gb, n);
      body(static_cast<T*>(pb), g ? static_cast<const T*>(gb) : nullptr, first, n);
      store_f32(static_cast<const T*>(pb), p + first, n);
    }
  }
}

}  // namespace mg::optim
