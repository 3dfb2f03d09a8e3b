// The summation rule (core/cascade_sum.h) in the accumulating kernels outside the norms and the
// generic reductions: softmax / log_softmax and their backward ops, the class losses and their
// batch means, cumsum, scatter_add (embedding backward), avg pooling over long windows and the
// conv weight gradient. Each case sums 10^5..10^6 terms in one group whose exact result is known
// (a constant such as 0.1f, whose in-order f32 running sum drifts by ~1% over 10^6 terms) or is
// computed here in long double, and allows a few ulps × log2 n; a last case checks that results are
// bit-identical at 1, 2 and 3 threads. Each case prints its measured error (the before /
// after numbers come from these lines).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/parallel.h"
#include "ops/conv.h"
#include "ops/cpu/leaf_sum.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;

namespace {

using LD = long double;
constexpr double kU = 0x1p-24;  // f32 unit roundoff

// The rule's bound for n terms in ulps of Σ|x|, with headroom for the term's own roundings:
// 128-term in-order leaves plus ceil(log2 leaves) pairwise levels, plus 8.
double rule_ulps(int64_t n) {
  const double leaves = std::ceil(double(n) / 128.0);
  return 128.0 + std::ceil(std::log2(std::max(1.0, leaves))) + 8.0;
}

std::vector<float> f32_values(const Tensor& t) {
  NoGradGuard no_grad;
  const Tensor c = contiguous(to(t, DType::F32));
  const float* p = c.data<float>();
  return std::vector<float>(p, p + c.numel());
}

Tensor f32_tensor(const std::vector<float>& v, const Shape& shape) { return from_vector<float>(v, shape); }

// max_i |got_i - want_i| / scale_i
double max_rel(const std::vector<float>& got, const std::vector<LD>& want, const std::vector<LD>& scale) {
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, double(std::fabs(LD(got[i]) - want[i]) / scale[i]));
  }
  return worst;
}

void report(const char* what, double err_ulps, double bound_ulps) {
  std::printf("[numerics] %-44s error %10.2f ulps (bound %.0f)\n", what, err_ulps, bound_ulps);
}

// A row whose softmax terms are ~0.1 (x = ln 0.1 below the max at x[0] = 0).
std::vector<float> tenth_row(int64_t n) {
  std::vector<float> x(std::size_t(n), -2.30258509f);
  x[0] = 0.0f;
  return x;
}

}  // namespace

TEST_CASE("softmax and log_softmax over a row of 10^6 sum by the rule", "[ops][numerics]") {
  const int64_t n = 1000000;
  const std::vector<float> x = tenth_row(n);
  LD s = 0;
  for (float v : x) s += std::exp(LD(v));
  const double bound = rule_ulps(n);
  {
    const std::vector<float> y = f32_values(softmax(f32_tensor(x, {1, n}), 1));
    std::vector<LD> want(x.size()), scale(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) want[i] = scale[i] = std::exp(LD(x[i])) / s;
    const double e = max_rel(y, want, scale) / kU;
    report("softmax [1, 10^6] (relative)", e, bound);
    CHECK(e <= bound);
  }
  {
    // the same row along dim 0 of [n, 2] (strided lines)
    std::vector<float> x2(std::size_t(2 * n));
    for (int64_t i = 0; i < n; ++i) x2[std::size_t(2 * i)] = x2[std::size_t(2 * i + 1)] = x[std::size_t(i)];
    const std::vector<float> y = f32_values(log_softmax(f32_tensor(x2, {n, 2}), 0));
    std::vector<LD> want(x2.size()), scale(x2.size(), LD(1));
    for (std::size_t i = 0; i < x2.size(); ++i) want[i] = LD(x2[i]) - std::log(s);
    const double e = max_rel(y, want, scale) / kU;  // absolute, in ulps of 1 (log's argument error)
    report("log_softmax [10^6, 2] dim 0 (absolute)", e, bound + 16);
    CHECK(e <= bound + 16);  // + the ulps of |y| ~ 14 on store
  }
}

