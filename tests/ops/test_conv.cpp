// Tests of the conv group: conv2d against a naive 7-loop f64 reference over many geometries
// (stride, padding, dilation, groups, non-square), the gradient ops against the adjoint
// identities <conv(x, w), g> = <x, B(g, w)> = <W(x, g), w>, f16/bf16 f32 accumulation with one
// rounding, double backward by central differences, error texts, the oneDNN path (plain and
// blocked layouts) and the im2col path against f64 for f32/bf16 on non-contiguous inputs, and
// (hidden, [.perf]) the f32 GFLOP/s of the ResNet-20 3x3 conv shape. The op table adds golden
// values and gradient checks.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <thread>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/parallel.h"
#include "ops/conv.h"
#include "ops/conv1d.h"
#include "ops/conv3d.h"
#include "ops/cpu/conv_onednn.h"
#include "ops/cpu/onednn_matmul.h"
#include "nn/conv.h"
#include "nn/conv1d.h"
#include "nn/pooling.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;

namespace {

Generator& gen() {
  static Generator g(4321);
  return g;
}

Tensor rnd(const Shape& shape, DType dtype = DType::F64) { return randn(shape, {.dtype = dtype}, &gen()); }

std::vector<double> vals(const Tensor& t) {
  NoGradGuard no_grad;
  const Tensor c = contiguous(to(t, DType::F64));
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

double dot(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = vals(a), vb = vals(b);
  REQUIRE(va.size() == vb.size());
  double s = 0;
  for (std::size_t i = 0; i < va.size(); ++i) s += va[i] * vb[i];
  return s;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// Naive direct convolution in f64: y[n][o][oh][ow] = b[o] + sum over c in o's group, ki, kj of
// x[n][c][oh*sh - ph + ki*dh][ow*sw - pw + kj*dw] * w[o][c - group start][ki][kj] (0 in the padding).
std::vector<double> ref_conv(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dOptions& o) {
  const std::vector<double> xv = vals(x), wv = vals(w), bv = b.defined() ? vals(b) : std::vector<double>{};
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = w.size(0), Cg = w.size(1), kH = w.size(2), kW = w.size(3), Og = O / o.groups;
  const int64_t Ho = (H + 2 * o.padding[0] - o.dilation[0] * (kH - 1) - 1) / o.stride[0] + 1;
  const int64_t Wo = (W + 2 * o.padding[1] - o.dilation[1] * (kW - 1) - 1) / o.stride[1] + 1;
  std::vector<double> y;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oc = 0; oc < O; ++oc)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          double s = bv.empty() ? 0.0 : bv[std::size_t(oc)];
          const int64_t c0 = (oc / Og) * Cg;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t ki = 0; ki < kH; ++ki)
              for (int64_t kj = 0; kj < kW; ++kj) {
                const int64_t ih = oh * o.stride[0] - o.padding[0] + ki * o.dilation[0];
                const int64_t iw = ow * o.stride[1] - o.padding[1] + kj * o.dilation[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                s += xv[std::size_t(((n * C + c0 + c) * H + ih) * W + iw)] *
                     wv[std::size_t(((oc * Cg + c) * kH + ki) * kW + kj)];
              }
          y.push_back(s);
        }
  return y;
}

struct Config {
  Shape x, w;
  Conv2dOptions o;
  bool bias;
};

std::vector<Config> configs() {
  return {
      {{1, 1, 3, 3}, {1, 1, 3, 3}, {}, false},
      {{2, 3, 7, 5}, {4, 3, 3, 3}, {}, true},
      {{2, 3, 7, 5}, {4, 3, 3, 2}, {.stride = {2, 3}}, true},
      {{1, 2, 6, 9}, {3, 2, 2, 4}, {.padding = {2, 1}}, false},
      {{1, 2, 9, 8}, {3, 2, 3, 3}, {.dilation = {2, 3}}, true},
      {{3, 4, 8, 8}, {6, 2, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .groups = 2}, true},
      {{2, 6, 5, 7}, {6, 1, 3, 3}, {.padding = {1, 1}, .groups = 6}, true},  // depthwise
      {{2, 4, 10, 6}, {8, 1, 3, 2}, {.stride = {3, 1}, .padding = {2, 1}, .dilation = {2, 2}, .groups = 4}, false},
      {{1, 3, 4, 4}, {2, 3, 4, 4}, {}, true},                               // kernel == input: 1x1 output
      {{2, 5, 1, 6}, {2, 5, 1, 3}, {.stride = {1, 2}}, false},              // H = 1
      {{1, 2, 3, 3}, {2, 2, 5, 5}, {.padding = {1, 1}}, true},             // kernel larger than input, fits the padding
  };
}

}  // namespace

TEST_CASE("conv2d matches a naive direct convolution in f64 and f32", "[conv]") {
  for (const Config& cf : configs()) {
    const Tensor x = rnd(cf.x), w = rnd(cf.w), b = cf.bias ? rnd({cf.w[0]}) : Tensor();
    const std::vector<double> want = ref_conv(x, w, b, cf.o);
    INFO("x " << shape_str(cf.x) << " w " << shape_str(cf.w) << " groups " << cf.o.groups);
    const Tensor y = conv2d(x, w, b, cf.o);
    CHECK(max_abs_diff(vals(y), want) < 1e-12);
    const Tensor y32 = conv2d(to(x, DType::F32), to(w, DType::F32), b.defined() ? to(b, DType::F32) : b, cf.o);
    CHECK(y32.dtype() == DType::F32);
    CHECK(max_abs_diff(vals(y32), want) < 1e-4);
  }
}

TEST_CASE("conv2d gradient ops satisfy the adjoint identities", "[conv]") {
  // <conv(x, w), g> = <x, conv2d_backward_input(g, w)> = <conv2d_backward_weight(x, g), w>
  for (const Config& cf : configs()) {
    const Tensor x = rnd(cf.x), w = rnd(cf.w);
    const Tensor y = conv2d(x, w, {}, cf.o);
    const Tensor g = rnd(y.shape());
    const Tensor dx = conv2d_backward_input(g, w, {cf.x[2], cf.x[3]}, cf.o);
    const Tensor dw = conv2d_backward_weight(x, g, {cf.w[2], cf.w[3]}, cf.o);
    INFO("x " << shape_str(cf.x) << " w " << shape_str(cf.w) << " groups " << cf.o.groups);
    REQUIRE(dx.shape() == cf.x);
    REQUIRE(dw.shape() == cf.w);
    const double lhs = dot(y, g);
    CHECK(std::abs(dot(x, dx) - lhs) < 1e-10 * (1 + std::abs(lhs)));
    CHECK(std::abs(dot(dw, w) - lhs) < 1e-10 * (1 + std::abs(lhs)));
  }
}

TEST_CASE("conv2d autograd gives the gradient ops and the bias sum", "[conv][grad]") {
  const Conv2dOptions o{.stride = {2, 1}, .padding = {1, 1}, .groups = 2};
  const Tensor x = rnd({2, 4, 5, 6}).requires_grad_(), w = rnd({4, 2, 3, 3}).requires_grad_(),
               b = rnd({4}).requires_grad_();
  const Tensor y = conv2d(x, w, b, o);
  const Tensor g = rnd(y.shape());
  const Tensors gr = autograd::grad({y}, {x, w, b}, {g});
  CHECK(max_abs_diff(vals(gr[0]), vals(conv2d_backward_input(g, w.detach(), {5, 6}, o))) < 1e-12);
  CHECK(max_abs_diff(vals(gr[1]), vals(conv2d_backward_weight(x.detach(), g, {3, 3}, o))) < 1e-12);
  CHECK(max_abs_diff(vals(gr[2]), vals(sum(g, {0, 2, 3}))) < 1e-12);
}

