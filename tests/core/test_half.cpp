// Tests of the f16/bf16 numerics contract (DESIGN §3): the scalar conversions of core/half.h
// (round to nearest even, overflow to ±inf, subnormals kept, NaN stays NaN, every 16-bit pattern
// round-trips) and the bulk conversions of core/convert.h, which must agree with the scalar code
// bit for bit on every path (vector and forced-portable), for any length, whatever MXCSR says.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/convert.h"
#include "core/half.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MG_TEST_X86 1
#else
#define MG_TEST_X86 0
#endif

using mg::BFloat16;
using mg::Half;

namespace {

uint16_t f16_of(float f) { return Half(f).bits; }
uint16_t bf16_of(float f) { return BFloat16(f).bits; }
float from_f16(uint16_t b) { return float(Half::from_bits(b)); }
float from_bf16(uint16_t b) { return float(BFloat16::from_bits(b)); }
float pow2(int e) { return std::ldexp(1.0f, e); }
float from_bits(uint32_t u) { return mg::f32_from_bits(u); }
uint32_t bits_of(float f) { return mg::f32_bits(f); }

bool f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool bf16_is_nan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

// Restores automatic ISA selection when a test section ends (also on a failed REQUIRE).
struct PortableGuard {
  explicit PortableGuard(bool force) { mg::convert_force_portable(force); }
  ~PortableGuard() { mg::convert_force_portable(false); }
};

// Every 4099th uint32 (4099 is prime, so the sweep hits every exponent and many mantissa
// residues), plus the special patterns a sweep could miss.
std::vector<float> f32_sweep() {
  std::vector<float> v;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4099) v.push_back(from_bits(uint32_t(u)));
  const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00800000u,
                               0x33000000u, 0x33000001u, 0x387fe000u, 0x387ff000u, 0x38800000u,
                               0x477fe000u, 0x477fefffu, 0x477ff000u, 0x7f7f7fffu, 0x7f7f8000u,
                               0x7f7fffffu, 0x7f800000u, 0xff800000u, 0x7f800001u, 0x7fbfffffu,
                               0x7fc00000u, 0xffc00001u, 0x7fffffffu, 0x3f808000u, 0x3f818000u};
  for (uint32_t s : specials) v.push_back(from_bits(s));
  return v;
}

std::vector<uint16_t> all_16bit_patterns() {
  std::vector<uint16_t> v(65536);
  for (uint32_t i = 0; i < 65536; ++i) v[i] = uint16_t(i);
  return v;
}

// Bulk conversions of `src` with the current ISA selection, bits of the results.
std::vector<uint16_t> bulk_to_f16(const std::vector<float>& src) {
  std::vector<Half> out(src.size());
  mg::convert_f32_to_f16(src.data(), out.data(), int64_t(src.size()));
  std::vector<uint16_t> bits(src.size());
  for (std::size_t i = 0; i < src.size(); ++i) bits[i] = out[i].bits;
  return bits;
}
std::vector<uint16_t> bulk_to_bf16(const std::vector<float>& src) {
  std::vector<BFloat16> out(src.size());
  mg::convert_f32_to_bf16(src.data(), out.data(), int64_t(src.size()));
  std::vector<uint16_t> bits(src.size());
  for (std::size_t i = 0; i < src.size(); ++i) bits[i] = out[i].bits;
  return bits;
}
std::vector<uint32_t> bulk_from_f16(const std::vector<uint16_t>& src) {
  std::vector<float> out(src.size());
  mg::convert_f16_to_f32(reinterpret_cast<const Half*>(src.data()), out.data(), int64_t(src.size()));
  std::vector<uint32_t> bits(src.size());
  for (std::size_t i = 0; i < src.size(); ++i) bits[i] = bits_of(out[i]);
  return bits;
}
std::vector<uint32_t> bulk_from_bf16(const std::vector<uint16_t>& src) {
  std::vector<float> out(src.size());
  mg::convert_bf16_to_f32(reinterpret_cast<const BFloat16*>(src.data()), out.data(),
                          int64_t(src.size()));
  std::vector<uint32_t> bits(src.size());
  for (std::size_t i = 0; i < src.size(); ++i) bits[i] = bits_of(out[i]);
  return bits;
}

