// LPPool1d / LPPool2d, ChannelShuffle, Softmax2d, CosineSimilarity and PairwiseDistance against
// PyTorch 2.15 in f64 (tests/data/reference/torch_small_layers.json, written by
// tools/reference/gen_torch_small_layers.py): outputs and input gradients for norm types 1, 1.5,
// 2, 3, strides, ceil_mode and unbatched input; then the edge cases (a negative window sum, a zero
// window), reprs and refusals; MaxPool's indices and MaxUnpool against PyTorch, and the unpool's
// rule for a repeated index.
#include <catch2/catch.hpp>

#include <cmath>
#include <optional>
#include <tuple>
#include <vector>

#include "autograd/engine.h"
#include "core/factory.h"
#include "nn/nn.h"
#include "ops/conv3d.h"
#include "ops/distance.h"
#include "ops/lp_pool.h"
#include "ops/max_unpool.h"
#include "ops/ops.h"
#include "reference/json_reference.h"
#include "test_util.h"

using namespace mg;
using mg::test::V;
using mg::test::values;

namespace {

std::shared_ptr<nn::Module> layer_of(const nlohmann::json& c) {
  const std::string kind = c["kind"].get<std::string>();
  const nlohmann::json& o = c["options"];
  if (kind == "lp_pool1d") {
    return nn::make<nn::LPPool1d>({.norm_type = o["norm_type"].get<double>(), .kernel = o["kernel"].get<int64_t>(),
                                   .stride = o["stride"].get<int64_t>(), .ceil_mode = o["ceil_mode"].get<bool>()});
  }
  if (kind == "lp_pool2d") {
    const auto k = o["kernel"].get<std::vector<int64_t>>(), s = o["stride"].get<std::vector<int64_t>>();
    return nn::make<nn::LPPool2d>({.norm_type = o["norm_type"].get<double>(), .kernel = {k[0], k[1]},
                                   .stride = {s[0], s[1]}, .ceil_mode = o["ceil_mode"].get<bool>()});
  }
  if (kind == "channel_shuffle") return nn::make<nn::ChannelShuffle>({.groups = o["groups"].get<int64_t>()});
  REQUIRE(kind == "softmax2d");
  return nn::make<nn::Softmax2d>();
}

}  // namespace

TEST_CASE("LPPool1d, LPPool2d, ChannelShuffle and Softmax2d equal PyTorch's in f64, gradients included",
          "[nn][pooling]") {
  const nlohmann::json ref = test::load_json_reference("torch_small_layers.json");
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    INFO("case " << checked << ": " << c["kind"].get<std::string>() << " " << c["options"].dump());
    auto layer = std::dynamic_pointer_cast<nn::UnaryModule>(layer_of(c));
    REQUIRE(layer);
    const Tensor x = test::json_tensor(c["x"], c["x_shape"]).requires_grad_();
    const Tensor y = (*layer)(x);
    REQUIRE(y.shape() == Shape(c["out_shape"].get<std::vector<int64_t>>()));
    test::check_json_close(y, c["out"]);
    const Tensors g = autograd::grad({sum(y * test::json_tensor(c["r"], c["out_shape"]))}, {x});
    test::check_json_close(g[0], c["grad"]);
    ++checked;
  }
  CHECK(checked == 14);
}

