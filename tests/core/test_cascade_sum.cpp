// The summation rule (core/cascade_sum.h): the streaming cascade builds exactly the documented
// tree (checked with a non-associative "combine" that prints the grouping), a chunked parallel sum
// equals the sequential one bit for bit at every thread count, and the error bound holds on long
// inputs whose exact sum is known.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/cascade_sum.h"
#include "ops/cpu/norm_sums.h"
#include "core/parallel.h"

namespace {

// The documented tree over leaves [b, e): the left child covers the largest power of two of
// leaves strictly below the count.
std::string tree(int64_t b, int64_t e) {
  if (e - b == 1) return std::to_string(b);
  int64_t h = 1;
  while (h * 2 < e - b) h *= 2;
  return "(" + tree(b, b + h) + "+" + tree(b + h, e) + ")";
}

// Exact sum of floats: a double holds the sum of up to 2^29 floats of one binade exactly enough
// for these tests (the reference error is far below the float bound checked).
double exact_sum(const std::vector<float>& x) {
  long double s = 0;
  for (float v : x) s += v;
  return double(s);
}

struct ThreadsGuard {
  int saved = mg::num_threads();
  ~ThreadsGuard() { mg::set_num_threads(saved); }
};

}  // namespace

TEST_CASE("cascade: the streaming counter builds the documented tree", "[core][numerics]") {
  auto join = [](const std::string& a, const std::string& b) { return "(" + a + "+" + b + ")"; };
  for (int64_t m = 1; m <= 70; ++m) {
    mg::Cascade<std::string, decltype(join)> c(join);
    for (int64_t i = 0; i < m; ++i) c.push(std::to_string(i));
    INFO("leaves: " << m);
    REQUIRE(c.result("") == tree(0, m));
  }
  mg::Cascade<std::string, decltype(join)> empty(join);
  REQUIRE(empty.result("none") == "none");
}

TEST_CASE("cascade: chunks are nodes of the tree, so parallel sums repeat at any thread count", "[core][numerics]") {
  ThreadsGuard guard;
  // Grouping strings again, over leaves of a long range: the chunked parallel reduction must
  // group exactly as the sequential one.
  auto join = [](const std::string& a, const std::string& b) { return "(" + a + "+" + b + ")"; };
  const int64_t n = mg::kSumChunk * 5 + 3 * mg::kSumLeaf + 17;
  auto fold = [](int64_t b, int64_t) { return std::to_string(b / mg::kSumLeaf); };
  const std::string sequential = mg::cascade_reduce<std::string>(n, "", fold, join, false);
  REQUIRE(sequential == tree(0, mg::sum_leaf_count(n)));
  for (int t : {1, 2, 3, 4}) {
    mg::set_num_threads(t);
    INFO("threads: " << t);
    REQUIRE(mg::cascade_reduce<std::string>(n, "", fold, join, true) == sequential);
  }

  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(3'000'017);
  for (float& v : x) v = u(rng) * std::exp2(float(int(rng() % 20)));
  mg::set_num_threads(1);
  const float one = mg::cascade_sum<float>(int64_t(x.size()), [&](int64_t i) { return x[i]; }, true);
  for (int t : {2, 3, 4}) {
    mg::set_num_threads(t);
    REQUIRE(mg::cascade_sum<float>(int64_t(x.size()), [&](int64_t i) { return x[i]; }, true) == one);
  }
}

TEST_CASE("cascade: error bound on long sums with known results", "[core][numerics]") {
  // The bound of core/cascade_sum.h: (kSumLeaf / 8 + 3 + ceil(log2 L)) u Σ|x|.
  auto bound = [](int64_t n, double abs_sum) {
    const double levels = std::ceil(std::log2(double(mg::sum_leaf_count(n))));
    return (double(mg::kSumLeaf) / 8 + 3 + levels) * std::exp2(-24.0) * abs_sum;
  };
  SECTION("10^7 times 0.1f") {
    const int64_t n = 10'000'000;
    const float s = mg::cascade_sum<float>(n, [](int64_t) { return 0.1f; }, true);
    const double exact = double(0.1f) * double(n);
    // One running float total gives 1087937 here (8.8% off); the rule stays within a few ulps.
    REQUIRE(std::abs(s - exact) <= bound(n, exact));
    REQUIRE(std::abs(s - exact) / exact < 1e-6);
  }
  SECTION("alternating large and small values") {
    std::vector<float> x(2'000'000);
    for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 2 == 0) ? 1.0e4f : 1.0e-3f;
    const float s = mg::cascade_sum<float>(int64_t(x.size()), [&](int64_t i) { return x[i]; }, true);
    const double exact = exact_sum(x);
    REQUIRE(std::abs(s - exact) <= bound(int64_t(x.size()), exact));
  }
  SECTION("random values of both signs against long double") {
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.5f, 2.f);
    std::vector<float> x(1'048'583);
    double abs_sum = 0;
    for (float& v : x) {
      v = nd(rng);
      abs_sum += std::abs(double(v));
    }
    const float s = mg::cascade_sum<float>(int64_t(x.size()), [&](int64_t i) { return x[i]; }, true);
    REQUIRE(std::abs(s - exact_sum(x)) <= bound(int64_t(x.size()), abs_sum));
  }
}

// A partial last leaf used to add its n mod 8 tail terms in order after combining its lanes: a
// depth of up to 16 + 3 + 7, past the documented 19, reached 20.98 u Σ|x| at n = 127 with the
// values below. Now term t goes to lane t mod 8 as the rule says, within the bound, and the bits
// equal the norm kernels' RuleSums (ops/cpu/norm_sums.h) for every n.
TEST_CASE("cascade: a partial leaf's tail goes into its lanes, within the bound and equal to rule_sum", "[core][numerics]") {
  std::vector<float> x;
  for (int i = 0; i < 8; ++i) x.push_back(0.125f);
  for (int i = 0; i < 112; ++i) x.push_back(std::ldexp(1.0f + std::ldexp(1.0f, -10), -27));
  for (int i = 0; i < 7; ++i) x.push_back(std::ldexp(1.0f + std::ldexp(1.0f, -10), -24));
  REQUIRE(x.size() == 127);
  const float s = mg::cascade_sum<float>(127, [&](int64_t i) { return x[std::size_t(i)]; });
  const double exact = exact_sum(x);  // every term positive: Σ|x| = the sum
  CHECK(std::abs(double(s) - exact) <= (double(mg::kSumLeaf) / 8 + 3) * std::exp2(-24.0) * exact);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> y(1000);
  for (float& v : y) v = nd(rng);
  for (int64_t n = 1; n <= int64_t(y.size()); n += (n < 300 ? 1 : 37)) {
    INFO("n " << n);
    const auto term = [&](int64_t i) { return y[std::size_t(i)]; };
    CHECK(mg::cascade_sum<float>(n, term) == mg::cpu::rule_sum<float>(n, term));
  }
}
