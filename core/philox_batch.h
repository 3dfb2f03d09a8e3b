// Philox blocks in batches on the CPU: the same words as philox_block (core/philox.h), computed
// for 8 consecutive blocks at once in vector lanes: 64-bit lanes in GCC/Clang vector extensions
// where AVX-512 is on (and as the portable path), AVX2 intrinsics on 32-bit lanes otherwise on
// x86-64 (chosen at run time when the build does not target AVX2). One scalar block at a time made
// dropout the costliest op of a BERT step.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "mixgrad/core/philox.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define MG_PHILOX_X86 1
// The AVX2 functions carry a target attribute so a build without -mavx2 still has them.
#define MG_PHILOX_AVX2 __attribute__((target("avx2")))
#else
#define MG_PHILOX_X86 0
#endif

#if MG_PHILOX_X86
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
#else
  out = a * uint64_t(k);
#endif
}

#if MG_PHILOX_X86
// AVX2: eight blocks per vector with each word in a 32-bit lane (word j of the 8 blocks in cj).
// The 64-bit-lane form (philox_blocks_lanes) split over two ymm registers made g++ spill and
// extract lane by lane; here the 32 x 32 -> 64-bit products come from vpmuludq on the even lanes
// and on the odd lanes shifted down, and one blend puts each half back in place.
MG_PHILOX_AVX2 inline void philox_mulhilo8(__m256i a, __m256i k, __m256i& lo, __m256i& hi) {
  const __m256i even = _mm256_mul_epu32(a, k);                         // lanes 0, 2, 4, 6
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), k);  // lanes 1, 3, 5, 7
  lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

