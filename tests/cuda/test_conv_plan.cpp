// The CUDA conv lowering (cuda/host/conv_plan.h) on the CPU, no GPU needed: the device kernels'
// per-element index math (im2col_source, col2im_gather) against the CPU's im2col/col2im
// (ops/cpu/im2col.h) bit for bit, the chunk sizes, the GEMM shapes each direction asks for, and
// the drivers run end to end with a CPU model of the device (the element functions above, the
// cuBLASLt model of tests/cuda/cublaslt_model.h for the GEMMs) against the CPU conv ops in f64 —
// with workspace budgets that force every chunk size from one image to the whole batch.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/generator.h"
#include "cublaslt_model.h"
#include "cuda/host/conv_plan.h"
#include "cuda/host/gemm_plan.h"
#include "ops/conv.h"
#include "ops/cpu/im2col.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using namespace mg::cuda;

namespace {

struct Geo {
  std::string name;
  Shape x;  // [N, C, H, W]
  Shape w;  // [O, C/groups, kH, kW]
  Conv2dOptions o;
};

const std::vector<Geo> kGeos = {
    {"3x3 pad 1", {2, 3, 6, 5}, {4, 3, 3, 3}, {.padding = {1, 1}}},
    {"groups 2 stride 2", {3, 4, 7, 8}, {6, 2, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .groups = 2}},
    {"depthwise", {2, 4, 5, 5}, {4, 1, 3, 3}, {.padding = {1, 1}, .groups = 4}},
    {"dilation 2", {2, 2, 9, 7}, {3, 2, 3, 2}, {.padding = {2, 1}, .dilation = {2, 2}}},
    {"1x1", {3, 5, 4, 3}, {2, 5, 1, 1}, {}},
    {"7x7 stride 2 stem", {2, 3, 13, 11}, {4, 3, 7, 7}, {.stride = {2, 2}, .padding = {3, 3}}},
    {"odd strides", {2, 2, 9, 10}, {2, 2, 2, 3}, {.stride = {3, 2}, .padding = {0, 1}}},
    {"batch 1", {1, 2, 4, 4}, {3, 2, 3, 3}, {.padding = {1, 1}}},
    {"batch 0", {0, 2, 4, 4}, {3, 2, 3, 3}, {.padding = {1, 1}}},
};

OpAttrs attrs_of(const Conv2dOptions& o) {
  OpAttrs a;
  a.ints = {o.stride[0], o.stride[1], o.padding[0], o.padding[1], o.dilation[0], o.dilation[1], o.groups};
  return a;
}
ConvDims dims_of(const Geo& c) {
  return conv_dims(attrs_of(c.o).ints, c.x[0], c.x[1], c.x[2], c.x[3], c.w[0], c.w[2], c.w[3]);
}
cpu::ConvGeom cpu_geom(const Geo& c) {
  return cpu::conv_geom(attrs_of(c.o), c.x[0], c.x[1], c.x[2], c.x[3], c.w[0], c.w[2], c.w[3]);
}

std::vector<double> rnd(int64_t n, uint64_t seed) {
  Generator gen(seed);
  return test::values(randn({n}, {.dtype = DType::F64}, &gen));
}

// The CPU model of the device: the kernels' element functions and the cuBLASLt model, on f64.
class ModelDevice final : public ConvDevice {
 public:
  int gemms = 0, chunks = 0;
  void im2col(const ConvDims& g, ColLayout layout, int64_t nb, const void* x, void* col) override {
    ++chunks;
    const auto* xp = static_cast<const double*>(x);
    auto* cp = static_cast<double*>(col);
    for (int64_t e = 0; e < nb * g.C * g.kk() * g.hw_out(); ++e) {
      const int64_t s = im2col_source(g, layout, nb, e);
      cp[e] = s < 0 ? 0.0 : xp[s];
    }
  }
  void col2im(const ConvDims& g, int64_t nb, const void* dcol, const void* bias, void* dx) override {
    ++chunks;
    const auto* bp = static_cast<const double*>(bias);
    auto* dp = static_cast<double*>(dx);
    for (int64_t e = 0; e < nb * g.C * g.H * g.W; ++e) {
      dp[e] = col2im_gather<double>(g, e, static_cast<const double*>(dcol), bp ? bp[(e / (g.H * g.W)) % g.C] : 0.0);
    }
  }
  void fill_bias(const ConvDims& g, const void* bias, void* y) override {
    for (int64_t e = 0; e < g.N * g.O * g.hw_out(); ++e)
      static_cast<double*>(y)[e] = static_cast<const double*>(bias)[(e / g.hw_out()) % g.O];
  }
  void permute_grad(const ConvDims& g, int64_t nb, const void* gy, void* gp) override {
    const int64_t hw = g.hw_out();
    for (int64_t e = 0; e < nb * g.O * hw; ++e) {
      const int64_t p = e % hw, n = (e / hw) % nb, o = e / (hw * nb);
      static_cast<double*>(gp)[e] = static_cast<const double*>(gy)[(n * g.O + o) * hw + p];
    }
  }
  void gemm(const GemmProblem& p, DType dtype, DType out_dtype) override {
    ++gemms;
    const GemmPlan plan = plan_gemm(p, dtype, {.out_dtype = out_dtype});
    INFO(describe(plan));
    REQUIRE_FALSE(plan.copy_a);
    REQUIRE_FALSE(plan.copy_b);
    REQUIRE(plan.out_dtype == out_dtype);
    if (plan.kind == GemmKind::Zero) {
      for (int64_t i = 0; i < shape_numel(p.batch) * p.n * p.m; ++i) static_cast<double*>(p.out)[i] = 0;
    }
    if (plan.kind != GemmKind::Matmul) return;
    REQUIRE((plan.c_mode == GemmCMode::None || (plan.c_mode == GemmCMode::CopyToOut && p.c.ptr == p.out)));
    test::execute_like_cublaslt(plan);
  }
  void convert(void* dst, DType, const void* src, DType, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) static_cast<double*>(dst)[i] = src ? static_cast<const double*>(src)[i] : 0.0;
  }
};

