// The norm group beyond the op table: batch_norm running statistics after one step (exact
// numbers), f32 statistics for f16 inputs (a sum of squares that would overflow f16), mixed
// f16 input / f32 parameter dtypes, embedding gradients with repeated and padding indices,
// dropout reproducibility / keep fraction / scaling / eval identity, double backward of
// layer_norm and batch_norm, the fused first-order backward against the composite one (f64 and
// f16/bf16), and error texts.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <vector>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "core/generator.h"
#include "core/philox.h"
#include "ops/dispatcher.h"
#include "ops/norm.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;

namespace {

Tensor f64(const std::vector<double>& v, Shape shape = {}) { return from_vector<double>(v, shape); }

std::vector<double> vals(const Tensor& t) {
  NoGradGuard no_grad;
  const Tensor c = contiguous(to(t.detach(), DType::F64));
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    CHECK(std::fabs(got[i] - want[i]) <= tol * (1.0 + std::fabs(want[i])));
  }
}

// Double backward of f at x: d/dx sum(grad_x(sum(f(x) * cot)) * v) against central differences
// of the first-order gradient.
void check_double_backward(const std::function<Tensor(const Tensor&)>& f, Tensor x, uint64_t seed) {
  x.requires_grad_();
  Generator gen(seed);
  Tensor cot, v;
  {
    NoGradGuard no_grad;
    cot = randn(f(x).shape(), {.dtype = DType::F64}, &gen);
    v = randn(x.shape(), {.dtype = DType::F64}, &gen);
  }
  const auto first = [&](bool create) {
    return autograd::grad({sum(f(x) * cot)}, {x}, {}, std::nullopt, create)[0];
  };
  const Tensor s = sum(first(true) * v);
  const std::vector<double> got = vals(autograd::grad({s}, {x})[0]);
  const std::vector<double> vv = vals(v);
  double* p = x.data<double>();
  const double h = 1e-6;
  for (int64_t k = 0; k < x.numel(); ++k) {
    const double x0 = p[k];
    double sp = 0, sm = 0;
    p[k] = x0 + h;
    std::vector<double> gp = vals(first(false));
    p[k] = x0 - h;
    std::vector<double> gm = vals(first(false));
    p[k] = x0;
    for (std::size_t i = 0; i < vv.size(); ++i) sp += gp[i] * vv[i], sm += gm[i] * vv[i];
    const double want = (sp - sm) / (2 * h);
    INFO("element " << k << ": got " << got[k] << ", want " << want);
    CHECK(std::fabs(got[k] - want) <= 1e-5 * (1.0 + std::fabs(want)));
  }
}

// Gradients of f() with respect to `wrt` for the cotangent `cot`, through the fused *_backward ops
// (an ordinary backward) or through the composite of public ops (create_graph = true).
Tensors grads_of(const std::function<Tensor()>& f, const Tensors& wrt, const Tensor& cot, bool composite) {
  const Tensor y = f();
  return autograd::grad({y}, wrt, {to(cot, y.dtype())}, std::nullopt, /*create_graph=*/composite);
}

// The fused and the composite backward give the same gradients, in the same dtypes, within
// |fused - composite| <= atol + rtol * |composite|.
void check_fused_matches_composite(const std::function<Tensor()>& f, const Tensors& wrt, double rtol, double atol,
                                   uint64_t seed) {
  Generator gen(seed);
  Tensor cot;
  {
    NoGradGuard no_grad;
    cot = randn(f().shape(), {.dtype = DType::F64}, &gen);
  }
  const Tensors fused = grads_of(f, wrt, cot, false);
  const Tensors composite = grads_of(f, wrt, cot, true);
  REQUIRE(fused.size() == wrt.size());
  for (std::size_t i = 0; i < wrt.size(); ++i) {
    INFO("gradient " << i << " of " << describe(wrt[i]));
    REQUIRE(fused[i].defined());
    CHECK_FALSE(fused[i].requires_grad());  // the fused ops are not recorded
    if (i == 0) CHECK(composite[i].requires_grad());  // the composite is recorded (dbias = sum(g) is constant)
    CHECK(fused[i].dtype() == wrt[i].dtype());
    CHECK(composite[i].dtype() == wrt[i].dtype());
    CHECK(fused[i].shape() == wrt[i].shape());
    const std::vector<double> a = vals(fused[i]), b = vals(composite[i]);
    REQUIRE(a.size() == b.size());
    double worst = 0;
    for (std::size_t k = 0; k < a.size(); ++k) {
      worst = std::max(worst, std::fabs(a[k] - b[k]) / (atol + rtol * std::fabs(b[k])));
    }
    INFO("worst |fused - composite| / (atol + rtol |composite|) = " << worst);
    CHECK(worst <= 1.0);
  }
}