// Index of the first mismatch, or -1 (one REQUIRE per sweep instead of a million CHECKs).
template <typename A, typename B>
int64_t first_mismatch(const std::vector<A>& a, const std::vector<B>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (uint64_t(a[i]) != uint64_t(b[i])) return int64_t(i);
  }
  return -1;
}

}  // namespace

TEST_CASE("f16: every bit pattern round-trips through f32", "[core][half]") {
  int64_t nan_count = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = uint16_t(i);
    const float f = from_f16(h);
    const uint16_t back = f16_of(f);
    if (f16_is_nan(h)) {
      ++nan_count;
      REQUIRE(std::isnan(f));
      // A quiet NaN (mantissa bit 9 set) comes back unchanged; a signalling one comes back
      // quiet with the same sign and payload, as vcvtph2ps/vcvtps2ph do.
      REQUIRE(back == uint16_t(h | 0x200u));
    } else {
      REQUIRE(back == h);
      REQUIRE(!std::isnan(f));
    }
  }
  REQUIRE(nan_count == 2 * 1023);  // sign x 1023 non-zero mantissas
}

TEST_CASE("f16: values of landmark patterns", "[core][half]") {
  CHECK(from_f16(0x3c00) == 1.0f);
  CHECK(from_f16(0xc000) == -2.0f);
  CHECK(from_f16(0x7bff) == 65504.0f);           // largest finite: (2 - 2^-10) * 2^15
  CHECK(from_f16(0x0400) == pow2(-14));          // smallest normal
  CHECK(from_f16(0x0001) == pow2(-24));          // smallest subnormal
  CHECK(from_f16(0x03ff) == 1023.0f * pow2(-24));  // largest subnormal
  CHECK(from_f16(0x7c00) == std::numeric_limits<float>::infinity());
  CHECK(from_f16(0xfc00) == -std::numeric_limits<float>::infinity());
  CHECK(bits_of(from_f16(0x8000)) == 0x80000000u);  // -0 keeps its sign
  CHECK(from_f16(0x3555) == 0.333251953125f);      // 1/3 rounded: 0x155 / 1024 * 2^-1 + 2^-2
}

TEST_CASE("f16: rounding to nearest even at ties", "[core][half]") {
  // Near 1 the f16 spacing is 2^-10, so 1 + 2^-11 is halfway between 1 (mantissa 0, even) and
  // 1 + 2^-10 (mantissa 1, odd): the tie goes to 1. 1 + 3*2^-11 is halfway between 1 + 2^-10
  // (odd) and 1 + 2^-9 (mantissa 2, even): the tie goes up to 1 + 2^-9.
  CHECK(f16_of(1.0f + pow2(-11)) == 0x3c00);
  CHECK(f16_of(1.0f + 3.0f * pow2(-11)) == 0x3c02);
  // One f32 ulp (2^-23) off the tie decides by distance.
  CHECK(f16_of(1.0f + pow2(-11) + pow2(-23)) == 0x3c01);
  CHECK(f16_of(1.0f + pow2(-11) - pow2(-23)) == 0x3c00);
  CHECK(f16_of(1.0f + 3.0f * pow2(-11) - pow2(-23)) == 0x3c01);
  // Negative values round by magnitude (same tie rule, sign kept).
  CHECK(f16_of(-(1.0f + pow2(-11))) == 0xbc00);
  CHECK(f16_of(-(1.0f + 3.0f * pow2(-11))) == 0xbc02);
  // The carry out of the mantissa bumps the exponent: 2 - 2^-11 is halfway between
  // 2 - 2^-10 (mantissa 0x3ff, odd) and 2 (even) -> 2.
  CHECK(f16_of(2.0f - pow2(-11)) == 0x4000);
  // 2048 + 1 is halfway between 2048 and 2050 (spacing 2 in [2048, 4096)); 2048 is even.
  CHECK(f16_of(2049.0f) == 0x6800);
  CHECK(f16_of(2051.0f) == 0x6802);  // 2051: between 2050 (odd) and 2052 (even) -> 2052
}

