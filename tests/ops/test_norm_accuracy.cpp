// Accuracy of the norm kernels' sums (issue 12): batch/layer/group/rms norm, forward statistics and
// the fused backward (Σg, Σg·xhat per row/channel/group, dweight/dbias column sums), on long
// reductions (2^20 = 1,048,576 values in one reduced group) whose exact result is known — constants
// (normalised output exactly 0, bias gradient n·0.1f to a few ulps), alternating large/small values
// — and on random values against the f64 kernels fed the same inputs. Tolerances are
// c · log2(n) · u · (the scale of the sum), u = 2^-24: the summation rule's bound (core/cascade_sum.h)
// up to a small constant; one running f32 total is off by ~n · u on the same data and fails them.
// The results are the same bit for bit at 1, 2 and 3 threads; and batch norm at ResNet-20's
// first-stage shape [16, 16, 28, 28] matches f64 through autograd.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "ops/norm.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;

namespace {

constexpr double kU = 1.0 / (1 << 24);  // unit roundoff of f32
constexpr int64_t kLong = int64_t(1) << 20;

std::vector<double> vals(const Tensor& t) {
  NoGradGuard no_grad;
  const Tensor c = contiguous(to(t.detach(), DType::F64));
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

Tensor f32(const std::vector<float>& v, const Shape& shape) { return from_vector<float>(v, shape); }
Tensor as_f64(const Tensor& t) { return t.defined() ? to(t, DType::F64) : Tensor(); }

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// max_i |got_i - want_i| / tol_i (<= 1 passes); reports the worst element.
double worst_ratio(const std::vector<double>& got, const std::vector<double>& want, const std::vector<double>& tol) {
  REQUIRE(got.size() == want.size());
  REQUIRE(tol.size() == want.size());
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double r = std::fabs(got[i] - want[i]) / tol[i];
    if (!(r <= worst)) worst = r, at = i;  // NaN counts as worst
  }
  INFO("worst element " << at << ": got " << got[at] << ", want " << want[at] << ", tol " << tol[at]);
  CHECK(worst <= 1.0);
  return worst;
}
std::vector<double> same_tol(std::size_t n, double tol) { return std::vector<double>(n, tol); }

// Uniform values in [lo, lo + 1), and their f32 copy.
std::vector<float> uniform(int64_t n, double lo, uint64_t seed) {
  manual_seed(seed);
  const std::vector<double> r = vals(rand({n}));
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[std::size_t(i)] = float(lo + r[std::size_t(i)]);
  return v;
}

// The per-element tolerance of a normalised output y = (x - mean) * rstd * w + b computed in f32
// from an accurately summed mean/var: the statistics' error (c log2 n u, relative) times
// |x - mean|·rstd·|w| and |mean|·rstd·|w|, plus the final few roundings.
double norm_out_tol(double xhat, double mean_rstd, double w, double b, int64_t n) {
  const double stats = 2.0 * std::log2(double(n)) * kU;
  return stats * std::fabs(w) * (mean_rstd + std::fabs(xhat)) + 4 * kU * (std::fabs(xhat * w) + std::fabs(b)) + 1e-30;
}

}  // namespace

TEST_CASE("batch_norm of a constant channel normalises to exactly 0 - its bias gradient is exact to a few ulps",
          "[ops][norm][numerics]") {
  // The example [16, 1, 28, 28] (12,544 values per channel) and 2^20 values per channel.
  for (const Shape& shape : {Shape{16, 1, 28, 28}, Shape{16, 1, 256, 256}}) {
    const int64_t n = shape[0] * shape[2] * shape[3];
    INFO("shape [" << shape[0] << ", 1, " << shape[2] << ", " << shape[3] << "], n = " << n);
    const Tensor x = full(shape, 0.1);
    Tensor w = ones({1}).requires_grad_(), b = zeros({1}).requires_grad_();
    const Tensor y = batch_norm(x, w, b, Tensor(), Tensor(), /*training=*/true);
    CHECK(max_abs(vals(y)) == 0.0);  // mean = 0.1f exactly, so x - mean = 0 (a running total gave 4.0e-3)
    sum(y * 0.1).backward();
    // dbias = Σ 0.1f over n values; exact in f64 (n * 0.1f needs < 53 bits).
    const double exact = double(n) * double(0.1f);
    const double db = vals(b.grad())[0];
    INFO("dbias " << db << " exact " << exact);  // a running total gave 1254.2408 for 1254.4000
    CHECK(std::fabs(db - exact) <= 2.0 * std::log2(double(n)) * kU * exact);
    CHECK(vals(w.grad())[0] == 0.0);  // Σ g·xhat with xhat = 0
  }
}