TEST_CASE("conv2d f16/bf16 accumulate in f32 and round once", "[conv][lowp]") {
  // 288 products per output: an f16 accumulator would drift far beyond one rounding
  const Conv2dOptions o{.padding = {1, 1}};
  for (DType dt : {DType::F16, DType::BF16}) {
    const Tensor x = to(rnd({2, 32, 6, 6}), dt), w = to(rnd({4, 32, 3, 3}), dt);
    const Tensor y = conv2d(x, w, {}, o);
    REQUIRE(y.dtype() == dt);
    // the f32 result of the same rounded inputs, rounded once to dt, is the exact answer up to
    // f32 summation order (a 1-ulp difference of dt where the f32 sum sits on a rounding tie)
    const Tensor ref = to(conv2d(to(x, DType::F32), to(w, DType::F32), {}, o), dt);
    const std::vector<double> a = vals(y), b = vals(ref);
    const double ulp = dt == DType::F16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
    int exact = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      CHECK(std::abs(a[i] - b[i]) <= ulp * std::abs(b[i]) + 1e-30);
      exact += a[i] == b[i];
    }
    CHECK(exact > int(a.size()) * 9 / 10);
    // the gradient ops too
    const Tensor g = to(rnd(y.shape()), dt);
    const Tensor dx = conv2d_backward_input(g, w, {6, 6}, o);
    const Tensor dx32 = to(conv2d_backward_input(to(g, DType::F32), to(w, DType::F32), {6, 6}, o), dt);
    const Tensor dw = conv2d_backward_weight(x, g, {3, 3}, o);
    const Tensor dw32 = to(conv2d_backward_weight(to(x, DType::F32), to(g, DType::F32), {3, 3}, o), dt);
    CHECK(dx.dtype() == dt);
    CHECK(dw.dtype() == dt);
    const std::vector<double> p = vals(dx), q = vals(dx32), r = vals(dw), s = vals(dw32);
    for (std::size_t i = 0; i < p.size(); ++i) CHECK(std::abs(p[i] - q[i]) <= ulp * std::abs(q[i]) + 1e-30);
    for (std::size_t i = 0; i < r.size(); ++i) CHECK(std::abs(r[i] - s[i]) <= ulp * std::abs(s[i]) + 1e-30);
  }
}

TEST_CASE("conv2d double backward matches central differences of the gradient", "[conv][grad]") {
  // S(x, w) = <dL/dx, vx> + <dL/dw, vw> with L = <conv2d(x, w, b), cot>; dS/dx, dS/dw by autograd
  // (create_graph through conv2d_backward_input / _weight) vs central differences of S.
  const Conv2dOptions o{.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}, .groups = 2};
  Tensor x = rnd({1, 4, 4, 5}).requires_grad_(), w = rnd({2, 2, 2, 2}).requires_grad_(),
         b = rnd({2}).requires_grad_();
  const Tensor cot = rnd(conv2d(x.detach(), w.detach(), {}, o).shape());
  const Tensor vx = rnd(x.shape()), vw = rnd(w.shape());
  auto S = [&](bool create_graph) {
    const Tensor y = conv2d(x, w, b, o);
    const Tensors g = autograd::grad({y}, {x, w}, {cot}, std::nullopt, create_graph);
    return add(sum(mul(g[0], vx)), sum(mul(g[1], vw)));
  };
  const Tensors gg = autograd::grad({S(true)}, {x, w});
  const double h = 1e-6;
  for (int which = 0; which < 2; ++which) {
    Tensor& t = which == 0 ? x : w;
    std::vector<double> num;
    double* p = t.data<double>();
    for (int64_t k = 0; k < t.numel(); ++k) {
      const double v = p[k];
      p[k] = v + h;
      const double fp = vals(S(false))[0];
      p[k] = v - h;
      const double fm = vals(S(false))[0];
      p[k] = v;
      num.push_back((fp - fm) / (2 * h));
    }
    INFO("input " << which);
    CHECK(max_abs_diff(vals(gg[std::size_t(which)]), num) < 1e-6);
  }
}

TEST_CASE("conv2d errors name the op and both operands", "[conv][errors]") {
  const Tensor x = rnd({8, 3, 28, 28}, DType::F32);
  CHECK_THROWS_WITH(conv2d(x, rnd({16, 1, 3, 3}, DType::F32)),
                    "conv2d: input has 3 channels but weight expects 1 (groups=1); got input "
                    "[8, 3, 28, 28] f32 cpu, weight [16, 1, 3, 3] f32 cpu");
  CHECK_THROWS_AS(conv2d(x, rnd({16, 1, 3, 3}, DType::F32)), ShapeError);
  CHECK_THROWS_WITH(conv2d(rnd({28, 28}, DType::F32), rnd({16, 3, 3, 3}, DType::F32)),
                    "conv2d: expected a 4-D input [N, C, H, W] (or an unbatched [C, H, W]), got input [28, 28] f32 cpu");
  CHECK_THROWS_WITH(conv2d(rnd({1, 2, 3, 3}), rnd({4, 2, 5, 3})),
                    Catch::StartsWith("conv2d: the kernel (size 5, dilation 1, effective 5) is larger than the "
                                      "padded input (3 + 2 * 0); got input [1, 2, 3, 3] f64 cpu, weight [4, 2, 5, 3] f64 cpu") &&
                        Catch::Contains("hint:"));
  CHECK_THROWS_WITH(conv2d(rnd({1, 4, 5, 5}), rnd({3, 2, 3, 3}), {}, {.groups = 2}),
                    "conv2d: groups=2 does not divide the weight's 3 output channels; got weight [3, 2, 3, 3] f64 cpu");
  CHECK_THROWS_WITH(conv2d(rnd({1, 3, 5, 5}), rnd({4, 1, 3, 3}), {}, {.groups = 2}),
                    Catch::StartsWith("conv2d: input has 3 channels but weight expects 2 (groups=2)"));
  CHECK_THROWS_WITH(conv2d(rnd({1, 2, 5, 5}), rnd({4, 2, 3, 3}), rnd({3})),
                    "conv2d: expected a bias of shape [4], got bias [3] f64 cpu");
  CHECK_THROWS_AS(conv2d(rnd({1, 2, 5, 5}), rnd({4, 2, 3, 3}, DType::F32)), DTypeError);
  CHECK_THROWS_WITH(conv2d(rnd({1, 2, 5, 5}), rnd({4, 2, 3, 3}), {}, {.stride = {0, 1}}),
                    "conv2d: stride must be >= 1, got [0, 1]");
  CHECK_THROWS_WITH(conv2d_backward_input(rnd({1, 4, 2, 2}), rnd({4, 2, 3, 3}), {5, 5}),
                    "conv2d_backward_input: expected an output gradient of shape [1, 4, 3, 3], got grad [1, 4, 2, 2] f64 cpu");
}