Tensor rand_tensor(Generator& gen, const Shape& s, DType dt, double scale = 1.0, double shift = 0.0) {
  NoGradGuard no_grad;
  return to(randn(s, {.dtype = DType::F64}, &gen) * scale + shift, dt).requires_grad_();
}

}  // namespace

TEST_CASE("batch_norm: running statistics after one training step", "[norm]") {
  // x [2, 2, 2]: channel 0 {1, 2, 3, 4}: mean 2.5, unbiased var 5/3; channel 1 {0, 0, 2, 6}:
  // mean 2, unbiased var 8. From running_mean 0, running_var 1 with momentum 0.1:
  //   running_mean = 0.9 * 0 + 0.1 * mean = [0.25, 0.2]
  //   running_var  = 0.9 * 1 + 0.1 * unbiased var = [0.9 + 1/6, 1.7]
  const Tensor x = f64({1, 2, 0, 0, 3, 4, 2, 6}, {2, 2, 2});
  SECTION("f64 statistics") {
    Tensor rm = zeros({2}, {.dtype = DType::F64}), rv = ones({2}, {.dtype = DType::F64});
    batch_norm(x, Tensor(), Tensor(), rm, rv, true, 0.1, 1e-5);
    check_close(vals(rm), {0.25, 0.2}, 1e-15);
    check_close(vals(rv), {0.9 + 1.0 / 6.0, 1.7}, 1e-15);
  }
  SECTION("f32 statistics next to an f16 input, then eval uses them") {
    Tensor rm = zeros({2}), rv = ones({2});
    const Tensor xh = to(x, DType::F16);
    batch_norm(xh, ones({2}), zeros({2}), rm, rv, true, 0.1, 1e-5);
    CHECK(rm.dtype() == DType::F32);
    check_close(vals(rm), {0.25, 0.2}, 1e-7);
    check_close(vals(rv), {0.9 + 1.0 / 6.0, 1.7}, 1e-7);
    // eval: y = (x - rm) / sqrt(rv + eps), x[0, 0, 0] = 1 -> 0.75 / sqrt(1.0666766...)
    const Tensor y = batch_norm(xh, Tensor(), Tensor(), rm, rv, false);
    CHECK(y.dtype() == DType::F16);
    CHECK(vals(rm)[0] == Approx(0.25));  // eval leaves the running stats alone
    CHECK(vals(y)[0] == Approx(0.75 / std::sqrt(0.9 + 1.0 / 6.0 + 1e-5)).epsilon(1e-3));
  }
}

TEST_CASE("batch_norm: an f16 input keeps f16 and its statistics are computed in f32", "[norm]") {
  // 65 values per channel. Channel 0: all 1000 (sum 65000 fits in f16, the sum of squares 6.5e7
  // overflows it: an f16 accumulator would give inf/NaN); mean 1000, var 0 -> y = bias = 0.
  // Channel 1: 999 and 1001 alternating (33 x 999, 32 x 1001).
  std::vector<double> v;
  for (int n = 0; n < 65; ++n) v.push_back(1000.0), v.push_back(n % 2 == 0 ? 999.0 : 1001.0);
  const Tensor x64 = f64(v, {65, 2});
  const Tensor xh = to(x64, DType::F16);
  const Tensor w = ones({2}), b = zeros({2});  // f32 parameters
  Tensor rm = zeros({2}), rv = ones({2});
  const Tensor y = batch_norm(xh, w, b, rm, rv, true);
  REQUIRE(y.dtype() == DType::F16);
  const Tensor want = batch_norm(x64, to(w, DType::F64), to(b, DType::F64), Tensor(), Tensor(), true);
  const std::vector<double> got = vals(y), ref = vals(want);
  for (std::size_t i = 0; i < got.size(); ++i) {
    REQUIRE(std::isfinite(got[i]));
    CHECK(std::fabs(got[i] - ref[i]) <= 1e-3 + 1e-2 * std::fabs(ref[i]));
  }
  CHECK(got[0] == 0.0);
  // running_mean = 0.1 * mean: 100 and 0.1 * 64999 / 65
  check_close(vals(rm), {100.0, 0.1 * 64999.0 / 65.0}, 1e-6);
}

TEST_CASE("norm layers: f16 inputs with f32 parameters, gradients in each input's dtype", "[norm]") {
  Generator gen(7);
  const Tensor x = to(randn({4, 3, 2}, {}, &gen), DType::F16).requires_grad_();
  const Tensor w = (randn({3}, {}, &gen) + 1.0).requires_grad_();
  const Tensor b = randn({3}, {}, &gen).requires_grad_();
  const Tensor y = batch_norm(x, w, b, Tensor(), Tensor(), true);
  CHECK(y.dtype() == DType::F16);
  sum(y * y).backward();
  CHECK(x.grad().dtype() == DType::F16);
  CHECK(w.grad().dtype() == DType::F32);
  CHECK(b.grad().dtype() == DType::F32);

  const Tensor wl = ones({2}).requires_grad_();
  const Tensor yl = layer_norm(reshape(x.detach(), {12, 2}), {2}, wl);
  CHECK(yl.dtype() == DType::F16);
  // Rows of two distinct values normalise to -1 and 1 (up to eps): |y| = 1 - 1e-5-ish.
  for (double t : vals(yl)) CHECK(std::fabs(std::fabs(t) - 1.0) < 2e-3);
}