TEST_CASE("softmax_backward and log_softmax_backward sum a row of 10^6 by the rule", "[ops][numerics]") {
  const int64_t n = 1000000;
  const float yv = 0.5f / float(n), gv = 0.1f;
  const Tensor g = full({1, n}, gv);
  const double bound = rule_ulps(n);
  {
    // dx = y (g - Σ g y): Σ g y = n · fl(g y) ≈ 0.05, so dx ≈ y · 0.05
    const std::vector<float> dx = f32_values(softmax_backward(g, full({1, n}, yv), 1));
    const LD s = LD(n) * LD(gv * yv);
    const LD want = LD(yv) * (LD(gv) - s);
    double worst = 0;
    for (float v : dx) worst = std::max(worst, double(std::fabs(LD(v) - want) / std::fabs(want)));
    report("softmax_backward [1, 10^6] (relative)", worst / kU, bound);
    CHECK(worst / kU <= bound);
  }
  {
    // dx = g - exp(y) Σ g ≈ 0.1 - 0.5e-6 · 1e5 = 0.05
    const float ly = std::log(yv);
    const std::vector<float> dx = f32_values(log_softmax_backward(g, full({1, n}, ly), 1));
    const LD want = LD(gv) - LD(std::exp(ly)) * LD(n) * LD(gv);
    double worst = 0;
    for (float v : dx) worst = std::max(worst, double(std::fabs(LD(v) - want) / std::fabs(want)));
    report("log_softmax_backward [1, 10^6] (relative)", worst / kU, bound);
    CHECK(worst / kU <= bound);
  }
}

TEST_CASE("cross_entropy and nll_loss: the batch mean of 10^6 rows and a class sum of 10^6", "[ops][loss][numerics]") {
  const double bound = rule_ulps(1000000);
  SECTION("mean over 10^6 rows of zero logits is log 4") {
    const int64_t n = 1000000;
    const Tensor t = zeros({n}, {.dtype = DType::I64});
    const float got = cross_entropy(zeros({n, 4}), t).item<float>();
    const double e = std::fabs(double(got) - std::log(4.0)) / std::log(4.0) / kU;
    report("cross_entropy mean of 10^6 rows", e, bound);
    CHECK(e <= bound);
    const float nll = nll_loss(full({n, 4}, -1.38629436f), t).item<float>();
    const double en = std::fabs(double(nll) - double(1.38629436f)) / double(1.38629436f) / kU;
    report("nll_loss mean of 10^6 rows", en, bound);
    CHECK(en <= bound);
    const float sum = cross_entropy(zeros({n, 4}), t, Reduction::Sum).item<float>();
    const double es = std::fabs(double(sum) - double(n) * std::log(4.0)) / (double(n) * std::log(4.0)) / kU;
    report("cross_entropy sum of 10^6 rows", es, bound);
    CHECK(es <= bound);
  }
  SECTION("random logits with label smoothing and ignored rows, against long double") {
    const int64_t n = 300000, c = 5;
    const std::vector<float> x = f32_values(randn({n, c}));
    std::vector<int64_t> t(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) t[std::size_t(i)] = i % 7 == 3 ? -100 : i % c;
    const double eps = 0.1;
    LD total = 0, abs_total = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (t[std::size_t(i)] == -100) continue;
      const float* r = x.data() + i * c;
      LD m = r[0], se = 0, sx = 0;
      for (int64_t k = 1; k < c; ++k) m = std::max(m, LD(r[k]));
      for (int64_t k = 0; k < c; ++k) se += std::exp(LD(r[k]) - m), sx += r[k];
      const LD lse = m + std::log(se);
      const LD l = (1 - LD(eps)) * (lse - r[t[std::size_t(i)]]) + LD(eps) * (lse - sx / c);
      total += l;
      abs_total += std::fabs(l);
      ++count;
    }
    const float got =
        cross_entropy(f32_tensor(x, {n, c}), from_vector<int64_t>(t, {n}), Reduction::Mean, -100, eps).item<float>();
    // per-row roundings (a few ulps of each |loss|) and the rule's bound on the sum
    const double e = double(std::fabs(LD(got) - total / count) / (abs_total / count)) / kU;
    report("cross_entropy smoothed, ignore_index, 3e5 rows", e, rule_ulps(n) + 16);
    CHECK(e <= rule_ulps(n) + 16);
  }
  SECTION("one row of 10^6 classes, forward and backward") {
    const int64_t c = 1000000;
    const std::vector<float> x = tenth_row(c);
    LD se = 0, sx = 0;
    for (float v : x) se += std::exp(LD(v)), sx += v;
    const Tensor logits = f32_tensor(x, {1, c});
    const Tensor t = zeros({1}, {.dtype = DType::I64});
    const double eps = 0.2;
    const float got = cross_entropy(logits, t, Reduction::Mean, -100, eps).item<float>();
    const LD lse = std::log(se);
    const LD want = (1 - LD(eps)) * lse + LD(eps) * (lse - sx / c);
    const double e = double(std::fabs(LD(got) - want)) / kU;  // absolute, in ulps of 1
    report("cross_entropy over 10^6 classes (absolute)", e, bound + 16);
    CHECK(e <= bound + 16);
    const std::vector<float> dx = f32_values(cross_entropy_backward(ones({}), logits, t, Reduction::Mean, -100, eps));
    std::vector<LD> want_dx(x.size()), scale(x.size());
    for (std::size_t k = 0; k < x.size(); ++k) {
      want_dx[k] = std::exp(LD(x[k])) / se - LD(eps) / c - (k == 0 ? 1 - LD(eps) : LD(0));
      // the softmax term carries the sum's error; the subtracted terms one rounding each
      scale[k] = std::exp(LD(x[k])) / se + LD(eps) / c + (k == 0 ? 1 - LD(eps) : LD(0));
    }
    const double ed = max_rel(dx, want_dx, scale) / kU;
    report("cross_entropy_backward over 10^6 classes", ed, bound + 8);
    CHECK(ed <= bound + 8);
  }
}