TEST_CASE("batch_norm over 2^20 alternating large and small values per channel", "[ops][norm][numerics]") {
  // x = 4096, 1, 4096, 1, ... (exact mean 2048.5, var 2047.5^2): a running f32 total drops the 1s once
  // it passes 2^25 and gets the mean 0.5 low; the rule's tree sums these exactly.
  const Shape shape{16, 1, 256, 256};
  std::vector<float> v(static_cast<std::size_t>(kLong));
  for (int64_t i = 0; i < kLong; ++i) v[std::size_t(i)] = (i % 2 == 0) ? 4096.f : 1.f;
  const Tensor x = f32(v, shape);
  Tensor rm = zeros({1}), rv = ones({1});
  const std::vector<double> y = vals(batch_norm(x, Tensor(), Tensor(), rm, rv, true, /*momentum=*/1.0, 1e-5));
  const double sd = 2047.5, r = 1.0 / std::sqrt(sd * sd + 1e-5);
  std::vector<double> want(y.size());
  for (std::size_t i = 0; i < y.size(); ++i) want[i] = (i % 2 == 0 ? sd : -sd) * r;
  worst_ratio(y, want, same_tol(y.size(), 4 * kU));
  // momentum 1: the running stats are the batch mean and the unbiased variance.
  CHECK(vals(rm)[0] == 2048.5);
  const double var_unbiased = sd * sd * double(kLong) / double(kLong - 1);
  CHECK(std::fabs(vals(rv)[0] - var_unbiased) <= 4 * kU * var_unbiased);
}