TEST_CASE("lp_pool edge cases as PyTorch's: negative sums, zero windows, f32 and bf16, refusals", "[nn][pooling]") {
  // PyTorch 2.15: LPPool1d(1, 2) of [1, -2, 3, -4] = [-1, -1] (p = 1 keeps the sign); LPPool1d(3, 2)
  // of [1, -2] is NaN (a negative sum under a cube root)
  CHECK(values(lp_pool1d(from_vector<double>({1, -2, 3, -4}, {1, 1, 4}), 1.0, 2)) == V({-1, -1}));
  CHECK(std::isnan(values(lp_pool1d(from_vector<double>({1, -2}, {1, 1, 2}), 3.0, 2))[0]));
  // PyTorch: LPPool1d(2, 2) of [0, 0, 1, 2] = [0, sqrt(5)], gradient [0, 0, 1/sqrt(5), 2/sqrt(5)]
  const Tensor x = from_vector<double>({0, 0, 1, 2}, {1, 1, 4}).requires_grad_();
  const Tensor y = lp_pool1d(x, 2.0, 2);
  CHECK(values(y)[0] == 0.0);
  CHECK(values(y)[1] == Approx(std::sqrt(5.0)));
  sum(y).backward();
  const std::vector<double> g = values(x.grad());
  CHECK((g[0] == 0.0 && g[1] == 0.0));
  CHECK(g[2] == Approx(1 / std::sqrt(5.0)));
  CHECK(g[3] == Approx(2 / std::sqrt(5.0)));
  // PyTorch: LPPool2d(2, 3, ceil_mode=True) of ones [1, 1, 5, 5] = 3 everywhere (a window hanging
  // over the end is scaled by the whole kernel's 9)
  CHECK(values(lp_pool2d(ones({1, 1, 5, 5}), 2.0, {3, 3}, {0, 0}, true)) == V({3, 3, 3, 3}));
  // low precision: close to f32
  const Tensor xf = abs(randn({2, 3, 8, 8})) + 0.1;
  const Tensor yf = lp_pool2d(xf, 2.0, {2, 2});
  const Tensor yb = lp_pool2d(to(xf, DType::BF16), 2.0, {2, 2});
  CHECK(yb.dtype() == DType::BF16);
  CHECK(values(amax(abs(to(yb, DType::F32) - yf) / yf))[0] < 2e-2);
  MG_REQUIRE_ERROR(lp_pool2d(xf, 0.0, {2, 2}), "lp_pool2d: norm_type must be finite and nonzero, got 0");
  MG_REQUIRE_ERROR(lp_pool1d(randn({1, 1, 4}), INFINITY, 2), "for p = inf use max pooling");
  MG_REQUIRE_ERROR(lp_pool2d(xf, 2.0, {9, 9}), "lp_pool2d: ");
  MG_REQUIRE_ERROR(nn::LPPool2d({.kernel = 0}), "LPPool2d: kernel must be positive, got 0");
  MG_REQUIRE_ERROR(nn::LPPool1d({.norm_type = -INFINITY, .kernel = 2}), "LPPool1d: norm_type must be finite and nonzero");
  nn::LPPool2d pool({.norm_type = 1.5, .kernel = {2, 3}, .ceil_mode = true});
  CHECK(pool.str() == "LPPool2d(norm_type=1.5, kernel=2x3, stride=2x3, ceil_mode=true)");
  MG_REQUIRE_ERROR(pool(randn({4, 4})), "LPPool2d(norm_type=1.5, kernel=2x3, stride=2x3, ceil_mode=true): lp_pool2d: ");
}

