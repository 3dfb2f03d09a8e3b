// Bulk f32 <-> f16/bf16 conversion with the instruction set chosen at run time.
// Decision: the vector paths are compiled per function with __attribute__((target(...))), so this
// file gives AVX-512 / F16C speed even in a library built without -march=native, and the choice
// (AVX-512F, else F16C+AVX2, else the scalar code of core/half.h) is made once per process with
// __builtin_cpu_supports and CPUID (MG_CONVERT_ISA=f16c|portable in the environment caps it, for testing).
// Every path gives bit for bit the scalar results:
//   - f16 uses vcvtps2ph (rounding fixed to nearest-even by the immediate, not MXCSR) and
//     vcvtph2ps; both keep subnormals whatever MXCSR's DAZ/FTZ say (tests/core/test_half.cpp
//     checks this with DAZ and FTZ set) and quiet signalling NaNs keeping the payload.
//   - bf16 never uses AVX512-BF16's vcvtneps2bf16, which flushes subnormal inputs to zero; it
//     rounds with integer ops, (x + 0x7fff + ((x >> 16) & 1)) >> 16, and makes NaNs quiet
//     ((x >> 16) | 0x40), exactly as f32_to_bf16_bits does.
// Tails shorter than a vector use the scalar functions. Large buffers are split over the worker
// threads with parallel_for.
#include "mixgrad/core/convert.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "mixgrad/core/parallel.h"

#if defined(__x86_64__) || defined(__i386__)
// GCC 12's AVX-512 intrinsics trip a false -Wmaybe-uninitialized (GCC bug 105593, their
// _mm512_undefined_* self-initialisation); the pragma must cover the header's lines.
#pragma GCC diagnostic push
#if !defined(__clang__)  // clang has no such warning (and would warn about the pragma)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#pragma GCC diagnostic pop
#include <cpuid.h>
#define MG_CONVERT_X86 1
#else
#define MG_CONVERT_X86 0
#endif

namespace mg {
namespace {

// Elements per parallel chunk: conversions are memory bound, so a chunk is a few hundred KiB.
constexpr int64_t kConvertGrain = int64_t(1) << 16;

enum class ConvertIsa { Portable, F16C, AVX512 };

// ---- portable: the scalar conversions of core/half.h (also the tail of every vector path) ----

void f32_to_f16_portable(const float* src, Half* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i].bits = f32_to_f16_bits(src[i]);
}
void f16_to_f32_portable(const Half* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_bits_to_f32(src[i].bits);
}
void f32_to_bf16_portable(const float* src, BFloat16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i].bits = f32_to_bf16_bits(src[i]);
}
void bf16_to_f32_portable(const BFloat16* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_f32(src[i].bits);
}

#if MG_CONVERT_X86

// ---- F16C + AVX2: 8 (f16) or 16 (bf16) elements per step ----

__attribute__((target("f16c,avx2"))) void f32_to_f16_f16c(const float* src, Half* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(src + i);
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  f32_to_f16_portable(src + i, dst + i, n - i);
}

__attribute__((target("f16c,avx2"))) void f16_to_f32_f16c(const Half* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  f16_to_f32_portable(src + i, dst + i, n - i);
}

// 8 f32 bit patterns -> 8 bf16 patterns in the low 16 bits of each 32-bit lane.
__attribute__((target("avx2"))) inline __m256i bf16_round_avx2(__m256i x) {
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                                        _mm256_and_si256(_mm256_srli_epi32(x, 16), one));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, bias), 16);
  const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
  // |x| > inf as a signed compare is safe: both sides are below 2^31.
  const __m256i abs = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
  const __m256i is_nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
}

__attribute__((target("f16c,avx2"))) void f32_to_bf16_f16c(const float* src, BFloat16* dst,
                                                          int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = bf16_round_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m256i b =
        bf16_round_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 8)));
    // packus works per 128-bit lane (a0-3 b0-3 a4-7 b4-7); the permute restores the order.
    // Values are <= 0xffff, so the unsigned saturation never triggers.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
  f32_to_bf16_portable(src + i, dst + i, n - i);
}

__attribute__((target("f16c,avx2"))) void bf16_to_f32_f16c(const BFloat16* src, float* dst,
                                                          int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), w);
  }
  bf16_to_f32_portable(src + i, dst + i, n - i);
}

// ---- AVX-512F: 16 elements per step ----

__attribute__((target("avx512f"))) void f32_to_f16_avx512(const float* src, Half* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(src + i);
    const __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
  f32_to_f16_portable(src + i, dst + i, n - i);
}

__attribute__((target("avx512f"))) void f16_to_f32_avx512(const Half* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
  f16_to_f32_portable(src + i, dst + i, n - i);
}

__attribute__((target("avx512f"))) void f32_to_bf16_avx512(const float* src, BFloat16* dst,
                                                          int64_t n) {
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i round_bias = _mm512_set1_epi32(0x7fff);
  const __m512i quiet_bit = _mm512_set1_epi32(0x40);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i inf_bits = _mm512_set1_epi32(0x7f800000);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i x = _mm512_loadu_si512(src + i);
    const __m512i hi = _mm512_srli_epi32(x, 16);
    const __m512i bias = _mm512_add_epi32(round_bias, _mm512_and_si512(hi, one));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(x, bias), 16);
    const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, abs_mask), inf_bits);
    const __m512i r = _mm512_mask_or_epi32(rounded, is_nan, hi, quiet_bit);
    // vpmovdw truncates each 32-bit lane to 16 bits; every lane already fits.
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(r));
  }
  f32_to_bf16_portable(src + i, dst + i, n - i);
}