Tensor f64(const std::vector<double>& v, const Shape& s) { return from_vector(v, s); }

void require_near(const std::string& what, const std::vector<double>& got, const Tensor& want) {
  const std::vector<double> w = test::values(want);
  REQUIRE(got.size() == w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    INFO(what << " element " << i);
    REQUIRE(std::abs(got[i] - w[i]) <= 1e-12 * (1 + std::abs(w[i])));
  }
}

}  // namespace

TEST_CASE("conv plan: im2col_source builds the CPU's columns in both layouts", "[cuda][conv]") {
  for (const Geo& c : kGeos) {
    INFO(c.name);
    const ConvDims g = dims_of(c);
    const cpu::ConvGeom cg = cpu_geom(c);
    const int64_t N = g.N, hw = g.hw_out(), K = g.rows();
    const std::vector<double> x = rnd(N * g.C * g.H * g.W, 1);
    for (ColLayout layout : {ColLayout::ImageMajor, ColLayout::GroupMajor}) {
      std::vector<double> want(std::size_t(N * g.C * g.kk() * hw), -1.0), got(want.size());
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t gr = 0; gr < g.groups; ++gr) {
          const double* src = x.data() + (n * g.C + gr * g.cg()) * g.H * g.W;
          if (layout == ColLayout::ImageMajor) {
            cpu::im2col(src, want.data() + (n * g.groups + gr) * K * hw, hw, cg);
          } else {  // the CPU weight gradient's slice layout: [K, N*hw] per group
            cpu::im2col(src, want.data() + gr * K * N * hw + n * hw, N * hw, cg);
          }
        }
      }
      for (int64_t e = 0; e < int64_t(got.size()); ++e) {
        const int64_t s = im2col_source(g, layout, N, e);
        got[std::size_t(e)] = s < 0 ? 0.0 : x[std::size_t(s)];
      }
      CHECK(got == want);
    }
  }
}

TEST_CASE("conv plan: col2im_gather equals the CPU's scatter bit for bit in f32", "[cuda][conv]") {
  for (const Geo& c : kGeos) {
    INFO(c.name);
    const ConvDims g = dims_of(c);
    const cpu::ConvGeom cg = cpu_geom(c);
    const int64_t hw = g.hw_out(), K = g.rows(), plane = g.H * g.W;
    const std::vector<double> d = rnd(g.N * g.C * g.kk() * hw, 2), b = rnd(g.C, 3);
    const std::vector<float> dcol(d.begin(), d.end()), bias(b.begin(), b.end());
    std::vector<float> want(std::size_t(g.N * g.C * plane)), got(want.size());
    for (int64_t n = 0; n < g.N; ++n) {
      for (int64_t gr = 0; gr < g.groups; ++gr) {
        float* dx = want.data() + (n * g.C + gr * g.cg()) * plane;
        for (int64_t ch = 0; ch < g.cg(); ++ch)
          std::fill(dx + ch * plane, dx + (ch + 1) * plane, bias[std::size_t(gr * g.cg() + ch)]);
        cpu::col2im(dcol.data() + (n * g.groups + gr) * K * hw, dx, cg);
      }
    }
    for (int64_t e = 0; e < int64_t(got.size()); ++e)
      got[std::size_t(e)] = col2im_gather<float>(g, e, dcol.data(), bias[std::size_t((e / plane) % g.C)]);
    CHECK(got == want);  // the same additions in the same order
  }
}