TEST_CASE("elementwise losses reduce 10^6 terms by the rule", "[ops][loss][numerics]") {
  // They reduce through mean/sum (ops/cpu/reduce_loop.h): a regression check of that path.
  const int64_t n = 1000000;
  const Tensor x = full({n}, 0.1f), z = zeros({n});
  const double want = double(0.1f), bound = rule_ulps(n);
  auto check = [&](const char* what, float got, double w) {
    const double e = std::fabs(double(got) - w) / w / kU;
    report(what, e, bound);
    CHECK(e <= bound);
  };
  check("l1_loss mean of 10^6 x 0.1", l1_loss(x, z).item<float>(), want);
  check("mse_loss sum of 10^6 x 0.1^2", mse_loss(x, z, Reduction::Sum).item<float>(), double(n) * double(0.1f * 0.1f));
  check("smooth_l1_loss mean of 10^6 x 0.1", smooth_l1_loss(x, z, Reduction::Mean, 0.0).item<float>(), want);
}

TEST_CASE("cumsum: every prefix of 10^6 x 0.1f and of random values within the rule's bound", "[ops][numerics]") {
  const int64_t n = 1000000;
  {
    const std::vector<float> y = f32_values(cumsum(full({n}, 0.1f), 0));
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double want = double(i + 1) * double(0.1f);
      worst = std::max(worst, std::fabs(double(y[std::size_t(i)]) - want) / want);
    }
    report("cumsum of 10^6 x 0.1f (worst prefix)", worst / kU, rule_ulps(n));
    CHECK(worst / kU <= rule_ulps(n));
  }
  {
    // random signs, along dim 0 of [n/4, 4] (strided lines): error relative to the prefix of |x|
    const int64_t rows = n / 4;
    const std::vector<float> x = f32_values(randn({rows, 4}));
    const std::vector<float> y = f32_values(cumsum(f32_tensor(x, {rows, 4}), 0));
    double worst = 0;
    for (int64_t col = 0; col < 4; ++col) {
      LD s = 0, a = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const float v = x[std::size_t(r * 4 + col)];
        s += v;
        a += std::fabs(v);
        worst = std::max(worst, double(std::fabs(LD(y[std::size_t(r * 4 + col)]) - s) / a));
      }
    }
    report("cumsum random [2.5e5, 4] dim 0 (of prefix |x|)", worst / kU, rule_ulps(rows));
    CHECK(worst / kU <= rule_ulps(rows));
  }
}

