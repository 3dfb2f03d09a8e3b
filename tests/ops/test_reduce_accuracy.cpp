// The generic reductions (sum, mean, var/std, norm, logsumexp) follow the summation rule of
// core/cascade_sum.h on every path of reduce_loop: one long reduction split over the threads,
// many outputs in parallel, and the row-tile walk of column sums. Long inputs with known results,
// against a long double reference, and bit-identical results at 1, 2 and 3 threads.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "core/cascade_sum.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;

namespace {

// The rule's bound for n f32 terms with an 8-lane leaf: (16 + 3 + ceil(log2 L)) u Σ|x|.
double f32_bound(int64_t n, double abs_sum) {
  const double levels = std::ceil(std::log2(double(sum_leaf_count(n))));
  return (double(kSumLeaf) / 8 + 3 + levels) * std::exp2(-24.0) * abs_sum;
}

float item(const Tensor& t) { return float(test::values(t).at(0)); }

Tensor random_f32(const Shape& shape, uint32_t seed, float mean, float sd, std::vector<double>* abs_values = nullptr) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(mean, sd);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = nd(rng);
  if (abs_values) abs_values->assign(v.begin(), v.end());
  return from_vector(v, shape);
}

}  // namespace

TEST_CASE("reduce accuracy: a full sum of 2^20 x 0.1f and its mean", "[ops][numerics]") {
  const int64_t n = int64_t(1) << 20;
  const Tensor x = full({n}, 0.1);
  const double exact = double(0.1f) * double(n);
  // One running f32 total is 1% off here (105891.84 for 104857.60); the rule is within a few ulps.
  REQUIRE(std::abs(double(item(sum(x))) - exact) <= f32_bound(n, exact));
  REQUIRE(item(mean(x)) == Approx(0.1f).epsilon(1e-6));
  // A constant has no spread: the centred two-pass variance is exactly 0.
  REQUIRE(item(var(x)) == 0.0f);
  REQUIRE(item(norm(x)) == Approx(std::sqrt(double(n) * 0.1f * 0.1f)).epsilon(2e-6));
}

TEST_CASE("reduce accuracy: random sums and norms against long double", "[ops][numerics]") {
  std::vector<double> v;
  const Tensor x = random_f32({1'000'003}, 5, 0.3f, 2.0f, &v);
  long double s = 0, ss = 0, abs_sum = 0;
  for (double a : v) {
    s += a;
    ss += a * a;
    abs_sum += std::abs(a);
  }
  const int64_t n = int64_t(v.size());
  REQUIRE(std::abs(double(item(sum(x))) - double(s)) <= f32_bound(n, double(abs_sum)));
  REQUIRE(std::abs(double(item(norm(x))) * item(norm(x)) - double(ss)) <= 2 * f32_bound(n, double(ss)));
  long double m2 = 0;
  const long double mu = s / n;
  for (double a : v) m2 += (a - mu) * (a - mu);
  REQUIRE(double(item(var(x))) == Approx(double(m2 / (n - 1))).epsilon(1e-6));
  // logsumexp of values near 0: log(Σ e^x) with the sum by the rule.
  long double se = 0;
  for (double a : v) se += std::exp((long double)a);
  REQUIRE(double(item(logsumexp(x, {0}))) == Approx(double(std::log(se))).epsilon(1e-6));
}

TEST_CASE("reduce accuracy: column sums (the row-tile path) and many-output row sums", "[ops][numerics]") {
  // [16384, 64] of 0.1: every column sums 16384 values (the bias-gradient shape).
  const Tensor cols = full({16384, 64}, 0.1);
  const std::vector<double> c = test::values(sum(cols, {0}));
  const double exact = double(0.1f) * 16384;
  for (double v : c) REQUIRE(std::abs(v - exact) <= f32_bound(16384, exact));
  // [64, 16384]: contiguous rows, one output per row.
  const std::vector<double> r = test::values(sum(full({64, 16384}, 0.1), {1}));
  for (double v : r) REQUIRE(std::abs(v - exact) <= f32_bound(16384, exact));
  // Batch-norm-like statistics: [N, C, H, W] reduced over {0, 2, 3}, 10^6 values per channel.
  const Tensor bn = full({20, 2, 224, 224}, 0.1);
  const double exact_bn = double(0.1f) * 20 * 224 * 224;
  for (double v : test::values(sum(bn, {0, 2, 3}))) REQUIRE(std::abs(v - exact_bn) <= f32_bound(20 * 224 * 224, exact_bn));
  for (double v : test::values(var(bn, {0, 2, 3}))) REQUIRE(v == 0.0);
}

