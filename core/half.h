// 16-bit floating-point storage types usable on host and device (DESIGN §3).
//   Half     — IEEE binary16: 1 sign, 5 exponent, 10 mantissa bits; max 65504, min subnormal 2^-24.
//   BFloat16 — the top 16 bits of an IEEE binary32.
// They are storage types only: arithmetic converts to float ("opmath"), computes, and converts
// back once. f32 -> 16-bit rounds to nearest, ties to even; overflow gives ±inf; subnormals are
// kept; NaN stays NaN (signalling NaNs come back quiet, as the F16C instructions do).
//
//   mg::Half h = 1.0f / 3.0f;  float f = h;  // 0.333251953125
#pragma once
#include <cstdint>
#include <cstring>

#include "mixgrad/core/macros.h"

namespace mg {

MG_HOST_DEVICE uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

MG_HOST_DEVICE float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// binary16 bits -> float, exact for every non-NaN value.
MG_HOST_DEVICE float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) {  // inf or NaN; a NaN comes back quiet with its payload
    return f32_from_bits(sign | 0x7f800000u | (man ? (0x400000u | (man << 13)) : 0u));
  }
  if (exp == 0) {
    if (man == 0) return f32_from_bits(sign);
    // Subnormal: value = man * 2^-24, exactly representable in f32.
    const float mag = float(man) * f32_from_bits(0x33800000u);  // 2^-24
    return f32_from_bits(sign | f32_bits(mag));
  }
  return f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

// float -> binary16 bits, round to nearest even; overflow -> inf; subnormals kept.
MG_HOST_DEVICE uint16_t f32_to_f16_bits(float f) {
  const uint32_t x = f32_bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf or NaN
    if (ax == 0x7f800000u) return sign | 0x7c00u;
    return sign | 0x7e00u | uint16_t((ax >> 13) & 0x3ffu);  // quiet NaN, payload kept
  }
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to inf
  if (ax < 0x38800000u) {                          // below 2^-14: f16 subnormal or zero
    if (ax < 0x33000000u) return sign;             // <= 2^-25 rounds to zero (tie to even)
    const uint32_t e = ax >> 23;                   // 102..112
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // value = m * 2^(e-150); f16 unit = 2^-24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return sign | uint16_t(r);
  }
  // Normal: rebias exponent, round mantissa from 23 to 10 bits (carry may bump the exponent).
  uint32_t r = ax - 0x38000000u;  // exponent 127 -> 15
  r += 0xfffu + ((r >> 13) & 1u);
  return sign | uint16_t(r >> 13);
}

MG_HOST_DEVICE float bf16_bits_to_f32(uint16_t b) { return f32_from_bits(uint32_t(b) << 16); }

// float -> bfloat16 bits, round to nearest even; NaN stays (quiet) NaN; subnormals kept.
MG_HOST_DEVICE uint16_t f32_to_bf16_bits(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

struct Half {
  uint16_t bits;
  Half() = default;
  MG_HOST_DEVICE Half(float f) : bits(f32_to_f16_bits(f)) {}  // NOLINT: implicit like a float
  MG_HOST_DEVICE operator float() const { return f16_bits_to_f32(bits); }
  MG_HOST_DEVICE static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

struct BFloat16 {
  uint16_t bits;
  BFloat16() = default;
  MG_HOST_DEVICE BFloat16(float f) : bits(f32_to_bf16_bits(f)) {}  // NOLINT
  MG_HOST_DEVICE operator float() const { return bf16_bits_to_f32(bits); }
  MG_HOST_DEVICE static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2, "16-bit storage types");

}  // namespace mg
