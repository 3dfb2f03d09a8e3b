// conv3d, max_pool3d, avg_pool3d, adaptive_avg_pool3d (ops/conv3d.h), interpolate's area mode on
// 5-D input, conv_transpose3d, BatchNorm3d and InstanceNorm3d against PyTorch 2.15 in f64
// (tests/data/reference/torch_conv3d.json, written by tools/reference/gen_torch_conv3d.py): stride,
// padding, dilation, groups, no bias, unbatched, ceil_mode, count_include_pad; outputs and the
// gradients of every input (1e-11). Then bf16 (conv under autocast, average pools rounded once),
// the layers, and the refusals.
#include <catch2/catch.hpp>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "core/factory.h"
#include "nn/nn.h"
#include "ops/conv3d.h"
#include "ops/interpolate.h"
#include "ops/ops.h"
#include "reference/json_reference.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

Int3 int3(const nlohmann::json& v) { return {v[0].get<int64_t>(), v[1].get<int64_t>(), v[2].get<int64_t>()}; }

}  // namespace

TEST_CASE("3-D convolution, pooling and normalisation equal PyTorch's in f64, gradients included", "[ops][conv3d]") {
  const nlohmann::json ref = load_json_reference("torch_conv3d.json");
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    const std::string name = c["name"], op = c["op"];
    INFO(name);
    Tensors in, wrt;
    for (std::size_t i = 0; i < c["inputs"].size(); ++i) {
      if (c["inputs"][i].is_null()) {
        in.emplace_back();
        continue;
      }
      in.push_back(json_tensor(c["inputs"][i], c["shapes"][i]).requires_grad_());
      wrt.push_back(in.back());
    }
    const nlohmann::json& kw = c["kw"];
    Tensor y;
    if (op == "conv3d") {
      y = conv3d(in[0], in[1], in[2],
                 {.stride = int3(kw["stride"]), .padding = int3(kw["padding"]), .dilation = int3(kw["dilation"]),
                  .groups = kw["groups"].get<int64_t>()});
    } else if (op == "conv_transpose3d") {
      y = conv_transpose3d(in[0], in[1], in[2],
                           {.stride = int3(kw["stride"]), .padding = int3(kw["padding"]),
                            .dilation = int3(kw["dilation"]), .groups = kw["groups"].get<int64_t>()},
                           int3(kw["output_padding"]));
    } else if (op == "max_pool3d") {
      y = max_pool3d(in[0], int3(kw["kernel_size"]), int3(kw["stride"]), int3(kw["padding"]), int3(kw["dilation"]),
                     kw["ceil_mode"].get<bool>());
    } else if (op == "avg_pool3d") {
      y = avg_pool3d(in[0], int3(kw["kernel_size"]), int3(kw["stride"]), int3(kw["padding"]),
                     kw["count_include_pad"].get<bool>(), kw["ceil_mode"].get<bool>());
    } else if (op == "adaptive_avg_pool3d") {
      y = adaptive_avg_pool3d(in[0], int3(kw["output_size"]));
    } else if (op == "area") {
      y = interpolate(in[0], {.size = kw["size"].get<std::vector<int64_t>>(), .mode = InterpolateMode::Area});
    } else if (op == "batch_norm3d") {
      y = batch_norm(in[0], in[1], in[2], Tensor(), Tensor(), true);
      // The layer gives the same output (its own parameters set to the same values).
      nn::BatchNorm3d layer({.features = 3});
      layer.to(DType::F64);
      {
        NoGradGuard no_grad;
        layer.weight.copy_(in[1]);
        layer.bias.copy_(in[2]);
      }
      CHECK(values(layer.forward(in[0])) == values(y));
    } else {
      REQUIRE(op == "instance_norm3d");
      nn::InstanceNorm3d layer({.num_features = 3, .affine = true});
      layer.to(DType::F64);
      layer.weight = in[1];  // the reference's parameters, so the gradients reach them
      layer.bias = in[2];
      y = layer.forward(in[0]);
    }
    REQUIRE(y.shape() == Shape(c["y_shape"].get<std::vector<int64_t>>()));
    check_json_close(y, c["y"], 1e-11, 1e-13);
    const Tensors g = autograd::grad({sum(y * json_tensor(c["r"], c["y_shape"]))}, wrt);
    REQUIRE(g.size() == c["grads"].size());
    for (std::size_t i = 0; i < g.size(); ++i) check_json_close(g[i], c["grads"][i], 1e-11, 1e-13);
    ++checked;
  }
  CHECK(checked == 21);
}