TEST_CASE("conv2d f32 throughput on the ResNet-20 3x3 shape", "[conv][.perf]") {
  // x [128, 16, 28, 28], w [16, 16, 3, 3], padding 1: 2 * N * O * H * W * C * 9 flops
  const Tensor x = rnd({128, 16, 28, 28}, DType::F32), w = rnd({16, 16, 3, 3}, DType::F32);
  const Conv2dOptions o{.padding = {1, 1}};
  const double flops = 2.0 * 128 * 16 * 28 * 28 * 16 * 9;
  auto time_it = [](auto&& f) {
    f();
    double best = 1e30;
    for (int r = 0; r < 5; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      f();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  Tensor y;
  const double t_conv = time_it([&] { y = conv2d(x, w, {}, o); });
  // peer: one GEMM with the same flop count, [16, 144] @ [144, 128 * 784]
  const Tensor a = rnd({16, 144}, DType::F32), bm = rnd({144, 128 * 784}, DType::F32);
  const double t_mm = time_it([&] { (void)mm(a, bm); });
  std::printf("conv2d f32 [128, 16, 28, 28] x [16, 16, 3, 3]: %.1f GFLOP/s (%.2f ms); same-size mm %.1f GFLOP/s; "
              "ratio %.2f\n", flops / t_conv * 1e-9, t_conv * 1e3, flops / t_mm * 1e-9, t_mm / t_conv);
  CHECK(y.shape() == Shape{128, 16, 28, 28});
}

TEST_CASE("conv_transpose2d is the input gradient of conv2d plus bias", "[conv]") {
  // conv_transpose2d(x, w, b) = conv2d_backward_input(x, w) + b for a conv of the output's size
  const Conv2dOptions o{.stride = {2, 3}, .padding = {1, 1}, .dilation = {2, 1}, .groups = 2};
  const Tensor x = rnd({2, 4, 3, 4}), w = rnd({4, 3, 3, 2}), b = rnd({6});
  const Tensor y = conv_transpose2d(x, w, b, o, {1, 2});
  // H: (3 - 1) * 2 - 2 + 2 * 2 + 1 + 1 = 8; W: (4 - 1) * 3 - 2 + 1 + 2 + 1 = 11
  REQUIRE(y.shape() == Shape{2, 6, 8, 11});
  const Tensor want = add(conv2d_backward_input(x, w, {8, 11}, o), reshape(b, {1, 6, 1, 1}));
  CHECK(max_abs_diff(vals(y), vals(want)) < 1e-12);
  CHECK_THROWS_WITH(conv_transpose2d(x, w, {}, {.stride = {2, 2}}, {2, 0}),
                    "conv_transpose2d: output_padding must be smaller than the stride or the dilation, got "
                    "output_padding 2, stride 2, dilation 1");
  CHECK_THROWS_WITH(conv_transpose2d(rnd({2, 3, 3, 4}), w),
                    "conv_transpose2d: input has 3 channels but weight expects 4; got input [2, 3, 3, 4] f64 cpu, "
                    "weight [4, 3, 3, 2] f64 cpu");
}

TEST_CASE("conv_transpose2d with output_padding at or above the stride (below the dilation)", "[conv]") {
  // y[n][co][oh][ow] = b[co] + sum over ci in co's group, i, j of x[n][ci][h][w] * w[ci][co'][i][j]
  // where oh = h * s - p + i * d (likewise ow): a naive scatter in f64. Output padding 1 with
  // stride 1 and dilation 2 adds a row and a column that only the bias reaches.
  const Conv2dOptions o{.padding = {1, 0}, .dilation = {2, 2}, .groups = 2};
  const Tensor x = rnd({2, 4, 3, 4}), w = rnd({4, 3, 2, 3}), b = rnd({6});
  const Tensor y = conv_transpose2d(x, w, b, o, {1, 1});
  // H: (3 - 1) - 2 + 2 * 1 + 1 + 1 = 4; W: (4 - 1) - 0 + 2 * 2 + 1 + 1 = 9
  REQUIRE(y.shape() == Shape{2, 6, 4, 9});
  const std::vector<double> xv = vals(x), wv = vals(w), bv = vals(b);
  std::vector<double> want(std::size_t(y.numel()));
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t co = 0; co < 6; ++co)
      for (int64_t i = 0; i < 4 * 9; ++i) want[std::size_t((n * 6 + co) * 36 + i)] = bv[std::size_t(co)];
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t ci = 0; ci < 4; ++ci)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t h = 0; h < 3; ++h)
          for (int64_t ww = 0; ww < 4; ++ww)
            for (int64_t i = 0; i < 2; ++i)
              for (int64_t j = 0; j < 3; ++j) {
                const int64_t oh = h - 1 + 2 * i, ow = ww + 2 * j, co = (ci / 2) * 3 + c;
                if (oh < 0 || oh >= 4 || ow < 0 || ow >= 9) continue;
                want[std::size_t(((n * 6 + co) * 4 + oh) * 9 + ow)] +=
                    xv[std::size_t(((n * 4 + ci) * 3 + h) * 4 + ww)] * wv[std::size_t(((ci * 3 + c) * 2 + i) * 3 + j)];
              }
  CHECK(max_abs_diff(vals(y), want) < 1e-12);
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor yl = conv_transpose2d(to(x, dt), to(w, dt), to(b, dt), o, {1, 1});
    CHECK(max_abs_diff(vals(yl), vals(conv_transpose2d(to(to(x, dt), DType::F64), to(to(w, dt), DType::F64),
                                                       to(to(b, dt), DType::F64), o, {1, 1}))) < 0.05);
  }
}

TEST_CASE("conv_transpose2d gradients with output_padding at or above the stride match central differences",
          "[conv][grad]") {
  // Output padding 1 at stride 1 (dilation 2): conv2d over y's size is one row and column longer
  // than x, which the backward must drop from dx and pad x by for dw. First order: autograd vs
  // central differences of L = <y, cot>; second order: of S = <dL/dx, vx> + <dL/dw, vw>.
  const Conv2dOptions o{.padding = {1, 0}, .dilation = {2, 2}, .groups = 2};
  Tensor x = rnd({1, 4, 3, 4}).requires_grad_(), w = rnd({4, 3, 2, 3}).requires_grad_(), b = rnd({6}).requires_grad_();
  const Tensor cot = rnd(conv_transpose2d(x.detach(), w.detach(), b.detach(), o, {1, 1}).shape());
  const Tensor vx = rnd(x.shape()), vw = rnd(w.shape());
  auto L = [&] { return sum(mul(conv_transpose2d(x, w, b, o, {1, 1}), cot)); };
  auto S = [&](bool create_graph) {
    const Tensors g = autograd::grad({L()}, {x, w}, {}, std::nullopt, create_graph);
    return add(sum(mul(g[0], vx)), sum(mul(g[1], vw)));
  };
  const Tensors g1 = autograd::grad({L()}, {x, w, b});
  const Tensors g2 = autograd::grad({S(true)}, {x, w});
  const double h = 1e-6;
  auto central = [&](Tensor& t, const std::function<double()>& f) {
    std::vector<double> num;
    double* p = t.data<double>();
    for (int64_t k = 0; k < t.numel(); ++k) {
      const double v = p[k];
      p[k] = v + h;
      const double fp = f();
      p[k] = v - h;
      const double fm = f();
      p[k] = v;
      num.push_back((fp - fm) / (2 * h));
    }
    return num;
  };
  const std::function<double()> l = [&] { return vals(L())[0]; }, s2 = [&] { return vals(S(false))[0]; };
  CHECK(max_abs_diff(vals(g1[0]), central(x, l)) < 1e-6);
  CHECK(max_abs_diff(vals(g1[1]), central(w, l)) < 1e-6);
  CHECK(max_abs_diff(vals(g1[2]), central(b, l)) < 1e-6);
  CHECK(max_abs_diff(vals(g2[0]), central(x, s2)) < 1e-6);
  CHECK(max_abs_diff(vals(g2[1]), central(w, s2)) < 1e-6);
}

