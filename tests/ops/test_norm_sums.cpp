// The norm kernels' sums (ops/cpu/norm_sums.h, norm_sums_simd.h) against the summation rule written
// out term by term: leaves of kSumLeaf consecutive terms, term t of a leaf into lane t mod 8, each
// leaf folded ((0+1)+(2+3))+((4+5)+(6+7)), the leaves combined by a Cascade. The SIMD adders (AVX2
// lanes, kLeafBatch leaves at a time) and the scalar RuleSums::add must give these bits for any
// length and any split of the terms into runs, from f32 and from bf16 values. Compiled without FMA
// contraction (tests/CMakeLists.txt), as ops/cpu/norm_kernels.cpp is.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/cascade_sum.h"
#include "core/half.h"
#include "ops/cpu/norm_sums.h"
#include "ops/cpu/norm_sums_simd.h"

using namespace mg;
using namespace mg::cpu;

namespace {

// The rule, one term at a time.
template <int K>
SumVec<float, K> reference(const std::vector<SumVec<float, K>>& terms) {
  Cascade<SumVec<float, K>> c;
  for (std::size_t leaf = 0; leaf < terms.size(); leaf += std::size_t(kSumLeaf)) {
    float l[K][8] = {};
    for (std::size_t t = leaf; t < std::min(terms.size(), leaf + std::size_t(kSumLeaf)); ++t) {
      for (int k = 0; k < K; ++k) l[k][(t - leaf) % 8] += terms[t].v[k];
    }
    SumVec<float, K> f;
    for (int k = 0; k < K; ++k) f.v[k] = ((l[k][0] + l[k][1]) + (l[k][2] + l[k][3])) + ((l[k][4] + l[k][5]) + (l[k][6] + l[k][7]));
    c.push(f);
  }
  return c.result(SumVec<float, K>{});
}

template <int K>
void require_same_bits(const SumVec<float, K>& a, const SumVec<float, K>& b) {
  for (int k = 0; k < K; ++k) {
    INFO("sum " << k << ": " << a.v[k] << " vs " << b.v[k]);
    CHECK(std::memcmp(&a.v[k], &b.v[k], sizeof(float)) == 0);
  }
}

// Run lengths that cover n: all of it, fixed lengths of the norm kernels' planes, and random ones.
std::vector<std::vector<int64_t>> splits(int64_t n, std::mt19937& rng) {
  std::vector<std::vector<int64_t>> out = {{n}};
  if (n == 0) return out;
  for (int64_t len : {int64_t(13), int64_t(49), int64_t(196), int64_t(784)}) {
    std::vector<int64_t> runs;
    for (int64_t done = 0; done < n; done += len) runs.push_back(std::min(len, n - done));
    out.push_back(runs);
  }
  std::vector<int64_t> runs;
  for (int64_t done = 0; done < n;) {
    const int64_t len = std::min<int64_t>(n - done, 1 + int64_t(rng() % 700));
    runs.push_back(len);
    done += len;
  }
  out.push_back(runs);
  return out;
}

template <typename S>
void check_source(const std::vector<float>& xf, const std::vector<float>& gf, int64_t n, std::mt19937& rng) {
  std::vector<S> x(static_cast<std::size_t>(n) + 1), g(static_cast<std::size_t>(n) + 1);  // +1: the pointers below stay in range
  for (int64_t i = 0; i < n; ++i) x[std::size_t(i)] = S(xf[std::size_t(i)]), g[std::size_t(i)] = S(gf[std::size_t(i)]);
  const float m0 = 0.37f, mu = -0.21f, rs = 1.73f;
  std::vector<SumVec<float, 1>> tx;
  std::vector<SumVec<float, 2>> tc, tg;
  for (int64_t i = 0; i < n; ++i) {
    const float xv = float(x[std::size_t(i)]), gv = float(g[std::size_t(i)]);
    const float d = xv - m0;
    tx.push_back({{xv}});
    tc.push_back({{d, d * d}});
    tg.push_back({{gv, gv * ((xv - mu) * rs)}});
  }
  const SumVec<float, 1> want_x = reference(tx);
  const SumVec<float, 2> want_c = reference(tc), want_g = reference(tg);
  for (const std::vector<int64_t>& runs : splits(n, rng)) {
    INFO(runs.size() << " runs, the first of " << runs.front());
    RuleSums<float, 1> sx, scalar_x;
    RuleSums<float, 2> sc, sg, scalar_g;
    int64_t off = 0;
    for (int64_t len : runs) {
      const S* xp = x.data() + off;
      const S* gp = g.data() + off;
      add_values(sx, xp, len);
      add_centred(sc, xp, len, m0);
      add_grad_sums(sg, gp, xp, len, mu, rs);
      scalar_x.add(len, [&](int64_t k) { return SumVec<float, 1>{{float(xp[k])}}; });
      scalar_g.add(len, [&](int64_t k) { return SumVec<float, 2>{{float(gp[k]), float(gp[k]) * ((float(xp[k]) - mu) * rs)}}; });
      off += len;
    }
    require_same_bits(sx.result(), want_x);
    require_same_bits(sc.result(), want_c);
    require_same_bits(sg.result(), want_g);
    require_same_bits(scalar_x.result(), want_x);
    require_same_bits(scalar_g.result(), want_g);
  }
}

}  // namespace

TEST_CASE("norm sums: SIMD and scalar adders give the rule's bits for any length and split", "[ops][norm]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.5f, 3.0f);
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(8), int64_t(127), int64_t(128), int64_t(129),
                    int64_t(511), int64_t(512), int64_t(513), int64_t(1000), int64_t(4133), int64_t(100352)}) {
    INFO("n " << n);
    std::vector<float> x(static_cast<std::size_t>(n)), g(static_cast<std::size_t>(n));
    for (float& v : x) v = normal(rng);
    for (float& v : g) v = normal(rng) * 0.01f;
    check_source<float>(x, g, n, rng);
    check_source<BFloat16>(x, g, n, rng);
  }
}