TEST_CASE("conv plan: chunks stay within the budget, at least one image", "[cuda][conv]") {
  CHECK(conv_chunk_images(10, 300, 1000) == 3);   // floor(1000 / 300)
  CHECK(conv_chunk_images(10, 100, 1000) == 10);
  CHECK(conv_chunk_images(10, 50, 1000) == 10);   // at most N
  CHECK(conv_chunk_images(5, 2000, 1000) == 1);   // one image over the budget still runs alone
  CHECK(conv_chunk_images(0, 300, 1000) == 0);
  // ResNet-50's stem in bf16 at batch 256: columns 3 * 7 * 7 * 112 * 112 * 2 bytes = 3,687,936
  // bytes per image, so 2^30 / that = 291 images fit: the whole batch in one chunk; its 3x3 convs
  // at 56x56 with 64 channels: 64 * 9 * 3136 * 2 = 3,612,672 bytes, 297 images.
  ConvDims stem = conv_dims({2, 2, 3, 3, 1, 1, 1}, 256, 3, 224, 224, 64, 7, 7);
  CHECK(stem.Ho == 112);
  CHECK(conv_bytes_per_image(ConvDirection::Forward, stem, DType::BF16) == 3687936);
  CHECK(conv_chunk_images(256, conv_bytes_per_image(ConvDirection::Forward, stem, DType::BF16)) == 256);
  // the input gradient's columns are f32 for bf16 (twice the bytes); the weight gradient adds g
  CHECK(conv_bytes_per_image(ConvDirection::BackwardInput, stem, DType::BF16) == 2 * 3687936);
  CHECK(conv_bytes_per_image(ConvDirection::BackwardWeight, stem, DType::BF16) == 3687936 + 64 * 12544 * 2);
  ConvDims big = conv_dims({1, 1, 1, 1, 1, 1, 1}, 512, 256, 64, 64, 256, 3, 3);  // 256*9*4096*4 = 37.7 MB in f32
  CHECK(conv_chunk_images(512, conv_bytes_per_image(ConvDirection::Forward, big, DType::F32)) == 28);
  CHECK(conv_acc_dtype(DType::F16) == DType::F32);
  CHECK(conv_acc_dtype(DType::BF16) == DType::F32);
  CHECK(conv_acc_dtype(DType::F32) == DType::F32);
  CHECK(conv_acc_dtype(DType::F64) == DType::F64);
}

