// The values of the factories (core/factory.h), written once for the CPU loop (core/factory.cpp)
// and the CUDA kernel (cuda/kernels/factory.cu): a FillSpec says what to fill, fill_item() writes
// one work item of it. Element i's value depends only on the spec and i, so both devices write the
// same bits by construction, whatever the thread count or launch shape.
// Decision: the unit of work is an item, not an element: one element for the deterministic fills,
// one Philox block (2 or 4 elements) for the random ones, so each block's words (and randn's one
// Box-Muller transform per pair) are computed once. Casting: the value is computed in double (or
// int64) and converted to the storage type through its opmath type (f16/bf16 from f32), as the
// CPU always did.
//
//   FillSpec s{.kind = FillKind::Randn, .seed = g.seed()};
//   const int64_t items = fill_item_count(s.kind, DType::F32, n);   // Philox blocks: (n + 1) / 2
//   s.offset = g.reserve(uint64_t(items));
//   for (int64_t it = 0; it < items; ++it) fill_item<FillKind::Randn>(p, n, s, it);  // p: float[n]
#pragma once
#include <cstdint>
#include <type_traits>

#include "mixgrad/core/box_muller.h"
#include "mixgrad/core/dtype.h"
#include "mixgrad/core/half.h"
#include "mixgrad/core/macros.h"
#include "mixgrad/core/philox.h"

namespace mg {

enum class FillKind : uint8_t { Full, Arange, Linspace, Eye, Rand, Randn, Randint };

// What a factory fills; only the fields of its kind are read. Trivially copyable (a kernel
// argument).
struct FillSpec {
  FillKind kind = FillKind::Full;
  double value = 0;                 // Full
  int64_t start = 0, step = 1;      // Arange: start + i * step
  double lin_start = 0, lin_end = 0, lin_delta = 0;  // Linspace: delta = (end - start) / (steps - 1)
  int64_t cols = 0;                 // Eye: the row length m of the [n, m] result
  int64_t low = 0;                  // Randint: low + w % range (mod 2^64)
  uint64_t range = 1;               // Randint: high - low (> 0)
  uint64_t seed = 0, offset = 0;    // Rand, Randn, Randint: the Philox stream position
};

// What a fill (full, fill_, masked_fill) may write into dtype t, as PyTorch's: integral_holds for
// the integer dtypes; for f16, bf16 and f32 a finite v beyond the dtype's largest finite value is
// refused (it would silently become inf: f16 1e6); NaN and +-inf are held by every floating dtype.
// Host only.
bool fill_value_holds(DType t, double v);

// The storage value of `v` computed in double / int64: rounded once to the opmath type, then
// (f16/bf16) to the storage type.
template <typename T, typename V>
MG_HOST_DEVICE T fill_cast(V v) {
  return static_cast<T>(static_cast<opmath_t<T>>(v));
}

// Elements per Philox block of a random fill: rand f64 takes two words per value (53 bits), rand
// of the other dtypes one word (24 bits); randn two values per block (one Box-Muller pair);
// randint two words (64 bits) per value. 1 for the deterministic kinds.
MG_HOST_DEVICE int64_t fill_per_item(FillKind k, bool f64) {
  switch (k) {
    case FillKind::Rand: return f64 ? 2 : 4;
    case FillKind::Randn:
    case FillKind::Randint: return 2;
    default: return 1;
  }
}

// Work items of a fill of n elements; for the random kinds this is also the number of Philox
// blocks the generator must reserve (its offset advance).
MG_HOST_DEVICE int64_t fill_item_count(FillKind k, DType dt, int64_t n) {
  const int64_t per = fill_per_item(k, dt == DType::F64);
  return (n + per - 1) / per;
}

// Writes item `it` of `spec` into p[0, n) (the dense output): element it for the deterministic
// kinds, the elements of Philox block `it` (those below n) for the random ones.
template <FillKind K, typename T>
MG_HOST_DEVICE void fill_item(T* p, int64_t n, const FillSpec& s, int64_t it) {
  if constexpr (K == FillKind::Full) {
    p[it] = fill_cast<T>(s.value);
  } else if constexpr (K == FillKind::Arange) {
    // In uint64 (wrapping, defined), then back: every value lies between start and end, but
    // it * step alone may not fit int64 (arange(INT64_MIN, INT64_MAX, INT64_MAX)).
    p[it] = fill_cast<T>(static_cast<int64_t>(static_cast<uint64_t>(s.start) +
                                              static_cast<uint64_t>(it) * static_cast<uint64_t>(s.step)));
  } else if constexpr (K == FillKind::Linspace) {
    // From both ends, so the last value is exactly `end`: start + d i, or end - d (n - 1 - i),
    // each one fused multiply-add (what g++ made of the CPU loop's expression before issue 14).
    const double v = it < (n + 1) / 2 ? bm::fma_f64(s.lin_delta, double(it), s.lin_start)
                                      : bm::fma_f64(-s.lin_delta, double(n - 1 - it), s.lin_end);
    p[it] = fill_cast<T>(v);
  } else if constexpr (K == FillKind::Eye) {
    p[it] = fill_cast<T>(it / s.cols == it % s.cols ? 1 : 0);
  } else if constexpr (K == FillKind::Rand) {
    const Philox4 r = philox_block(s.seed, s.offset, uint64_t(it));
    if constexpr (std::is_same_v<T, double>) {
      p[2 * it] = philox_uniform_double(r.v[0], r.v[1]);
      if (2 * it + 1 < n) p[2 * it + 1] = philox_uniform_double(r.v[2], r.v[3]);
    } else {
      for (int j = 0; j < 4 && 4 * it + j < n; ++j) {
        T v = fill_cast<T>(philox_uniform(r.v[j]));
        // f16/bf16 round values within half an ulp of 1 up to 1.0; keep the range [0, 1).
        if constexpr (std::is_same_v<T, Half>) {
          if (float(v) >= 1.0f) v = Half::from_bits(0x3bff);  // 1 - 2^-11
        } else if constexpr (std::is_same_v<T, BFloat16>) {
          if (float(v) >= 1.0f) v = BFloat16::from_bits(0x3f7f);  // 1 - 2^-8
        }
        p[4 * it + j] = v;
      }
    }
  } else if constexpr (K == FillKind::Randn) {
    const Philox4 r = philox_block(s.seed, s.offset, uint64_t(it));
    const bm::NormalPair z = bm::box_muller_f64(1.0 - philox_uniform_double(r.v[0], r.v[1]),  // (0, 1]
                                                philox_uniform_double(r.v[2], r.v[3]));
    p[2 * it] = fill_cast<T>(z.z0);
    if (2 * it + 1 < n) p[2 * it + 1] = fill_cast<T>(z.z1);
  } else if constexpr (K == FillKind::Randint) {
    const Philox4 r = philox_block(s.seed, s.offset, uint64_t(it));
    const uint64_t w0 = uint64_t(r.v[0]) << 32 | r.v[1], w1 = uint64_t(r.v[2]) << 32 | r.v[3];
    // Modulo bias is below 2^-40 for any range that fits in 24 bits.
    p[2 * it] = fill_cast<T>(int64_t(uint64_t(s.low) + w0 % s.range));
    if (2 * it + 1 < n) p[2 * it + 1] = fill_cast<T>(int64_t(uint64_t(s.low) + w1 % s.range));
  }
}

}  // namespace mg