TEST_CASE("norm layers: double backward of layer_norm, batch_norm and group_norm", "[norm][grad]") {
  Generator gen(11);
  const Tensor w = f64({0.5, 1.5, -1.0, 2.0}, {4});
  check_double_backward([&](const Tensor& x) { return layer_norm(x, {4}, w, w); },
                        randn({3, 4}, {.dtype = DType::F64}, &gen), 1);
  const Tensor wc = f64({0.5, 1.5}, {2});
  check_double_backward([&](const Tensor& x) { return batch_norm(x, wc, wc, Tensor(), Tensor(), true); },
                        randn({3, 2, 2}, {.dtype = DType::F64}, &gen), 2);
  check_double_backward([&](const Tensor& x) { return group_norm(x, 2, f64({1, 2, 3, 4}, {4})); },
                        randn({2, 4, 2}, {.dtype = DType::F64}, &gen), 3);
  check_double_backward([&](const Tensor& x) { return rms_norm(x, {4}, w); },
                        randn({2, 4}, {.dtype = DType::F64}, &gen), 4);
}

TEST_CASE("norm layers: the fused backward matches the composite one in f64", "[norm][grad]") {
  Generator gen(21);
  const DType f = DType::F64;
  SECTION("layer_norm, one normalised dim") {
    const Tensor x = rand_tensor(gen, {6, 5, 8}, f, 2.0, 0.5), w = rand_tensor(gen, {8}, f, 0.5, 1.0);
    const Tensor b = rand_tensor(gen, {8}, f);
    check_fused_matches_composite([&] { return layer_norm(x, {8}, w, b); }, {x, w, b}, 1e-12, 1e-12, 1);
    check_fused_matches_composite([&] { return layer_norm(x, {8}); }, {x}, 1e-12, 1e-12, 2);
    check_fused_matches_composite([&] { return layer_norm(x, {8}, w); }, {x, w}, 1e-12, 1e-12, 3);
    check_fused_matches_composite([&] { return layer_norm(x, {8}, Tensor(), b); }, {x, b}, 1e-12, 1e-12, 4);
    // A frozen weight: only x and b get gradients.
    const Tensor wf = w.detach();
    check_fused_matches_composite([&] { return layer_norm(x, {8}, wf, b); }, {x, b}, 1e-12, 1e-12, 5);
    // A non-contiguous input.
    const Tensor w6 = rand_tensor(gen, {6}, f, 0.5, 1.0);
    check_fused_matches_composite([&] { return layer_norm(transpose(x, 0, 2), {6}, w6); }, {x, w6}, 1e-12, 1e-12, 6);
  }
  SECTION("layer_norm, two normalised dims") {
    const Tensor x = rand_tensor(gen, {4, 3, 7}, f, 1.5, -1.0), w = rand_tensor(gen, {3, 7}, f, 0.5, 1.0);
    const Tensor b = rand_tensor(gen, {3, 7}, f);
    check_fused_matches_composite([&] { return layer_norm(x, {3, 7}, w, b); }, {x, w, b}, 1e-12, 1e-12, 7);
    check_fused_matches_composite([&] { return layer_norm(x, {3, 7}); }, {x}, 1e-12, 1e-12, 8);
  }
  SECTION("group_norm") {
    const Tensor x = rand_tensor(gen, {3, 6, 4, 5}, f, 2.0, 1.0), w = rand_tensor(gen, {6}, f, 0.5, 1.0);
    const Tensor b = rand_tensor(gen, {6}, f);
    check_fused_matches_composite([&] { return group_norm(x, 3, w, b); }, {x, w, b}, 1e-12, 1e-12, 9);
    check_fused_matches_composite([&] { return group_norm(x, 2); }, {x}, 1e-12, 1e-12, 10);
    check_fused_matches_composite([&] { return group_norm(x, 6, w); }, {x, w}, 1e-12, 1e-12, 11);
    const Tensor x3 = rand_tensor(gen, {2, 4, 9}, f), w4 = rand_tensor(gen, {4}, f, 0.5, 1.0);
    check_fused_matches_composite([&] { return group_norm(x3, 1, w4); }, {x3, w4}, 1e-12, 1e-12, 12);
  }
  SECTION("batch_norm training, 2-D and 4-D") {
    const Tensor w = rand_tensor(gen, {5}, f, 0.5, 1.0), b = rand_tensor(gen, {5}, f);
    const Tensor x2 = rand_tensor(gen, {16, 5}, f, 2.0, 0.5), x4 = rand_tensor(gen, {4, 5, 3, 6}, f, 1.5, -0.5);
    Tensor rm = zeros({5}, {.dtype = f}), rv = ones({5}, {.dtype = f});
    check_fused_matches_composite([&] { return batch_norm(x2, w, b, rm, rv, true); }, {x2, w, b}, 1e-12, 1e-12, 13);
    check_fused_matches_composite([&] { return batch_norm(x4, w, b, rm, rv, true); }, {x4, w, b}, 1e-12, 1e-12, 14);
    check_fused_matches_composite([&] { return batch_norm(x4, Tensor(), Tensor(), Tensor(), Tensor(), true); },
                                  {x4}, 1e-12, 1e-12, 15);
    check_fused_matches_composite([&] { return batch_norm(x2, Tensor(), b, Tensor(), Tensor(), true); }, {x2, b},
                                  1e-12, 1e-12, 16);
    // Eval keeps its own (single) formula; both paths still agree.
    check_fused_matches_composite([&] { return batch_norm(x4, w, b, rm, rv, false); }, {x4, w, b}, 1e-12, 1e-12, 17);
  }
}