TEST_CASE("conv plan: the GEMM each direction asks for", "[cuda][conv][gemm]") {
  // x [4, 6, 8, 8], w [8, 3, 3, 3], groups 2, padding 1: og 4, K = 3 * 9 = 27, Ho*Wo = 64.
  const ConvDims g = conv_dims({1, 1, 1, 1, 1, 1, 2}, 4, 6, 8, 8, 8, 3, 3);
  REQUIRE(g.rows() == 27);
  REQUIRE(g.hw_out() == 64);
  static double buf[8];  // only the pointers' alignment matters
  void* p = buf;
  {
    // y[n, g] [4, 64] = w[g] [4, 27] @ col[n, g] [27, 64]: column-major D [64, 4] = col^T w^T;
    // the groups are one strided batch, the images a loop (w's image stride 0 does not merge).
    const GemmPlan plan = plan_gemm(conv_forward_gemm(g, 3, p, p, p, false), DType::F16);
    INFO(describe(plan));
    CHECK(plan.M == 64);
    CHECK(plan.N == 4);
    CHECK(plan.K == 27);
    CHECK(plan.batch_count == 2);
    CHECK(plan.loop == Shape{3});
    CHECK(plan.A.batch_stride == 27 * 64);
    CHECK(plan.B.batch_stride == 4 * 27);
    CHECK(plan.D.batch_stride == 4 * 64);
    CHECK(plan.loop_b == Strides{2 * 27 * 64});  // the images' column matrices
    CHECK(plan.loop_a == Strides{0});             // the weight, shared
    CHECK(plan.loop_out == Strides{8 * 64});
    CHECK(plan.c_mode == GemmCMode::None);
    CHECK(plan.out_dtype == DType::F16);
    // with a bias already in y: D = A B + D (beta 1), no copy
    const GemmPlan acc = plan_gemm(conv_forward_gemm(g, 3, p, p, p, true), DType::F16);
    CHECK(acc.c_mode == GemmCMode::CopyToOut);
    CHECK(acc.beta == 1.0);
  }
  {
    // groups 1: one strided batch over the images, the weight at stride 0
    const ConvDims g1 = conv_dims({1, 1, 1, 1, 1, 1, 1}, 4, 6, 8, 8, 8, 3, 3);
    const GemmPlan plan = plan_gemm(conv_forward_gemm(g1, 4, p, p, p, false), DType::F32);
    CHECK(plan.batch_count == 4);
    CHECK(plan.loop.empty());
    CHECK(plan.B.batch_stride == 0);
  }
  {
    // dcol[n, g] [27, 64] = w[g]^T [27, 4] @ gy[n, g] [4, 64], in f32 for f16 inputs: w^T is
    // w read with op T (no copy)
    const GemmPlan plan =
        plan_gemm(conv_backward_input_gemm(g, 3, p, p, p), DType::F16, {.out_dtype = DType::F32});
    INFO(describe(plan));
    CHECK(plan.M == 64);
    CHECK(plan.N == 27);
    CHECK(plan.K == 4);
    CHECK_FALSE(plan.copy_a);
    CHECK(plan.B.transpose);
    CHECK(plan.out_dtype == DType::F32);
    CHECK(plan.D.batch_stride == 27 * 64);
  }
  {
    // dw[g] [4, 27] = gp[g] [4, 3 * 64] @ col[g]^T [192, 27]: the batch inside K
    const GemmPlan plan =
        plan_gemm(conv_backward_weight_gemm(g, 3, p, p, p, true), DType::BF16, {.out_dtype = DType::F32});
    INFO(describe(plan));
    CHECK(plan.M == 27);
    CHECK(plan.N == 4);
    CHECK(plan.K == 3 * 64);
    CHECK(plan.batch_count == 2);
    CHECK(plan.A.transpose);  // col [K, L] read as col^T
    CHECK(plan.c_mode == GemmCMode::CopyToOut);
    CHECK(plan.beta == 1.0);
  }
}

TEST_CASE("conv plan: the drivers compute the CPU's conv ops in every chunking", "[cuda][conv]") {
  for (const Geo& c : kGeos) {
    const ConvDims g = dims_of(c);
    const int64_t N = g.N;
    const Shape ys{N, g.O, g.Ho, g.Wo};
    const std::vector<double> x = rnd(shape_numel(c.x), 4), w = rnd(shape_numel(c.w), 5), b = rnd(g.O, 6),
                              bc = rnd(g.C, 7), gy = rnd(shape_numel(ys), 8);
    const Tensor tx = f64(x, c.x), tw = f64(w, c.w), tb = f64(b, {g.O}), tg = f64(gy, ys);
    for (const int64_t nb : {int64_t(1), int64_t(2), std::max<int64_t>(N, 1)}) {
      if (nb > std::max<int64_t>(N, 1)) continue;
      INFO(c.name << ", " << nb << " images per chunk");
      ModelDevice dev;
      // forward, with and without bias
      for (const bool with_bias : {true, false}) {
        std::vector<double> y(std::size_t(shape_numel(ys)), std::nan("")), col(std::size_t(nb * g.C * g.kk() * g.hw_out()));
        conv_forward_steps(g, DType::F64, x.data(), w.data(), with_bias ? b.data() : nullptr, y.data(), col.data(), nb,
                           dev);
        require_near("conv2d", y, conv2d(tx, tw, with_bias ? tb : Tensor(), c.o));
      }
      // input gradient (and conv_transpose2d: the same steps with a bias of the conv's input channels)
      {
        std::vector<double> dx(std::size_t(shape_numel(c.x)), std::nan("")),
            dcol(std::size_t(nb * g.C * g.kk() * g.hw_out()));
        conv_backward_input_steps(g, DType::F64, gy.data(), w.data(), nullptr, dx.data(), dcol.data(), nb, dev);
        require_near("conv2d_backward_input", dx, conv2d_backward_input(tg, tw, {c.x[2], c.x[3]}, c.o));
        if (c.o.stride[0] == 1 && c.o.stride[1] == 1) {  // output_padding 0 reproduces {H, W}
          conv_backward_input_steps(g, DType::F64, gy.data(), w.data(), bc.data(), dx.data(), dcol.data(), nb, dev);
          require_near("conv_transpose2d", dx, conv_transpose2d(tg, tw, f64(bc, {g.C}), c.o));
        }
      }
      // weight gradient: acc is dw itself (f64)
      {
        std::vector<double> dw(std::size_t(shape_numel(c.w)), std::nan("")),
            col(std::size_t(nb * g.C * g.kk() * g.hw_out())), gp(std::size_t(nb * g.O * g.hw_out()));
        conv_backward_weight_steps(g, DType::F64, x.data(), gy.data(), dw.data(), dw.data(), col.data(), gp.data(), nb,
                                   dev);
        require_near("conv2d_backward_weight", dw, conv2d_backward_weight(tx, tg, {c.w[2], c.w[3]}, c.o));
        // a separate accumulator is converted into dw once at the end
        std::vector<double> dw2(dw.size(), std::nan("")), acc(dw.size(), std::nan(""));
        conv_backward_weight_steps(g, DType::F64, x.data(), gy.data(), dw2.data(), acc.data(), col.data(), gp.data(),
                                   nb, dev);
        CHECK(dw2 == dw);
      }
      if (N > 0) CHECK(dev.gemms > 0);
      if (N > 1 && nb == 1) CHECK(dev.chunks >= 5 * N);  // every direction ran image by image
    }
  }
}

