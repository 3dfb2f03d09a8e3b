// The cuDNN convolution (cuda/dnn.cpp through cuda/conv_kernels.cpp) on the GPU against the CPU:
// channels-last (NHWC strides) inputs, weights and gradients in f32/f16/bf16 over odd sizes,
// groups, depthwise, stride, dilation, 1x1 and 7x7; mixed layouts; gradients through autograd of
// a channels-last input; benchmark mode (same results, one counted synchronisation per new
// configuration, a cached choice afterwards); deterministic mode (bit-for-bit repeats); the TF32
// switch; and the declared im2col case (conv_transpose2d with output_padding >= stride). The
// tolerance is conv_test_util.h's. All [gpu]: skipped without a device.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "conv_test_util.h"
#include "core/factory.h"
#include "cuda/conv_settings.h"
#include "cuda/cuda.h"
#include "cuda/host/dnn_conv_plan.h"
#include "cuda_test_util.h"
#include "ops/conv.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::gpu;
using namespace mg::test::conv;

namespace {

struct Geo {
  std::string name;
  Shape x;  // [N, C, H, W]
  Shape w;  // [O, C/groups, kH, kW]
  Conv2dOptions o;
};

const std::vector<Geo> kGeos = {
    {"3x3 pad 1", {2, 8, 9, 8}, {16, 8, 3, 3}, {.padding = {1, 1}}},
    {"groups 2", {2, 8, 7, 7}, {12, 4, 3, 3}, {.padding = {1, 1}, .groups = 2}},
    {"depthwise stride 2", {2, 8, 9, 9}, {8, 1, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .groups = 8}},
    {"dilation 2", {2, 4, 10, 9}, {8, 4, 3, 3}, {.padding = {2, 2}, .dilation = {2, 2}}},
    {"1x1 stride 2", {2, 16, 7, 6}, {8, 16, 1, 1}, {.stride = {2, 2}}},
    {"7x7 stride 2 stem", {2, 3, 32, 30}, {8, 3, 7, 7}, {.stride = {2, 2}, .padding = {3, 3}}},
    {"odd sizes", {3, 5, 13, 7}, {3, 5, 2, 3}, {.stride = {3, 1}, .padding = {1, 0}}},
};

Shape out_shape(const Geo& c) {
  const int64_t ho = (c.x[2] + 2 * c.o.padding[0] - c.o.dilation[0] * (c.w[2] - 1) - 1) / c.o.stride[0] + 1;
  const int64_t wo = (c.x[3] + 2 * c.o.padding[1] - c.o.dilation[1] * (c.w[3] - 1) - 1) / c.o.stride[1] + 1;
  return {c.x[0], c.w[0], ho, wo};
}

// t on the GPU, stored channels-last (NHWC strides).
Tensor gpu_nhwc(const Tensor& t) {
  const Tensor r = cuda::in_layout(t.to(gpu()), cuda::ConvLayout::NHWC);
  REQUIRE(cuda::layout_match(r).nhwc);
  return r;
}

// Restores the cuDNN switches at scope end.
struct DnnModes {
  bool benchmark = cuda::cudnn_benchmark(), deterministic = cuda::cudnn_deterministic(), tf32 = cuda::allow_tf32();
  ~DnnModes() {
    cuda::set_cudnn_benchmark(benchmark);
    cuda::set_cudnn_deterministic(deterministic);
    cuda::set_allow_tf32(tf32);
  }
};

}  // namespace

