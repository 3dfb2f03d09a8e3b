// Bulk conversions between f32 and f16/bf16 buffers. They give bit for bit the results of the
// scalar conversions in core/half.h (round to nearest even, overflow to inf, subnormals kept,
// NaN stays NaN) and use F16C / AVX-512 instructions when the processor has them (detected at
// run time), with a portable fallback.
//
//   mg::convert_f32_to_f16(src, dst, n);
#pragma once
#include <cstdint>

#include "mixgrad/core/half.h"

namespace mg {

void convert_f32_to_f16(const float* src, Half* dst, int64_t n);
void convert_f16_to_f32(const Half* src, float* dst, int64_t n);
void convert_f32_to_bf16(const float* src, BFloat16* dst, int64_t n);
void convert_bf16_to_f32(const BFloat16* src, float* dst, int64_t n);

// The same four, overloaded on the low-precision type, for code templated on it:
//   load_f32(x, buf, n);  ...f32 math on buf...;  store_f32(buf, y, n);
inline void load_f32(const Half* src, float* dst, int64_t n) { convert_f16_to_f32(src, dst, n); }
inline void load_f32(const BFloat16* src, float* dst, int64_t n) { convert_bf16_to_f32(src, dst, n); }
inline void store_f32(const float* src, Half* dst, int64_t n) { convert_f32_to_f16(src, dst, n); }
inline void store_f32(const float* src, BFloat16* dst, int64_t n) { convert_f32_to_bf16(src, dst, n); }

// Which implementation the bulk conversions use on this processor: "avx512", "f16c" or "portable".
const char* convert_isa();
// Forces the portable path (tests compare it with the vector path); `false` restores detection.
void convert_force_portable(bool force);

}  // namespace mg