TEST_CASE("ChannelShuffle, Softmax2d, CosineSimilarity and PairwiseDistance layers", "[nn]") {
  // channel g * (C / groups) + i goes to i * groups + g: [0..5] with 2 groups -> [0, 3, 1, 4, 2, 5]
  const Tensor c = reshape(arange(0, 6, 1, {.dtype = DType::F32}), {1, 6, 1});
  CHECK(values(nn::ChannelShuffle({.groups = 2})(c)) == V({0, 3, 1, 4, 2, 5}));
  MG_REQUIRE_ERROR(channel_shuffle(c, 4), "channel_shuffle: the channels of [1, 6, 1] f32 cpu (6) are not divisible by groups = 4");
  MG_REQUIRE_ERROR(channel_shuffle(zeros({2, 4}), 2), "channel_shuffle: expected x [N, C, *] with 3 or more dims");
  MG_REQUIRE_ERROR(nn::ChannelShuffle({.groups = 0}), "ChannelShuffle: groups must be >= 1, got 0");
  CHECK(nn::ChannelShuffle({.groups = 3}).str() == "ChannelShuffle(groups=3)");

  const Tensor x = randn({2, 3, 4, 5});
  nn::Softmax2d sm;
  CHECK(values(sm(x)) == values(softmax(x, 1)));
  MG_REQUIRE_ERROR(sm(randn({3, 4})), "Softmax2d: expected x [N, C, H, W] or [C, H, W], got [3, 4] f32 cpu");

  const Tensor a = randn({4, 6}), b = randn({4, 6});
  nn::CosineSimilarity cos({.dim = 1, .eps = 1e-6});
  CHECK(values(cos.forward(a, b)) == values(cosine_similarity(a, b, 1, 1e-6)));
  CHECK(cos.str() == "CosineSimilarity(dim=1, eps=1e-06)");
  nn::PairwiseDistance dist({.p = 1.0, .keepdim = true});
  CHECK(dist.forward(a, b).shape() == Shape{4, 1});
  CHECK(values(dist.forward(a, b)) == values(pairwise_distance(a, b, 1.0, 1e-6, true)));
  CHECK(dist.str() == "PairwiseDistance(p=1, eps=1e-06, keepdim=true)");
}

TEST_CASE("ConvTranspose1d/2d/3d forward with output_size: PyTorch's sizes and ranges, the output_padding result",
          "[nn][conv]") {
  // PyTorch 2.15: ConvTranspose2d(2, 3, 3, stride=(2, 3), padding=1) of [1, 2, 4, 5] takes
  // output_size from [7, 13] to [8, 15]; (9, 13) and (7, 16) are refused
  nn::ConvTranspose2d t2({.in = 2, .out = 3, .kernel = 3, .stride = {2, 3}, .padding = 1});
  nn::ConvTranspose2d t2p({.in = 2, .out = 3, .kernel = 3, .stride = {2, 3}, .padding = 1, .output_padding = {1, 2}});
  t2p.load_state_dict(t2.state_dict());
  const Tensor x = randn({1, 2, 4, 5});
  CHECK(t2.forward(x, {7, 13}).shape() == Shape{1, 3, 7, 13});
  const Tensor y = t2.forward(x, {8, 15});
  CHECK(y.shape() == Shape{1, 3, 8, 15});
  CHECK(values(y) == values(t2p(x)));
  CHECK(t2.forward(x.squeeze(0), {8, 14}).shape() == Shape{3, 8, 14});  // unbatched
  MG_REQUIRE_ERROR(t2.forward(x, {9, 13}), "output_size [9, 13] cannot come from input [1, 2, 4, 5] f32 cpu: spatial dim 0 must be in [7, 8] (stride 2)");
  MG_REQUIRE_ERROR(t2.forward(x, {7, 16}), "spatial dim 1 must be in [13, 15] (stride 3)");
  // 1-D with stride 1 and dilation 2: only 8 (PyTorch: [8] to [8])
  nn::ConvTranspose1d t1({.in = 2, .out = 3, .kernel = 3, .dilation = 2});
  const Tensor x1 = randn({1, 2, 4});
  CHECK(values(t1.forward(x1, 8)) == values(t1(x1)));
  MG_REQUIRE_ERROR(t1.forward(x1, 9), "spatial dim 0 must be in [8, 8] (stride 1)");
  // 3-D
  nn::ConvTranspose3d t3({.in = 1, .out = 2, .kernel = 2, .stride = 2});
  nn::ConvTranspose3d t3p({.in = 1, .out = 2, .kernel = 2, .stride = 2, .output_padding = {1, 0, 1}});
  t3p.load_state_dict(t3.state_dict());
  const Tensor x3 = randn({1, 1, 2, 3, 2});
  const Tensor y3 = t3.forward(x3, {5, 6, 5});
  CHECK(y3.shape() == Shape{1, 2, 5, 6, 5});
  CHECK(values(y3) == values(t3p(x3)));
}