TEST_CASE("f16: overflow goes to inf at 65520", "[core][half]") {
  const float inf = std::numeric_limits<float>::infinity();
  // Above 65504 = (2 - 2^-10) * 2^15 the next step would be 65536 (spacing 32), so 65520 is the
  // tie; its even neighbour 65536 does not exist in f16 and becomes inf.
  CHECK(f16_of(65504.0f) == 0x7bff);
  CHECK(f16_of(65519.99f) == 0x7bff);  // the f32 nearest 65519.99 is 65519.9921875 < 65520
  CHECK(f16_of(std::nextafter(65520.0f, 0.0f)) == 0x7bff);
  CHECK(f16_of(65520.0f) == 0x7c00);
  CHECK(f16_of(-65520.0f) == 0xfc00);
  CHECK(f16_of(1e6f) == 0x7c00);
  CHECK(f16_of(-1e6f) == 0xfc00);
  CHECK(f16_of(std::numeric_limits<float>::max()) == 0x7c00);
  CHECK(f16_of(inf) == 0x7c00);
  CHECK(f16_of(-inf) == 0xfc00);
}

TEST_CASE("f16: subnormals are kept and round to nearest even", "[core][half]") {
  // Subnormal f16 values are k * 2^-24 for k = 1..1023.
  CHECK(f16_of(pow2(-24)) == 0x0001);
  CHECK(f16_of(pow2(-25)) == 0x0000);           // halfway between 0 (even) and 2^-24 -> 0
  CHECK(f16_of(-pow2(-25)) == 0x8000);          // ... with the sign kept
  CHECK(f16_of(pow2(-25) * 1.0001f) == 0x0001);  // just above the tie rounds up
  CHECK(f16_of(3.0f * pow2(-25)) == 0x0002);    // 1.5 * 2^-24: tie between 1 (odd) and 2 (even)
  CHECK(f16_of(5.0f * pow2(-25)) == 0x0002);    // 2.5 * 2^-24: tie between 2 (even) and 3
  CHECK(f16_of(1023.0f * pow2(-24)) == 0x03ff);  // largest subnormal exact
  CHECK(f16_of(1023.5f * pow2(-24)) == 0x0400);  // tie with 2^-14 (1024 * 2^-24, even)
  CHECK(f16_of(pow2(-14)) == 0x0400);
  CHECK(f16_of(pow2(-26)) == 0x0000);
  CHECK(f16_of(-pow2(-26)) == 0x8000);
  CHECK(f16_of(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(f16_of(-std::numeric_limits<float>::denorm_min()) == 0x8000);
}

TEST_CASE("f16: zeros, infinities and NaN", "[core][half]") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(f16_of(0.0f) == 0x0000);
  CHECK(f16_of(-0.0f) == 0x8000);
  CHECK(std::isinf(from_f16(f16_of(inf))));
  CHECK(f16_is_nan(f16_of(std::numeric_limits<float>::quiet_NaN())));
  CHECK(f16_is_nan(f16_of(-std::numeric_limits<float>::quiet_NaN())));
  // A NaN whose payload lives only in the low 13 bits (lost in f16) must still be NaN.
  CHECK(f16_is_nan(f16_of(from_bits(0x7f800001u))));
  CHECK(f16_is_nan(f16_of(from_bits(0xff800001u))));
  CHECK((f16_of(from_bits(0xff800001u)) & 0x8000u) != 0);
  CHECK(f16_of(from_bits(0x7fc00000u)) == 0x7e00);
}

TEST_CASE("bf16: every bit pattern round-trips through f32", "[core][half]") {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t b = uint16_t(i);
    const float f = from_bf16(b);
    REQUIRE(bits_of(f) == uint32_t(b) << 16);  // bf16 -> f32 is exact: the top half
    const uint16_t back = bf16_of(f);
    if (bf16_is_nan(b)) {
      REQUIRE(back == uint16_t(b | 0x40u));  // quiet NaNs unchanged, signalling ones made quiet
    } else {
      REQUIRE(back == b);
    }
  }
}