TEST_CASE("reduce accuracy: results repeat bit for bit at 1, 2 and 3 threads", "[ops][numerics]") {
  const Tensor x = random_f32({300'007}, 9, 0.f, 1.f);
  const Tensor m = random_f32({3000, 130}, 10, 1.f, 3.f);
  auto results = [&] {
    std::vector<std::vector<double>> out;
    out.push_back(test::values(sum(x)));                 // one output, split over threads
    out.push_back(test::values(var(x)));
    out.push_back(test::values(norm(x)));
    out.push_back(test::values(logsumexp(x, {0})));
    out.push_back(test::values(sum(m, {0})));            // column sums: row tiles
    out.push_back(test::values(mean(m, {1})));           // many outputs
    out.push_back(test::values(mg::std(m, {0})));         // strided, many outputs
    out.push_back(test::values(sum(to(m, DType::BF16), {0})));
    return out;
  };
  test::check_same_at_thread_counts(results);
}

TEST_CASE("reduce accuracy: column sums follow the rule's tree bit for bit (column blocks, tiles and edges)",
          "[ops][numerics]") {
  // Each column: in-order f32 leaves of 128 rows, combined pairwise (core/cascade_sum.h) — computed
  // here directly and compared bit for bit, for widths with partial tiles and at 1, 2 and 3 threads.
  auto rule_column_sums = [](const std::vector<float>& v, int64_t rows, int64_t cols) {
    std::vector<float> out(static_cast<std::size_t>(cols));
    for (int64_t c = 0; c < cols; ++c) {
      std::vector<float> leaves;
      for (int64_t r0 = 0; r0 < rows; r0 += kSumLeaf) {
        float leaf = 0.f;
        for (int64_t r = r0; r < std::min(rows, r0 + kSumLeaf); ++r) leaf += v[std::size_t(r * cols + c)];
        leaves.push_back(leaf);
      }
      out[std::size_t(c)] = pairwise_combine(leaves.data(), int64_t(leaves.size()), 0.f);
    }
    return out;
  };
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1000, 200}, {4100, 16}, {300, 2500}}) {
    std::vector<double> dv;
    const Tensor m = random_f32({rows, cols}, uint32_t(rows + cols), 0.5f, 2.f, &dv);
    const std::vector<float> v(dv.begin(), dv.end());
    const std::vector<float> want = rule_column_sums(v, rows, cols);
    const Tensor mb = to(m, DType::BF16);
    const std::vector<double> bv = test::values(mb);
    const std::vector<float> want_bf16 = rule_column_sums(std::vector<float>(bv.begin(), bv.end()), rows, cols);
    auto results = [&] {
      std::vector<std::vector<double>> out;
      out.push_back(test::values(sum(m, {0})));
      out.push_back(test::values(sum(mb, {0}).to(DType::F32)));
      return out;
    };
    test::check_same_at_thread_counts(results);
    const std::vector<double> got = test::values(sum(m, {0}));
    const std::vector<double> got_bf16 = test::values(sum(mb, {0}).to(DType::F32));
    for (int64_t c = 0; c < cols; ++c) {
      REQUIRE(float(got[std::size_t(c)]) == want[std::size_t(c)]);
      REQUIRE(float(got_bf16[std::size_t(c)]) == float(BFloat16(want_bf16[std::size_t(c)])));
    }
  }
}
