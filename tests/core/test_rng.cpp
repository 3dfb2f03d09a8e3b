// Tests of the counter-based RNG (core/philox.h, core/generator.h) and the random factories:
// Philox4x32-10 known answers, reproducibility, independence of element i from the tensor size and
// the thread count, and the statistics of rand/randn/randint over 10^6 samples.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/factory.h"
#include "core/parallel.h"
#include "core/philox.h"
#include "core/philox_batch.h"

namespace {

std::vector<double> values(const mg::Tensor& t) {
  std::vector<double> v(size_t(t.numel()));
  const float* p = t.data<float>();
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = p[i];
  return v;
}

std::vector<int64_t> int_values(const mg::Tensor& t) {
  const int64_t* p = t.data<int64_t>();
  return std::vector<int64_t>(p, p + t.numel());
}

// Restores the thread count when a test ends.
struct ThreadsGuard {
  int saved = mg::num_threads();
  ~ThreadsGuard() { mg::set_num_threads(saved); }
};

}  // namespace

TEST_CASE("philox_blocks: every batched path's words equal philox_block's, across counter carries and partial batches",
          "[core][rng]") {
  // Offsets near 2^32 make the counter's low word wrap inside a batch (0xFFFFFFF3 + 5: a batch of
  // eight ends exactly at the wrap); counts not a multiple of 16 exercise the partial last batch.
  for (const uint64_t offset :
       {uint64_t(0), uint64_t(0xFFFFFFF0u), uint64_t(0xFFFFFFF3u), uint64_t(0x123456789ull)}) {
    for (const int64_t count : {int64_t(1), int64_t(15), int64_t(16), int64_t(37)}) {
      const uint64_t seed = 0xDEADBEEFCAFEF00Dull, first = 5;
      // The dispatched path and each path this processor can run (64-bit lanes everywhere, the
      // 32-bit-lane AVX2 intrinsics where it has AVX2), so every machine checks both.
      using Path = void (*)(uint64_t, uint64_t, uint64_t, int64_t, uint32_t*);
      std::vector<Path> paths = {&mg::philox_blocks, &mg::detail::philox_blocks_lanes};
#if MG_PHILOX_X86
      if (__builtin_cpu_supports("avx2")) paths.push_back(&mg::detail::philox_blocks_avx2);
#endif
      for (std::size_t path = 0; path < paths.size(); ++path) {
        CAPTURE(path, offset, count);
        std::vector<uint32_t> words(size_t(4 * count) + 4, 0xABCDEF01u);
        paths[path](seed, offset, first, count, words.data());
        for (int64_t b = 0; b < count; ++b) {
          const mg::Philox4 r = mg::philox_block(seed, offset, first + uint64_t(b));
          for (int j = 0; j < 4; ++j) REQUIRE(words[size_t(4 * b + j)] == r.v[j]);
        }
        for (int j = 0; j < 4; ++j) REQUIRE(words[size_t(4 * count + j)] == 0xABCDEF01u);  // nothing past the end
      }
    }
  }
}