TEST_CASE("norm layers: the fused backward matches the composite one in f16 and bf16", "[norm][grad]") {
  Generator gen(22);
  for (DType dt : {DType::F16, DType::BF16}) {
    INFO("dtype " << dtype_name(dt));
    // The composite computes in f32 and rounds once, like the fused kernel: they differ by at most
    // about one rounding of the result.
    const double rtol = dt == DType::F16 ? 2e-3 : 1.6e-2, atol = dt == DType::F16 ? 1e-3 : 1e-2;
    const Tensor x = rand_tensor(gen, {32, 48}, dt, 2.0, 0.5);
    const Tensor w = rand_tensor(gen, {48}, dt, 0.5, 1.0), b = rand_tensor(gen, {48}, dt);
    check_fused_matches_composite([&] { return layer_norm(x, {48}, w, b); }, {x, w, b}, rtol, atol, 31);
    const Tensor x4 = rand_tensor(gen, {4, 8, 5, 5}, dt, 1.5, -0.5);
    const Tensor wg = rand_tensor(gen, {8}, dt, 0.5, 1.0), bg = rand_tensor(gen, {8}, dt);
    check_fused_matches_composite([&] { return group_norm(x4, 4, wg, bg); }, {x4, wg, bg}, rtol, atol, 32);
    // batch_norm: a low-precision input with f32 parameters (the AMP layout); 4-D and 2-D.
    const Tensor wb = rand_tensor(gen, {8}, DType::F32, 0.5, 1.0), bb = rand_tensor(gen, {8}, DType::F32);
    check_fused_matches_composite([&] { return batch_norm(x4, wb, bb, Tensor(), Tensor(), true); }, {x4, wb, bb},
                                  rtol, atol, 33);
    const Tensor x2 = rand_tensor(gen, {64, 8}, dt, 2.0, 1.0);
    check_fused_matches_composite([&] { return batch_norm(x2, wb, bb, Tensor(), Tensor(), true); }, {x2, wb, bb},
                                  rtol, atol, 34);
  }
}