// Blocks first .. first + 7 of stream (seed, offset), stored block after block (32 words).
MG_PHILOX_AVX2 inline void philox_8_blocks(uint64_t seed, uint64_t counter0, uint32_t* out) {
  // Counters counter0 + l: built in registers unless the low word carries within the eight (eight
  // scalar stores read back as one vector stall store forwarding, 25% of dropout's time).
  __m256i c0, c1;
  if (uint32_t(counter0) <= 0xFFFFFFFFu - 7u) {
    c0 = _mm256_add_epi32(_mm256_set1_epi32(int(uint32_t(counter0))), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    c1 = _mm256_set1_epi32(int(uint32_t(counter0 >> 32)));
  } else {
    alignas(32) uint32_t lo32[8], hi32[8];
    for (int l = 0; l < 8; ++l) {
      const uint64_t c = counter0 + uint64_t(l);
      lo32[l] = uint32_t(c);
      hi32[l] = uint32_t(c >> 32);
    }
    c0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lo32));
    c1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(hi32));
  }
  __m256i c2 = _mm256_setzero_si256(), c3 = _mm256_setzero_si256();
  const __m256i m0 = _mm256_set1_epi32(int(0xD2511F53u)), m1 = _mm256_set1_epi32(int(0xCD9E8D57u));
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    __m256i lo0, hi0, lo1, hi1;
    philox_mulhilo8(c0, m0, lo0, hi0);
    philox_mulhilo8(c2, m1, lo1, hi1);
    c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(int(k0)));
    c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(int(k1)));
    c1 = lo1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  // 4 x 8 transpose: block b's four words together.
  const __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpackhi_epi32(c0, c1);
  const __m256i t2 = _mm256_unpacklo_epi32(c2, c3), t3 = _mm256_unpackhi_epi32(c2, c3);
  const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);  // blocks 0|4, 1|5
  const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);  // blocks 2|6, 3|7
  __m256i* o = reinterpret_cast<__m256i*>(out);
  _mm256_storeu_si256(o + 0, _mm256_permute2x128_si256(u0, u1, 0x20));
  _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(u2, u3, 0x20));
  _mm256_storeu_si256(o + 2, _mm256_permute2x128_si256(u0, u1, 0x31));
  _mm256_storeu_si256(o + 3, _mm256_permute2x128_si256(u2, u3, 0x31));
}
#endif
// Eight blocks at a time in 64-bit lanes (the AVX-512 and portable path; GCC/Clang vector
// extensions, so the same code is exercised by the tests on any processor): each 32-bit word
// lives in the low half of a lane so one 64-bit product holds the full 32 x 32 -> 64-bit result
// (philox_mul). The counters come from one vector add and the words leave through two lane packs
// and two permutes (AVX-512; elsewhere four narrowings and three shuffles): building the counters
// lane by lane and extracting the words one by one had cost as much as the rounds.
inline void philox_blocks_lanes(uint64_t seed, uint64_t offset, uint64_t first_block, int64_t count,
                                uint32_t* words) {
  constexpr int kLanes = 8;
  using Lanes = PhiloxLanes;
  const Lanes low32 = Lanes{} + 0xFFFFFFFFull;
  const Lanes iota = {0, 1, 2, 3, 4, 5, 6, 7};
  for (int64_t b0 = 0; b0 < count; b0 += kLanes) {
    const Lanes ctr = (Lanes{} + (offset + first_block + uint64_t(b0))) + iota;
    Lanes c0 = ctr & low32, c1 = ctr >> 32, c2 = {}, c3 = {};
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    for (int r = 0; r < 10; ++r) {
      Lanes p0, p1;
      philox_mul(c0, 0xD2511F53u, p0);
      philox_mul(c2, 0xCD9E8D57u, p1);
      const Lanes n0 = (p1 >> 32) ^ c1 ^ uint64_t(k0), n2 = (p0 >> 32) ^ c3 ^ uint64_t(k1);
      c1 = p1 & low32;
      c3 = p0 & low32;
      c0 = n0;
      c2 = n2;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    // Interleave word j of block l to position 4 l + j.
#if defined(__AVX512F__)
    // Words 0|1 and 2|3 of each block packed into one 64-bit lane each, then two cross-lane
    // permutes: g++ lowered the generic shuffles below to 32 scalar extracts whose stores the
    // caller's vector loads then waited on (store forwarding; perf: 30% of dropout on a BERT step).
    const __m512i w01 = reinterpret_cast<__m512i>(c0 | (c1 << 32)), w23 = reinterpret_cast<__m512i>(c2 | (c3 << 32));
    const __m512i lo = _mm512_permutex2var_epi64(w01, _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11), w23);
    const __m512i hi = _mm512_permutex2var_epi64(w01, _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15), w23);
    const int64_t n = 4 * std::min<int64_t>(kLanes, count - b0);
    if (n == 4 * kLanes) {
      _mm512_storeu_si512(words + 4 * b0, lo);
      _mm512_storeu_si512(words + 4 * b0 + 16, hi);
    } else {
      alignas(64) uint32_t tail[4 * kLanes];
      _mm512_store_si512(tail, lo);
      _mm512_store_si512(tail + 16, hi);
      std::copy(tail, tail + n, words + 4 * b0);
    }
#else
    typedef uint32_t Words8 __attribute__((vector_size(32)));
    typedef uint32_t Words16 __attribute__((vector_size(64)));
    typedef uint32_t Words32 __attribute__((vector_size(128)));
    const Words8 w0 = __builtin_convertvector(c0, Words8), w1 = __builtin_convertvector(c1, Words8);
    const Words8 w2 = __builtin_convertvector(c2, Words8), w3 = __builtin_convertvector(c3, Words8);
    const Words16 w01 = __builtin_shufflevector(w0, w1, 0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
    const Words16 w23 = __builtin_shufflevector(w2, w3, 0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
    const Words32 all = __builtin_shufflevector(w01, w23, 0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23, 8,
                                                9, 24, 25, 10, 11, 26, 27, 12, 13, 28, 29, 14, 15, 30, 31);
    const int64_t n = 4 * std::min<int64_t>(kLanes, count - b0);
    if (n == 4 * kLanes) {
      std::memcpy(words + 4 * b0, &all, sizeof(all));
    } else {
      uint32_t tail[4 * kLanes];
      std::memcpy(tail, &all, sizeof(all));
      std::copy(tail, tail + n, words + 4 * b0);
    }
#endif
  }
}

#if MG_PHILOX_X86
// The AVX2 path: eight blocks at a time through philox_8_blocks.
MG_PHILOX_AVX2 inline void philox_blocks_avx2(uint64_t seed, uint64_t offset, uint64_t first_block, int64_t count,
                                              uint32_t* words) {
  for (int64_t b0 = 0; b0 < count; b0 += 8) {
    if (count - b0 >= 8) {
      philox_8_blocks(seed, offset + first_block + uint64_t(b0), words + 4 * b0);
    } else {
      uint32_t tail[32];
      philox_8_blocks(seed, offset + first_block + uint64_t(b0), tail);
      std::copy(tail, tail + 4 * (count - b0), words + 4 * b0);
    }
  }
}
#endif
}  // namespace detail

// Writes the 4 words of blocks first_block .. first_block + count - 1 of stream (seed, offset)
// to words[0 .. 4 * count), block after block (word j of block b at words[4 * b + j]).
// AVX-512 runs 64-bit lanes (one vpmuludq per eight products); AVX2 without it, 32-bit lanes.
inline void philox_blocks(uint64_t seed, uint64_t offset, uint64_t first_block, int64_t count, uint32_t* words) {
#if defined(__AVX512F__) || !MG_PHILOX_X86
  detail::philox_blocks_lanes(seed, offset, first_block, count, words);
#elif defined(__AVX2__)
  detail::philox_blocks_avx2(seed, offset, first_block, count, words);
#else
  // A portable build: 64-bit lane products without AVX-512 are emulated and 4-5x slower.
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) {
    detail::philox_blocks_avx2(seed, offset, first_block, count, words);
  } else {
    detail::philox_blocks_lanes(seed, offset, first_block, count, words);
  }
#endif
}

}  // namespace mg