TEST_CASE("batch_norm forward and backward on 2^20 random values per channel match f64", "[ops][norm][numerics]") {
  // x in [3, 4) (mean 3.5: a nonzero mean is what a running total loses), 2 channels of
  // N·H·W = 4·512·512 = 2^20 values; random weight and bias.
  const Shape shape{4, 2, 512, 512};
  const int64_t numel = 2 * kLong, s = 512 * 512, n = kLong;
  const Tensor x = f32(uniform(numel, 3.0, 1), shape);
  const Tensor w = f32({1.5f, -0.75f}, {2}), b = f32({0.25f, 2.0f}, {2});
  const std::vector<double> y32 = vals(batch_norm(x, w, b, Tensor(), Tensor(), true));
  const std::vector<double> y64 = vals(batch_norm(as_f64(x), as_f64(w), as_f64(b), Tensor(), Tensor(), true));
  // Exact per-channel statistics (f64), for the tolerance and as the backward's inputs.
  const std::vector<double> xv = vals(x), wv = vals(w), bv = vals(b);
  double mean[2] = {0, 0}, var[2] = {0, 0};
  for (int64_t i = 0; i < numel; ++i) mean[(i / s) % 2] += xv[std::size_t(i)] / double(n);
  for (int64_t i = 0; i < numel; ++i) {
    const double d = xv[std::size_t(i)] - mean[(i / s) % 2];
    var[(i / s) % 2] += d * d / double(n);
  }
  const double rstd[2] = {1 / std::sqrt(var[0] + 1e-5), 1 / std::sqrt(var[1] + 1e-5)};
  std::vector<double> tol(y32.size());
  for (int64_t i = 0; i < numel; ++i) {
    const int64_t c = (i / s) % 2;
    tol[std::size_t(i)] = norm_out_tol((xv[std::size_t(i)] - mean[c]) * rstd[c], mean[c] * rstd[c], wv[c], bv[c], n);
  }
  worst_ratio(y32, y64, tol);

  // Backward from the same f32 inputs (x, g, mean, invstd, weight) in f32 and in f64: what differs
  // is the f32 kernel's rounding. g in [0.5, 1.5) (nonzero mean, like the bias gradients).
  const Tensor g = f32(uniform(numel, 0.5, 2), shape);
  const Tensor m32 = f32({float(mean[0]), float(mean[1])}, {2}), r32 = f32({float(rstd[0]), float(rstd[1])}, {2});
  const NormGrads a = batch_norm_backward(g, x, m32, r32, w, true);
  const NormGrads e = batch_norm_backward(as_f64(g), as_f64(x), as_f64(m32), as_f64(r32), as_f64(w), true);
  const std::vector<double> gv = vals(g), mv = vals(m32), rv = vals(r32);
  double sum_g[2] = {0, 0}, sum_gx[2] = {0, 0};
  for (int64_t i = 0; i < numel; ++i) {
    const int64_t c = (i / s) % 2;
    sum_g[c] += std::fabs(gv[std::size_t(i)]);
    sum_gx[c] += std::fabs(gv[std::size_t(i)] * (xv[std::size_t(i)] - mv[c]) * rv[c]);
  }
  const double lg = 2.0 * std::log2(double(n)) + 3;
  worst_ratio(vals(a.dbias), vals(e.dbias), {lg * kU * sum_g[0], lg * kU * sum_g[1]});
  worst_ratio(vals(a.dweight), vals(e.dweight), {lg * kU * sum_gx[0], lg * kU * sum_gx[1]});
  const std::vector<double> m1 = {wv[0] * vals(e.dbias)[0] / n, wv[1] * vals(e.dbias)[1] / n};
  const std::vector<double> m2 = {wv[0] * vals(e.dweight)[0] / n, wv[1] * vals(e.dweight)[1] / n};
  std::vector<double> dx_tol(static_cast<std::size_t>(numel));
  for (int64_t i = 0; i < numel; ++i) {
    const int64_t c = (i / s) % 2;
    const double xh = (xv[std::size_t(i)] - mv[c]) * rv[c];
    // dx = rstd (g w - m1 - xh m2): the means' summation error plus a few roundings per term
    dx_tol[std::size_t(i)] = rv[c] * (lg * kU * std::fabs(wv[c]) * (sum_g[c] + std::fabs(xh) * sum_gx[c]) / n +
                                      6 * kU * (std::fabs(gv[std::size_t(i)] * wv[c]) + std::fabs(m1[c]) +
                                                std::fabs(xh * m2[c])));
  }
  worst_ratio(vals(a.dx), vals(e.dx), dx_tol);
}