TEST_CASE("embedding backward and scatter_add: 10^6 additions into one row", "[ops][numerics]") {
  const int64_t n = 1000000, d = 4;
  const double bound = rule_ulps(n);
  {
    const Tensor w = zeros({3, d}).requires_grad_();
    const Tensor idx = ones({n}, {.dtype = DType::I64});
    const Tensor y = embedding(w, idx);  // [n, d]
    const std::vector<float> gw = f32_values(autograd::grad({y}, {w}, {full({n, d}, 0.1f)})[0]);
    double worst = 0;
    for (int64_t k = 0; k < d; ++k) {
      CHECK(gw[std::size_t(k)] == 0.0f);
      CHECK(gw[std::size_t(2 * d + k)] == 0.0f);
      const double want = double(n) * double(0.1f);
      worst = std::max(worst, std::fabs(double(gw[std::size_t(d + k)]) - want) / want);
    }
    report("embedding backward, 10^6 lookups of one row", worst / kU, bound);
    CHECK(worst / kU <= bound);
  }
  {
    // random values into 3 targets, with a nonzero self, against long double
    const std::vector<float> src = f32_values(randn({n}));
    std::vector<int64_t> index(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) index[std::size_t(i)] = (i * 7) % 3;
    const std::vector<float> self = {1.5f, -2.0f, 0.25f};
    const std::vector<float> got =
        f32_values(scatter_add(f32_tensor(self, {3}), 0, from_vector<int64_t>(index, {n}), f32_tensor(src, {n})));
    std::vector<LD> want(3), scale(3);
    for (int k = 0; k < 3; ++k) want[std::size_t(k)] = scale[std::size_t(k)] = std::fabs(LD(self[std::size_t(k)]));
    for (int k = 0; k < 3; ++k) want[std::size_t(k)] = self[std::size_t(k)];
    for (int64_t i = 0; i < n; ++i) {
      want[std::size_t(index[std::size_t(i)])] += src[std::size_t(i)];
      scale[std::size_t(index[std::size_t(i)])] += std::fabs(LD(src[std::size_t(i)]));
    }
    const double e = max_rel(got, want, scale) / kU;
    report("scatter_add random, 3.3e5 per target (of Σ|x|)", e, rule_ulps(n / 3));
    CHECK(e <= rule_ulps(n / 3));
  }
}

TEST_CASE("general scatter_add (many targets per index row) sums each target by the rule, bit for bit",
          "[ops][numerics]") {
  // ops/cpu/scatter_add_lines.h counts leaves while it adds, and runs adjacent lines (here the D
  // columns of a contiguous [n, D] along dim 0) together. Each output element must still be its
  // sequence (self, its terms in index order) summed in in-order leaves of 128 combined pairwise:
  // LeafSum (ops/cpu/leaf_sum.h) fed that sequence is the reference. Targets differ along every
  // row, every 5th row sends column j to target j mod 2 (about 600 terms: 4 leaves and an open
  // one). The same scatter through transposed
  // operands along dim 1 (lines not adjacent: one at a time) and at 1, 2, 3 threads gives the same
  // bits; bf16 sums in f32 and rounds once.
  const int64_t n = 3001, d = 37, size = 11;
  std::vector<int64_t> iv(static_cast<std::size_t>(n * d));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < d; ++j) {
      const int64_t v = i % 5 == 0 ? j % 2 : (i * 7 + j * 3) % size;
      iv[std::size_t(i * d + j)] = v;
    }
  }
  const Tensor index = from_vector<int64_t>(iv, {n, d});
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor src = to(randn({n, d}), dt), self = to(randn({size, d}), dt);
    const std::vector<float> sv = f32_values(src), selfv = f32_values(self);
    std::vector<float> want(static_cast<std::size_t>(size * d));
    for (int64_t j = 0; j < d; ++j) {
      std::vector<cpu::LeafSum<float>> acc(static_cast<std::size_t>(size));
      for (int64_t v = 0; v < size; ++v) acc[std::size_t(v)].add(selfv[std::size_t(v * d + j)]);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t v = iv[std::size_t(i * d + j)];
        acc[std::size_t(v)].add(sv[std::size_t(i * d + j)]);
      }
      for (int64_t v = 0; v < size; ++v) {
        const float r = acc[std::size_t(v)].result();
        want[std::size_t(v * d + j)] = dt == DType::F32 ? r : float(BFloat16(r));
      }
    }
    auto run = [&] {
      std::vector<std::vector<float>> r;
      r.push_back(f32_values(scatter_add(self, 0, index, src)));
      r.push_back(f32_values(transpose(scatter_add(transpose(self, 0, 1), 1, transpose(index, 0, 1), transpose(src, 0, 1)), 0, 1)));
      return r;
    };
    test::check_same_at_thread_counts(run);
    const std::vector<std::vector<float>> r = run();
    CHECK(r[0] == want);
    CHECK(r[1] == want);
  }
  // An index out of range throws in the middle of a line; the next scatter on that thread is right.
  std::vector<int64_t> bad = iv;
  bad[std::size_t((n / 2) * d + 3)] = size;
  const Tensor src = randn({n, d}), self = zeros({size, d});
  const std::vector<float> before = f32_values(scatter_add(self, 0, index, src));
  MG_REQUIRE_ERROR(scatter_add(self, 0, from_vector<int64_t>(bad, {n, d}), src), "scatter_add: index 11 is out of range");
  CHECK(f32_values(scatter_add(self, 0, index, src)) == before);
}

