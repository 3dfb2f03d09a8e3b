// Philox4x32-10 counter-based RNG (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3").
// Element i of a random tensor depends only on (seed, offset, i), so the CPU loop and a CUDA
// kernel produce the same sequence regardless of threading or launch shape.
#pragma once
#include <cstdint>

#include "mixgrad/core/macros.h"

namespace mg {

struct Philox4 {
  uint32_t v[4];
};

MG_HOST_DEVICE uint32_t philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  const uint64_t p = uint64_t(a) * uint64_t(b);
  *hi = uint32_t(p >> 32);
  return uint32_t(p);
}

// Ten rounds of Philox4x32 on counter `ctr` with 64-bit key `key`.
MG_HOST_DEVICE Philox4 philox4x32_10(Philox4 ctr, uint64_t key) {
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, hi1;
    const uint32_t lo0 = philox_mulhilo(0xD2511F53u, ctr.v[0], &hi0);
    const uint32_t lo1 = philox_mulhilo(0xCD9E8D57u, ctr.v[2], &hi1);
    ctr = Philox4{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return ctr;
}

// Four random 32-bit words for block `block` of stream (seed, offset).
MG_HOST_DEVICE Philox4 philox_block(uint64_t seed, uint64_t offset, uint64_t block) {
  const uint64_t c = offset + block;
  return philox4x32_10(Philox4{{uint32_t(c), uint32_t(c >> 32), 0u, 0u}}, seed);
}

// Uniform float in [0, 1) from the top 24 bits of a word (every value exactly representable).
MG_HOST_DEVICE float philox_uniform(uint32_t w) { return float(w >> 8) * (1.0f / 16777216.0f); }

// Uniform double in [0, 1) from two words (53 bits).
MG_HOST_DEVICE double philox_uniform_double(uint32_t hi, uint32_t lo) {
  const uint64_t bits = (uint64_t(hi) << 21) ^ uint64_t(lo >> 11);
  return double(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

}  // namespace mg