TEST_CASE("bf16: rounding, subnormals, overflow and NaN", "[core][half]") {
  const float inf = std::numeric_limits<float>::infinity();
  // bf16 keeps 7 mantissa bits: near 1 the spacing is 2^-7. 1 + 2^-8 (f32 0x3f808000) is the
  // tie between 0x3f80 (even) and 0x3f81 -> 0x3f80; 1 + 3*2^-8 (0x3f818000) is the tie between
  // 0x3f81 (odd) and 0x3f82 -> 0x3f82.
  CHECK(bf16_of(1.0f + pow2(-8)) == 0x3f80);
  CHECK(bf16_of(1.0f + 3.0f * pow2(-8)) == 0x3f82);
  CHECK(bf16_of(from_bits(0x3f808001u)) == 0x3f81);  // one ulp above the tie
  CHECK(bf16_of(from_bits(0x3f807fffu)) == 0x3f80);  // one ulp below
  CHECK(bf16_of(-(1.0f + 3.0f * pow2(-8))) == 0xbf82);
  // Subnormal f32 inputs are rounded, not flushed (vcvtneps2bf16 would flush them).
  CHECK(bf16_of(from_bits(0x00010000u)) == 0x0001);  // 2^-133, smallest bf16 subnormal
  CHECK(bf16_of(from_bits(0x00018000u)) == 0x0002);  // tie between 1 (odd) and 2 (even)
  CHECK(bf16_of(from_bits(0x00028000u)) == 0x0002);  // tie between 2 (even) and 3
  CHECK(bf16_of(from_bits(0x00008001u)) == 0x0001);  // just above half the smallest
  CHECK(bf16_of(from_bits(0x00008000u)) == 0x0000);  // tie with 0 (even)
  CHECK(bf16_of(from_bits(0x807f0000u)) == 0x807f);  // largest subnormal, negative
  CHECK(bf16_of(from_bits(0x007fc000u)) == 0x0080);  // rounds up into the smallest normal
  CHECK(bits_of(from_bf16(0x0001)) == 0x00010000u);  // and back: still a subnormal f32
  CHECK(bf16_of(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(bf16_of(-std::numeric_limits<float>::denorm_min()) == 0x8000);
  // Largest finite bf16 0x7f7f = (2 - 2^-7) * 2^127 ~ 3.3895e38; the tie above it (0x7f7f8000)
  // goes to the even neighbour 0x7f80, which is inf.
  CHECK(from_bf16(0x7f7f) == Approx(3.3895314e38));
  CHECK(bf16_of(from_bits(0x7f7f7fffu)) == 0x7f7f);
  CHECK(bf16_of(from_bits(0x7f7f8000u)) == 0x7f80);
  CHECK(bf16_of(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(bf16_of(-std::numeric_limits<float>::max()) == 0xff80);
  CHECK(bf16_of(inf) == 0x7f80);
  CHECK(bf16_of(-inf) == 0xff80);
  CHECK(bf16_of(0.0f) == 0x0000);
  CHECK(bf16_of(-0.0f) == 0x8000);
  // NaN stays NaN, also when the payload sits only in the low 16 bits (naive rounding would
  // carry it into inf or drop it).
  CHECK(bf16_of(from_bits(0x7fc00000u)) == 0x7fc0);
  CHECK(bf16_is_nan(bf16_of(from_bits(0x7f800001u))));
  CHECK(bf16_is_nan(bf16_of(from_bits(0x7fffffffu))));
  CHECK(bf16_is_nan(bf16_of(from_bits(0xff80ffffu))));
  CHECK((bf16_of(from_bits(0xff80ffffu)) & 0x8000u) != 0);
}

TEST_CASE("convert: the ISA in use is reported", "[core][half]") {
  const std::string isa = mg::convert_isa();
  CHECK((isa == "avx512" || isa == "f16c" || isa == "portable"));
#if MG_TEST_X86
  if (std::getenv("MG_CONVERT_ISA") == nullptr && __builtin_cpu_supports("avx512f")) {
    CHECK(isa == "avx512");
  }
#endif
  {
    PortableGuard guard(true);
    CHECK(std::string(mg::convert_isa()) == "portable");
  }
  CHECK(mg::convert_isa() == isa);
}

TEST_CASE("convert: bulk agrees with scalar for all 16-bit patterns and an f32 sweep",
          "[core][half]") {
  const std::vector<uint16_t> patterns = all_16bit_patterns();
  const std::vector<float> sweep = f32_sweep();
  REQUIRE(sweep.size() > 1000000);

  std::vector<uint32_t> f16_to_f32(65536), bf16_to_f32(65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    f16_to_f32[i] = bits_of(from_f16(uint16_t(i)));
    bf16_to_f32[i] = bits_of(from_bf16(uint16_t(i)));
  }
  std::vector<uint16_t> to_f16(sweep.size()), to_bf16(sweep.size());
  for (std::size_t i = 0; i < sweep.size(); ++i) {
    to_f16[i] = f16_of(sweep[i]);
    to_bf16[i] = bf16_of(sweep[i]);
  }

  for (bool portable : {false, true}) {
    DYNAMIC_SECTION((portable ? "portable path" : "vector path")) {
      PortableGuard guard(portable);
      INFO("isa " << mg::convert_isa());
      CHECK(first_mismatch(bulk_from_f16(patterns), f16_to_f32) == -1);
      CHECK(first_mismatch(bulk_from_bf16(patterns), bf16_to_f32) == -1);
      CHECK(first_mismatch(bulk_to_f16(sweep), to_f16) == -1);
      CHECK(first_mismatch(bulk_to_bf16(sweep), to_bf16) == -1);
    }
  }
}

TEST_CASE("convert: lengths and offsets that are not multiples of the vector width",
          "[core][half]") {
  // Source values straddle ties, subnormals, overflow and NaN so every lane sees them.
  std::vector<float> src;
  const std::vector<float> sweep = f32_sweep();
  for (std::size_t i = 0; i < 200; ++i) src.push_back(sweep[sweep.size() - 1 - i]);
  for (std::size_t i = 0; i < 200; ++i) src.push_back(sweep[i * 5000]);
  std::vector<uint16_t> h_src(src.size());
  for (std::size_t i = 0; i < src.size(); ++i) h_src[i] = uint16_t(i * 331u + 7u);

  for (bool portable : {false, true}) {
    DYNAMIC_SECTION((portable ? "portable path" : "vector path")) {
      PortableGuard guard(portable);
      for (int64_t offset : {0, 1, 3, 7}) {
        for (int64_t n = 0; n <= 70; ++n) {
          INFO("offset " << offset << " n " << n);
          // Sentinels after the end must stay untouched.
          std::vector<Half> h(size_t(n + 4), Half::from_bits(0xabcd));
          std::vector<BFloat16> b(size_t(n + 4), BFloat16::from_bits(0xabcd));
          std::vector<float> f(size_t(n + 4), 12345.0f), g(size_t(n + 4), 12345.0f);
          mg::convert_f32_to_f16(src.data() + offset, h.data(), n);
          mg::convert_f32_to_bf16(src.data() + offset, b.data(), n);
          mg::convert_f16_to_f32(reinterpret_cast<const Half*>(h_src.data()) + offset, f.data(), n);
          mg::convert_bf16_to_f32(reinterpret_cast<const BFloat16*>(h_src.data()) + offset,
                                  g.data(), n);
          bool ok = true;
          for (int64_t i = 0; i < n; ++i) {
            ok = ok && h[size_t(i)].bits == f16_of(src[size_t(offset + i)]);
            ok = ok && b[size_t(i)].bits == bf16_of(src[size_t(offset + i)]);
            ok = ok && bits_of(f[size_t(i)]) == bits_of(from_f16(h_src[size_t(offset + i)]));
            ok = ok && bits_of(g[size_t(i)]) == bits_of(from_bf16(h_src[size_t(offset + i)]));
          }
          for (int64_t i = n; i < n + 4; ++i) {
            ok = ok && h[size_t(i)].bits == 0xabcd && b[size_t(i)].bits == 0xabcd;
            ok = ok && f[size_t(i)] == 12345.0f && g[size_t(i)] == 12345.0f;
          }
          REQUIRE(ok);
        }
      }
    }
  }
}

#if MG_TEST_X86
TEST_CASE("convert: subnormals are kept with MXCSR DAZ and FTZ set", "[core][half]") {
  // The default MXCSR has DAZ (bit 6) and FTZ (bit 15) clear; code linked with -ffast-math may
  // set them. The contract must hold either way, so run the vector path with both set.
  const unsigned int saved = _mm_getcsr();
  CHECK((saved & 0x8040u) == 0);  // default state of a fresh test process

  const std::vector<uint16_t> patterns = all_16bit_patterns();
  // MXCSR is per thread, so every bulk call below stays within one parallel_for grain (65536
  // elements) and runs on this thread.
  std::vector<float> tiny;  // f16 subnormal range and f32 subnormals
  for (uint32_t u = 0x33000000u; u < 0x38800000u; u += 1999) tiny.push_back(from_bits(u));
  for (uint32_t u = 0x00000001u; u < 0x00800000u; u += 4099) tiny.push_back(from_bits(u));
  for (uint32_t u = 0x80000001u; u < 0x80800000u; u += 4099) tiny.push_back(from_bits(u));
  REQUIRE(tiny.size() <= 65536);
  std::vector<uint32_t> exp_f16(65536), exp_bf16(65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    exp_f16[i] = bits_of(from_f16(uint16_t(i)));
    exp_bf16[i] = bits_of(from_bf16(uint16_t(i)));
  }
  std::vector<uint16_t> exp_to_f16(tiny.size()), exp_to_bf16(tiny.size());
  for (std::size_t i = 0; i < tiny.size(); ++i) {
    exp_to_f16[i] = f16_of(tiny[i]);
    exp_to_bf16[i] = bf16_of(tiny[i]);
  }

  _mm_setcsr(saved | 0x8040u);
  const std::vector<uint32_t> got_f16 = bulk_from_f16(patterns);
  const std::vector<uint32_t> got_bf16 = bulk_from_bf16(patterns);
  const std::vector<uint16_t> got_to_f16 = bulk_to_f16(tiny);
  const std::vector<uint16_t> got_to_bf16 = bulk_to_bf16(tiny);
  _mm_setcsr(saved);

  INFO("isa " << mg::convert_isa());
  CHECK(first_mismatch(got_f16, exp_f16) == -1);
  CHECK(first_mismatch(got_bf16, exp_bf16) == -1);
  CHECK(first_mismatch(got_to_f16, exp_to_f16) == -1);
  CHECK(first_mismatch(got_to_bf16, exp_to_bf16) == -1);
  CHECK(got_f16[1] == 0x33800000u);  // f16 0x0001 -> 2^-24, not flushed
  CHECK(got_to_bf16[tiny.size() - 1] != 0x8000u);  // an f32 subnormal stays a bf16 subnormal
}
#endif