namespace {

// The same values as t in a non-contiguous layout at a storage offset: the second half of rows
// twice as long (4-D), or every other element of a buffer twice as long (1-D).
Tensor scrambled(const Tensor& t) {
  NoGradGuard no_grad;
  if (t.dim() == 1) return select(stack({t, t}, 1), 1, 1);
  return narrow(cat({t, t}, 3), 3, t.size(3), t.size(3));
}

// got (f32 or bf16) against the f64 result of the same rounded inputs: f32 within 1e-4 (sums of
// at most a few hundred unit-size products); bf16 within one bf16 ulp of the f64 result and equal
// to it rounded once to bf16 for >= 95% of the elements, up to the f32 sums' own error near zero
// (f32 accumulation misses the rounded value only where
// the exact value sits next to a rounding boundary; a second rounding, say of a bias added after
// the bf16 store, misses it for a quarter of them; a wrong layout misses everywhere).
void check_close(const Tensor& got, const Tensor& want64, const char* what) {
  INFO(what << " " << dtype_name(got.dtype()));
  REQUIRE(got.shape() == want64.shape());
  const std::vector<double> a = vals(got), exact = vals(want64);
  if (got.dtype() == DType::F32) {
    CHECK(max_abs_diff(a, exact) < 1e-4);
    return;
  }
  const std::vector<double> once = vals(to(want64, got.dtype()));
  const double ulp = std::ldexp(1.0, -7);
  // An element whose sum cancels to near 0 keeps the f32 accumulation's absolute error, about
  // u_f32 sum|terms|: 2e-5 for a weight gradient's 512 unit products (measured: -4.28e-5 for an
  // exact -2.25e-5). 1e-6 of the largest output covers it; a wrong layout is O(1) off.
  double largest = 0;
  for (double e : exact) largest = std::max(largest, std::abs(e));
  const double margin = 1e-5 + 1e-6 * largest;
  int equal = 0, far = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    equal += a[i] == once[i];
    far += std::abs(a[i] - exact[i]) > ulp * std::abs(exact[i]) + margin;
  }
  CHECK(far == 0);
  CHECK(equal >= int(a.size()) * 95 / 100);
}

}  // namespace

TEST_CASE("conv oneDNN and im2col paths match f64 for f32, bf16 and f16", "[conv][onednn]") {
  // (f16 runs on the f32 primitives: inputs widened exactly, one rounding of the result)
  std::vector<Config> cases = configs();
  // shapes on which oneDNN's blocked kernels (AVX-512, AMX for bf16) run, with bias, stride,
  // padding, dilation and groups; a batch of 3 splits unevenly over two threads in the weight
  // gradient
  cases.push_back({{3, 16, 9, 9}, {16, 16, 3, 3}, {.padding = {1, 1}}, true});
  cases.push_back({{2, 16, 12, 12}, {32, 16, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}, true});
  cases.push_back({{2, 32, 7, 7}, {64, 32, 1, 1}, {}, false});
  cases.push_back({{2, 32, 10, 11}, {32, 8, 3, 3},
                   {.stride = {1, 2}, .padding = {2, 1}, .dilation = {2, 1}, .groups = 4}, true});
  cases.push_back({{2, 16, 8, 8}, {16, 1, 3, 3}, {.padding = {1, 1}, .groups = 16}, true});  // depthwise
  cases.push_back({{2, 16, 16, 16}, {16, 16, 3, 3}, {.padding = {1, 1}}, true});
  for (cpu::ConvPath path : {cpu::ConvPath::Im2col, cpu::ConvPath::OnednnPlain, cpu::ConvPath::OnednnBlocked,
                             cpu::ConvPath::Auto}) {
    const cpu::ConvPathGuard guard(path);
    for (const Config& cf : cases) {
      for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
        INFO("path " << int(path) << " x " << shape_str(cf.x) << " w " << shape_str(cf.w) << " groups " << cf.o.groups);
        // inputs rounded to dt once; the f64 reference computes on exactly those values
        const Tensor x = to(rnd(cf.x), dt), w = to(rnd(cf.w), dt);
        const Tensor b = cf.bias ? to(rnd({cf.w[0]}), dt) : Tensor();
        auto f64 = [](const Tensor& t) { return t.defined() ? to(t, DType::F64) : t; };
        const Tensor y64 = conv2d(f64(x), f64(w), f64(b), cf.o);
        const Tensor gy = to(rnd(y64.shape()), dt);
        const Tensor cb = to(rnd({cf.x[1]}), dt);  // conv_transpose2d bias, over the conv's input channels
        const Tensor xs = scrambled(x), w_ = scrambled(w), gy_ = scrambled(gy), b_ = cf.bias ? scrambled(b) : b;
        REQUIRE_FALSE(xs.is_contiguous());
        const int64_t calls = cpu::onednn_conv_calls();
        check_close(conv2d(xs, w_, b_, cf.o), y64, "conv2d");
        check_close(conv2d_backward_input(gy_, w_, {cf.x[2], cf.x[3]}, cf.o),
                    conv2d_backward_input(f64(gy), f64(w), {cf.x[2], cf.x[3]}, cf.o), "conv2d_backward_input");
        check_close(conv2d_backward_weight(xs, gy_, {cf.w[2], cf.w[3]}, cf.o),
                    conv2d_backward_weight(f64(x), f64(gy), {cf.w[2], cf.w[3]}, cf.o), "conv2d_backward_weight");
        // conv_transpose2d from gy back to x's size (output_padding = what the stride dropped)
        std::array<int64_t, 2> opad{};
        bool fits = true;
        for (int d = 0; d < 2; ++d) {
          const int64_t s = cf.o.stride[d], p = cf.o.padding[d], dil = cf.o.dilation[d];
          opad[d] = cf.x[2 + d] - ((y64.size(2 + d) - 1) * s - 2 * p + dil * (cf.w[2 + d] - 1) + 1);
          fits = fits && opad[d] < std::max(s, dil);
        }
        if (fits) {
          check_close(conv_transpose2d(gy_, w_, scrambled(cb), cf.o, opad),
                      conv_transpose2d(f64(gy), f64(w), f64(cb), cf.o, opad), "conv_transpose2d");
        }
        // the forced paths ran where they say
        if (path == cpu::ConvPath::Im2col) CHECK(cpu::onednn_conv_calls() == calls);
        if (path == cpu::ConvPath::OnednnPlain || path == cpu::ConvPath::OnednnBlocked) {
          CHECK(cpu::onednn_conv_calls() == calls + (fits ? 4 : 3));
        }
      }
    }
    // an empty batch: no contributions, a zero weight gradient
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      const Tensor dw = conv2d_backward_weight(to(rnd({0, 4, 5, 5}), dt), to(rnd({0, 8, 5, 5}), dt), {3, 3},
                                               {.padding = {1, 1}});
      REQUIRE(dw.shape() == Shape{8, 4, 3, 3});
      CHECK(max_abs_diff(vals(dw), std::vector<double>(8 * 4 * 9, 0.0)) == 0.0);
    }
  }
}

TEST_CASE("conv auto path: bf16 convolves natively where native_bf16_preferred(), else widened to f32",
          "[conv][onednn]") {
  // ResNet-20's 32>32 14x14 layer, batch 8 (conv_onednn.cpp measured bf16 slower than f32 on
  // Intel processors without AMX)
  const cpu::ConvGeom g{8, 32, 14, 14, 32, 3, 3, 14, 14, 1, 1, 1, 1, 1, 1, 1};
  const cpu::ConvPathGuard guard(cpu::ConvPath::Auto);
  for (cpu::ConvDir dir : {cpu::ConvDir::Forward, cpu::ConvDir::BackwardData, cpu::ConvDir::BackwardWeights}) {
    INFO("direction " << int(dir));
    CHECK(cpu::onednn_conv_picks(dir, DType::F32, g));
    CHECK(cpu::onednn_conv_picks(dir, DType::BF16, g) == cpu::native_bf16_preferred());
  }
  // either way a bf16 conv runs on oneDNN (natively or widened) and rounds the f32 result once
  const Tensor x = to(rnd({8, 32, 14, 14}), DType::BF16), w = to(rnd({32, 32, 3, 3}), DType::BF16);
  const int64_t calls = cpu::onednn_conv_calls();
  check_close(conv2d(x, w, {}, {.padding = {1, 1}}),
              conv2d(to(x, DType::F64), to(w, DType::F64), {}, {.padding = {1, 1}}), "conv2d");
  CHECK(cpu::onednn_conv_calls() == calls + 1);
}