TEST_CASE("MaxPool forward_with_indices and MaxUnpool1d/2d/3d equal PyTorch's: indices, unpooled values, gradients",
          "[nn][pooling]") {
  // tests/data/reference/torch_max_unpool.json (tools/reference/gen_torch_max_unpool.py, PyTorch
  // 2.15, f64, distinct values): 3-D, 2-D and 1-D, padding, a kernel of different sizes, unbatched
  // input, the default and a given output_size.
  const nlohmann::json ref = test::load_json_reference("torch_max_unpool.json");
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    INFO("case " << checked);
    const auto k = c["kernel"].get<std::vector<int64_t>>(), s = c["stride"].get<std::vector<int64_t>>(),
               p = c["padding"].get<std::vector<int64_t>>();
    const Tensor x = test::json_tensor(c["x"], c["x_shape"]);
    Tensor y, i, u;
    const Tensor yr = test::json_tensor(c["y"], c["y_shape"]).requires_grad_();
    if (c["dims"].get<int>() == 3) {
      const nn::Size3 ks(k[0], k[1], k[2]), ss(s[0], s[1], s[2]), ps(p[0], p[1], p[2]);
      nn::MaxPool3d pool({.kernel = ks, .stride = ss, .padding = ps});
      std::tie(y, i) = pool.forward_with_indices(x);
      nn::MaxUnpool3d unpool({.kernel = ks, .stride = ss, .padding = ps});
      std::optional<nn::Size3> size;
      if (!c["output_size"].is_null()) {
        const auto o = c["output_size"].get<std::vector<int64_t>>();
        size = nn::Size3(o[0], o[1], o[2]);
      }
      u = unpool.forward(yr, i, size);
    } else if (c["dims"].get<int>() == 2) {
      nn::MaxPool2d pool({.kernel = {k[0], k[1]}, .stride = {s[0], s[1]}, .padding = {p[0], p[1]}});
      std::tie(y, i) = pool.forward_with_indices(x);
      nn::MaxUnpool2d unpool({.kernel = {k[0], k[1]}, .stride = {s[0], s[1]}, .padding = {p[0], p[1]}});
      std::optional<nn::Size2> size;
      if (!c["output_size"].is_null()) size = nn::Size2(c["output_size"][0].get<int64_t>(), c["output_size"][1].get<int64_t>());
      u = unpool.forward(yr, i, size);
    } else {
      nn::MaxPool1d pool({.kernel = k[0], .stride = s[0], .padding = p[0]});
      std::tie(y, i) = pool.forward_with_indices(x);
      nn::MaxUnpool1d unpool({.kernel = k[0], .stride = s[0], .padding = p[0]});
      std::optional<int64_t> size;
      if (!c["output_size"].is_null()) size = c["output_size"][0].get<int64_t>();
      u = unpool.forward(yr, i, size);
    }
    CHECK(i.dtype() == DType::I64);
    test::check_json_close(y, c["y"]);
    CHECK(values(i) == c["indices"].get<std::vector<double>>());
    REQUIRE(u.shape() == Shape(c["u_shape"].get<std::vector<int64_t>>()));
    test::check_json_close(u, c["u"]);
    const Tensors g = autograd::grad({sum(u * test::json_tensor(c["r"], c["u_shape"]))}, {yr});
    test::check_json_close(g[0], c["grad"]);
    ++checked;
  }
  CHECK(checked == 9);
}