TEST_CASE("layer_norm over rows of 2^20 and its column sums over 2^20 rows", "[ops][norm][numerics]") {
  // Rows of 2^20: row 0 constant 0.1 (normalises to exactly 0), row 1 random in [3, 4).
  std::vector<float> v = uniform(2 * kLong, 3.0, 3);
  std::fill(v.begin(), v.begin() + kLong, 0.1f);
  const Tensor x = f32(v, {2, kLong});
  const std::vector<double> y32 = vals(layer_norm(x, {kLong}));
  const std::vector<double> y64 = vals(layer_norm(as_f64(x), {kLong}));
  CHECK(max_abs(std::vector<double>(y32.begin(), y32.begin() + kLong)) == 0.0);
  std::vector<double> tol(y32.size(), 1e-30);
  for (int64_t i = kLong; i < 2 * kLong; ++i) {
    const double mr = 3.5 * std::sqrt(12.0);  // |mean| · rstd for uniform [3, 4)
    tol[std::size_t(i)] = norm_out_tol(y64[std::size_t(i)], mr, 1, 0, kLong);
  }
  worst_ratio(y32, y64, tol);

  // The backward over those two rows: Σg and Σg·xhat per row of 2^20, g in [0.5, 1.5).
  {
    const Tensor g = f32(uniform(2 * kLong, 0.5, 4), {2, kLong});
    const std::vector<double> xv = vals(x);
    double mean = 0, var = 0;
    for (int64_t i = kLong; i < 2 * kLong; ++i) mean += xv[std::size_t(i)] / double(kLong);
    for (int64_t i = kLong; i < 2 * kLong; ++i) var += (xv[std::size_t(i)] - mean) * (xv[std::size_t(i)] - mean) / double(kLong);
    const Tensor m32 = f32({0.1f, float(mean)}, {2, 1}), r32 = f32({float(1 / std::sqrt(1e-5)), float(1 / std::sqrt(var + 1e-5))}, {2, 1});
    const NormGrads a = layer_norm_backward(g, x, m32, r32, {kLong});
    const NormGrads e = layer_norm_backward(as_f64(g), as_f64(x), as_f64(m32), as_f64(r32), {kLong});
    const std::vector<double> gv = vals(g), dx64 = vals(e.dx), rv = vals(r32), mv = vals(m32);
    const double lg = 2.0 * std::log2(double(kLong)) + 3;
    std::vector<double> dx_tol(gv.size());
    for (int64_t r = 0; r < 2; ++r) {
      double sg = 0, sgx = 0;
      for (int64_t i = r * kLong; i < (r + 1) * kLong; ++i) {
        sg += std::fabs(gv[std::size_t(i)]);
        sgx += std::fabs(gv[std::size_t(i)] * (xv[std::size_t(i)] - mv[r]) * rv[r]);
      }
      for (int64_t i = r * kLong; i < (r + 1) * kLong; ++i) {
        const double xh = (xv[std::size_t(i)] - mv[r]) * rv[r];
        dx_tol[std::size_t(i)] = rv[r] * (lg * kU * (sg + std::fabs(xh) * sgx) / kLong +
                                          8 * kU * (std::fabs(gv[std::size_t(i)]) + sg / kLong + std::fabs(xh) * sgx / kLong));
      }
    }
    worst_ratio(vals(a.dx), dx64, dx_tol);
  }

  // dweight / dbias over 2^20 rows of 4 features: g = 0.1 gives dbias = 2^20 · 0.1f, and random g
  // in [0.5, 1.5) against f64.
  const Tensor xr = f32(uniform(4 * kLong, 0.0, 5), {kLong, 4});
  const Tensor mean = mg::mean(xr, {1}, true), rstd = rsqrt(var(xr, {1}, /*unbiased=*/false, true) + 1e-5);
  const Tensor w = f32({1.f, 2.f, -1.f, 0.5f}, {4});
  {
    const NormGrads a = layer_norm_backward(full({kLong, 4}, 0.1), xr, mean, rstd, {4}, w, true);
    const double exact = double(kLong) * double(0.1f);
    for (double db : vals(a.dbias)) CHECK(std::fabs(db - exact) <= 2.0 * std::log2(double(kLong)) * kU * exact);
  }
  const Tensor g = f32(uniform(4 * kLong, 0.5, 6), {kLong, 4});
  const NormGrads a = layer_norm_backward(g, xr, mean, rstd, {4}, w, true);
  const NormGrads e = layer_norm_backward(as_f64(g), as_f64(xr), as_f64(mean), as_f64(rstd), {4}, as_f64(w), true);
  const std::vector<double> gv = vals(g), xv = vals(xr), mv = vals(mean), rv = vals(rstd);
  std::vector<double> sum_g(4, 0), sum_gx(4, 0);
  for (int64_t r = 0; r < kLong; ++r) {
    for (int64_t i = 0; i < 4; ++i) {
      const double gi = gv[std::size_t(r * 4 + i)];
      sum_g[std::size_t(i)] += std::fabs(gi);
      sum_gx[std::size_t(i)] += std::fabs(gi * (xv[std::size_t(r * 4 + i)] - mv[std::size_t(r)]) * rv[std::size_t(r)]);
    }
  }
  // in-order leaves of 128 rows: d_leaf = 128, then log2(2^20 / 128) = 13 levels
  const double lc = 128 + 13 + 3;
  std::vector<double> tb(4), tw(4);
  for (int i = 0; i < 4; ++i) tb[std::size_t(i)] = lc * kU * sum_g[std::size_t(i)], tw[std::size_t(i)] = lc * kU * sum_gx[std::size_t(i)];
  worst_ratio(vals(a.dbias), vals(e.dbias), tb);
  worst_ratio(vals(a.dweight), vals(e.dweight), tw);
}

