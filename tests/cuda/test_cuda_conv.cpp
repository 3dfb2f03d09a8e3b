// The CUDA conv kernels (cuda/conv_kernels.cpp: cuDNN, and im2col + cuBLASLt for f64) against
// the CPU's, the reference: every op of the conv group in f32, f16, bf16 (and f64) over a table of
// geometries, gradients through autograd, bit-for-bit repeats in deterministic mode, large
// batches, no counted sync, and ResNet-20 forward and backward end to end. The tolerance is
// conv_test_util.h's. Channels-last, the cuDNN modes and the declared im2col cases:
// test_cuda_cudnn_conv.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/generator.h"
#include "conv_test_util.h"
#include "cuda/conv_settings.h"
#include "cuda/cuda.h"
#include "cuda_test_util.h"
#include "nn/models/resnet.h"
#include "ops/conv.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::gpu;
using mg::test::values;
using namespace mg::test::conv;

namespace {

struct Geo {
  std::string name;
  Shape x;  // [N, C, H, W]
  Shape w;  // [O, C/groups, kH, kW]
  Conv2dOptions o;
  bool strided_input = false;  // x as a step slice along W of a twice-wider tensor
};

const std::vector<Geo> kGeos = {
    {"3x3 pad 1", {2, 3, 9, 8}, {5, 3, 3, 3}, {.padding = {1, 1}}},
    {"groups 2", {2, 4, 7, 7}, {6, 2, 3, 3}, {.padding = {1, 1}, .groups = 2}},
    {"depthwise stride 2", {2, 6, 9, 9}, {6, 1, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .groups = 6}},
    {"stride 2 no pad", {3, 4, 11, 10}, {4, 4, 3, 3}, {.stride = {2, 2}}},
    {"dilation 2", {2, 3, 10, 9}, {4, 3, 3, 3}, {.padding = {2, 2}, .dilation = {2, 2}}},
    {"1x1", {2, 8, 5, 6}, {16, 8, 1, 1}, {}},
    {"1x1 stride 2", {2, 8, 7, 6}, {4, 8, 1, 1}, {.stride = {2, 2}}},
    {"7x7 stride 2 stem", {2, 3, 32, 30}, {8, 3, 7, 7}, {.stride = {2, 2}, .padding = {3, 3}}},
    {"odd sizes", {1, 5, 13, 7}, {3, 5, 2, 3}, {.stride = {3, 1}, .padding = {1, 0}}},
    {"batch 1", {1, 16, 8, 8}, {32, 16, 3, 3}, {.padding = {1, 1}}},
    {"batch 0", {0, 4, 6, 6}, {4, 4, 3, 3}, {.padding = {1, 1}}},
    {"non-contiguous input", {2, 3, 8, 7}, {4, 3, 3, 3}, {.padding = {1, 1}}, true},
};

// x of the geometry (a strided view where asked)
Tensor make_x(const Geo& c, DType dt, uint64_t seed) {
  if (!c.strided_input) return randn_in(dt, c.x, seed);
  const Tensor wide = randn_in(dt, {c.x[0], c.x[1], c.x[2], 2 * c.x[3]}, seed);
  return wide.slice(3, 0, 2 * c.x[3], 2);
}

Shape out_shape(const Geo& c) {
  const int64_t ho = (c.x[2] + 2 * c.o.padding[0] - c.o.dilation[0] * (c.w[2] - 1) - 1) / c.o.stride[0] + 1;
  const int64_t wo = (c.x[3] + 2 * c.o.padding[1] - c.o.dilation[1] * (c.w[3] - 1) - 1) / c.o.stride[1] + 1;
  return {c.x[0], c.w[0], ho, wo};
}

const std::vector<DType> kDTypes = {DType::F32, DType::F16, DType::BF16, DType::F64};

}  // namespace