namespace {

// Naive pooling in f64 over x [N, C, H, W]: max (first maximum, -inf padding) or mean
// (count_include_pad: divisor = window clipped to the padded input).
std::vector<double> ref_pool(const Tensor& x, bool is_max, std::array<int64_t, 2> k, std::array<int64_t, 2> s,
                             std::array<int64_t, 2> p, std::array<int64_t, 2> d, bool include_pad) {
  const std::vector<double> xv = vals(x);
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t Ho = (H + 2 * p[0] - d[0] * (k[0] - 1) - 1) / s[0] + 1;
  const int64_t Wo = (W + 2 * p[1] - d[1] * (k[1] - 1) - 1) / s[1] + 1;
  std::vector<double> y;
  for (int64_t pl = 0; pl < N * C; ++pl)
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow) {
        double best = -INFINITY, total = 0;
        int64_t count = 0, padded = 0;
        for (int64_t i = 0; i < k[0]; ++i)
          for (int64_t j = 0; j < k[1]; ++j) {
            const int64_t ih = oh * s[0] - p[0] + i * d[0], iw = ow * s[1] - p[1] + j * d[1];
            if (ih < H + p[0] && iw < W + p[1]) ++padded;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            const double v = xv[std::size_t((pl * H + ih) * W + iw)];
            best = std::max(best, v);
            total += v;
            ++count;
          }
        y.push_back(is_max ? best : total / double(include_pad ? padded : count));
      }
  return y;
}

}  // namespace

TEST_CASE("max_pool2d and avg_pool2d match a naive reference", "[conv][pool]") {
  struct P {
    Shape x;
    std::array<int64_t, 2> k, s, p, d;
  };
  const std::vector<P> ps = {
      {{2, 3, 6, 6}, {2, 2}, {2, 2}, {0, 0}, {1, 1}},  {{1, 2, 7, 5}, {3, 3}, {2, 2}, {1, 1}, {1, 1}},
      {{1, 2, 7, 9}, {3, 2}, {1, 3}, {1, 1}, {1, 1}},  {{2, 1, 9, 8}, {3, 3}, {2, 1}, {1, 1}, {2, 1}},
      {{1, 1, 1, 5}, {1, 3}, {1, 2}, {0, 1}, {1, 1}},
  };
  for (const P& q : ps) {
    const Tensor x = rnd(q.x);
    INFO("x " << shape_str(q.x) << " k " << q.k[0] << "x" << q.k[1] << " s " << q.s[0] << "," << q.s[1]);
    CHECK(max_abs_diff(vals(max_pool2d(x, q.k, q.s, q.p, q.d)), ref_pool(x, true, q.k, q.s, q.p, q.d, true)) == 0);
    const Tensor idx = max_pool2d_indices(x, q.k, q.s, q.p, q.d);
    CHECK(idx.dtype() == DType::I64);
    // the indices point at the maxima
    const Tensor picked = gather(reshape(x, {q.x[0], q.x[1], -1}), 2, reshape(idx, {q.x[0], q.x[1], -1}));
    CHECK(max_abs_diff(vals(picked), vals(max_pool2d(x, q.k, q.s, q.p, q.d))) == 0);
    if (q.d[0] == 1 && q.d[1] == 1) {
      for (bool inc : {true, false}) {
        CHECK(max_abs_diff(vals(avg_pool2d(x, q.k, q.s, q.p, inc)), ref_pool(x, false, q.k, q.s, q.p, q.d, inc)) <
              1e-14);
      }
    }
  }
}

TEST_CASE("max_pool2d sends the gradient to the first maximum - NaN propagates, the last NaN wins", "[conv][pool][grad]") {
  // one 2x2 window of equal values: all the gradient goes to element 0
  const Tensor x = full({1, 1, 2, 2}, 3.0, {.dtype = DType::F64}).requires_grad_();
  const Tensor g = autograd::grad({max_pool2d(x, {2, 2})}, {x}, {full({1, 1, 1, 1}, 5.0, {.dtype = DType::F64})})[0];
  CHECK(vals(g) == std::vector<double>{5, 0, 0, 0});
  const Tensor xn = from_vector<double>({1, NAN, 7, 2}, {1, 1, 2, 2});
  CHECK(std::isnan(vals(max_pool2d(xn, {2, 2}))[0]));
  CHECK(vals(max_pool2d_indices(xn, {2, 2}))[0] == 1);
  // Several NaNs: the last one takes the index and the gradient, as PyTorch 2.15 (index 2; the
  // first NaN before). max_pool1d and max_pool3d likewise (adaptive max pooling, which pools one
  // dim at a time, still sends it to the first NaN: docs/ops.md).
  const Tensor two_nans = from_vector<double>({NAN, 1, NAN, 2}, {1, 1, 2, 2}).requires_grad_();
  CHECK(vals(max_pool2d_indices(two_nans.detach(), {2, 2}))[0] == 2);
  const Tensor gn = autograd::grad({max_pool2d(two_nans, {2, 2})}, {two_nans}, {full({1, 1, 1, 1}, 1.0, {.dtype = DType::F64})})[0];
  CHECK(vals(gn) == std::vector<double>{0, 0, 1, 0});
  const Tensor nans1 = from_vector<double>({NAN, 1, NAN, 2}, {1, 1, 4}).requires_grad_();
  const Tensor g1 = autograd::grad({max_pool1d(nans1, 4)}, {nans1}, {full({1, 1, 1}, 1.0, {.dtype = DType::F64})})[0];
  CHECK(vals(g1) == std::vector<double>{0, 0, 1, 0});
  const Tensor nans3 = from_vector<double>({NAN, 1, NAN, 2, 3, NAN, 4, 5}, {1, 1, 2, 2, 2}).requires_grad_();
  const Tensor g3 = autograd::grad({max_pool3d(nans3, {2, 2, 2})}, {nans3}, {full({1, 1, 1, 1, 1}, 1.0, {.dtype = DType::F64})})[0];
  CHECK(vals(g3) == std::vector<double>{0, 0, 0, 0, 0, 1, 0, 0});
  // f16 keeps the winning value exactly
  const Tensor xh = to(rnd({1, 2, 4, 4}), DType::F16);
  CHECK(max_abs_diff(vals(max_pool2d(xh, {2, 2})), vals(max_pool2d(to(xh, DType::F64), {2, 2}))) == 0);
}