TEST_CASE("batch_norm: f16 and bf16 equal the f32 kernel on the same values rounded once", "[norm][lowp]") {
  // The low-precision kernels widen x (and grad) exactly to f32, run the f32 kernel's sums and
  // expressions, and round each output once (through the SIMD converters): so y and dx are, bit for
  // bit, the f32 kernel's results on the widened inputs rounded once, and the statistics and
  // parameter gradients equal the f32 ones. Runs of 81 (>= 64: converted per run) and 9 values
  // (< 64: one dense copy), and a non-contiguous input.
  Generator gen(41);
  for (DType dt : {DType::F16, DType::BF16}) {
    for (const Shape& shape : {Shape{4, 6, 9, 9}, Shape{16, 5, 3, 3}}) {
      for (bool strided : {false, true}) {
        INFO(dtype_name(dt) << " [" << shape[0] << ", " << shape[1] << ", " << shape[2] << ", " << shape[3] << "]"
                            << (strided ? " transposed" : ""));
        NoGradGuard no_grad;
        Tensor x = to(randn(shape, {.dtype = DType::F64}, &gen) * 3.0 + 1.5, dt);
        Tensor g = to(randn(shape, {.dtype = DType::F64}, &gen), dt);
        if (strided) x = transpose(contiguous(transpose(x, 2, 3)), 2, 3), g = transpose(contiguous(transpose(g, 2, 3)), 2, 3);
        REQUIRE(x.is_contiguous() != strided);
        const Tensor w = to(randn({shape[1]}, {.dtype = DType::F64}, &gen) * 0.5 + 1.0, DType::F32);
        const Tensor b = to(randn({shape[1]}, {.dtype = DType::F64}, &gen), DType::F32);
        const Tensor x32 = to(x, DType::F32), g32 = to(g, DType::F32);
        Tensor rm = zeros({shape[1]}), rv = ones({shape[1]}), rm32 = zeros({shape[1]}), rv32 = ones({shape[1]});
        const Tensor y = batch_norm(x, w, b, rm, rv, true);
        const Tensor y32 = batch_norm(x32, w, b, rm32, rv32, true);
        REQUIRE(y.dtype() == dt);
        CHECK(vals(y) == vals(to(y32, dt)));
        CHECK(vals(rm) == vals(rm32));
        CHECK(vals(rv) == vals(rv32));
        // statistics as the forward's (any values serve: both backwards read the same ones)
        const Tensor mu = mean(x32, {0, 2, 3});
        const Tensor invstd = rsqrt(var(x32, {0, 2, 3}, /*correction=*/0.0) + 1e-5);
        const NormGrads lo = batch_norm_backward(g, x, mu, invstd, w, true);
        const NormGrads hi = batch_norm_backward(g32, x32, mu, invstd, w, true);
        REQUIRE(lo.dx.dtype() == dt);
        CHECK(vals(lo.dx) == vals(to(hi.dx, dt)));
        CHECK(vals(lo.dweight) == vals(hi.dweight));
        CHECK(vals(lo.dbias) == vals(hi.dbias));
      }
    }
  }
}