TEST_CASE("scatter_add by rows (one target per index row) equals the general kernel bit for bit", "[ops][numerics]") {
  // Embedding backward's shape: the index is the token ids expanded along D, so scatter_add runs
  // row by row (ops/cpu/scatter_add_rows.h). The same scatter through a non-contiguous index takes
  // the general line-by-line kernel; both must give the same bits, with targets that fill many
  // leaves (and some that do not), a nonzero self, D not a multiple of the blocks, f32 and bf16,
  // and at 1, 2 and 3 threads.
  const int64_t n = 70000, d = 40, vocab = 10;  // targets 0..6: rows 7..9 untouched
  std::vector<int64_t> ids(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[std::size_t(i)] = i % 1000 == 0 ? 6 : (i * 5) % 3 + (i % 7 == 0 ? 3 : 0);
  const Tensor id = reshape(from_vector<int64_t>(ids, {n}), {n, 1});
  const Tensor by_rows = contiguous(expand(id, {n, d}));
  const Tensor general = slice(contiguous(expand(id, {n, 2 * d})), 1, 0, d);  // same values, strided rows
  REQUIRE(!general.is_contiguous());
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor src = to(randn({n, d}), dt);
    const Tensor self = to(randn({vocab, d}), dt);
    auto run = [&] {
      std::vector<std::vector<float>> r;
      r.push_back(f32_values(scatter_add(self, 0, by_rows, src)));
      r.push_back(f32_values(scatter_add(self, 0, general, src)));
      return r;
    };
    test::check_same_at_thread_counts(run);
    const std::vector<std::vector<float>> r = run();
    REQUIRE(r[0] == r[1]);
  }
  // embedding backward itself (D = 16: the row path), 10^6 lookups of one row
  const int64_t m = 1000000, w = 16;
  const Tensor weight = zeros({3, w}).requires_grad_();
  const Tensor y = embedding(weight, ones({m}, {.dtype = DType::I64}));  // [m, w]
  const std::vector<float> gw = f32_values(autograd::grad({y}, {weight}, {full({m, w}, 0.1f)})[0]);
  const double want = double(m) * double(0.1f);
  double worst = 0;
  for (int64_t k = 0; k < w; ++k) {
    CHECK(gw[std::size_t(k)] == 0.0f);
    worst = std::max(worst, std::fabs(double(gw[std::size_t(w + k)]) - want) / want);
  }
  report("embedding backward by rows, 10^6 lookups of one row", worst / kU, rule_ulps(m));
  CHECK(worst / kU <= rule_ulps(m));
}

TEST_CASE("adaptive average pooling over a 1024 x 1024 window", "[ops][numerics]") {
  const int64_t h = 1024;
  const float got = adaptive_avg_pool2d(full({1, 1, h, h}, 0.1f), {1, 1}).item<float>();
  const double e = std::fabs(double(got) - double(0.1f)) / double(0.1f) / kU;
  report("adaptive_avg_pool2d of 2^20 x 0.1f", e, rule_ulps(h * h));
  CHECK(e <= rule_ulps(h * h));
}

