// Philox blocks in batches on the CPU: the same words as philox_block (core/philox.h), computed
// for 8 consecutive blocks at once in vector lanes (GCC/Clang vector extensions). One scalar
// block at a time made dropout the costliest op of a BERT step.
#pragma once
#include <algorithm>
#include <cstdint>

#include "mixgrad/core/philox.h"

#if defined(__AVX512F__) || defined(__AVX2__)
// GCC 12's AVX-512 intrinsics trip false -Wuninitialized / -Wmaybe-uninitialized warnings (GCC bug
// 105593); the pragma must cover the header's lines (as in core/convert.cpp).
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace mg {

namespace detail {
// Eight 64-bit lanes, each holding a 32-bit word in its low half.
typedef uint64_t PhiloxLanes __attribute__((vector_size(64)));

// The full 32 x 32 -> 64-bit products of each lane's low word with k. Written as a 64-bit lane
// multiply, g++ emits AVX-512DQ's vpmullq (3 uops, ~15 cycles latency) — it does not see that the
// upper halves are zero — which made the multiplies most of dropout's time (perf: BERT-mini
// O1, 1 thread); vpmuludq is the one-uop instruction made for it.
// (By reference: a 64-byte vector passed by value changes the ABI where AVX-512 is off, -Wpsabi.)
inline void philox_mul(const PhiloxLanes& a, uint32_t k, PhiloxLanes& out) {
#if defined(__AVX512F__)
  out = reinterpret_cast<PhiloxLanes>(_mm512_mul_epu32(reinterpret_cast<__m512i>(a), _mm512_set1_epi64(k)));
#elif defined(__AVX2__)
  typedef long long Quad __attribute__((vector_size(32)));
  const __m256i kk = _mm256_set1_epi64x(k);
  const Quad lo = reinterpret_cast<Quad>(_mm256_mul_epu32(
      reinterpret_cast<__m256i>(Quad{(long long)a[0], (long long)a[1], (long long)a[2], (long long)a[3]}), kk));
  const Quad hi = reinterpret_cast<Quad>(_mm256_mul_epu32(
      reinterpret_cast<__m256i>(Quad{(long long)a[4], (long long)a[5], (long long)a[6], (long long)a[7]}), kk));
  out = PhiloxLanes{uint64_t(lo[0]), uint64_t(lo[1]), uint64_t(lo[2]), uint64_t(lo[3]),
                    uint64_t(hi[0]), uint64_t(hi[1]), uint64_t(hi[2]), uint64_t(hi[3])};
#else
  out = a * uint64_t(k);
#endif
}
}  // namespace detail

// Writes the 4 words of blocks first_block .. first_block + count - 1 of stream (seed, offset)
// to words[0 .. 4 * count), block after block (word j of block b at words[4 * b + j]).
inline void philox_blocks(uint64_t seed, uint64_t offset, uint64_t first_block, int64_t count, uint32_t* words) {
  // Eight blocks per vector; each 32-bit word lives in the low half of a 64-bit lane so one
  // 64-bit product holds the full 32 x 32 -> 64-bit result (detail::philox_mul).
  constexpr int kLanes = 8;
  using Lanes = detail::PhiloxLanes;
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
      Lanes p0, p1;
      detail::philox_mul(c0, 0xD2511F53u, p0);
      detail::philox_mul(c2, 0xCD9E8D57u, p1);
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