TEST_CASE("norm layers: an ordinary backward reads the saved statistics, create_graph does not", "[norm][grad]") {
  // The fused path unpacks the forward's mean/rstd outputs (version-checked); the composite path
  // recomputes them from x. Modifying the saved mean in place therefore breaks only the former.
  Generator gen(23);
  const Tensor x = rand_tensor(gen, {3, 4}, DType::F64);
  const Tensor w = rand_tensor(gen, {4}, DType::F64, 0.5, 1.0);
  const auto forward = [&] { return dispatch(OpId::layer_norm, {x, w}, {.dim = 1, .alpha = 1e-5, .mode = 1}); };
  {
    Tensors out = forward();
    {
      NoGradGuard no_grad;
      out[1].add_(0.0);  // bumps the version of the saved mean
    }
    REQUIRE_THROWS_WITH(autograd::grad({sum(out[0])}, {x}), Catch::Contains("modified by an in-place operation"));
  }
  {
    Tensors out = forward();
    {
      NoGradGuard no_grad;
      out[1].add_(0.0);
    }
    const Tensor g = autograd::grad({sum(out[0] * out[0])}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
    CHECK(g.shape() == x.shape());
  }
  // The statistics outputs 1 and 2 are what the fused op takes.
  const Tensors out = forward();
  const Tensor cot = f64({1, -2, 0.5, 3, 0.25, -1, 2, -0.5, 1, 1, -1, 0}, {3, 4});
  const NormGrads r = layer_norm_backward(cot, x.detach(), out[1], out[2], {4}, w.detach(), true);
  const Tensors want = autograd::grad({out[0]}, {x, w}, {cot});
  check_close(vals(r.dx), vals(want[0]), 1e-12);
  check_close(vals(r.dweight), vals(want[1]), 1e-12);
  check_close(vals(r.dbias), vals(sum(cot, {0})), 1e-15);
  CHECK(r.dweight.dtype() == DType::F64);
}

TEST_CASE("embedding: repeated indices accumulate, padding rows get no gradient", "[norm]") {
  const Tensor idx = from_vector<int64_t>({0, 0, 2, 1, 0}, {5});
  SECTION("no padding") {
    const Tensor w = f64({1, 2, 3, 4, 5, 6}, {3, 2}).requires_grad_();
    const Tensor y = embedding(w, idx);
    check_close(vals(y), {1, 2, 1, 2, 5, 6, 3, 4, 1, 2}, 0);
    sum(y).backward();
    // row 0 picked 3 times, rows 1 and 2 once each
    check_close(vals(w.grad()), {3, 3, 1, 1, 1, 1}, 0);
  }
  SECTION("padding_idx 0") {
    const Tensor w = f64({1, 2, 3, 4, 5, 6}, {3, 2}).requires_grad_();
    sum(embedding(w, idx, 0)).backward();
    check_close(vals(w.grad()), {0, 0, 1, 1, 1, 1}, 0);
  }
  SECTION("a negative padding_idx counts from the end, as PyTorch's (-1: the last row)") {
    const Tensor w = f64({1, 2, 3, 4, 5, 6}, {3, 2}).requires_grad_();
    sum(embedding(w, idx, -1)).backward();
    check_close(vals(w.grad()), {3, 3, 1, 1, 0, 0}, 0);
    REQUIRE_THROWS_WITH(embedding(w, idx, -4), Catch::Contains("embedding: padding_idx -4 is out of range for a table of 3 rows"));
    REQUIRE_THROWS_WITH(embedding(w, idx, 3), Catch::Contains("embedding: padding_idx 3 is out of range for a table of 3 rows"));
  }
  SECTION("i32 indices and a bf16 table") {
    const Tensor w = to(f64({1, 2, 3, 4, 5, 6}, {3, 2}), DType::BF16);
    const Tensor y = embedding(w, to(idx, DType::I32));
    CHECK(y.dtype() == DType::BF16);
    CHECK(y.shape() == Shape{5, 2});
    check_close(vals(y), {1, 2, 1, 2, 5, 6, 3, 4, 1, 2}, 0);
  }
}

// PyTorch's dropout is x * noise: a dropped NaN or inf gives NaN (a step a GradScaler must skip),
// a dropped negative -0. The bit mask made every dropped element +0, hiding the NaN.
TEST_CASE("dropout: a dropped NaN or inf stays NaN, a dropped negative is -0, in every dtype", "[norm]") {
  for (const DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
    INFO(dtype_name(dt));
    std::vector<double> src;
    for (int i = 0; i < 64; ++i) src.push_back(i % 3 == 0 ? NAN : (i % 3 == 1 ? INFINITY : -2.0));
    const Tensor x = to(from_vector<double>(src), dt);
    Generator g(5);
    const Tensor keep = dropout(ones({64}), 0.5, true, &g);  // the same stream: 0 where dropped
    Generator g2(5);
    const std::vector<double> y = vals(dropout(x, 0.5, true, &g2));
    const std::vector<double> k = vals(keep);
    int dropped = 0;
    for (std::size_t i = 0; i < src.size(); ++i) {
      if (k[i] != 0.0) continue;
      ++dropped;
      if (i % 3 == 2) {
        CHECK(y[i] == 0.0);
        CHECK(std::signbit(y[i]));
      } else {
        CHECK(std::isnan(y[i]));
      }
    }
    CHECK(dropped > 10);
  }
}

TEST_CASE("dropout: reproducible from the seed, keep fraction, scaling, eval identity", "[norm]") {
  const int64_t n = 100000;
  const Tensor x = ones({n});
  Generator g1(42), g2(42), g3(43);
  const Tensor a = dropout(x, 0.3, true, &g1);
  const Tensor b = dropout(x, 0.3, true, &g2);
  const Tensor c = dropout(x, 0.3, true, &g3);
  const Tensor a2 = dropout(x, 0.3, true, &g1);  // the generator advanced: a new mask
  CHECK(vals(a) == vals(b));
  CHECK(vals(a) != vals(c));
  CHECK(vals(a) != vals(a2));
  CHECK(g1.offset() == 2 * uint64_t(n / 4));
  int64_t kept = 0;
  const float scale = float(1.0 / 0.7);
  for (double v : vals(a)) {
    if (v != 0.0) {
      ++kept;
      CHECK(v == double(scale));  // 1 / (1 - p), rounded once to f32
    }
  }
  // binomial: sd = sqrt(n * 0.7 * 0.3) ~ 145, so 0.7 n +- 1% is > 6 sd
  CHECK(std::fabs(double(kept) / double(n) - 0.7) < 0.01);

  CHECK(dropout(x, 0.3, false).is_same(x));  // eval: identity
  CHECK(dropout(x, 0.0, true).is_same(x));
  for (double v : vals(dropout(x, 1.0, true))) REQUIRE(v == 0.0);

  // element i is kept exactly when the i-th uniform of the Philox stream (seed 42, offset 0) is
  // >= p: the kernel's batched generator draws the documented stream (n is not a multiple of 4)
  {
    const int64_t m = 1003;
    Generator gs(42);
    const std::vector<double> vs = vals(dropout(ones({m}), 0.3, true, &gs));
    for (int64_t i = 0; i < m; ++i) {
      const bool keep = mg::philox_uniform(mg::philox_block(42, 0, uint64_t(i / 4)).v[i % 4]) >= 0.3f;
      REQUIRE((vs[size_t(i)] != 0.0) == keep);
    }
  }

  // f16 draws the same mask as f32 for the same seed
  Generator g4(42);
  const Tensor ah = dropout(to(x, DType::F16), 0.3, true, &g4);
  CHECK(ah.dtype() == DType::F16);
  const std::vector<double> va = vals(a), vh = vals(ah);
  for (int64_t i = 0; i < n; i += 997) CHECK((va[i] == 0.0) == (vh[i] == 0.0));

  // backward: dx = mask / (1 - p), i.e. y itself for x = 1
  const Tensor xs = ones({64}).requires_grad_();
  Generator g5(5);
  const Tensor y = dropout(xs, 0.5, true, &g5);
  sum(y).backward();
  check_close(vals(xs.grad()), vals(y), 0);

  REQUIRE_THROWS_WITH(dropout(x, 1.5), Catch::Contains("dropout: probability must be in [0, 1], got 1.5"));
}

// The unfused backward multiplied by a 0-d scale of the gradient's dtype, which rounds 1 / 0.9 to
// 1.109375 in bf16 (0.16% low) and 1.111328 in f16: every kept gradient was scaled by the wrong
// factor. The fused op scales in f32 and rounds once, as the forward does.
TEST_CASE("dropout backward: f16/bf16 gradients scaled by 1 / (1 - p) in f32, rounded once", "[norm]") {
  const int64_t n = 4096;
  const double p = 0.1;
  const float scale = float(1.0 / (1.0 - p));
  for (DType dt : {DType::BF16, DType::F16}) {
    INFO(dtype_name(dt));
    const Tensor x = to(ones({n}), dt).requires_grad_();
    Generator gen(77);
    const Tensor y = dropout(x, p, true, &gen);
    const Tensor g = to(randn({n}, {.dtype = DType::F32}), dt);
    y.backward(g);
    const std::vector<double> yv = vals(y), gv = vals(g), dx = vals(x.grad());
    const double scale_in_dt = vals(to(scalar_tensor(1.0 / (1.0 - p)), dt))[0];
    int64_t kept = 0, differs_from_rounded_scale = 0;
    for (int64_t i = 0; i < n; ++i) {
      const bool keep = yv[size_t(i)] != 0.0;
      const float prod = float(gv[size_t(i)]) * scale;
      const double want = !keep ? 0.0 : dt == DType::BF16 ? double(float(BFloat16(prod))) : double(float(Half(prod)));
      REQUIRE(dx[size_t(i)] == want);
      if (keep) {
        ++kept;
        const float old = float(gv[size_t(i)]) * float(scale_in_dt);
        const double old_rounded = dt == DType::BF16 ? double(float(BFloat16(old))) : double(float(Half(old)));
        if (old_rounded != want) ++differs_from_rounded_scale;
      }
    }
    CHECK(kept > n / 2);
    CHECK(differs_from_rounded_scale > 0);  // the check above tells the two scalings apart
  }
  // the fused op itself: shapes, mask dtype, p
  const Tensor g = ones({2, 3});
  REQUIRE_THROWS_WITH(dropout_backward(g, ones({2, 3}), 0.5), Catch::Contains("dropout_backward: the keep mask must be bool"));
  REQUIRE_THROWS_WITH(dropout_backward(g, to(ones({3, 2}), DType::Bool), 0.5),
                      Catch::Contains("dropout_backward: expected grad and mask of the same shape"));
  REQUIRE_THROWS_WITH(dropout_backward(g, to(ones({2, 3}), DType::Bool), 1.0), Catch::Contains("p must be in [0, 1)"));
  // a strided grad and mask give the same values as dense ones
  const Tensor gs = randn({3, 4}).transpose(0, 1), ks = gt(randn({3, 4}), zeros({3, 4})).transpose(0, 1);
  CHECK(vals(dropout_backward(gs, ks, 0.25)) == vals(dropout_backward(contiguous(gs), contiguous(ks), 0.25)));
}

TEST_CASE("norm layers: error messages name the op and both shapes", "[norm]") {
  const Tensor x = zeros({2, 3, 4});
  REQUIRE_THROWS_AS(batch_norm(x, ones({4}), zeros({4}), Tensor(), Tensor(), true), ShapeError);
  REQUIRE_THROWS_WITH(batch_norm(x, ones({4}), zeros({4}), Tensor(), Tensor(), true),
                      Catch::Contains("batch_norm: expected weight of shape [3] for input [2, 3, 4] f32 cpu, "
                                      "got [4] f32 cpu") &&
                          Catch::Contains("hint:"));
  REQUIRE_THROWS_WITH(batch_norm(x, Tensor(), Tensor(), zeros({5}), ones({5}), true),
                      Catch::Contains("batch_norm: expected running_mean of shape [3]"));
  REQUIRE_THROWS_WITH(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false),
                      Catch::Contains("batch_norm: eval mode needs running_mean and running_var"));
  REQUIRE_THROWS_WITH(batch_norm(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true),
                      Catch::Contains("batch_norm: expected more than 1 value per channel when training"));
  REQUIRE_THROWS_WITH(layer_norm(x, {3}), Catch::Contains("layer_norm: normalized_shape [3] does not match "
                                                          "the trailing sizes of input [2, 3, 4] f32 cpu"));
  REQUIRE_THROWS_WITH(layer_norm(x, {4}, ones({3})),
                      Catch::Contains("layer_norm: expected weight of shape [4] for input [2, 3, 4] f32 cpu, "
                                      "got [3] f32 cpu"));
  REQUIRE_THROWS_WITH(group_norm(x, 2), Catch::Contains("group_norm: 3 channels cannot be split into 2 groups"));
  REQUIRE_THROWS_WITH(group_norm(x, 3, ones({2})),
                      Catch::Contains("group_norm: expected weight of shape [3] for input [2, 3, 4] f32 cpu"));
  REQUIRE_THROWS_AS(layer_norm(from_vector<int64_t>({1, 2}), {2}), DTypeError);
  REQUIRE_THROWS_WITH(layer_norm_backward(x, x, zeros({2, 3}), ones({2, 3, 1}), {4}),
                      Catch::Contains("layer_norm_backward: expected mean of shape [2, 3, 1] in f32 for input "
                                      "[2, 3, 4] f32 cpu, got [2, 3] f32 cpu") &&
                          Catch::Contains("hint:"));
  REQUIRE_THROWS_WITH(batch_norm_backward(x, x, zeros({3}, {.dtype = DType::F64}), ones({3})),
                      Catch::Contains("batch_norm_backward: expected mean of shape [3] in f32"));
  REQUIRE_THROWS_WITH(group_norm_backward(x, x, zeros({2, 3}), ones({2, 3}), 3, ones({4})),
                      Catch::Contains("group_norm_backward: expected weight of shape [3]"));
  REQUIRE_THROWS_WITH(group_norm_backward(zeros({2, 3, 5}), x, zeros({2, 3}), ones({2, 3}), 3),
                      Catch::Contains("group_norm_backward: expected grad of the input's shape"));

  // eps 0 in training: a constant channel would divide 0 by 0 (PyTorch refuses it too); eval may.
  REQUIRE_THROWS_WITH(batch_norm(ones({2, 3, 4}), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 0.0),
                      Catch::Contains("batch_norm: eps must be positive in training, got 0"));
  CHECK(batch_norm(ones({2, 3, 4}), Tensor(), Tensor(), ones({3}) * 0.0, ones({3}), false, 0.1, 0.0).defined());

  // Running statistics that require grad: parameters in the running slots (a call ported from
  // PyTorch's F.batch_norm, which puts the statistics second) were silently overwritten.
  {
    const Tensor w = ones({3}).requires_grad_(), b = zeros({3}).requires_grad_();
    MG_REQUIRE_ERROR(batch_norm(randn({2, 3, 4}), ones({3}), zeros({3}), w, b, true),
                     "batch_norm: running_mean [3] f32 cpu requires grad, but running statistics are buffers");
    MG_REQUIRE_ERROR(batch_norm(randn({2, 3, 4}), ones({3}), zeros({3}), w, b, false), "PyTorch's F.batch_norm");
    CHECK(vals(w) == std::vector<double>{1, 1, 1});  // untouched
  }
  // f64 statistics or parameters beside an f32 input would go through f32 (a module moved to f64,
  // its input not); PyTorch refuses the mix too. f32 ones beside f16/bf16 (or f64) inputs are fine.
  {
    const TensorOptions d64{.dtype = DType::F64};
    MG_REQUIRE_ERROR(batch_norm(randn({2, 3, 4}), Tensor(), Tensor(), zeros({3}, d64), ones({3}, d64), true),
                     "batch_norm: running_mean [3] f64 cpu is f64 but input [2, 3, 4] f32 cpu is not");
    MG_REQUIRE_ERROR(layer_norm(randn({2, 4}), {4}, ones({4}, d64)), "layer_norm: weight [4] f64 cpu is f64");
    CHECK(batch_norm(randn({2, 3, 4}).to(DType::BF16), ones({3}), zeros({3}), zeros({3}), ones({3}), true).dtype() ==
          DType::BF16);
  }

  const Tensor table = zeros({8192, 4});
  REQUIRE_THROWS_AS(embedding(table, from_vector<int64_t>({1, 8192})), IndexError);
  REQUIRE_THROWS_WITH(embedding(table, from_vector<int64_t>({1, 8192})),
                      Catch::Contains("embedding: index 8192 is out of range for a table of 8192 rows"));
  REQUIRE_THROWS_WITH(embedding(table, from_vector<int64_t>({-1})),
                      Catch::Contains("embedding: index -1 is out of range for a table of 8192 rows"));
  REQUIRE_THROWS_AS(embedding(table, from_vector<double>({1.0})), DTypeError);
}