TEST_CASE("group_norm over groups of 2^20 values, forward and backward", "[ops][norm][numerics]") {
  // [2, 4, 512, 512], one group: each sample's 4·512·512 = 2^20 values are normalised together.
  // Sample 0 constant 0.1 (exactly 0 out), sample 1 random in [3, 4); per-channel weight and bias.
  const Shape shape{2, 4, 512, 512};
  std::vector<float> v = uniform(2 * kLong, 3.0, 7);
  std::fill(v.begin(), v.begin() + kLong, 0.1f);
  const Tensor x = f32(v, shape);
  const std::vector<double> y32 = vals(group_norm(x, 1));
  const std::vector<double> y64 = vals(group_norm(as_f64(x), 1));
  CHECK(max_abs(std::vector<double>(y32.begin(), y32.begin() + kLong)) == 0.0);
  std::vector<double> tol(y32.size(), 1e-30);
  for (int64_t i = kLong; i < 2 * kLong; ++i) tol[std::size_t(i)] = norm_out_tol(y64[std::size_t(i)], 3.5 * std::sqrt(12.0), 1, 0, kLong);
  worst_ratio(y32, y64, tol);

  // Backward with g = 0.1 everywhere: dbias[c] = Σ over N·H·W = 2^19 values of 0.1f.
  const std::vector<double> xv = vals(x);
  double mean = 0, var = 0;
  for (int64_t i = kLong; i < 2 * kLong; ++i) mean += xv[std::size_t(i)] / double(kLong);
  for (int64_t i = kLong; i < 2 * kLong; ++i) var += (xv[std::size_t(i)] - mean) * (xv[std::size_t(i)] - mean) / double(kLong);
  const Tensor m32 = f32({0.1f, float(mean)}, {2, 1}), r32 = f32({float(1 / std::sqrt(1e-5)), float(1 / std::sqrt(var + 1e-5))}, {2, 1});
  const Tensor w = f32({1.f, -2.f, 0.5f, 3.f}, {4});
  {
    const NormGrads a = group_norm_backward(full(shape, 0.1), x, m32, r32, 1, w, true);
    const double exact = double(kLong / 2) * double(0.1f);
    for (double db : vals(a.dbias)) CHECK(std::fabs(db - exact) <= 2.0 * std::log2(double(kLong)) * kU * exact);
  }
  const Tensor g = f32(uniform(2 * kLong, 0.5, 8), shape);
  const NormGrads a = group_norm_backward(g, x, m32, r32, 1, w, true);
  const NormGrads e = group_norm_backward(as_f64(g), as_f64(x), as_f64(m32), as_f64(r32), 1, as_f64(w), true);
  const std::vector<double> gv = vals(g), mv = vals(m32), rv = vals(r32), wv = vals(w);
  const int64_t s = 512 * 512;
  std::vector<double> sum_g(4, 0), sum_gx(4, 0);  // per channel over both samples
  double grp_g[2] = {0, 0}, grp_gx[2] = {0, 0};   // per sample, Σ|g w| and Σ|g w xhat|
  for (int64_t i = 0; i < 2 * kLong; ++i) {
    const int64_t nn = i / kLong, c = (i / s) % 4;
    const double gi = gv[std::size_t(i)], xh = (xv[std::size_t(i)] - mv[nn]) * rv[nn];
    sum_g[std::size_t(c)] += std::fabs(gi);
    sum_gx[std::size_t(c)] += std::fabs(gi * xh);
    grp_g[nn] += std::fabs(gi * wv[std::size_t(c)]);
    grp_gx[nn] += std::fabs(gi * wv[std::size_t(c)] * xh);
  }
  const double lg = 2.0 * std::log2(double(kLong)) + 3;
  std::vector<double> tb(4), tw(4);
  for (int c = 0; c < 4; ++c) tb[std::size_t(c)] = lg * kU * sum_g[std::size_t(c)], tw[std::size_t(c)] = lg * kU * sum_gx[std::size_t(c)];
  worst_ratio(vals(a.dbias), vals(e.dbias), tb);
  worst_ratio(vals(a.dweight), vals(e.dweight), tw);
  std::vector<double> dx_tol(gv.size());
  for (int64_t i = 0; i < 2 * kLong; ++i) {
    const int64_t nn = i / kLong, c = (i / s) % 4;
    const double xh = (xv[std::size_t(i)] - mv[nn]) * rv[nn];
    dx_tol[std::size_t(i)] = rv[nn] * (lg * kU * (grp_g[nn] + std::fabs(xh) * grp_gx[nn]) / kLong +
                                       8 * kU * (std::fabs(gv[std::size_t(i)] * wv[std::size_t(c)]) + grp_g[nn] / kLong +
                                                 std::fabs(xh) * grp_gx[nn] / kLong));
  }
  worst_ratio(vals(a.dx), vals(e.dx), dx_tol);
}