TEST_CASE("pooling double backward matches central differences", "[conv][pool][grad]") {
  // S(x) = <d<pool(x), cot>/dx, v> is (piecewise) linear in x, so its gradient is 0 for max (the
  // argmax does not move under a small step) and for avg; autograd must agree and not throw.
  for (int which = 0; which < 3; ++which) {
    Tensor x = rnd({1, 2, 5, 5}).requires_grad_();
    auto pool = [&](const Tensor& t) {
      return which == 0 ? max_pool2d(t, {3, 3}, {2, 2}, {1, 1})
                        : which == 1 ? avg_pool2d(t, {3, 3}, {2, 2}, {1, 1}) : adaptive_avg_pool2d(t, {2, 3});
    };
    const Tensor y = pool(x);
    const Tensor cot = rnd(y.shape()).requires_grad_(), v = rnd(x.shape());
    const Tensor gx = autograd::grad({y}, {x}, {cot}, std::nullopt, true)[0];
    const Tensor s = sum(mul(gx, v));
    // dS/dcot = pool(v) for the linear (avg) pools and v gathered at the maxima for max pooling
    const Tensors gg = autograd::grad({s}, {cot, x}, {}, std::nullopt, false, /*allow_unused=*/true);
    INFO("pool " << which);
    std::vector<double> want;
    if (which == 0) {
      want = vals(gather(reshape(v, {1, 2, -1}), 2, reshape(max_pool2d_indices(x.detach(), {3, 3}, {2, 2}, {1, 1}), {1, 2, -1})));
    } else {
      want = vals(pool(v));
    }
    CHECK(max_abs_diff(vals(gg[0]), want) < 1e-12);
    if (gg[1].defined()) CHECK(max_abs_diff(vals(gg[1]), std::vector<double>(25 * 2, 0.0)) == 0);
  }
}

TEST_CASE("max_pool2d_backward equals the scatter_add of g at the window maxima, bit for bit, NCHW and NHWC",
          "[conv][pool][grad]") {
  // The op replaced max_pool2d's scatter_add backward (its CUDA kernel scanned every output of a
  // plane for every input element); the sums are the same, in the same order.
  Generator gen(31);
  const std::vector<std::vector<int64_t>> geoms = {
      {3, 3, 2, 2, 1, 1, 1, 1}, {2, 3, 1, 2, 1, 1, 2, 1}, {3, 3, 1, 1, 1, 1, 1, 1}, {3, 3, 2, 2, 1, 1, 2, 2}};
  for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
    // clamped values: many windows share a maximum, so elements collect several terms
    const Tensor x = to(clamp(randn({2, 3, 9, 11}, {.dtype = DType::F64}, &gen), -0.4, 0.4), dt);
    for (const auto& m : geoms) {
      for (const MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
        INFO(dtype_name(dt) << " kernel " << m[0] << "x" << m[1] << (f == MemoryFormat::ChannelsLast ? " NHWC" : ""));
        const Tensor xf = contiguous(x, f);
        const Tensor idx = max_pool2d_indices(xf, {m[0], m[1]}, {m[2], m[3]}, {m[4], m[5]}, {m[6], m[7]});
        const Tensor g = contiguous(to(randn(idx.shape(), {.dtype = DType::F64}, &gen), dt), f);
        const Tensor got = max_pool2d_backward(g, idx, {9, 11}, {m[0], m[1]}, {m[2], m[3]}, {m[4], m[5]}, {m[6], m[7]});
        const int64_t n = 2, c = 3;
        const Tensor plane = zeros({n, c, 99}, {.dtype = dt});
        const Tensor want = reshape(scatter_add(plane, 2, reshape(contiguous(idx), {n, c, -1}), reshape(contiguous(g), {n, c, -1})),
                                    {n, c, 9, 11});
        CHECK(got.suggest_memory_format() == f);
        CHECK(max_abs_diff(vals(got), vals(want)) == 0.0);
        // and through autograd: max_pool2d's gradient is this op
        const Tensor xr = xf.detach().requires_grad_();
        (max_pool2d(xr, {m[0], m[1]}, {m[2], m[3]}, {m[4], m[5]}, {m[6], m[7]}) * g).sum().backward();
        CHECK(max_abs_diff(vals(xr.grad()), vals(want)) == 0.0);
      }
    }
  }
  const Tensor x = rnd({1, 2, 4, 4});
  const Tensor idx = max_pool2d_indices(x, {2, 2});
  const Tensor g = rnd({1, 2, 2, 2});
  CHECK_THROWS_WITH(max_pool2d_backward(g, idx.to(DType::F64), {4, 4}, {2, 2}),
                    Catch::StartsWith("max_pool2d_backward: expected i64 indices of the grad's shape"));
  CHECK_THROWS_WITH(max_pool2d_backward(g, idx, {6, 6}, {2, 2}),
                    Catch::StartsWith("max_pool2d_backward: expected an output gradient of shape [1, 2, 3, 3]"));
  CHECK_THROWS_AS(max_pool2d_backward(g, full({1, 2, 2, 2}, 16.0, {.dtype = DType::I64}), {4, 4}, {2, 2}), IndexError);
  // Indices of another geometry: the 3x3 stride-1 maxima of 0..15 are bottom-right corners (index 10
  // for output (0, 0)), which the 2x2 stride-2 window (0, 0) does not hold.
  const Tensor ramp = reshape(arange(0, 16, 1, {.dtype = DType::F64}), {1, 1, 4, 4});
  const Tensor other = max_pool2d_indices(ramp, {3, 3}, {1, 1});
  CHECK_THROWS_WITH(max_pool2d_backward(rnd({1, 1, 2, 2}), other, {4, 4}, {2, 2}),
                    Catch::StartsWith("max_pool2d_backward: index 10 at output (0, 0) of plane 0 is not an element of "
                                      "that output's window"));
  // An empty batch differentiates twice (the gather's shapes are explicit).
  const Tensor e = zeros({0, 2, 4, 4}).requires_grad_();
  const Tensor ge = zeros({0, 2, 2, 2}).requires_grad_();
  const Tensors first = autograd::grad({(max_pool2d(e, {2, 2}) * ge).sum()}, {e}, {}, true, true);
  const Tensors second = autograd::grad({first[0].sum()}, {ge});
  CHECK(second[0].shape() == Shape{0, 2, 2, 2});
}

TEST_CASE("ceil_mode pools a window that reaches up to stride - 1 past the padded input, as PyTorch", "[conv][pool]") {
  // PyTorch 2.15: MaxPool2d(3, 2, ceil_mode=True) of a 2 x 2 map is its maximum, the gradient at
  // it; AvgPool2d the same window divides by the 2 x 2 it covers inside the padded input.
  const Tensor x = from_vector<double>({0, 1, 2, 3}, {1, 1, 2, 2}).requires_grad_();
  const Tensor m = max_pool2d(x, {3, 3}, {2, 2}, {0, 0}, {1, 1}, /*ceil_mode=*/true);
  REQUIRE(m.shape() == Shape{1, 1, 1, 1});
  CHECK(m.item<double>() == 3.0);
  sum(m).backward();
  CHECK(vals(x.grad()) == std::vector<double>{0, 0, 0, 1});
  CHECK(avg_pool2d(x.detach(), {3, 3}, {2, 2}, {0, 0}, true, /*ceil_mode=*/true).item<double>() == 1.5);
  const Tensor v = from_vector<double>({0, 1}, {1, 1, 2});
  CHECK(max_pool1d(v, 3, 2, 0, 1, /*ceil_mode=*/true).item<double>() == 1.0);
  CHECK(avg_pool1d(v, 3, 2, 0, true, /*ceil_mode=*/true).item<double>() == 0.5);
  CHECK(max_pool3d(rnd({1, 1, 2, 2, 2}), {3, 3, 3}, {2, 2, 2}, {0, 0, 0}, {1, 1, 1}, true).shape() ==
        Shape{1, 1, 1, 1, 1});
  // Farther than stride - 1, or without ceil_mode: still refused (PyTorch: output size too small).
  CHECK_THROWS_WITH(max_pool2d(x.detach(), {3, 3}, {2, 2}), Catch::StartsWith("max_pool2d: the window (3) is larger"));
  CHECK_THROWS_WITH(max_pool1d(from_vector<double>({0}, {1, 1, 1}), 3, 2, 0, 1, true),
                    Catch::Contains("the window (3) is larger than the padded input (1 + 2 * 0)"));
  // avg_pool3d refuses it, as PyTorch's "input image smaller than kernel size".
  CHECK_THROWS_WITH(avg_pool3d(rnd({1, 1, 2, 2, 2}), {3, 3, 3}, {2, 2, 2}, {0, 0, 0}, true, true),
                    Catch::Contains("is larger than the padded input"));
}

