// Reductions and cumsum: golden values (math in comments), keepdim / negative / multiple dims,
// ties, NaN, zeros in prod, f16/bf16 against f64, f32 accumulation of f16 sums, f64 central-
// difference gradient checks (and double backward), error messages, and the parallel paths of
// reduce_loop against a serial f64 reference.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/parallel.h"
#include "ops/ops.h"

using namespace mg;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor f64(const std::vector<double>& v, Shape shape = {}) { return from_vector<double>(v, shape); }

// All elements of t (any dtype, any layout) as doubles, row-major.
std::vector<double> vals(const Tensor& t) {
  NoGradGuard no_grad;
  const Tensor d = contiguous(to(t.detach(), DType::F64));
  const double* p = d.data<double>();
  return std::vector<double>(p, p + d.numel());
}

// Element-wise |got - want| <= atol + rtol |want|; NaN matches NaN, inf matches the same inf.
void require_close(const std::vector<double>& got, const std::vector<double>& want, double rtol = 1e-12,
                   double atol = 1e-12) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    if (std::isnan(want[i])) {
      CHECK(std::isnan(got[i]));
    } else if (std::isinf(want[i])) {
      CHECK(got[i] == want[i]);
    } else {
      CHECK(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]));
    }
  }
}

using Fn = std::function<Tensor(const Tensor&)>;

// Checks autograd's vector-Jacobian product of f at x (f64) against central differences
// (f(x + h e_i) - f(x - h e_i)) / 2h . cotangent, for a random cotangent.
void check_grad(const Fn& f, const Tensor& x0, double tol = 1e-6, double h = 1e-6) {
  const Tensor x = clone(x0).requires_grad_();
  const Tensor y = f(x);
  const Tensor cot = randn(y.shape(), {.dtype = DType::F64});
  const std::vector<double> got = vals(autograd::grad({y}, {x}, {cot})[0]);
  const std::vector<double> c = vals(cot);
  const std::vector<double> base = vals(x0);
  auto eval = [&](int64_t i, double dx) {
    std::vector<double> v = base;
    v[i] += dx;
    Tensor xi = f64(v, x0.shape()).requires_grad_();  // f may differentiate internally
    const std::vector<double> yi = vals(f(xi));
    double s = 0;
    for (std::size_t k = 0; k < yi.size(); ++k) s += yi[k] * c[k];
    return s;
  };
  for (int64_t i = 0; i < x0.numel(); ++i) {
    const double fd = (eval(i, h) - eval(i, -h)) / (2 * h);
    INFO("d/dx[" << i << "]: autograd " << got[i] << ", central difference " << fd);
    CHECK(std::fabs(got[i] - fd) <= tol * (1.0 + std::fabs(fd)));
  }
}

// x -> d(sum(f(x) * v))/dx with create_graph, so check_grad of it checks the double backward.
Fn grad_of(const Fn& f, const Shape& out_shape) {
  const Tensor v = randn(out_shape, {.dtype = DType::F64});
  return [f, v](const Tensor& x) { return autograd::grad({f(x)}, {x}, {v}, true, /*create_graph=*/true)[0]; };
}