TEST_CASE("rms_norm over rows of 2^20", "[ops][norm][numerics]") {
  // Row 0 constant 0.1: y = x / sqrt(x^2 + eps) exactly up to the final roundings; row 1 random
  // in [3, 4) against f64.
  std::vector<float> v = uniform(2 * kLong, 3.0, 9);
  std::fill(v.begin(), v.begin() + kLong, 0.1f);
  const Tensor x = f32(v, {2, kLong});
  // eps given: the default is the dtype's epsilon, which differs between the f32 and f64 runs.
  const std::vector<double> y32 = vals(rms_norm(x, {kLong}, Tensor(), 1e-5));
  const std::vector<double> y64 = vals(rms_norm(as_f64(x), {kLong}, Tensor(), 1e-5));
  const double x0 = double(0.1f), want0 = x0 / std::sqrt(x0 * x0 + 1e-5);
  std::vector<double> want(y64), tol(y64.size());
  for (int64_t i = 0; i < kLong; ++i) want[std::size_t(i)] = want0;
  // rstd = (mean(x^2) + eps)^-1/2: half the relative error of the sum of squares, plus roundings
  for (std::size_t i = 0; i < want.size(); ++i) tol[i] = (std::log2(double(kLong)) + 4) * kU * std::fabs(want[i]);
  worst_ratio(y32, want, tol);
}

TEST_CASE("norm kernels give the same bits at 1, 2 and 3 threads", "[ops][norm][numerics]") {
  const Tensor x = f32(uniform(2 * kLong, 3.0, 10), {4, 2, 512, 512});
  const Tensor g = f32(uniform(2 * kLong, 0.5, 11), {4, 2, 512, 512});
  const Tensor w = f32({1.5f, -0.5f}, {2});
  auto run = [&] {
    std::vector<std::vector<double>> out;
    out.push_back(vals(batch_norm(x, w, w, Tensor(), Tensor(), true)));
    const Tensor mean = mg::mean(x, {0, 2, 3}), invstd = rsqrt(var(x, {0, 2, 3}, false) + 1e-5);
    const NormGrads b = batch_norm_backward(g, x, mean, invstd, w, true);
    out.push_back(vals(b.dx)), out.push_back(vals(b.dweight)), out.push_back(vals(b.dbias));
    const Tensor xr = reshape(x, {4096, 512}), gr = reshape(g, {4096, 512});
    out.push_back(vals(layer_norm(xr, {512})));
    const Tensor lm = mg::mean(xr, {1}, true), lr = rsqrt(var(xr, {1}, false, true) + 1e-5);
    const NormGrads l = layer_norm_backward(gr, xr, lm, lr, {512}, ones({512}), true);
    out.push_back(vals(l.dx)), out.push_back(vals(l.dweight)), out.push_back(vals(l.dbias));
    out.push_back(vals(group_norm(x, 2)));
    out.push_back(vals(rms_norm(xr, {512})));
    return out;
  };
  test::check_same_at_thread_counts(run);
}

