// The norm kernels' three kinds of sums over a run of values (ops/cpu/norm_kernels.cpp), added to a
// RuleSums (norm_sums.h) with its eight lanes held in AVX2 registers where the build has AVX2 and
// the sums are f32: each lane gets the same terms in the same order, by the same IEEE operations
// (include it only where FMA contraction is off, as for norm_kernels.cpp: CMakeLists.txt), so the
// bits equal the scalar loop's. The scalar
// loop kept the lanes in memory (perf: 128-bit adds through the stack), about 3 cycles a term.
//
//   RuleSums<float, 1> s;   add_values(s, x_bf16_run, n);        // Σx
//   RuleSums<float, 2> c;   add_centred(c, x_run, n, m0);         // Σd, Σd² with d = x - m0
//   RuleSums<float, 2> g;   add_grad_sums(g, g_run, x_run, n, mu, rs);  // Σg, Σg·(x - mu)·rs
#pragma once
#include <cstdint>
#include <type_traits>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "mixgrad/core/half.h"
#include "mixgrad/ops/cpu/norm_sums.h"

namespace mg::cpu {

#if defined(__AVX2__)
// Eight consecutive values as f32: f32 loaded, bf16 widened (exact: the bits shifted up).
inline __m256 load8_f32(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8_f32(const BFloat16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
// Whether values of type S with f32 sums take the AVX2 lanes.
template <typename A, typename S>
inline constexpr bool kSimdSums = std::is_same_v<A, float> && (std::is_same_v<S, float> || std::is_same_v<S, BFloat16>);
#else
template <typename A, typename S>
inline constexpr bool kSimdSums = false;
#endif

#if defined(__AVX2__)
// K vectors of eight f32 lanes (a struct, not std::array: the vector type's alignment attribute
// does not survive as a template argument).
template <int K>
struct Lanes8 {
  __m256 v[K];
};

// Adds term(0..n-1) to s with AVX2 lanes: vt(q) gives terms q..q+7 as K vectors (lane j = term
// q + j), the same values term(q + j) gives. Runs of whole leaves are summed kLeafBatch at a time
// (K x kLeafBatch independent chains of vector adds instead of K).
template <int K, typename Term, typename VecTerm>
void add_simd(RuleSums<float, K>& s, int64_t n, const Term& term, const VecTerm& vt) {
  using Sums = RuleSums<float, K>;
  constexpr int B = Sums::kLeafBatch;
  s.add(
      n, term,
      [&](int64_t i, int64_t m, float (&l)[K][8]) {
        __m256 acc[K];
        for (int k = 0; k < K; ++k) acc[k] = _mm256_loadu_ps(l[k]);
        for (int64_t q = i; q < i + m; q += 8) {
          const Lanes8<K> t = vt(q);
          for (int k = 0; k < K; ++k) acc[k] = _mm256_add_ps(acc[k], t.v[k]);
        }
        for (int k = 0; k < K; ++k) _mm256_storeu_ps(l[k], acc[k]);
      },
      [&](int64_t i, float (&out)[B][K][8]) {
        __m256 acc[B][K];
        for (int b = 0; b < B; ++b) {
          for (int k = 0; k < K; ++k) acc[b][k] = _mm256_setzero_ps();
        }
        for (int64_t q = i; q < i + kSumLeaf; q += 8) {
          for (int b = 0; b < B; ++b) {
            const Lanes8<K> t = vt(q + b * kSumLeaf);
            for (int k = 0; k < K; ++k) acc[b][k] = _mm256_add_ps(acc[b][k], t.v[k]);
          }
        }
        for (int b = 0; b < B; ++b) {
          for (int k = 0; k < K; ++k) _mm256_storeu_ps(out[b][k], acc[b][k]);
        }
      });
}
#endif

// Σx of p[0, n) (S: A, or a type that widens to A exactly).
template <typename A, typename S>
void add_values(RuleSums<A, 1>& s, const S* p, int64_t n) {
  auto term = [&](int64_t k) { return SumVec<A, 1>{{A(p[k])}}; };
  if constexpr (kSimdSums<A, S>) {
#if defined(__AVX2__)
    add_simd<1>(s, n, term, [&](int64_t q) { return Lanes8<1>{{load8_f32(p + q)}}; });
#endif
  } else {
    s.add(n, term);
  }
}

// Σd and Σd² of p[0, n) with d = x - m0.
template <typename A, typename S>
void add_centred(RuleSums<A, 2>& s, const S* p, int64_t n, A m0) {
  auto term = [&](int64_t k) {
    const A d = A(p[k]) - m0;
    return SumVec<A, 2>{{d, d * d}};
  };
  if constexpr (kSimdSums<A, S>) {
#if defined(__AVX2__)
    const __m256 mv = _mm256_set1_ps(m0);
    add_simd<2>(s, n, term, [&](int64_t q) {
      const __m256 d = _mm256_sub_ps(load8_f32(p + q), mv);
      return Lanes8<2>{{d, _mm256_mul_ps(d, d)}};
    });
#endif
  } else {
    s.add(n, term);
  }
}

// Σg and Σg·xhat of g[0, n), x[0, n) with xhat = (x - mu) · rs (a norm backward's two sums).
template <typename A, typename S>
void add_grad_sums(RuleSums<A, 2>& s, const S* g, const S* x, int64_t n, A mu, A rs) {
  auto term = [&](int64_t k) { return SumVec<A, 2>{{A(g[k]), A(g[k]) * ((A(x[k]) - mu) * rs)}}; };
  if constexpr (kSimdSums<A, S>) {
#if defined(__AVX2__)
    const __m256 muv = _mm256_set1_ps(mu), rsv = _mm256_set1_ps(rs);
    add_simd<2>(s, n, term, [&](int64_t q) {
      const __m256 gv = load8_f32(g + q);
      const __m256 xh = _mm256_mul_ps(_mm256_sub_ps(load8_f32(x + q), muv), rsv);
      return Lanes8<2>{{gv, _mm256_mul_ps(gv, xh)}};
    });
#endif
  } else {
    s.add(n, term);
  }
}

}  // namespace mg::cpu