TEST_CASE("cuDNN conv with channels-last operands matches the CPU", "[cuda][conv][cudnn][gpu]") {
  for (const Geo& c : kGeos) {
    for (const DType dt : {DType::F32, DType::F16, DType::BF16}) {
      const Shape ys = out_shape(c);
      const Tensor x = randn_in(dt, c.x, 1), w = randn_in(dt, c.w, 2), b = randn_in(dt, {c.w[0]}, 3),
                   g = randn_in(dt, ys, 4);
      const Tensor gx = gpu_nhwc(x), gw = gpu_nhwc(w), gg = gpu_nhwc(g);
      const int64_t Kf = c.w[1] * c.w[2] * c.w[3], Kb = c.w[0] / c.o.groups * c.w[2] * c.w[3];
      require_conv_close(c.name + " NHWC conv2d+bias", conv2d(gx, gw, b.to(gpu()), c.o), conv2d(x, w, b, c.o),
                         conv2d(abs64(x), abs64(w), abs64(b), c.o), Kf);
      // Mixed: NHWC input, NCHW weight (the weight is copied to the conv's layout).
      require_conv_close(c.name + " NHWC x, NCHW w", conv2d(gx, w.to(gpu()), {}, c.o), conv2d(x, w, {}, c.o),
                         conv2d(abs64(x), abs64(w), {}, c.o), Kf);
      const std::array<int64_t, 2> hw{c.x[2], c.x[3]}, khw{c.w[2], c.w[3]};
      require_conv_close(c.name + " NHWC backward_input", conv2d_backward_input(gg, gw, hw, c.o),
                         conv2d_backward_input(g, w, hw, c.o), conv2d_backward_input(abs64(g), abs64(w), hw, c.o), Kb);
      require_conv_close(c.name + " NHWC backward_weight", conv2d_backward_weight(gx, gg, khw, c.o),
                         conv2d_backward_weight(x, g, khw, c.o),
                         conv2d_backward_weight(abs64(x), abs64(g), khw, c.o), ys[0] * ys[2] * ys[3]);
      // conv_transpose2d of the gradient (cuDNN's backward-data plus a bias of C channels) where
      // {H, W} is reachable with output_padding below the stride.
      std::array<int64_t, 2> opad{};
      for (std::size_t d = 0; d < 2; ++d) {
        opad[d] = c.x[2 + d] - ((ys[2 + d] - 1) * c.o.stride[d] - 2 * c.o.padding[d] +
                                c.o.dilation[d] * (c.w[2 + d] - 1) + 1);
      }
      if (opad[0] < c.o.stride[0] && opad[1] < c.o.stride[1]) {
        const Tensor bt = randn_in(dt, {c.x[1]}, 5);
        require_conv_close(c.name + " NHWC conv_transpose2d+bias", conv_transpose2d(gg, gw, bt.to(gpu()), c.o, opad),
                           conv_transpose2d(g, w, bt, c.o, opad),
                           conv_transpose2d(abs64(g), abs64(w), abs64(bt), c.o, opad), Kb);
      }
    }
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("cuDNN conv gradients of a channels-last input through autograd match the CPU's",
          "[cuda][conv][cudnn][grad][gpu]") {
  const Conv2dOptions o{.stride = {2, 2}, .padding = {1, 1}, .groups = 2};
  for (const DType dt : {DType::F32, DType::F16, DType::BF16}) {
    INFO(dtype_name(dt));
    const Tensor x = randn_in(dt, {3, 4, 9, 8}, 11), w = randn_in(dt, {6, 2, 3, 3}, 12), b = randn_in(dt, {6}, 13);
    Tensors cpu_in{x.detach().requires_grad_(true), w.detach().requires_grad_(true), b.detach().requires_grad_(true)};
    Tensors gpu_in{gpu_nhwc(x).detach().requires_grad_(true), gpu_nhwc(w).detach().requires_grad_(true),
                   b.to(gpu()).detach().requires_grad_(true)};
    const Tensor ycpu = conv2d(cpu_in[0], cpu_in[1], cpu_in[2], o);
    const Tensor ygpu = conv2d(gpu_in[0], gpu_in[1], gpu_in[2], o);
    const Tensor r = randn_in(dt, ycpu.shape(), 14);  // the cotangent
    sum(ycpu * r).backward();
    sum(ygpu * r.to(gpu())).backward();
    const Tensor rd = to(r, DType::F64);
    require_conv_close("dx", gpu_in[0].grad(), cpu_in[0].grad(),
                       conv2d_backward_input(abs(rd), abs64(w), {9, 8}, o), 6 * 9);
    require_conv_close("dw", gpu_in[1].grad(), cpu_in[1].grad(),
                       conv2d_backward_weight(abs64(x), abs(rd), {3, 3}, o), 3 * 5 * 4);
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("cuDNN benchmark mode: same results, one counted sync per new configuration, then cached",
          "[cuda][conv][cudnn][gpu]") {
  DnnModes restore;
  const Conv2dOptions o{.padding = {1, 1}};
  for (const DType dt : {DType::F16, DType::BF16, DType::F32}) {
    INFO(dtype_name(dt));
    // A size no other test uses, so the first call is a new configuration in both modes.
    const Tensor x = randn_in(dt, {3, 24, 19, 17}, 21), w = randn_in(dt, {40, 24, 3, 3}, 22);
    const Tensor gx = gpu_nhwc(x), gw = gpu_nhwc(w);
    cuda::set_cudnn_benchmark(false);
    const Tensor heuristic = conv2d(gx, gw, {}, o);
    cuda::set_cudnn_benchmark(true);
    cuda::synchronize();
    const std::size_t entries = cuda::cudnn_algo_cache_size();
    const uint64_t syncs = cuda::sync_count();
    const Tensor measured = conv2d(gx, gw, {}, o);  // Find*Ex: every algorithm timed
    CHECK(cuda::sync_count() == syncs + 1);
    CHECK(cuda::cudnn_algo_cache_size() == entries + 1);
    const Tensor again = conv2d(gx, gw, {}, o);  // cached: no sync, no new entry
    CHECK(cuda::sync_count() == syncs + 1);
    CHECK(cuda::cudnn_algo_cache_size() == entries + 1);
    const Tensor want = conv2d(x, w, {}, o), bound = conv2d(abs64(x), abs64(w), {}, o);
    require_conv_close("heuristic", heuristic, want, bound, 24 * 9);
    require_conv_close("benchmark", measured, want, bound, 24 * 9);
    require_conv_close("benchmark cached", again, want, bound, 24 * 9);
    // With a bias: Find*Ex times the algorithms on a scratch output, so the bias written into the
    // real output first survives the search (a new configuration: 20 rows).
    const Tensor xb = randn_in(dt, {3, 24, 20, 17}, 23), b = randn_in(dt, {40}, 24);
    require_conv_close("benchmark + bias", conv2d(gpu_nhwc(xb), gw, b.to(gpu()), o), conv2d(xb, w, b, o),
                       conv2d(abs64(xb), abs64(w), abs64(b), o), 24 * 9);
    cuda::set_cudnn_benchmark(false);
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("cuDNN caches its choice per beta: a convolution with a bias and one without are two entries",
          "[cuda][conv][cudnn][gpu]") {
  // With a bias the output is accumulated into (beta = 1), for which cuDNN may refuse an algorithm
  // it runs at beta = 0; dropping that refusal from a shared entry would cost the bias-free call it.
  DnnModes restore;
  const Conv2dOptions o{.padding = {1, 1}};
  const Tensor x = randn_in(DType::F16, {3, 24, 21, 17}, 51), w = randn_in(DType::F16, {40, 24, 3, 3}, 52);
  const Tensor b = randn_in(DType::F16, {40}, 53);
  const Tensor gx = gpu_nhwc(x), gw = gpu_nhwc(w);
  const std::size_t entries = cuda::cudnn_algo_cache_size();
  const Tensor plain = conv2d(gx, gw, {}, o);
  CHECK(cuda::cudnn_algo_cache_size() == entries + 1);
  const Tensor biased = conv2d(gx, gw, b.to(gpu()), o);
  CHECK(cuda::cudnn_algo_cache_size() == entries + 2);
  require_conv_close("no bias", plain, conv2d(x, w, {}, o), conv2d(abs64(x), abs64(w), {}, o), 24 * 9);
  require_conv_close("bias", biased, conv2d(x, w, b, o), conv2d(abs64(x), abs64(w), abs64(b), o), 24 * 9);
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("cuDNN deterministic mode repeats every direction bit for bit, channels-last too",
          "[cuda][conv][cudnn][gpu]") {
  DnnModes restore;
  cuda::set_cudnn_deterministic(true);
  const Conv2dOptions o{.stride = {2, 2}, .padding = {1, 1}};
  for (const bool benchmark : {false, true}) {
    cuda::set_cudnn_benchmark(benchmark);
    for (const DType dt : {DType::F16, DType::BF16, DType::F32}) {
      INFO(dtype_name(dt) << (benchmark ? " benchmark" : " heuristic"));
      const Tensor x = gpu_nhwc(randn_in(dt, {16, 32, 28, 28}, 31)), w = gpu_nhwc(randn_in(dt, {64, 32, 3, 3}, 32));
      const Tensor g = gpu_nhwc(randn_in(dt, {16, 64, 14, 14}, 33));
      CHECK(bytes_of(conv2d(x, w, {}, o)) == bytes_of(conv2d(x, w, {}, o)));
      CHECK(bytes_of(conv2d_backward_input(g, w, {28, 28}, o)) == bytes_of(conv2d_backward_input(g, w, {28, 28}, o)));
      CHECK(bytes_of(conv2d_backward_weight(x, g, {3, 3}, o)) ==
            bytes_of(conv2d_backward_weight(x, g, {3, 3}, o)));
    }
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("cuDNN f32 is strict by default and follows the TF32 switch", "[cuda][conv][cudnn][gpu]") {
  DnnModes restore;
  // K = 256 * 9 products: strict f32 (FMA math) stays within the f32 bound; with the switch on,
  // cuDNN may use TF32 Tensor Cores (inputs rounded to 10 mantissa bits), whose error stays below
  // 2^-9 S per element (each product within 2^-10 relative). Whether cuDNN picks a TF32 algorithm
  // is its choice, so the test bounds the error and reports it.
  const Conv2dOptions o{.padding = {1, 1}};
  const Tensor x = randn_in(DType::F32, {2, 256, 12, 12}, 41), w = randn_in(DType::F32, {32, 256, 3, 3}, 42);
  const Tensor want = conv2d(x, w, {}, o), bound = conv2d(abs64(x), abs64(w), {}, o);
  cuda::set_allow_tf32(false);
  require_conv_close("strict f32", conv2d(x.to(gpu()), w.to(gpu()), {}, o), want, bound, 256 * 9);
  cuda::set_allow_tf32(true);
  const Tensor tf32 = conv2d(x.to(gpu()), w.to(gpu()), {}, o);
  const std::vector<double> a = mg::test::values(tf32.to(Device::cpu())), b = mg::test::values(want),
                            s = mg::test::values(bound);
  double worst = 0;  // the largest error relative to S: TF32 rounds inputs to 2^-11
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / s[i]);
  WARN("TF32 conv: largest error " << worst << " of S (strict f32 would be about 1e-7)");
  CHECK(worst < 0x1p-9);
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("conv_transpose2d with output_padding >= stride takes the declared im2col path",
          "[cuda][conv][cudnn][gpu]") {
  // stride 2, dilation 3, output_padding 2: the output size is not the forward size of the input
  // gradient (cuda/host/dnn_conv_plan.h, conv_engine), so this one runs as im2col + cuBLASLt.
  const Conv2dOptions o{.stride = {2, 2}, .dilation = {3, 3}};
  const std::array<int64_t, 2> opad{2, 2};
  for (const DType dt : {DType::F32, DType::F16, DType::BF16}) {
    const Tensor x = randn_in(dt, {2, 4, 5, 5}, 51), w = randn_in(dt, {4, 3, 3, 3}, 52), b = randn_in(dt, {3}, 53);
    const Tensor want = conv_transpose2d(x, w, b, o, opad);
    require_conv_close("conv_transpose2d opad 2", conv_transpose2d(gpu_nhwc(x), w.to(gpu()), b.to(gpu()), o, opad),
                       want, conv_transpose2d(abs64(x), abs64(w), abs64(b), o, opad), 4 * 9);
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA conv of a zero-height input is refused with the CPU's error, even when padding covers the kernel",
          "[cuda][conv][cudnn][gpu]") {
  // x [2, 3, 0, 5] with pad 1 and a 1x1 kernel: PyTorch refuses an empty spatial dim ("Only zero
  // batch or zero channel inputs are supported"), and so does the shared shape check on both devices
  // (it used to return the bias alone at an invented [2, 4, 2, 7]).
  const Tensor x = zeros({2, 3, 0, 5}), w = ones({4, 3, 1, 1}), b = from_vector<float>({1, 2, 3, 4}, {4});
  const Conv2dOptions opt{.padding = {1, 1}};
  const std::string cpu_error = mg::test::error_of([&] { conv2d(x, w, b, opt); });
  CHECK(cpu_error.find("only an empty batch or channels are supported") != std::string::npos);
  CHECK(mg::test::error_of([&] { conv2d(x.to(gpu()), w.to(gpu()), b.to(gpu()), opt); })
            .find("conv2d: only an empty batch or channels are supported, not an empty spatial dim") != std::string::npos);
  const Tensor g = ones({2, 4, 2, 7});
  CHECK(mg::test::error_of([&] { conv2d_backward_input(g.to(gpu()), w.to(gpu()), {0, 5}, opt); }) ==
        mg::test::error_of([&] { conv2d_backward_input(g, w, {0, 5}, opt); }));
  mg::test::require_no_pending_cuda_error();
}