TEST_CASE("conv plan: conv_transpose2d with stride and output_padding through the drivers", "[cuda][conv]") {
  // x [2, 4, 3, 4] as the conv's output gradient, w [4, 3, 3, 3] (Cin 4, Cout 3), stride 2,
  // padding 1, output_padding 1: out [2, 3, 6, 8] — the conv from [2, 3, 6, 8] to [2, 4, 3, 4].
  const Conv2dOptions o{.stride = {2, 2}, .padding = {1, 1}};
  ConvDims g = conv_dims(attrs_of(o).ints, 2, 3, 6, 8, 4, 3, 3);
  g.Ho = 3;
  g.Wo = 4;
  const std::vector<double> x = rnd(2 * 4 * 3 * 4, 9), w = rnd(4 * 3 * 9, 10), b = rnd(3, 11);
  std::vector<double> y(2 * 3 * 6 * 8), dcol(std::size_t(2 * g.C * g.kk() * g.hw_out()));
  ModelDevice dev;
  conv_backward_input_steps(g, DType::F64, x.data(), w.data(), b.data(), y.data(), dcol.data(), 2, dev);
  require_near("conv_transpose2d", y, conv_transpose2d(f64(x, {2, 4, 3, 4}), f64(w, {4, 3, 3, 3}), f64(b, {3}), o, {1, 1}));
}

TEST_CASE("conv plan: empty batches and channel-less groups", "[cuda][conv]") {
  ModelDevice dev;
  // batch 0: no work but the weight gradient, which is zeros
  const ConvDims g0 = conv_dims({1, 1, 0, 0, 1, 1, 1}, 0, 2, 4, 4, 3, 3, 3);
  std::vector<double> dw(3 * 2 * 9, std::nan(""));
  conv_backward_weight_steps(g0, DType::F64, nullptr, nullptr, dw.data(), dw.data(), nullptr, nullptr, 0, dev);
  for (double v : dw) CHECK(v == 0.0);
  conv_forward_steps(g0, DType::F64, nullptr, nullptr, nullptr, nullptr, nullptr, 0, dev);
  conv_backward_input_steps(g0, DType::F64, nullptr, nullptr, nullptr, nullptr, nullptr, 0, dev);
  CHECK(dev.gemms == 0);
  // no input channels: k = 0, so y is the bias alone
  const ConvDims gc = conv_dims({1, 1, 0, 0, 1, 1, 1}, 2, 0, 3, 3, 2, 1, 1);
  const std::vector<double> b{1.5, -2.0};
  std::vector<double> y(2 * 2 * 9, std::nan(""));
  conv_forward_steps(gc, DType::F64, nullptr, nullptr, b.data(), y.data(), nullptr, 2, dev);
  for (std::size_t i = 0; i < y.size(); ++i) CHECK(y[i] == b[(i / 9) % 2]);
  conv_forward_steps(gc, DType::F64, nullptr, nullptr, nullptr, y.data(), nullptr, 2, dev);
  for (double v : y) CHECK(v == 0.0);
}