TEST_CASE("3-D ops in bf16: conv under autocast, average pools rounded once, max exact", "[ops][conv3d]") {
  manual_seed(21);
  const Tensor x = randn({2, 3, 4, 5, 6}), w = randn({4, 3, 3, 3, 3}) * 0.2;
  const Tensor want = conv3d(x, w, Tensor(), {.padding = {1, 1, 1}});
  Tensor got;
  {
    amp::Autocast autocast({.dtype = DType::BF16});
    got = conv3d(x, w, Tensor(), {.padding = {1, 1, 1}});
  }
  CHECK(got.dtype() == DType::BF16);  // conv2d's lower-precision policy
  CHECK(max(abs(got.to(DType::F32) - want)).item<double>() < 0.1);
  const Tensor xb = x.to(DType::BF16);
  const Tensor avg = avg_pool3d(xb, {2, 3, 2}, {1, 1, 2}, {1, 1, 1});
  CHECK(avg.dtype() == DType::BF16);
  CHECK(values(avg) == values(avg_pool3d(xb.to(DType::F32), {2, 3, 2}, {1, 1, 2}, {1, 1, 1}).to(DType::BF16)));
  CHECK(values(adaptive_avg_pool3d(xb, {3, 2, 4})) ==
        values(adaptive_avg_pool3d(xb.to(DType::F32), {3, 2, 4}).to(DType::BF16)));
  CHECK(values(max_pool3d(xb, {2, 2, 2})) == values(max_pool3d(xb.to(DType::F32), {2, 2, 2})));
}