TEST_CASE("CUDA conv2d matches the CPU", "[cuda][conv][gpu]") {
  for (const Geo& c : kGeos) {
    for (const DType dt : kDTypes) {
      const Tensor x = make_x(c, dt, 1), w = randn_in(dt, c.w, 2), b = randn_in(dt, {c.w[0]}, 3);
      const int64_t K = c.w[1] * c.w[2] * c.w[3];
      const Tensor gx = mg::test::to_gpu_keep_layout(x);
      REQUIRE(gx.is_contiguous() == !c.strided_input);
      for (const bool with_bias : {true, false}) {
        const Tensor want = conv2d(x, w, with_bias ? b : Tensor(), c.o);
        const Tensor got = conv2d(gx, w.to(gpu()), with_bias ? b.to(gpu()) : Tensor(), c.o);
        const Tensor bound = conv2d(abs64(x), abs64(w), with_bias ? abs64(b) : Tensor(), c.o);
        require_conv_close(c.name + (with_bias ? " conv2d+bias" : " conv2d"), got, want, bound, K);
      }
    }
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA conv2d_backward_input, conv2d_backward_weight and conv_transpose2d match the CPU",
          "[cuda][conv][gpu]") {
  for (const Geo& c : kGeos) {
    for (const DType dt : kDTypes) {
      const Shape ys = out_shape(c);
      const Tensor x = make_x(c, dt, 4), w = randn_in(dt, c.w, 5), g = randn_in(dt, ys, 6);
      const Tensor gg = g.to(gpu()), gw = w.to(gpu());
      const std::array<int64_t, 2> hw{c.x[2], c.x[3]}, khw{c.w[2], c.w[3]};
      {
        const Tensor want = conv2d_backward_input(g, w, hw, c.o);
        const Tensor got = conv2d_backward_input(gg, gw, hw, c.o);
        const Tensor bound = conv2d_backward_input(abs64(g), abs64(w), hw, c.o);
        require_conv_close(c.name + " backward_input", got, want, bound, c.w[0] * c.w[2] * c.w[3]);
      }
      {
        const Tensor want = conv2d_backward_weight(x, g, khw, c.o);
        const Tensor got = conv2d_backward_weight(mg::test::to_gpu_keep_layout(x), gg, khw, c.o);
        const Tensor bound = conv2d_backward_weight(abs64(x), abs64(g), khw, c.o);
        require_conv_close(c.name + " backward_weight", got, want, bound, ys[0] * ys[2] * ys[3]);
      }
      {
        // conv_transpose2d(g, w, bias): the conv's input gradient plus a bias of its C channels;
        // output_padding reproduces {H, W} where the stride left a remainder.
        std::array<int64_t, 2> opad{};
        for (int d = 0; d < 2; ++d) {
          const int64_t s = c.o.stride[std::size_t(d)];
          const int64_t full = (ys[2 + d] - 1) * s - 2 * c.o.padding[std::size_t(d)] +
                               c.o.dilation[std::size_t(d)] * (c.w[2 + d] - 1) + 1;
          opad[std::size_t(d)] = c.x[2 + d] - full;
        }
        if (opad[0] < c.o.stride[0] && opad[1] < c.o.stride[1]) {
          const Tensor bias = randn_in(dt, {c.x[1]}, 7);
          const Tensor want = conv_transpose2d(g, w, bias, c.o, opad);
          const Tensor got = conv_transpose2d(gg, gw, bias.to(gpu()), c.o, opad);
          const Tensor bound = conv_transpose2d(abs64(g), abs64(w), abs64(bias), c.o, opad);
          require_conv_close(c.name + " conv_transpose2d", got, want, bound, c.w[0] * c.w[2] * c.w[3]);
        }
      }
    }
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA conv2d gradients through autograd match the CPU's", "[cuda][conv][grad][gpu]") {
  const Conv2dOptions o{.stride = {2, 2}, .padding = {1, 1}, .groups = 2};
  for (const DType dt : {DType::F32, DType::F16, DType::BF16}) {
    INFO(dtype_name(dt));
    const Tensor x = randn_in(dt, {3, 4, 9, 8}, 11), w = randn_in(dt, {6, 2, 3, 3}, 12),
                 b = randn_in(dt, {6}, 13);
    Tensors cpu_in{x.detach().requires_grad_(true), w.detach().requires_grad_(true), b.detach().requires_grad_(true)};
    Tensors gpu_in{x.to(gpu()).detach().requires_grad_(true), w.to(gpu()).detach().requires_grad_(true),
                   b.to(gpu()).detach().requires_grad_(true)};
    const Tensor ycpu = conv2d(cpu_in[0], cpu_in[1], cpu_in[2], o);
    const Tensor ygpu = conv2d(gpu_in[0], gpu_in[1], gpu_in[2], o);
    const Tensor r = randn_in(dt, ycpu.shape(), 14);  // the cotangent
    sum(ycpu * r).backward();
    sum(ygpu * r.to(gpu())).backward();
    const Tensor rd = to(r, DType::F64);
    // dx = B(r, w), dw = W(x, r), db = Σ r; bounds from the same ops on |.|
    require_conv_close("dx", gpu_in[0].grad(), cpu_in[0].grad(),
                       conv2d_backward_input(abs(rd), abs64(w), {9, 8}, o), 6 * 9);
    require_conv_close("dw", gpu_in[1].grad(), cpu_in[1].grad(),
                       conv2d_backward_weight(abs64(x), abs(rd), {3, 3}, o), 3 * 5 * 4);
    require_conv_close("db", gpu_in[2].grad(), cpu_in[2].grad(), sum(abs(rd), {0, 2, 3}), 3 * 5 * 4);
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA conv results repeat bit for bit in deterministic mode and launch without a host sync",
          "[cuda][conv][gpu]") {
  // Deterministic mode: only cuDNN algorithms without atomics (the default may pick the faster
  // nondeterministic backward algorithms, as PyTorch's does). Heuristic selection: no device work.
  cuda::set_cudnn_deterministic(true);
  cuda::set_cudnn_benchmark(false);
  const Conv2dOptions o{.stride = {2, 2}, .padding = {1, 1}};
  for (const DType dt : {DType::F32, DType::F16, DType::BF16}) {
    INFO(dtype_name(dt));
    const Tensor x = randn_in(dt, {8, 16, 33, 31}, 21).to(gpu()), w = randn_in(dt, {32, 16, 3, 3}, 22).to(gpu()),
                 b = randn_in(dt, {32}, 23).to(gpu());
    const Tensor g = randn_in(dt, {8, 32, 17, 16}, 24).to(gpu());
    cuda::synchronize();
    const uint64_t syncs = cuda::sync_count();
    const Tensor y1 = conv2d(x, w, b, o), y2 = conv2d(x, w, b, o);
    const Tensor dx1 = conv2d_backward_input(g, w, {33, 31}, o), dx2 = conv2d_backward_input(g, w, {33, 31}, o);
    const Tensor dw1 = conv2d_backward_weight(x, g, {3, 3}, o), dw2 = conv2d_backward_weight(x, g, {3, 3}, o);
    const Tensor t1 = conv_transpose2d(g, w, {}, o);
    CHECK(cuda::sync_count() == syncs);  // launches only: nothing waited for the device
    CHECK(bytes_of(y1) == bytes_of(y2));
    CHECK(bytes_of(dx1) == bytes_of(dx2));
    CHECK(bytes_of(dw1) == bytes_of(dw2));
    CHECK(t1.shape() == Shape{8, 16, 33, 31});
  }
  cuda::set_cudnn_deterministic(false);
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA conv of a batch whose im2col columns would exceed 1 GiB", "[cuda][conv][gpu][big]") {
  // x [30, 64, 128, 128], w [64, 64, 3, 3], padding 1: one image's im2col columns are 64 * 9 *
  // 16384 = 9,437,184 elements (37.7 MB in f32), so the im2col path would have chunked the batch
  // (28 + 2 images); cuDNN's implicit GEMM takes it whole. Large planes, many channels, f32 and bf16.
  const Conv2dOptions o{.padding = {1, 1}};
  for (const DType dt : {DType::F32, DType::BF16}) {
    INFO(dtype_name(dt));
    const Tensor x = randn_in(dt, {30, 64, 128, 128}, 31), w = randn_in(dt, {64, 64, 3, 3}, 32),
                 g = randn_in(dt, {30, 64, 128, 128}, 33);
    const Tensor xg = x.to(gpu()), wg = w.to(gpu()), gg = g.to(gpu());
    require_conv_close("chunked conv2d", conv2d(xg, wg, {}, o), conv2d(x, w, {}, o),
                       conv2d(abs64(x), abs64(w), {}, o), 64 * 9);
    require_conv_close("chunked backward_input", conv2d_backward_input(gg, wg, {128, 128}, o),
                       conv2d_backward_input(g, w, {128, 128}, o),
                       conv2d_backward_input(abs64(g), abs64(w), {128, 128}, o), 64 * 9);
    require_conv_close("chunked backward_weight", conv2d_backward_weight(xg, gg, {3, 3}, o),
                       conv2d_backward_weight(x, g, {3, 3}, o),
                       conv2d_backward_weight(abs64(x), abs64(g), {3, 3}, o), 30 * 128 * 128);
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA ResNet-20 runs forward and backward on the GPU like on the CPU", "[cuda][conv][nn][gpu]") {
  // Two copies of the same seeded net, one moved to the GPU; training-mode batch norm. f32 on both
  // devices differs by summation order only (~1e-7 relative per layer), which 20 layers of
  // conv + batch norm amplify to ~1e-5 of the logit scale; the tolerances leave 10-100x room and
  // still fail on any wrong kernel (a wrong tap or a dropped chunk moves values by O(1)).
  manual_seed(5);
  nn::models::ResNet cpu_net(nn::models::ResNetConfig::cifar(20, 3, 10));
  manual_seed(5);
  nn::models::ResNet gpu_net(nn::models::ResNetConfig::cifar(20, 3, 10));
  gpu_net.to(gpu());
  const Tensor x = randn_in(DType::F32, {8, 3, 32, 32}, 41);
  const Tensor target = from_vector<int64_t>({1, 7, 3, 9, 0, 2, 5, 4}, {8});
  const Tensor lc = cpu_net(x), lg = gpu_net(x.to(gpu()));
  REQUIRE(lg.device() == gpu());
  const std::vector<double> vc = values(lc), vg = values(lg);
  double scale = 0;
  for (double v : vc) scale = std::max(scale, std::abs(v));
  for (std::size_t i = 0; i < vc.size(); ++i) CHECK(std::abs(vg[i] - vc[i]) <= 1e-3 * scale + 1e-5);
  const Tensor loss_c = cross_entropy(lc, target), loss_g = cross_entropy(lg, target.to(gpu()));
  loss_c.backward();
  loss_g.backward();
  const double lcv = loss_c.item<double>(), lgv = loss_g.item<double>();
  CHECK(std::abs(lgv - lcv) <= 1e-4 * (1 + std::abs(lcv)));
  const auto pc = cpu_net.named_parameters(), pg = gpu_net.named_parameters();
  REQUIRE(pc.size() == pg.size());
  for (std::size_t i = 0; i < pc.size(); ++i) {
    INFO(pc[i].first);
    const std::vector<double> gc = values(pc[i].second.grad()), gg = values(pg[i].second.grad());
    double gscale = 0;
    for (double v : gc) gscale = std::max(gscale, std::abs(v));
    for (std::size_t j = 0; j < gc.size(); ++j) REQUIRE(std::abs(gg[j] - gc[j]) <= 1e-2 * gscale + 1e-6);
  }
  mg::test::require_no_pending_cuda_error();
}