Tensor randn64(const Shape& s, uint64_t seed) {
  Generator gen(seed);
  return randn(s, {.dtype = DType::F64}, &gen);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// golden values

TEST_CASE("prod: golden values, dims, keepdim, integers, empty", "[ops][reduce]") {
  const Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  require_close(vals(prod(x)), {720});  // 1*2*3*4*5*6
  require_close(vals(prod(x, {0})), {4, 10, 18});  // 1*4, 2*5, 3*6
  require_close(vals(prod(x, {-1})), {6, 120});    // 1*2*3, 4*5*6
  CHECK(prod(x, {1}, true).shape() == Shape{2, 1});
  CHECK(prod(x, {0, 1}, true).shape() == Shape{1, 1});
  CHECK(prod(x).shape() == Shape{});
  // Integers widen to i64 (as sum): 2*3*4 = 24.
  const Tensor xi = from_vector<int32_t>({2, 3, 4});
  CHECK(prod(xi).dtype() == DType::I64);
  CHECK(prod(xi).item<int64_t>() == 24);
  // The empty product is 1.
  require_close(vals(prod(zeros({0, 3}, {.dtype = DType::F64}), {0})), {1, 1, 1});
  // Zeros: one zero makes the slice 0.
  require_close(vals(prod(f64({0, 2, 3, 0, 0, 1, 1, 2, 3}, {3, 3}), {1})), {0, 0, 6});
}

TEST_CASE("prod: gradient with zeros", "[ops][reduce][grad]") {
  // d prod / d x_i = product of the others:
  //   row [0, 2, 3] (one zero):  [2*3, 0*3, 0*2] = [6, 0, 0]
  //   row [0, 0, 1] (two zeros): [0, 0, 0]
  //   row [1, 2, 3] (no zero):   [6, 3, 2]
  const Tensor x = f64({0, 2, 3, 0, 0, 1, 1, 2, 3}, {3, 3}).requires_grad_();
  sum(prod(x, {1})).backward();
  require_close(vals(x.grad()), {6, 0, 0, 0, 0, 0, 6, 3, 2});
  // A polynomial is smooth, so central differences agree even at the zeros.
  check_grad([](const Tensor& t) { return prod(t, {1}); }, f64({0, 2, 3, 0, 0, 1, 1, 2, 3}, {3, 3}));
  check_grad([](const Tensor& t) { return prod(t, {0}, true); }, f64({0, 2, 3, 0, 0, 1, 1, 2, 3}, {3, 3}));
  check_grad([](const Tensor& t) { return prod(t); }, randn64({2, 3}, 1));
}

TEST_CASE("amax / amin / max(x) / min(x): golden values, ties, NaN", "[ops][reduce]") {
  const Tensor x = f64({1, 5, 5, -2, 0, -7}, {2, 3});
  require_close(vals(amax(x, {1})), {5, 0});
  require_close(vals(amin(x, {1})), {1, -7});
  require_close(vals(amax(x, {0})), {1, 5, 5});
  require_close(vals(amin(x, {-2})), {-2, 0, -7});
  CHECK(amax(x, {0, 1}, true).shape() == Shape{1, 1});
  require_close(vals(amax(x, {0, 1}, true)), {5});
  CHECK(max(x).shape() == Shape{});
  CHECK(max(x).item<double>() == 5);
  CHECK(min(x).item<double>() == -7);
  // NaN is the maximum and the minimum (it propagates).
  const Tensor n = f64({1, kNaN, 3, 4, 5, 6}, {2, 3});
  require_close(vals(amax(n, {1})), {kNaN, 6});
  require_close(vals(amin(n, {1})), {kNaN, 4});
  CHECK(std::isnan(max(n).item<double>()));
  // -inf / +inf are ordinary values.
  require_close(vals(amax(f64({-kInf, -kInf}))), {-kInf});
  require_close(vals(amin(f64({kInf, 3}))), {3});
  // Integer dtypes.
  const Tensor xi = from_vector<int32_t>({3, -8, 7, 2}, {2, 2});
  CHECK(amax(xi, {1}).dtype() == DType::I32);
  require_close(vals(amax(xi, {1})), {3, 7});
  require_close(vals(amin(xi, {0})), {3, -8});
}

TEST_CASE("amax / amin over long contiguous runs: the serial fold's result, bit for bit", "[ops][reduce]") {
  // Rows of 300 (the lanes' path: contiguous runs of at least 32 f32/f64 values) with the extremum
  // in the tail, a NaN, signed zeros as the extremum and infinities; the reference is the serial
  // fold (first NaN wins, nothing beats NaN, strict comparison: the first of +0/-0 ties wins).
  const int64_t len = 300;
  std::vector<double> v;
  auto row = [&](const std::function<double(int64_t)>& f) {
    for (int64_t i = 0; i < len; ++i) v.push_back(f(i));
  };
  row([](int64_t i) { return std::sin(double(i)) * 100; });                  // ordinary values
  row([](int64_t i) { return i == len - 1 ? 1e9 : std::cos(double(i)); });    // max in the tail
  row([](int64_t i) { return i == 77 ? kNaN : double(i % 13); });             // a NaN
  row([](int64_t i) { return i % 2 ? -0.0 : -double(i + 1); });               // max -0
  // signed-zero ties where the first zero lies in a later lane than the other sign's: max +0 at 5
  // before -0 at 17 (amax +0), min -0 at 5 before +0 at 17 (amin -0)
  row([](int64_t i) { return i == 5 ? 0.0 : (i == 17 ? -0.0 : -1.0); });
  row([](int64_t i) { return i == 5 ? -0.0 : (i == 17 ? 0.0 : 1.0); });
  row([](int64_t) { return -kInf; });
  row([](int64_t i) { return i == 200 ? kInf : -kInf; });
  const int64_t rows = int64_t(v.size()) / len;
  for (DType dt : {DType::F64, DType::F32}) {
    const Tensor x = to(f64(v, {rows, len}), dt);
    const Tensor hi = contiguous(to(amax(x, {1}), DType::F64)), lo = contiguous(to(amin(x, {1}), DType::F64));
    const Tensor xs = contiguous(to(x, DType::F64));  // exact: the values were f64 rounded to dt
    for (int64_t r = 0; r < rows; ++r) {
      double want_hi = -kInf, want_lo = kInf;
      for (int64_t i = 0; i < len; ++i) {
        const double e = xs.data<double>()[r * len + i];
        if (!std::isnan(want_hi) && (std::isnan(e) || e > want_hi)) want_hi = e;
        if (!std::isnan(want_lo) && (std::isnan(e) || e < want_lo)) want_lo = e;
      }
      INFO(dtype_name(dt) << " row " << r << ": amax " << hi.data<double>()[r] << " amin " << lo.data<double>()[r]);
      const double got_hi = hi.data<double>()[r], got_lo = lo.data<double>()[r];
      REQUIRE((std::isnan(want_hi) ? std::isnan(got_hi) : got_hi == want_hi && std::signbit(got_hi) == std::signbit(want_hi)));
      REQUIRE((std::isnan(want_lo) ? std::isnan(got_lo) : got_lo == want_lo && std::signbit(got_lo) == std::signbit(want_lo)));
    }
    // the whole tensor at once (the runs of a full reduction)
    REQUIRE(std::isnan(max(x).item<double>()));
    const Tensor finite = x.narrow(0, 0, 2);
    CHECK(max(finite).item<double>() == 1e9);
  }
}

TEST_CASE("amax / amin: the gradient is split among ties", "[ops][reduce][grad]") {
  // Row [1, 5, 5]: two tied maxima share the gradient, 1/2 each. Row [-2, 0, -7]: one maximum.
  const Tensor x = f64({1, 5, 5, -2, 0, -7}, {2, 3}).requires_grad_();
  sum(amax(x, {1})).backward();
  require_close(vals(x.grad()), {0, 0.5, 0.5, 0, 1, 0});
  // amin over everything of [2, 2, 2, 9]: three ties get 1/3 each.
  // g++ 12.2 at -O3 -march=native miscompiles the expected-value list below into four copies of
  // 1/3 (an SLP-vectorizer bug); the build adds -fno-tree-slp-vectorize, and this test guards it.
  const Tensor y = f64({2, 2, 2, 9}).requires_grad_();
  min(y).backward();
  require_close(vals(y.grad()), {1.0 / 3, 1.0 / 3, 1.0 / 3, 0});
  check_grad([](const Tensor& t) { return amax(t, {1}); }, randn64({3, 4}, 2));
  check_grad([](const Tensor& t) { return amin(t, {0, 2}, true); }, randn64({2, 3, 2}, 3));
  check_grad([](const Tensor& t) { return max(t); }, randn64({5}, 4));
}

TEST_CASE("max / min along a dim: values, first index on ties, NaN, keepdim", "[ops][reduce]") {
  const Tensor x = f64({3, 7, 7, 9, 1, 9}, {2, 3});
  auto [v1, i1] = max(x, 1);
  require_close(vals(v1), {7, 9});
  require_close(vals(i1), {1, 0});  // ties: 7 at 1 and 2 -> 1; 9 at 0 and 2 -> 0
  CHECK(i1.dtype() == DType::I64);
  auto [v0, i0] = max(x, 0);
  require_close(vals(v0), {9, 7, 9});
  require_close(vals(i0), {1, 0, 1});
  auto [w, j] = min(x, -1, /*keepdim=*/true);
  CHECK(w.shape() == Shape{2, 1});
  CHECK(j.shape() == Shape{2, 1});
  require_close(vals(w), {3, 1});
  require_close(vals(j), {0, 1});
  require_close(vals(argmax(x, 1)), {1, 0});
  require_close(vals(argmin(x, 0)), {0, 1, 0});  // columns [3, 9], [7, 1], [7, 9]
  CHECK(argmax(x, 1, true).shape() == Shape{2, 1});
  // NaN is the max and the min; the first NaN's index is returned.
  const Tensor n = f64({1, kNaN, kNaN, 5});
  auto [nv, ni] = max(n, 0);
  CHECK(std::isnan(nv.item<double>()));
  CHECK(ni.item<int64_t>() == 1);
  CHECK(argmax(n, 0).item<int64_t>() == 1);
  CHECK(argmin(n, 0).item<int64_t>() == 1);
  // Integers.
  const Tensor xi = from_vector<int64_t>({4, 9, 9, -1});
  CHECK(argmax(xi, 0).item<int64_t>() == 1);
  CHECK(argmin(xi, 0).item<int64_t>() == 3);
  // A 0-d input reduces over nothing: value x, index 0.
  auto [sv, si] = max(scalar_tensor(2.5, {.dtype = DType::F64}), 0);
  CHECK(sv.item<double>() == 2.5);
  CHECK(si.item<int64_t>() == 0);
}

TEST_CASE("max / min along a dim: gradient goes to the index", "[ops][reduce][grad]") {
  // max over dim 1 of [[3, 7, 7], [9, 1, 9]] picks (0, 1) and (1, 0).
  const Tensor x = f64({3, 7, 7, 9, 1, 9}, {2, 3}).requires_grad_();
  sum(max(x, 1).first).backward();
  require_close(vals(x.grad()), {0, 1, 0, 1, 0, 0});
  check_grad([](const Tensor& t) { return max(t, 1).first; }, randn64({3, 4}, 5));
  check_grad([](const Tensor& t) { return max(t, 0, true).first; }, randn64({3, 4}, 6));
  check_grad([](const Tensor& t) { return min(t, -1).first; }, randn64({2, 3, 4}, 7));
  CHECK_FALSE(argmax(f64({1, 2}).requires_grad_(), 0).requires_grad());
}

TEST_CASE("var / std: golden values, correction, stability", "[ops][reduce]") {
  // [1, 2, 3, 4]: mean 2.5, squared deviations 2.25 + 0.25 + 0.25 + 2.25 = 5.
  const Tensor x = f64({1, 2, 3, 4});
  require_close(vals(var(x)), {5.0 / 3});       // / (N - 1)
  require_close(vals(var(x, {}, 0.0)), {1.25});  // / N
  require_close(vals(mg::std(x)), {std::sqrt(5.0 / 3)});
  require_close(vals(mg::std(x, {0}, 0.0, true)), {std::sqrt(1.25)});
  CHECK(mg::std(x, {0}, 0.0, true).shape() == Shape{1});
  // [[1, 2], [3, 5]]: dim 0 -> [(1-2)^2 + (3-2)^2, (2-3.5)^2 + (5-3.5)^2] / 1 = [2, 4.5];
  // dim 1 -> [0.5^2 * 2, 1^2 * 2] / 1 = [0.5, 2].
  const Tensor y = f64({1, 2, 3, 5}, {2, 2});
  require_close(vals(var(y, {0})), {2, 4.5});
  require_close(vals(var(y, {-1})), {0.5, 2});
  // all four: mean 2.75, squared deviations 3.0625 + 0.5625 + 0.0625 + 5.0625 = 8.75, / 3.
  require_close(vals(var(y, {0, 1})), {8.75 / 3});
  // One element with correction 1: 0 / 0 = NaN (as PyTorch).
  CHECK(std::isnan(var(f64({3})).item<double>()));
  // Stability in f32: 1e6 + [0, 1, 2, 3] has var 5/3; E[x^2] - E[x]^2 in f32 would lose every
  // digit (x^2 ~ 1e12, f32 spacing there ~ 6e4).
  const Tensor big = to(f64({1e6, 1e6 + 1, 1e6 + 2, 1e6 + 3}), DType::F32);
  require_close(vals(var(big)), {5.0 / 3}, 1e-6);
}

TEST_CASE("var / std: gradients", "[ops][reduce][grad]") {
  // d var / dx = 2 (x - mean) / (N - 1): [1, 2, 3, 4] -> 2 [-1.5, -0.5, 0.5, 1.5] / 3 = [-1, -1/3, 1/3, 1].
  const Tensor x = f64({1, 2, 3, 4}).requires_grad_();
  var(x).backward();
  require_close(vals(x.grad()), {-1, -1.0 / 3, 1.0 / 3, 1});
  check_grad([](const Tensor& t) { return var(t, {1}); }, randn64({3, 4}, 8));
  check_grad([](const Tensor& t) { return var(t, {0, 2}, 0.0, true); }, randn64({2, 3, 4}, 9));
  check_grad([](const Tensor& t) { return mg::std(t, {1}); }, randn64({3, 4}, 10));
  check_grad([](const Tensor& t) { return mg::std(t, {}, 0.0); }, randn64({5}, 11));
  // A constant slice has std 0; its gradient is taken as 0, not NaN.
  const Tensor c = f64({2, 2, 2}).requires_grad_();
  mg::std(c).backward();
  require_close(vals(c.grad()), {0, 0, 0});
}

TEST_CASE("norm: golden values for p = 0, 1, 2, 3, inf, -inf", "[ops][reduce]") {
  const Tensor x = f64({3, -4});
  require_close(vals(norm(x)), {5});               // sqrt(9 + 16)
  require_close(vals(norm(x, 1.0)), {7});          // 3 + 4
  require_close(vals(norm(x, INFINITY)), {4});     // max |x|
  require_close(vals(norm(x, -INFINITY)), {3});    // min |x|
  require_close(vals(norm(x, 0.0)), {2});          // number of nonzeros
  require_close(vals(norm(x, 3.0)), {std::cbrt(91.0)});  // (27 + 64)^(1/3)
  // [[3, 4], [0, 0]] along dim 1: [5, 0]; keepdim.
  const Tensor y = f64({3, 4, 0, 0}, {2, 2});
  require_close(vals(norm(y, 2.0, {1})), {5, 0});
  CHECK(norm(y, 2.0, {1}, true).shape() == Shape{2, 1});
  require_close(vals(norm(y, 1.0, {-2})), {3, 4});
  CHECK(std::isnan(norm(f64({1, kNaN}), INFINITY).item<double>()));
}

TEST_CASE("norm: gradients", "[ops][reduce][grad]") {
  // d ||x||_2 / dx = x / ||x||: [3, -4] -> [0.6, -0.8]; at x = 0 the gradient is 0, not NaN.
  const Tensor x = f64({3, -4, 0, 0}, {2, 2}).requires_grad_();
  sum(norm(x, 2.0, {1})).backward();
  require_close(vals(x.grad()), {0.6, -0.8, 0, 0});
  const Tensor away = f64({0.7, -1.3, 0.4, 2.1, -0.9, 1.6}, {2, 3});  // no zeros, no ties in |x|
  check_grad([](const Tensor& t) { return norm(t); }, away);
  check_grad([](const Tensor& t) { return norm(t, 1.0, {1}); }, away);
  check_grad([](const Tensor& t) { return norm(t, 3.0, {0}, true); }, away);
  check_grad([](const Tensor& t) { return norm(t, 0.5, {1}); }, away);
  check_grad([](const Tensor& t) { return norm(t, INFINITY, {1}); }, away);
  check_grad([](const Tensor& t) { return norm(t, -INFINITY); }, away);
}

TEST_CASE("logsumexp: golden values and special values", "[ops][reduce]") {
  // [[1, 2], [3, 4]] along dim 1: m + log(1 + e^-1) for m = 2, 4.
  const Tensor x = f64({1, 2, 3, 4}, {2, 2});
  const double l = std::log1p(std::exp(-1.0));
  require_close(vals(logsumexp(x, {1})), {2 + l, 4 + l});
  require_close(vals(logsumexp(x, {0})), {3 + std::log1p(std::exp(-2.0)), 4 + std::log1p(std::exp(-2.0))});
  CHECK(logsumexp(x, {0, 1}, true).shape() == Shape{1, 1});
  // Max-shifted: [1000, 1000] -> 1000 + log 2, no overflow (also in f32).
  require_close(vals(logsumexp(to(f64({1000, 1000}), DType::F32), {0})), {1000 + std::log(2.0)}, 1e-7);
  require_close(vals(logsumexp(f64({-kInf, -kInf}), {0})), {-kInf});  // all -inf -> -inf
  require_close(vals(logsumexp(f64({-kInf, 0}), {0})), {0});          // log(0 + 1)
  require_close(vals(logsumexp(f64({kInf, 1}), {0})), {kInf});
  require_close(vals(logsumexp(f64({1, kInf}), {0})), {kInf});
  CHECK(std::isnan(logsumexp(f64({1, kNaN, 2}), {0}).item<double>()));
}

TEST_CASE("logsumexp: gradients", "[ops][reduce][grad]") {
  // d lse / dx = softmax(x): [0, log 3] -> [1/4, 3/4].
  const Tensor x = f64({0, std::log(3.0)}).requires_grad_();
  logsumexp(x, {0}).backward();
  require_close(vals(x.grad()), {0.25, 0.75});
  check_grad([](const Tensor& t) { return logsumexp(t, {1}); }, randn64({3, 4}, 12));
  check_grad([](const Tensor& t) { return logsumexp(t, {0, 2}, true); }, randn64({2, 3, 2}, 13));
}

TEST_CASE("cumsum: golden values, dims, layouts, dtypes, gradient", "[ops][reduce]") {
  const Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  require_close(vals(cumsum(x, 1)), {1, 3, 6, 4, 9, 15});
  require_close(vals(cumsum(x, -1)), {1, 3, 6, 4, 9, 15});
  require_close(vals(cumsum(x, 0)), {1, 2, 3, 5, 7, 9});
  // Transposed (non-contiguous) input [[1, 4], [2, 5], [3, 6]] along dim 0: [[1, 4], [3, 9], [6, 15]].
  require_close(vals(cumsum(transpose(x, 0, 1), 0)), {1, 4, 3, 9, 6, 15});
  // Integers widen to i64.
  const Tensor xi = from_vector<int32_t>({5, -2, 7});
  CHECK(cumsum(xi, 0).dtype() == DType::I64);
  require_close(vals(cumsum(xi, 0)), {5, 3, 10});
  // f16 prefix sums accumulate in f32 and round each output once: the 2051st prefix sum is 2051,
  // stored as 2052 (f16 spacing is 2 above 2048; ties round to even). A running f16 total would
  // stick at 2048, since 2048 + 1 rounds back to 2048.
  const std::vector<double> c = vals(cumsum(ones({2051}, {.dtype = DType::F16}), 0));
  CHECK(c[2047] == 2048);
  CHECK(c[2050] == 2052);
  // d cumsum: the reverse cumulative sum of the cotangent: g = [1, 2, 3] -> [6, 5, 3].
  const Tensor y = f64({1, 1, 1}).requires_grad_();
  cumsum(y, 0).backward(f64({1, 2, 3}));
  require_close(vals(y.grad()), {6, 5, 3});
  check_grad([](const Tensor& t) { return cumsum(t, 1); }, randn64({3, 4}, 14));
  check_grad([](const Tensor& t) { return cumsum(t, 0); }, randn64({3, 4}, 15));
}

TEST_CASE("reductions: double backward", "[ops][reduce][grad]") {
  const Tensor x = randn64({3, 4}, 16);
  check_grad(grad_of([](const Tensor& t) { return prod(t, {1}); }, {3}), x, 1e-5);
  check_grad(grad_of([](const Tensor& t) { return var(t, {1}); }, {3}), x, 1e-5);
  check_grad(grad_of([](const Tensor& t) { return mg::std(t, {0}); }, {4}), x, 1e-5);
  check_grad(grad_of([](const Tensor& t) { return norm(t, 2.0, {1}); }, {3}), x, 1e-5);
  check_grad(grad_of([](const Tensor& t) { return norm(t, 3.0, {1}); }, {3}), x, 1e-5);
  check_grad(grad_of([](const Tensor& t) { return logsumexp(t, {1}); }, {3}), x, 1e-5);
  check_grad(grad_of([](const Tensor& t) { return cumsum(t, 1) * t; }, {3, 4}), x, 1e-5);
  check_grad(grad_of([](const Tensor& t) { return max(t, 1).first * amax(t, {1}); }, {3}), x, 1e-5);
}

TEST_CASE("prod: double backward through slices with one, two and three zeros", "[ops][reduce][grad]") {
  // PyTorch 2.15: the gradient of sum(d prod / dx) at [0, 2, 3] is [5, 3, 2], at [0, 0, 3] [3, 3, 0].
  for (const auto& [row, want] : std::vector<std::pair<std::vector<double>, std::vector<double>>>{
           {{0, 2, 3}, {5, 3, 2}}, {{0, 0, 3}, {3, 3, 0}}, {{0, 0, 0}, {0, 0, 0}}}) {
    const Tensor x = f64(row).requires_grad_();
    const Tensor g = autograd::grad({prod(x)}, {x}, {}, true, /*create_graph=*/true)[0];
    sum(g).backward();
    require_close(vals(x.grad()), want);
  }
  // The gradient is a polynomial, so central differences hold at the zeros (rows of 0 to 3 zeros).
  const Tensor z = f64({0, 2, 3, 4, 0, 0, 3, 4, 0, 0, 0, 4, 1, 2, 3, 4}, {4, 4});
  check_grad(grad_of([](const Tensor& t) { return prod(t, {1}); }, {4}), z, 1e-5);
  check_grad(grad_of([](const Tensor& t) { return prod(t, {0}); }, {4}), z, 1e-5);
}

// ---------------------------------------------------------------------------------------------
// low precision

TEST_CASE("reductions: f16 / bf16 against the f64 result of the same inputs", "[ops][reduce]") {
  struct Case {
    const char* name;
    Fn f;
  };
  const std::vector<Case> cases = {
      {"prod", [](const Tensor& t) { return prod(t * 0.5 + 1.0, {1}); }},
      {"amax", [](const Tensor& t) { return amax(t, {0}); }},
      {"amin", [](const Tensor& t) { return amin(t, {1}, true); }},
      {"max_dim", [](const Tensor& t) { return max(t, 1).first; }},
      {"min_dim", [](const Tensor& t) { return min(t, 0).first; }},
      {"var", [](const Tensor& t) { return var(t, {1}); }},
      {"std", [](const Tensor& t) { return mg::std(t, {0, 1}); }},
      {"norm2", [](const Tensor& t) { return norm(t, 2.0, {1}); }},
      {"norm3", [](const Tensor& t) { return norm(t, 3.0, {1}); }},
      {"norm_inf", [](const Tensor& t) { return norm(t, INFINITY, {1}); }},
      {"logsumexp", [](const Tensor& t) { return logsumexp(t, {1}); }},
      {"cumsum", [](const Tensor& t) { return cumsum(t, 1); }},
  };
  const Tensor x = randn64({6, 40}, 17) * 3.0;
  for (DType dt : {DType::F16, DType::BF16}) {
    // The same rounded inputs in both runs; only the op's own rounding differs.
    const Tensor low = to(x, dt);
    const Tensor ref_in = to(low, DType::F64);
    const double eps = dt == DType::F16 ? 0x1p-10 : 0x1p-7;
    for (const Case& c : cases) {
      INFO(c.name << " in " << dtype_name(dt));
      const Tensor got = c.f(low);
      CHECK(got.dtype() == dt);
      // prod rounds its (x * 0.5 + 1) inputs once more in low precision: a looser bound.
      const double rtol = std::string(c.name) == "prod" ? 40 * eps : 2 * eps;
      require_close(vals(got), vals(c.f(ref_in)), rtol, eps);
    }
    // argmax of the rounded values is exact.
    require_close(vals(argmax(low, 1)), vals(argmax(ref_in, 1)), 0, 0);
  }
}

TEST_CASE("sum / mean of f16 accumulate in f32", "[ops][reduce]") {
  // 4096 ones: exact in f32 (an f16 running total would stop at 2048 = 2^11, where 2048 + 1
  // rounds back to 2048).
  CHECK(sum(ones({4096}, {.dtype = DType::F16})).item<double>() == 4096);
  // 100000 ones: the f32 total 100000 rounds to inf on the store into an f16 output (max
  // 65504), but the mean 100000 / 100000 = 1 is exact.
  const Tensor many = ones({100000}, {.dtype = DType::F16});
  CHECK(sum(many).item<double>() == kInf);
  CHECK(mean(many).item<double>() == 1.0);
  // bf16 (8-bit significand): a bf16 running total would stop at 256.
  CHECK(sum(ones({1000}, {.dtype = DType::BF16})).item<double>() == 1000);
  // 3000 f16 values, alternately 1 + 2^-10 and 1: the population variance of an even two-point
  // distribution is (d / 2)^2 = 2^-22, far below f16's spacing at 1 (2^-10); f32 keeps it.
  std::vector<double> v(3000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = i % 2 ? 1.0 : 1.0 + 0x1p-10;
  require_close(vals(var(to(f64(v), DType::F16), {}, 0.0)), {0x1p-22}, 1e-3);
}

// ---------------------------------------------------------------------------------------------
// errors

TEST_CASE("reductions: error messages", "[ops][reduce]") {
  const Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  REQUIRE_THROWS_WITH(amax(x, {5}), Catch::Contains("amax: dim 5 is out of range for a 2-d tensor"));
  REQUIRE_THROWS_AS(amax(x, {5}), IndexError);
  REQUIRE_THROWS_WITH(max(x, -3), Catch::Contains("max: dim -3 is out of range"));
  REQUIRE_THROWS_WITH(cumsum(x, 2), Catch::Contains("cumsum: dim 2 is out of range"));
  REQUIRE_THROWS_WITH(var(x, {0, -2}), Catch::Contains("var: dim appears more than once"));
  const Tensor e = zeros({0, 3}, {.dtype = DType::F64});
  REQUIRE_THROWS_WITH(amax(e, {0}), Catch::StartsWith("amax: cannot reduce over an empty dim (dim 0 has size 0); got [0, 3] f64 cpu"));
  REQUIRE_THROWS_WITH(amin(e), Catch::StartsWith("amin: cannot reduce over an empty dim"));
  REQUIRE_THROWS_WITH(max(e, 0), Catch::StartsWith("max: cannot reduce over an empty dim"));
  REQUIRE_THROWS_WITH(argmin(e, 0), Catch::StartsWith("argmin: cannot reduce over an empty dim"));
  REQUIRE_THROWS_WITH(max(e), Catch::StartsWith("max: cannot reduce an empty tensor; got [0, 3] f64 cpu"));
  REQUIRE_THROWS_WITH(norm(e, INFINITY, {0}), Catch::StartsWith("norm: cannot reduce over an empty dim"));
  // Reducing the non-empty dim of an empty tensor is fine: [0, 3] -> [0].
  CHECK(amax(e, {1}).shape() == Shape{0});
  // Floating-only reductions name the op and the dtype.
  const Tensor xi = from_vector<int64_t>({1, 2});
  REQUIRE_THROWS_WITH(var(xi), Catch::StartsWith("var: expected a floating tensor (f64, f32, f16, bf16), got [2] i64 cpu"));
  REQUIRE_THROWS_AS(logsumexp(xi, {0}), DTypeError);
  REQUIRE_THROWS_WITH(norm(x, kNaN), Catch::StartsWith("norm: p must be a number"));
  // Empty reductions with an identity: sum 0, prod 1, norm 0, logsumexp -inf.
  require_close(vals(norm(e, 2.0, {0})), {0, 0, 0});
  require_close(vals(logsumexp(e, {0})), {-kInf, -kInf, -kInf});
}

// ---------------------------------------------------------------------------------------------
// parallel paths of reduce_loop

TEST_CASE("reductions: parallel paths match a serial f64 reference", "[ops][reduce]") {
  const int saved_threads = num_threads();
  set_num_threads(4);  // forces the chunked "few outputs" path to combine 4 partials
  const int64_t n = int64_t(1) << 20;
  Generator gen(18);
  const Tensor x32 = randn({n}, {.dtype = DType::F32}, &gen) + 1000.0;  // a large mean tests var
  const std::vector<double> xv = vals(x32);
  double s = 0, mx = -kInf, sq = 0;
  for (double v : xv) {
    s += v;
    mx = std::max(mx, v);
    sq += v * v;
  }
  double m2 = 0;
  for (double v : xv) m2 += (v - s / double(n)) * (v - s / double(n));
  SECTION("few outputs: one reduction over 2^20 elements, split into chunks") {
    require_close(vals(sum(x32)), {s}, 1e-6);
    require_close(vals(amax(x32)), {mx}, 0);
    require_close(vals(var(x32)), {m2 / double(n - 1)}, 1e-4);
    require_close(vals(norm(x32)), {std::sqrt(sq)}, 1e-6);
    double lse = 0;
    for (double v : xv) lse += std::exp(v - mx);
    require_close(vals(logsumexp(x32, {0})), {mx + std::log(lse)}, 1e-6);
    // The first of two tied maxima wins across chunks; a NaN in the last chunk wins over all.
    Tensor t = zeros({n}, {.dtype = DType::F64});
    {
      double* p = t.data<double>();
      p[100] = 5;
      p[n - 10] = 5;
    }
    CHECK(argmax(t, 0).item<int64_t>() == 100);
    CHECK(max(t, 0).second.item<int64_t>() == 100);
    t.data<double>()[n - 5] = kNaN;
    CHECK(argmax(t, 0).item<int64_t>() == n - 5);
    CHECK(std::isnan(amax(t).item<double>()));
  }
  SECTION("many outputs: 1024 reductions of 1024, along the contiguous and the strided dim") {
    const Tensor m = x32.view({1024, 1024});
    const std::vector<double> rows = vals(sum(m, {1}));
    const std::vector<double> colmax = vals(amax(m, {0}));
    const std::vector<double> rowvar = vals(var(m, {1}));
    for (int64_t r = 0; r < 1024; r += 97) {
      double rs = 0, cm = -kInf;
      for (int64_t c = 0; c < 1024; ++c) {
        rs += xv[r * 1024 + c];
        cm = std::max(cm, xv[c * 1024 + r]);
      }
      double rm2 = 0;
      for (int64_t c = 0; c < 1024; ++c) rm2 += (xv[r * 1024 + c] - rs / 1024) * (xv[r * 1024 + c] - rs / 1024);
      INFO("row/column " << r);
      CHECK(std::fabs(rows[r] - rs) <= 1e-6 * std::fabs(rs));
      CHECK(colmax[r] == cm);
      CHECK(std::fabs(rowvar[r] - rm2 / 1023) <= 1e-3 * rm2 / 1023);
    }
  }
  set_num_threads(saved_threads);
}

TEST_CASE("sum over outer dims (the tiled column walk) folds every column in row order, bit for bit",
          "[ops][reduce]") {
  // [3, 70, 5, 100] summed over dims {0, 2}: kept dims 70 x 100 with the innermost contiguous, more
  // than one tile of 64 outputs per row, a partial tile, and two coalesced-apart reduced dims.
  // The f32 reference adds each column's elements one after another in row-major order.
  for (const DType dt : {DType::BF16, DType::F16, DType::F32}) {
    INFO("dtype " << dtype_name(dt));
    const Tensor x = to(randn64({3, 70, 5, 100}, 77), dt);
    const std::vector<double> xv = vals(x);
    const std::vector<double> got = vals(to(sum(x, {0, 2}), DType::F64));
    std::vector<double> want;
    for (int64_t j = 0; j < 70; ++j) {
      for (int64_t l = 0; l < 100; ++l) {
        float acc = 0.0f;
        for (int64_t i = 0; i < 3; ++i) {
          for (int64_t k = 0; k < 5; ++k) acc += float(xv[size_t(((i * 70 + j) * 5 + k) * 100 + l)]);
        }
        // the sum is stored in x's dtype: round the f32 accumulator like the kernel does
        want.push_back(vals(to(from_vector<float>({acc}, {1}), dt))[0]);
      }
    }
    REQUIRE(got == want);
  }
}