TEST_CASE("3-D layers: shapes, reprs and refusals", "[ops][conv3d]") {
  manual_seed(22);
  nn::Conv3d conv({.in = 2, .out = 4, .kernel = {3, 1, 1}, .padding = {1, 0, 0}});
  CHECK(conv.weight.shape() == Shape{4, 2, 3, 1, 1});
  CHECK(conv.forward(randn({1, 2, 5, 3, 3})).shape() == Shape{1, 4, 5, 3, 3});
  CHECK(conv.str().find("Conv3d(2, 4, kernel_size=3x1x1, stride=1, padding=1x0x0)") != std::string::npos);
  nn::ConvTranspose3d up({.in = 4, .out = 2, .kernel = 2, .stride = 2});
  CHECK(up.weight.shape() == Shape{4, 2, 2, 2, 2});
  CHECK(up.forward(randn({1, 4, 5, 3, 3})).shape() == Shape{1, 2, 10, 6, 6});
  MG_REQUIRE_ERROR(conv_transpose3d(randn({1, 4, 2, 2, 2}), randn({4, 2, 2, 2, 2}), Tensor(), {.stride = {2, 2, 2}},
                                    {2, 0, 0}),
                   "output_padding must be smaller than the stride 2 or the dilation 1, got 2 along D");
  MG_REQUIRE_ERROR(conv_transpose3d(randn({1, 3, 2, 2, 2}), randn({4, 2, 2, 2, 2})), "with Cin = 3");
  CHECK(nn::MaxPool3d({.kernel = 2}).forward(randn({1, 1, 4, 4, 4})).shape() == Shape{1, 1, 2, 2, 2});
  CHECK(nn::AvgPool3d({.kernel = 2, .stride = 1}).forward(randn({3, 4, 4, 4})).shape() == Shape{3, 3, 3, 3});
  CHECK(nn::AdaptiveAvgPool3d({.output = 1}).forward(randn({2, 3, 4, 5, 6})).shape() == Shape{2, 3, 1, 1, 1});
  CHECK(nn::InstanceNorm3d({.num_features = 3}).forward(randn({3, 2, 2, 2})).shape() == Shape{3, 2, 2, 2});

  MG_REQUIRE_ERROR(conv3d(randn({1, 3, 4, 4}), randn({2, 3, 1, 1, 1})), "conv3d: expected weight [O, C/groups");
  MG_REQUIRE_ERROR(conv3d(randn({1, 2, 4, 4, 4}), randn({2, 3, 1, 1, 1})), "with C/groups = 2");
  MG_REQUIRE_ERROR(conv3d(randn({1, 2, 2, 4, 4}), randn({2, 2, 3, 1, 1})), "is larger than the padded input (2 + 2 * 0) along D");
  MG_REQUIRE_ERROR(conv3d(randn({2, 4}), randn({2, 2, 1, 1, 1})), "conv3d: expected x [N, C, D, H, W] or [C, D, H, W]");
  MG_REQUIRE_ERROR(max_pool3d(randn({1, 1, 4, 4, 4}), {3, 3, 3}, {1, 1, 1}, {2, 0, 0}),
                   "max_pool3d: padding (2) must be at most half the kernel (3) along D");
  MG_REQUIRE_ERROR(avg_pool3d(randn({1, 1, 4, 4, 4}), {2, 0, 2}), "avg_pool3d: kernel, stride and dilation must be >= 1");
  MG_REQUIRE_ERROR(adaptive_avg_pool3d(randn({1, 1, 4, 4, 4}), {2, 0, 2}), "output sizes must be >= 1, got 0 along H");
  MG_REQUIRE_ERROR(max_pool3d(zeros({1, 1, 2, 2, 2}, {.dtype = DType::I32}), {1, 1, 1}), "expected a floating input");
  MG_REQUIRE_ERROR(max_pool3d(randn({1, 1, 1, 3, 3}), {2, 1, 1}, {1, 1, 1}, {1, 0, 0}, {2, 1, 1}),
                   "max_pool3d: output 0 along D has a window with no input element");
  MG_REQUIRE_ERROR(avg_pool3d(randn({1, 0, 2, 2, 2}), {1, 1, 1}), "avg_pool3d: expected at least one channel");
  MG_REQUIRE_ERROR(avg_pool3d(randn({1, 1, 0, 2, 2}), {1, 1, 1}), "the input has no elements along D");
  MG_REQUIRE_ERROR(conv_transpose3d(randn({1, 1, 2, 2, 2}), randn({1, 1, 0, 1, 1})), "the kernel has no taps along D");
  MG_REQUIRE_ERROR(conv3d(randn({1, 1, 2, 2, 2}), randn({1, 1, 3, 1, 1}), Tensor(), {.dilation = {int64_t(1) << 62, 1, 1}}),
                   "overflow 64-bit sizes");
  MG_REQUIRE_ERROR(nn::Conv3d({.in = 2, .out = 3, .kernel = 3, .groups = 2}), "Conv3d: groups (2) must divide");
  MG_REQUIRE_ERROR(nn::Conv3d({.in = 2, .out = 4}), "Conv3d: kernel must be positive");
  MG_REQUIRE_ERROR(nn::MaxPool3d({.kernel = 2, .stride = -1}), "MaxPool3d: stride must be positive (or 0: the kernel)");
  MG_REQUIRE_ERROR(conv.forward(randn({1, 3, 5, 3, 3})), "Conv3d(2, 4");
  MG_REQUIRE_ERROR(nn::BatchNorm3d({.features = 3}).forward(randn({2, 3, 4, 4})), "expected a 5-D input");
}