TEST_CASE("batch_norm at ResNet-20's first-stage shape matches f64 through autograd", "[ops][norm][numerics]") {
  // [16, 16, 28, 28]: 16 channels in parallel, 12,544 values each in 16 runs of 784. y, dx and
  // dbias of sum(batch_norm(x) * c) with a random cotangent c in [0.5, 1.5) normwise relative to
  // the f64 run of the same values; dweight = Σ c·xhat cancels (xhat has mean 0), so it is checked
  // per channel against c log2(n) u (Σ|c·xhat| + |mean|·rstd·Σ|c|) — the second term is the f32
  // rounding of the mean itself, which shifts every xhat.
  const Shape shape{16, 16, 28, 28};
  const int64_t numel = 16 * 16 * 28 * 28, s = 28 * 28, n = 16 * s;
  const Tensor x32 = f32(uniform(numel, 0.0, 12), shape), c32 = f32(uniform(numel, 0.5, 13), shape);
  manual_seed(14);
  const Tensor w0 = randn({16}), b0 = randn({16});
  auto run = [&](DType dt) {
    Tensor x = to(x32, dt).detach().requires_grad_(), w = to(w0, dt).detach().requires_grad_(),
           b = to(b0, dt).detach().requires_grad_();
    const Tensor y = batch_norm(x, w, b, Tensor(), Tensor(), true);
    sum(y * to(c32, dt)).backward();
    return std::vector<std::vector<double>>{vals(y), vals(x.grad()), vals(b.grad()), vals(w.grad())};
  };
  const auto a = run(DType::F32), e = run(DType::F64);
  const double lg = 2.0 * std::log2(double(n)) + 4;
  const char* names[3] = {"y", "dx", "dbias"};
  for (int k = 0; k < 3; ++k) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < e[k].size(); ++i) num += (a[k][i] - e[k][i]) * (a[k][i] - e[k][i]), den += e[k][i] * e[k][i];
    INFO(names[k] << ": normwise relative error " << std::sqrt(num / den));
    CHECK(std::sqrt(num / den) <= lg * kU);
  }
  const std::vector<double> xv = vals(x32), cv = vals(c32);
  std::vector<double> mean(16, 0), var(16, 0), sum_c(16, 0), sum_cx(16, 0), tol(16);
  for (int64_t i = 0; i < numel; ++i) mean[std::size_t((i / s) % 16)] += xv[std::size_t(i)] / double(n);
  for (int64_t i = 0; i < numel; ++i) {
    const std::size_t c = std::size_t((i / s) % 16);
    var[c] += (xv[std::size_t(i)] - mean[c]) * (xv[std::size_t(i)] - mean[c]) / double(n);
  }
  for (int64_t i = 0; i < numel; ++i) {
    const std::size_t c = std::size_t((i / s) % 16);
    sum_c[c] += std::fabs(cv[std::size_t(i)]);
    sum_cx[c] += std::fabs(cv[std::size_t(i)] * (xv[std::size_t(i)] - mean[c]) / std::sqrt(var[c] + 1e-5));
  }
  for (std::size_t c = 0; c < 16; ++c) tol[c] = lg * kU * (sum_cx[c] + std::fabs(mean[c]) / std::sqrt(var[c] + 1e-5) * sum_c[c]);
  worst_ratio(a[3], e[3], tol);
}