TEST_CASE("philox: Random123 known-answer vectors", "[core][rng]") {
  // The philox4x32 10-round vectors of Random123's kat_vectors file (counter words, key words,
  // expected output). They were also recomputed with an independent straightforward Python
  // implementation of the paper's description (Salmon et al., SC'11, section 5:
  // multipliers 0xD2511F53 / 0xCD9E8D57, Weyl key increments 0x9E3779B9 / 0xBB67AE85), which
  // agrees on all three. The key is 64-bit here: key word 0 is the low half.
  struct Kat {
    uint32_t ctr[4];
    uint32_t key[2];
    uint32_t out[4];
  };
  const Kat kats[] = {
      {{0u, 0u, 0u, 0u}, {0u, 0u}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
       {0xffffffffu, 0xffffffffu},
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      // Digits of pi.
      {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
       {0xa4093822u, 0x299f31d0u},
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const Kat& k : kats) {
    const uint64_t key = uint64_t(k.key[1]) << 32 | k.key[0];
    const mg::Philox4 r =
        mg::philox4x32_10(mg::Philox4{{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}}, key);
    for (int i = 0; i < 4; ++i) CHECK(r.v[i] == k.out[i]);
  }
}

TEST_CASE("philox: uniform conversions", "[core][rng]") {
  CHECK(mg::philox_uniform(0u) == 0.0f);
  CHECK(mg::philox_uniform(0xffffffffu) == float(16777215.0 / 16777216.0));  // < 1
  CHECK(mg::philox_uniform(0x80000000u) == 0.5f);
  CHECK(mg::philox_uniform_double(0u, 0u) == 0.0);
  CHECK(mg::philox_uniform_double(0xffffffffu, 0xffffffffu) < 1.0);
}

TEST_CASE("rand: golden values of a seeded generator", "[core][rng]") {
  // Generator(42) at offset 0: element i is philox_uniform(word i % 4 of block i / 4), where
  // block b is Philox4x32-10 on counter (b, 0, 0, 0) with key 42. Words computed with the Python
  // implementation above: block 0 = 9ceaf053 77f5493b 12bf50ad 5742b3d7,
  // block 1 = fcdb2127 ...; uniform = (word >> 8) / 2^24, exact in f32.
  mg::Generator g(42);
  const mg::Tensor t = mg::rand({5}, {}, &g);
  const std::vector<double> v = values(t);
  CHECK(v[0] == 0.6129598617553711);
  CHECK(v[1] == 0.4685865044593811);
  CHECK(v[2] == 0.07323169708251953);
  CHECK(v[3] == 0.3408614993095398);
  CHECK(v[4] == 0.9877186417579651);
  CHECK(g.offset() == 2);  // 5 values use 2 blocks of 4 words
}

TEST_CASE("rand/randn/randint: reproducible from the seed", "[core][rng]") {
  SECTION("explicit generators") {
    mg::Generator a(123), b(123), c(124);
    CHECK(values(mg::rand({100}, {}, &a)) == values(mg::rand({100}, {}, &b)));
    CHECK(values(mg::randn({100}, {}, &a)) == values(mg::randn({100}, {}, &b)));
    CHECK(int_values(mg::randint(0, 1000, {100}, {.dtype = mg::DType::I64}, &a)) ==
          int_values(mg::randint(0, 1000, {100}, {.dtype = mg::DType::I64}, &b)));
    CHECK(values(mg::rand({100}, {}, &c)) != values(mg::rand({100}, {}, &b)));
  }
  SECTION("manual_seed resets the default generator") {
    mg::manual_seed(7);
    const auto r1 = values(mg::rand({50}));
    const auto n1 = values(mg::randn({50}));
    const auto r2 = values(mg::rand({50}));  // the stream advanced: different values
    CHECK(r1 != r2);
    CHECK(mg::default_generator().seed() == 7);
    mg::manual_seed(7);
    CHECK(values(mg::rand({50})) == r1);
    CHECK(values(mg::randn({50})) == n1);
    mg::manual_seed(8);
    CHECK(values(mg::rand({50})) != r1);
  }
  SECTION("consecutive calls continue the stream") {
    // rand({10}) reserves 3 blocks (12 words); the next call starts at block 3 = element 12.
    mg::Generator a(5), b(5);
    (void)mg::rand({10}, {}, &a);
    CHECK(a.offset() == 3);
    const auto next = values(mg::rand({4}, {}, &a));
    const auto all = values(mg::rand({16}, {}, &b));
    CHECK(next == std::vector<double>(all.begin() + 12, all.end()));
  }
  SECTION("set_state restores a position") {
    mg::Generator a(9);
    (void)mg::randn({7}, {}, &a);
    const uint64_t seed = a.seed(), offset = a.offset();
    const auto x = values(mg::randn({20}, {}, &a));
    a.set_state(seed, offset);
    CHECK(values(mg::randn({20}, {}, &a)) == x);
  }
}

TEST_CASE("rand/randn: element i does not depend on the tensor size or the threads",
          "[core][rng]") {
  ThreadsGuard guard;
  const int64_t big = 1000000;
  for (bool normal : {false, true}) {
    INFO((normal ? "randn" : "rand"));
    auto make = [&](int64_t n) {
      mg::Generator g(2024);
      return values(normal ? mg::randn({n}, {}, &g) : mg::rand({n}, {}, &g));
    };
    mg::set_num_threads(4);
    const auto large = make(big);
    const auto small = make(10);
    CHECK(small == std::vector<double>(large.begin(), large.begin() + 10));
    mg::set_num_threads(1);
    CHECK(make(big) == large);
    // The shape does not matter either, only the element count.
    mg::Generator g(2024);
    const mg::Tensor t2 = normal ? mg::randn({1000, 1000}, {}, &g) : mg::rand({1000, 1000}, {}, &g);
    CHECK(values(t2) == large);
  }
}

TEST_CASE("rand/randn: low-precision dtypes round the f32 values", "[core][rng]") {
  mg::Generator a(77), b(77);
  const mg::Tensor f = mg::rand({64}, {}, &a);
  const mg::Tensor h = mg::rand({64}, {.dtype = mg::DType::F16}, &b);
  REQUIRE(h.dtype() == mg::DType::F16);
  for (int64_t i = 0; i < 64; ++i) {
    CHECK(h.data<mg::Half>()[i].bits == mg::Half(f.data<float>()[i]).bits);
  }
}

TEST_CASE("rand/randn/randint: statistics over 10^6 samples", "[core][rng]") {
  const int64_t n = 1000000;
  mg::Generator g(31337);
  SECTION("rand is uniform on [0, 1)") {
    const auto v = values(mg::rand({n}, {}, &g));
    double sum = 0, lo = 1, hi = 0;
    for (double x : v) {
      sum += x;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    const double mean = sum / double(n);
    double var = 0;
    for (double x : v) var += (x - mean) * (x - mean);
    var /= double(n - 1);
    // Mean: sd of the sample mean is sqrt(1/12 / n) = 2.9e-4; 4 sigma = 1.2e-3 (within ±0.01).
    CHECK(std::abs(mean - 0.5) < 1.2e-3);
    // Variance 1/12: Var((U - 1/2)^2) = 1/80 - 1/144 = 1/180, sd of the estimate
    // sqrt(1/180 / n) = 7.5e-5; 4 sigma = 3e-4.
    CHECK(std::abs(var - 1.0 / 12.0) < 3e-4);
    CHECK(lo >= 0.0);
    CHECK(hi < 1.0);
    CHECK(lo < 1e-4);  // the range is covered
    CHECK(hi > 1 - 1e-4);
  }
  SECTION("randn is standard normal") {
    const auto v = values(mg::randn({n}, {}, &g));
    double sum = 0;
    int64_t beyond_2sd = 0;
    for (double x : v) {
      sum += x;
      beyond_2sd += std::abs(x) > 2.0;
    }
    const double mean = sum / double(n);
    double var = 0;
    for (double x : v) var += (x - mean) * (x - mean);
    var /= double(n - 1);
    // sd of the mean 1/sqrt(n) = 1e-3 -> 4e-3; sd of the variance sqrt(2/n) = 1.4e-3 -> 5.7e-3.
    CHECK(std::abs(mean) < 4e-3);
    CHECK(std::abs(var - 1.0) < 5.7e-3);
    // P(|Z| > 2) = 0.0455003; binomial sd sqrt(p(1-p)/n) = 2.1e-4; 4 sigma = 8.3e-4.
    CHECK(std::abs(double(beyond_2sd) / double(n) - 0.0455003) < 8.3e-4);
  }
  SECTION("randint covers [low, high) uniformly") {
    const auto v = int_values(mg::randint(-3, 4, {n}, {.dtype = mg::DType::I64}, &g));
    std::vector<int64_t> counts(7, 0);
    for (int64_t x : v) {
      REQUIRE(x >= -3);
      REQUIRE(x < 4);
      ++counts[size_t(x + 3)];
    }
    // Each count ~ Binomial(n, 1/7): sd sqrt(n * 1/7 * 6/7) = 350; 4 sigma = 1400.
    for (int64_t c : counts) CHECK(std::abs(double(c) - double(n) / 7.0) < 1400.0);
  }
}

TEST_CASE("randint: dtypes and errors", "[core][rng]") {
  mg::Generator g(1);
  const mg::Tensor t = mg::randint(10, 12, {1000}, {.dtype = mg::DType::I32}, &g);
  REQUIRE(t.dtype() == mg::DType::I32);
  bool seen10 = false, seen11 = false;
  for (int64_t i = 0; i < 1000; ++i) {
    const int32_t x = t.data<int32_t>()[i];
    CHECK((x == 10 || x == 11));
    seen10 = seen10 || x == 10;
    seen11 = seen11 || x == 11;
  }
  CHECK((seen10 && seen11));
  CHECK_THROWS_MATCHES(mg::randint(5, 5, {3}), mg::Error,
                       Catch::Matchers::Message("randint: expected low < high, got low=5 high=5"));
  CHECK_THROWS_MATCHES(mg::rand({3}, {.dtype = mg::DType::I64}), mg::DTypeError,
                       Catch::Matchers::Message("rand: expected a floating dtype, got i64"));
  CHECK_THROWS_MATCHES(mg::randn({3}, {.dtype = mg::DType::Bool}), mg::DTypeError,
                       Catch::Matchers::Message("randn: expected a floating dtype, got bool"));
}

TEST_CASE("f16 and bf16 rand stay below 1.0", "[core][rng]") {
  // f32 uniforms within half an f16 ulp of 1 (u >= 1 - 2^-12) would round up to exactly 1.0.
  for (mg::DType t : {mg::DType::F16, mg::DType::BF16}) {
    mg::Generator gen(7);
    const mg::Tensor u = mg::rand({1 << 20}, {.dtype = t}, &gen);
    const mg::Tensor f = u.to(mg::DType::F32);
    const float* p = f.data<float>();
    float hi = 0.0f;
    for (int64_t i = 0; i < f.numel(); ++i) hi = std::max(hi, p[i]);
    REQUIRE(hi < 1.0f);
    REQUIRE(hi > 0.99f);
  }
}