TEST_CASE("conv2d weight gradient: the batch's slices add no error of their own", "[ops][conv][numerics]") {
  // x = 0.1f and g = 1 everywhere: each tap of the 3x3 weight gradient sums N·32·32 terms of 0.1
  // (those inside the padded image). From N = 128 on, the kernel sums each slice of 16 images with
  // one oneDNN primitive or GEMM (their own order: not ours to change) and combines the slices by
  // the rule's pairwise tree; with equal slices the pairwise sums of a power of two of them are
  // exact, so 1024 images must be exactly as accurate as 128 (8 slices). One running total over
  // the slices would drift (on main: 68815 ulps at 1024 images).
  const int64_t hw = 32;
  const Conv2dOptions opt{.padding = {1, 1}};
  auto error_ulps = [&](int64_t n, int64_t ch) {
    const Tensor x = full({n, ch, hw, hw}, 0.1f), g = ones({n, ch, hw, hw});
    const std::vector<float> dw = f32_values(conv2d_backward_weight(x, g, {3, 3}, opt));
    const Tensor r = conv2d_backward_weight(to(x, DType::F64), to(g, DType::F64), {3, 3}, opt);
    NoGradGuard no_grad;
    const double* p = contiguous(r).data<double>();
    double worst = 0;
    for (std::size_t i = 0; i < dw.size(); ++i) worst = std::max(worst, std::fabs(double(dw[i]) - p[i]) / p[i]);
    return worst / kU;
  };
  for (const int64_t ch : {1, 4}) {
    const double slice = error_ulps(128, ch), batch = error_ulps(1024, ch);
    char what[64];
    std::snprintf(what, sizeof what, "conv2d_backward_weight 1024x%lldx32x32", (long long)ch);
    report(what, batch, slice + 8);
    std::printf("[numerics] %-44s error %10.2f ulps (the slices' own sums)\n", "  ... 128 images, 8 slices of 16", slice);
    CHECK(batch <= slice + 8);
  }
}

TEST_CASE("accumulating kernels give bit-identical results at 1, 2 and 3 threads", "[ops][numerics]") {
  const Tensor x = randn({3, 200000});
  const Tensor t = from_vector<int64_t>({7, 1, 199999}, {3});
  const Tensor rows = randn({40000, 10});
  std::vector<int64_t> rtv(40000), eiv(300000);
  for (std::size_t i = 0; i < rtv.size(); ++i) rtv[i] = int64_t(i % 10);
  for (std::size_t i = 0; i < eiv.size(); ++i) eiv[i] = int64_t((i * 3) % 5);
  const Tensor rt = from_vector<int64_t>(rtv, {40000});
  const Tensor emb_idx = from_vector<int64_t>(eiv, {300000});
  const Tensor emb_g = randn({300000, 8});
  const Tensor cx = randn({64, 4, 16, 16}), cg = randn({64, 8, 16, 16});
  auto run = [&] {
    std::vector<std::vector<float>> r;
    r.push_back(f32_values(softmax(x, 1)));
    r.push_back(f32_values(log_softmax_backward(x, log_softmax(x, 1), 1)));
    r.push_back(f32_values(cross_entropy(x, t, Reduction::Mean, -100, 0.1)));
    r.push_back(f32_values(cross_entropy(rows, rt)));
    r.push_back(f32_values(cross_entropy_backward(ones({}), x, t)));
    r.push_back(f32_values(cumsum(x, 1)));
    r.push_back(f32_values(scatter_add(zeros({5, 8}), 0, contiguous(expand(reshape(emb_idx, {-1, 1}), {300000, 8})), emb_g)));
    r.push_back(f32_values(conv2d_backward_weight(cx, cg, {3, 3}, {.padding = {1, 1}})));
    r.push_back(f32_values(adaptive_avg_pool2d(x.reshape({1, 3, 400, 500}), {1, 1})));
    return r;
  };
  test::check_same_at_thread_counts(run);
}