TEST_CASE("pooling errors name the op and the input", "[conv][pool][errors]") {
  const Tensor x = rnd({2, 3, 4, 4});
  CHECK_THROWS_WITH(max_pool2d(x, {5, 5}),
                    "max_pool2d: the window (5) is larger than the padded input (4 + 2 * 0) along H; got input "
                    "[2, 3, 4, 4] f64 cpu");
  CHECK_THROWS_WITH(avg_pool2d(x, {2, 2}, {2, 2}, {2, 2}),
                    "avg_pool2d: padding (2) must be at most half the kernel (2) along H; got input [2, 3, 4, 4] f64 cpu");
  CHECK_THROWS_WITH(max_pool2d(rnd({4, 4}), {2, 2}),
                    Catch::StartsWith("max_pool2d: expected a 4-D input [N, C, H, W] (or an unbatched [C, H, W]), got "
                                      "input [4, 4] f64 cpu"));
  CHECK_THROWS_WITH(adaptive_avg_pool2d(x, {-1, 2}), "adaptive_avg_pool2d: output size must not be negative, got [-1, 2]");
  CHECK_THROWS_WITH(adaptive_avg_pool2d(zeros({1, 1, 0, 4}), {2, 2}),
                    "adaptive_avg_pool2d: the input's H and W must be positive, got input [1, 1, 0, 4] f32 cpu");
  CHECK(adaptive_avg_pool2d(zeros({0, 3, 4, 4}), {2, 2}).shape() == Shape{0, 3, 2, 2});  // an empty batch is fine
  CHECK_THROWS_AS(max_pool2d(to(x, DType::I64), {2, 2}), DTypeError);
  // An empty spatial dim with padding would give windows that hold nothing.
  CHECK_THROWS_WITH(max_pool2d(zeros({1, 1, 0, 4}), {2, 2}, {1, 1}, {1, 1}),
                    Catch::StartsWith("max_pool2d: the input has no elements along H"));
  // Dilated windows whose every tap misses the input (they would read outside it): refused.
  CHECK_THROWS_WITH(max_pool2d(rnd({1, 1, 2, 2}), {2, 2}, {1, 1}, {1, 1}, {3, 3}),
                    Catch::StartsWith("max_pool2d: output 0 along H has a window with no input element (taps at -1, 2, "
                                      "... 2 of an input of 2 with padding 1, dilation 3)"));
  CHECK_THROWS_WITH(max_pool2d_indices(rnd({1, 1, 2, 2}), {2, 2}, {1, 1}, {1, 1}, {3, 3}),
                    Catch::StartsWith("max_pool2d_indices: output 0 along H has a window with no input element"));
  // The padding limit is half the kernel itself, not the dilated window (PyTorch 2.15 refuses
  // max_pool2d(k=2, dilation=3, padding=2): "pad should be smaller than or equal to half of kernel size").
  CHECK_THROWS_WITH(max_pool2d(rnd({1, 1, 6, 6}), {2, 2}, {1, 1}, {2, 2}, {3, 3}),
                    Catch::StartsWith("max_pool2d: padding (2) must be at most half the kernel (2) along H"));
  // A dilated window that keeps one real tap is fine, and its maximum is that element.
  const Tensor one = rnd({1, 1, 2, 2});
  const Tensor y = max_pool2d(one, {2, 2}, {1, 1}, {1, 1}, {2, 2});  // taps {-1, 1} and {0, 2} per dim
  REQUIRE(y.shape() == Shape{1, 1, 2, 2});
  CHECK(vals(y)[0] == vals(one)[3]);  // window (0, 0) holds only x(1, 1)
  CHECK(vals(y)[3] == vals(one)[0]);  // window (1, 1) holds only x(0, 0)
}

// oneDNN sizes a primitive for the OpenMP thread count at its creation; the plan builder set it
// process-wide (set_num_threads) and restored it afterwards, so two threads building plans at
// once could leave the process on one thread. It now sets the calling thread's count only.
TEST_CASE("conv plans built on two threads at once leave the process's thread count alone", "[ops][conv]") {
  const int before = num_threads();
  set_num_threads(2);
  const cpu::ConvPathGuard path(cpu::ConvPath::OnednnPlain);  // global: both threads build oneDNN plans
  const int64_t calls = cpu::onednn_conv_calls();
  const auto work = [](int64_t base) {
    for (int64_t k = 0; k < 12; ++k) {  // distinct geometries: a new plan each, single-threaded slices included
      const Tensor x = randn({32, 3, 6 + base + k, 6}), w = randn({4, 3, 3, 3});
      const Tensor g = randn({32, 4, 4 + base + k, 4});
      (void)conv2d_backward_weight(x, g, {3, 3}, {});
      (void)conv2d(x, w);
    }
  };
  std::thread a(work, 0), b(work, 20);
  a.join();
  b.join();
  CHECK(cpu::onednn_conv_calls() - calls >= 48);
  CHECK(num_threads() == 2);
  set_num_threads(before);
}

TEST_CASE("conv refuses a zero-size kernel and an empty spatial input, as PyTorch's", "[ops][conv]") {
  // PyTorch: "kernel size should be greater than zero"; "Only zero batch or zero channel inputs
  // are supported". mixgrad returned the bias at an invented size ([1, 1, 5, 2] here).
  MG_REQUIRE_ERROR(conv2d(randn({1, 1, 4, 4}), randn({1, 1, 0, 3})), "conv2d: the kernel size must be greater than zero");
  MG_REQUIRE_ERROR(conv2d(randn({1, 1, 0, 4}), randn({1, 1, 1, 1}), Tensor(), {.padding = {1, 1}}),
                   "conv2d: only an empty batch or channels are supported");
  MG_REQUIRE_ERROR(conv_transpose2d(randn({1, 1, 4, 4}), randn({1, 1, 0, 3})),
                   "conv_transpose2d: the kernel size must be greater than zero");
  MG_REQUIRE_ERROR(conv_transpose2d(randn({1, 1, 0, 4}), randn({1, 1, 3, 3})),
                   "conv_transpose2d: only an empty batch or channels are supported");
  MG_REQUIRE_ERROR(conv1d(randn({1, 1, 4}), randn({1, 1, 0})), "conv1d: the kernel size must be greater than zero");
  MG_REQUIRE_ERROR(conv1d(randn({1, 1, 0}), randn({1, 1, 1}), Tensor(), {.padding = 1}), "conv1d: only an empty batch");
  // an empty batch still works
  CHECK(conv2d(randn({0, 1, 4, 4}), randn({2, 1, 3, 3})).shape() == Shape{0, 2, 2, 2});
  // geometry whose size arithmetic would overflow int64 is refused up front
  MG_REQUIRE_ERROR(conv2d(randn({1, 1, 4, 4}), randn({1, 1, 2, 2}), Tensor(), {.dilation = {1, int64_t(1) << 62}}),
                   "must be at most 2^40");
  MG_REQUIRE_ERROR(max_pool2d(randn({1, 1, 4, 4}), {2, 3}, {1, 1}, {0, 0}, {1, int64_t(1) << 62}), "at most 2^40");
}