__attribute__((target("avx512f"))) void bf16_to_f32_avx512(const BFloat16* src, float* dst,
                                                          int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
  }
  bf16_to_f32_portable(src + i, dst + i, n - i);
}

// The best path this processor has, capped by the environment variable MG_CONVERT_ISA
// ("f16c" or "portable") so the F16C path can be tested on an AVX-512 machine.
// F16C is read from CPUID leaf 1 (ECX bit 29): clang before 15 has no "f16c" feature string for
// __builtin_cpu_supports. It is only used together with AVX2, whose __builtin_cpu_supports check
// (in both gcc and clang) includes the OS's YMM state (XGETBV), so F16C's instructions cannot
// raise SIGILL.
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  return (ecx & bit_F16C) != 0;
}

ConvertIsa detect_isa() {
  __builtin_cpu_init();
  ConvertIsa isa = ConvertIsa::Portable;
  if (__builtin_cpu_supports("avx512f")) {
    isa = ConvertIsa::AVX512;
  } else if (__builtin_cpu_supports("avx2") && cpu_has_f16c()) {
    isa = ConvertIsa::F16C;
  }
  if (const char* cap = std::getenv("MG_CONVERT_ISA")) {
    if (std::strcmp(cap, "portable") == 0) isa = ConvertIsa::Portable;
    if (std::strcmp(cap, "f16c") == 0 && isa == ConvertIsa::AVX512) isa = ConvertIsa::F16C;
  }
  return isa;
}

#else

ConvertIsa detect_isa() { return ConvertIsa::Portable; }

#endif  // MG_CONVERT_X86

std::atomic<bool> g_force_portable{false};

ConvertIsa active_isa() {
  static const ConvertIsa detected = detect_isa();  // cached: detection runs once per process
  return g_force_portable.load(std::memory_order_relaxed) ? ConvertIsa::Portable : detected;
}

// Runs `kernel` (one of the implementations above) over [0, n), split over the worker threads.
// Short runs and calls from inside a parallel region (the elementwise loops convert blocks of a
// few hundred elements) call the kernel directly: going through parallel_for built a
// std::function (a heap allocation) per call, which made bf16 relu 2.7x slower than f32's.
template <typename Src, typename Dst>
void run_chunked(void (*kernel)(const Src*, Dst*, int64_t), const Src* src, Dst* dst, int64_t n) {
  if (n <= kConvertGrain || in_parallel_region()) {
    kernel(src, dst, n);
    return;
  }
  parallel_for(0, n, kConvertGrain, [&](int64_t b, int64_t e) { kernel(src + b, dst + b, e - b); });
}

}  // namespace

void convert_f32_to_f16(const float* src, Half* dst, int64_t n) {
  auto kernel = &f32_to_f16_portable;
#if MG_CONVERT_X86
  switch (active_isa()) {
    case ConvertIsa::AVX512: kernel = &f32_to_f16_avx512; break;
    case ConvertIsa::F16C: kernel = &f32_to_f16_f16c; break;
    case ConvertIsa::Portable: break;
  }
#endif
  run_chunked(kernel, src, dst, n);
}

void convert_f16_to_f32(const Half* src, float* dst, int64_t n) {
  auto kernel = &f16_to_f32_portable;
#if MG_CONVERT_X86
  switch (active_isa()) {
    case ConvertIsa::AVX512: kernel = &f16_to_f32_avx512; break;
    case ConvertIsa::F16C: kernel = &f16_to_f32_f16c; break;
    case ConvertIsa::Portable: break;
  }
#endif
  run_chunked(kernel, src, dst, n);
}

void convert_f32_to_bf16(const float* src, BFloat16* dst, int64_t n) {
  auto kernel = &f32_to_bf16_portable;
#if MG_CONVERT_X86
  switch (active_isa()) {
    case ConvertIsa::AVX512: kernel = &f32_to_bf16_avx512; break;
    case ConvertIsa::F16C: kernel = &f32_to_bf16_f16c; break;
    case ConvertIsa::Portable: break;
  }
#endif
  run_chunked(kernel, src, dst, n);
}

void convert_bf16_to_f32(const BFloat16* src, float* dst, int64_t n) {
  auto kernel = &bf16_to_f32_portable;
#if MG_CONVERT_X86
  switch (active_isa()) {
    case ConvertIsa::AVX512: kernel = &bf16_to_f32_avx512; break;
    case ConvertIsa::F16C: kernel = &bf16_to_f32_f16c; break;
    case ConvertIsa::Portable: break;
  }
#endif
  run_chunked(kernel, src, dst, n);
}

const char* convert_isa() {
  switch (active_isa()) {
    case ConvertIsa::AVX512: return "avx512";
    case ConvertIsa::F16C: return "f16c";
    case ConvertIsa::Portable: break;
  }
  return "portable";
}

void convert_force_portable(bool force) { g_force_portable.store(force, std::memory_order_relaxed); }

}  // namespace mg
