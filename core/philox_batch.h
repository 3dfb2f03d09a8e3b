// Philox blocks in batches on the CPU: the same words as philox_block (core/philox.h), computed
// for 8 consecutive blocks at once in vector lanes (GCC/Clang vector extensions). One scalar
// block at a time made dropout the costliest op of a BERT step.
#pragma once
#include <algorithm>
#include <cstdint>

#include "mixgrad/core/philox.h"

namespace mg {

// Writes the 4 words of blocks first_block .. first_block + count - 1 of stream (seed, offset)
// to words[0 .. 4 * count), block after block (word j of block b at words[4 * b + j]).
inline void philox_blocks(uint64_t seed, uint64_t offset, uint64_t first_block, int64_t count, uint32_t* words) {
  // Eight blocks per vector; each 32-bit word lives in the low half of a 64-bit lane so one
  // 64-bit multiply yields the full 32 x 32 -> 64-bit product (vpmuludq/vpmullq on x86).
  constexpr int kLanes = 8;
  typedef uint64_t Lanes __attribute__((vector_size(8 * kLanes)));
  const Lanes low32 = Lanes{} + 0xFFFFFFFFull;
  for (int64_t b0 = 0; b0 < count; b0 += kLanes) {
    Lanes c0, c1, c2 = {}, c3 = {};
    for (int l = 0; l < kLanes; ++l) {
      const uint64_t c = offset + first_block + uint64_t(b0 + l);
      c0[l] = c & 0xFFFFFFFFull;
      c1[l] = c >> 32;
    }
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    for (int r = 0; r < 10; ++r) {
      const Lanes p0 = c0 * 0xD2511F53ull, p1 = c2 * 0xCD9E8D57ull;
      const Lanes n0 = (p1 >> 32) ^ c1 ^ uint64_t(k0), n2 = (p0 >> 32) ^ c3 ^ uint64_t(k1);
      c1 = p1 & low32;
      c3 = p0 & low32;
      c0 = n0;
      c2 = n2;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const int lanes = int(std::min<int64_t>(kLanes, count - b0));
    for (int l = 0; l < lanes; ++l) {
      uint32_t* w = words + 4 * (b0 + l);
      w[0] = uint32_t(c0[l]);
      w[1] = uint32_t(c1[l]);
      w[2] = uint32_t(c2[l]);
      w[3] = uint32_t(c3[l]);
    }
  }
}

}  // namespace mg