TEST_CASE("max_pool3d's f16 input gradient is summed in f32 and rounded once, as PyTorch's", "[ops][conv][pool]") {
  // All 8 windows of a 2x2x2 pool over 3x3x3 pick the centre: its gradient is the sum of the 8
  // upstream values, 1.5908203125 in f16 (PyTorch 2.15; the separable passes rounded twice: 1.58984375).
  Tensor x = zeros({1, 1, 3, 3, 3}, {.dtype = DType::F16});
  {
    NoGradGuard no_grad;
    x.select(2, 1).select(2, 1).select(2, 1).fill_(5.0);
  }
  x.requires_grad_();
  const Tensor y = max_pool3d(x, {2, 2, 2}, {1, 1, 1});
  const Tensor g = from_vector<double>({0.345703125, 0.82177734375, 0.330322265625, -1.302734375, 0.9052734375, 0.4462890625,
                                        -0.537109375, 0.5810546875},
                                       {1, 1, 2, 2, 2})
                       .to(DType::F16);
  const Tensor gx = autograd::grad({y}, {x}, {g})[0];
  CHECK(test::values(gx)[13] == 1.5908203125);
  CHECK(test::values(y) == std::vector<double>(8, 5.0));
}

TEST_CASE("unbatched [C, L] and [C, H, W] inputs run as a batch of one, as PyTorch's, gradients included",
          "[conv][pool]") {
  const Tensor x1 = rnd({3, 11}), x2 = rnd({3, 9, 8});
  const Tensor w1 = rnd({4, 3, 3}), w2 = rnd({4, 3, 3, 2}), wt1 = rnd({3, 2, 3}), wt2 = rnd({3, 2, 2, 3});
  const Tensor b = rnd({4});
  // f(x) on the unbatched input against f(x as [1, ...]) without its batch dim: values and x's gradient.
  const auto same = [](const char* what, const Tensor& x, auto f) {
    INFO(what);
    Tensor a = x.clone().requires_grad_(), c = x.clone().requires_grad_();
    const Tensor ya = f(a), yc = squeeze(f(unsqueeze(c, 0)), 0);
    REQUIRE(ya.shape() == yc.shape());
    CHECK(vals(ya) == vals(yc));
    sum(ya * ya).backward();
    sum(yc * yc).backward();
    CHECK(vals(a.grad()) == vals(c.grad()));
  };
  same("conv1d", x1, [&](const Tensor& x) { return conv1d(x, w1, b, {.stride = 2, .padding = 1}); });
  same("conv1d_same", x1, [&](const Tensor& x) { return conv1d_same(x, w1, b, 2); });
  same("conv_transpose1d", x1, [&](const Tensor& x) { return conv_transpose1d(x, wt1, {}, {.stride = 2}, 1); });
  same("max_pool1d", x1, [](const Tensor& x) { return max_pool1d(x, 3, 2, 1); });
  same("avg_pool1d", x1, [](const Tensor& x) { return avg_pool1d(x, 3, 2, 1, false, true); });
  same("adaptive_avg_pool1d", x1, [](const Tensor& x) { return adaptive_avg_pool1d(x, 4); });
  same("conv2d", x2, [&](const Tensor& x) { return conv2d(x, w2, b, {.stride = {2, 1}, .padding = {1, 0}}); });
  same("conv2d_same", x2, [&](const Tensor& x) { return conv2d_same(x, w2, b); });
  same("conv_transpose2d", x2, [&](const Tensor& x) { return conv_transpose2d(x, wt2, {}, {.stride = {2, 2}}); });
  same("max_pool2d", x2, [](const Tensor& x) { return max_pool2d(x, {3, 2}, {2, 2}); });
  same("avg_pool2d", x2, [](const Tensor& x) { return avg_pool2d(x, {2, 2}, {2, 2}, {1, 1}); });
  same("adaptive_avg_pool2d", x2, [](const Tensor& x) { return adaptive_avg_pool2d(x, {4, 3}); });
  CHECK(max_pool2d_indices(x2, {2, 2}, {2, 2}).shape() == Shape{3, 4, 4});
  // The layers (f32) take them too.
  const Tensor f1 = to(x1, DType::F32), f2 = to(x2, DType::F32);
  same("nn::Conv1d", f1, [](const Tensor& x) { manual_seed(1); return nn::Conv1d({.in = 3, .out = 4, .kernel = 3})(x); });
  same("nn::Conv1d reflect", f1, [](const Tensor& x) {
    manual_seed(1);
    return nn::Conv1d({.in = 3, .out = 4, .kernel = 3, .padding = 1, .padding_mode = PadMode::Reflect})(x);
  });
  same("nn::ConvTranspose1d", f1, [](const Tensor& x) { manual_seed(1); return nn::ConvTranspose1d({.in = 3, .out = 2, .kernel = 3})(x); });
  same("nn::MaxPool1d", f1, [](const Tensor& x) { return nn::MaxPool1d({.kernel = 2})(x); });
  same("nn::AvgPool1d", f1, [](const Tensor& x) { return nn::AvgPool1d({.kernel = 2})(x); });
  same("nn::AdaptiveAvgPool1d", f1, [](const Tensor& x) { return nn::AdaptiveAvgPool1d({.output = 5})(x); });
  same("nn::Conv2d", f2, [](const Tensor& x) { manual_seed(1); return nn::Conv2d({.in = 3, .out = 4, .kernel = 3})(x); });
  same("nn::ConvTranspose2d", f2, [](const Tensor& x) { manual_seed(1); return nn::ConvTranspose2d({.in = 3, .out = 2, .kernel = 2})(x); });
  same("nn::MaxPool2d", f2, [](const Tensor& x) { return nn::MaxPool2d({.kernel = 2})(x); });
  same("nn::AvgPool2d", f2, [](const Tensor& x) { return nn::AvgPool2d({.kernel = 2})(x); });
  same("nn::AdaptiveAvgPool2d", f2, [](const Tensor& x) { return nn::AdaptiveAvgPool2d({.output = 3})(x); });
  // Other ranks are still refused, naming both forms.
  CHECK_THROWS_WITH(conv1d(rnd({11}), w1), Catch::StartsWith("conv1d: expected x [N, C, L] (3-D, or an unbatched [C, L])"));
  CHECK_THROWS_WITH(nn::Conv2d({.in = 3, .out = 4, .kernel = 3})(rnd({9, 8})),
                    Catch::Contains("expected input [N, 3, H, W] (4-D with 3 channels, or an unbatched [3, H, W]), got "
                                    "input [9, 8]"));
}

TEST_CASE("an error for an unbatched input names the input as passed, and keeps its class", "[ops][conv][errors]") {
  // the op sees [1, 2, 5, 5]; the note says where that came from
  try {
    conv2d(randn({2, 5, 5}), randn({4, 3, 3, 3}));
    FAIL("no error");
  } catch (const ShapeError& e) {
    const std::string m = e.what();
    CHECK(m.find("conv2d: input has 2 channels but weight expects 3") == 0);
    CHECK(m.find("note: the unbatched input [2, 5, 5] f32 cpu ran as the batch of one [1, 2, 5, 5]") != std::string::npos);
  } catch (const Error& e) {
    FAIL("not a ShapeError: " << e.what());
  }
  MG_REQUIRE_ERROR(max_pool2d(randn({2, 1, 1}), {3, 3}), "note: the unbatched input [2, 1, 1] f32 cpu");
  MG_REQUIRE_ERROR(conv1d(randn({2, 5}), randn({4, 3, 3})), "note: the unbatched input [2, 5] f32 cpu");
}