TEST_CASE("max_pool3d_indices equals PyTorch's where windows overlap: ties, dilation, ceil_mode", "[nn][pooling]") {
  // torch_max_unpool.json's index_cases: inputs of small integers (many ties in a window; both
  // take the first maximum in (d, h, w) order), overlapping windows, dilation 2, ceil_mode.
  const nlohmann::json ref = test::load_json_reference("torch_max_unpool.json");
  int checked = 0;
  for (const auto& c : ref["index_cases"]) {
    INFO("case " << checked);
    auto trip = [&](const char* key) {
      const auto v = c[key].get<std::vector<int64_t>>();
      return std::array<int64_t, 3>{v[0], v[1], v[2]};
    };
    const Tensor x = test::json_tensor(c["x"], c["x_shape"]);
    const Tensor i = max_pool3d_indices(x, trip("kernel"), trip("stride"), trip("padding"), trip("dilation"),
                                        c["ceil_mode"].get<bool>());
    CHECK(i.dtype() == DType::I64);
    REQUIRE(i.shape() == Shape(c["y_shape"].get<std::vector<int64_t>>()));
    CHECK(values(i) == c["indices"].get<std::vector<double>>());
    test::check_json_close(max_pool3d(x, trip("kernel"), trip("stride"), trip("padding"), trip("dilation"),
                                      c["ceil_mode"].get<bool>()),
                           c["y"]);
    // the values at the indices are the maxima
    CHECK(values(gather(x.reshape({x.size(0), x.size(1), -1}), 2, i.reshape({i.size(0), i.size(1), -1}))) ==
          c["y"].get<std::vector<double>>());
    ++checked;
  }
  CHECK(checked == 3);
}

TEST_CASE("max_unpool: a repeated index writes the last value, bad indices and sizes are refused", "[nn][pooling]") {
  // overlapping windows that picked one maximum: indices [2, 2, 2]; the last value (7) is written
  // and only it gets a gradient (PyTorch 2.15 wrote 6 here and gave each the position's gradient)
  const Tensor z = from_vector<double>({5, 6, 7}, {1, 1, 3}).requires_grad_();
  const Tensor idx = from_vector<int64_t>({2, 2, 2}, {1, 1, 3});
  const Tensor u = max_unpool1d(z, idx, 5);
  CHECK(values(u) == V({0, 0, 7, 0, 0}));
  (u * from_vector<double>({1, 10, 100, 1000, 10000}, {1, 1, 5})).sum().backward();
  CHECK(values(z.grad()) == V({0, 0, 100}));
  // PyTorch: "Found an invalid max index: 30 (output volumes are of size 5x5)"
  MG_REQUIRE_ERROR(max_unpool2d(ones({1, 1, 2, 2}), full({1, 1, 2, 2}, 30.0, {.dtype = DType::I64}), {5, 5}),
                   "max_unpool2d: found the index 30, outside the output plane of 25 elements");
  MG_REQUIRE_ERROR(max_unpool2d(ones({1, 1, 2, 2}), zeros({1, 1, 2, 2}), {5, 5}), "max_unpool2d: indices must be i64");
  MG_REQUIRE_ERROR(max_unpool2d(ones({1, 1, 2, 2}), zeros({1, 1, 2}, {.dtype = DType::I64}), {5, 5}),
                   "must have the shape of x");
  // PyTorch: MaxUnpool2d(3, 2) of a [1, 1, 2, 2] pooling takes output sizes strictly between 3 and 7
  nn::MaxUnpool2d unpool({.kernel = 3, .stride = 2});
  const Tensor y = ones({1, 1, 2, 2}), i = zeros({1, 1, 2, 2}, {.dtype = DType::I64});
  CHECK(unpool.forward(y, i).shape() == Shape{1, 1, 5, 5});
  CHECK(unpool.forward(y, i, nn::Size2(6, 4)).shape() == Shape{1, 1, 6, 4});
  MG_REQUIRE_ERROR(unpool.forward(y, i, nn::Size2(7, 5)),
                   "MaxUnpool2d(kernel=3, stride=2, padding=0): output_size 7 must be in [4, 6] for x [1, 1, 2, 2] f32 cpu (within the stride of the default 5)");
  CHECK(unpool.str() == "MaxUnpool2d(kernel=3, stride=2, padding=0)");
  MG_REQUIRE_ERROR(nn::MaxUnpool1d({.kernel = 0}), "MaxUnpool1d: kernel must be positive");
  // empty input: an all-zero output
  CHECK(values(max_unpool1d(zeros({1, 2, 0}), zeros({1, 2, 0}, {.dtype = DType::I64}), 3)) == V({0, 0, 0, 0, 0, 0}));
}
