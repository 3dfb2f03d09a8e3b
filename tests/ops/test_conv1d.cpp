// 1-D convolution and pooling (ops/conv1d.h, nn/conv1d.h) against PyTorch 2.15 in f64
// (tests/data/reference/torch_conv1d.json, written by tools/reference/gen_torch_conv1d.py):
// conv1d with stride, padding, dilation, groups and no bias; conv1d_same with odd and even
// (dilated) kernels, a dilated kernel longer than L and groups; nn::Conv1d with padding_mode
// zeros / reflect / replicate / circular, explicit padding and padding_same with an even kernel;
// conv_transpose1d (op and layer) with stride, padding, output_padding, dilation, groups;
// max_pool1d, avg_pool1d (count_include_pad, ceil_mode, the ceil window dropped when it would
// start in the padding) and adaptive_avg_pool1d (output dividing L, not dividing it, > L/2, > L),
// op and layer. Values and the gradients of sum(y * r) for the stored r (x, w and b; pools: x) to
// 1e-12 relative. Then the layers' parameter names, shapes and default init, the bf16 autocast
// policy on the CPU (conv lowers, pooling keeps), and the error texts of bad inputs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "core/factory.h"
#include "core/generator.h"
#include "nn/conv1d.h"
#include "ops/conv1d.h"
#include "ops/ops.h"
#include "ops/pad.h"
#include "reference/json_reference.h"
#include "test_paths.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

nlohmann::json load() { return test::load_json_reference("torch_conv1d.json"); }

std::vector<double> vec(const nlohmann::json& c, const char* key) { return c[key].get<std::vector<double>>(); }
int64_t i64(const nlohmann::json& c, const char* key) { return c[key].get<int64_t>(); }
Shape shape(const nlohmann::json& c, const char* key) { return c[key].get<std::vector<int64_t>>(); }
Tensor tensor(const nlohmann::json& c, const char* key, const char* shape_key) {
  return from_vector<double>(vec(c, key), shape(c, shape_key));
}
// The case's bias [O] (requiring grad), or an undefined tensor when it has none.
Tensor bias_of(const nlohmann::json& c) {
  return c.contains("b") ? from_vector<double>(vec(c, "b")).requires_grad_() : Tensor{};
}

void check_close(const Tensor& got, const std::vector<double>& want) {
  const std::vector<double> g = values(got);
  REQUIRE(g.size() == want.size());
  for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(want[i]).epsilon(1e-12).margin(1e-13));
}

// y against the case's "y", then the gradients of sum(y * r) with respect to `wrt` against the
// case's entries `keys` (in the same order).
void check_case(const nlohmann::json& c, const Tensor& y, const Tensors& wrt, const std::vector<std::string>& keys) {
  REQUIRE(y.shape() == shape(c, "y_shape"));
  check_close(y, vec(c, "y"));
  const Tensor r = from_vector<double>(vec(c, "r"), y.shape());
  const Tensors g = autograd::grad({sum(y * r)}, wrt);
  REQUIRE(g.size() == keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    INFO("gradient " << keys[i]);
    check_close(g[i], vec(c, keys[i].c_str()));
  }
}

// The gradients a conv case stores: x and w, and b when it has a bias.
Tensors conv_inputs(const Tensor& x, const Tensor& w, const Tensor& b) {
  return b.defined() ? Tensors{x, w, b} : Tensors{x, w};
}
std::vector<std::string> conv_keys(const Tensor& b) {
  return b.defined() ? std::vector<std::string>{"gx", "gw", "gb"} : std::vector<std::string>{"gx", "gw"};
}

PadMode mode_of(const std::string& m) {
  if (m == "reflect") return PadMode::Reflect;
  if (m == "replicate") return PadMode::Replicate;
  if (m == "circular") return PadMode::Circular;
  return PadMode::Constant;  // "zeros"
}

// Copies the case's weight (and bias) into a layer's parameters without recording history.
template <typename Layer>
void load_params(Layer& layer, const nlohmann::json& c) {
  NoGradGuard no_grad;
  layer.weight.copy_(from_vector<double>(vec(c, "w"), layer.weight.shape()));
  if (c.contains("b")) layer.bias.copy_(from_vector<double>(vec(c, "b")));
}

std::vector<std::string> names(const nn::NamedTensors& list) {
  std::vector<std::string> out;
  for (const auto& [n, t] : list) out.push_back(n);
  return out;
}

// PyTorch's default conv init U(-b, b), b = 1/sqrt(fan_in): every value within b (up to the f32
// rounding of b), not all zero, and for >= 2000 values the largest within 2% of b (P = 0.98^n).
void check_default_init(const Tensor& w, double fan_in) {
  const double b = 1.0 / std::sqrt(fan_in);
  double m = 0;
  for (double v : values(w)) m = std::max(m, std::fabs(v));
  INFO("bound " << b << ", max |w| " << m << ", numel " << w.numel());
  CHECK(m <= b * (1 + 1e-6));
  CHECK(m > 0);
  if (w.numel() >= 2000) CHECK(m > 0.98 * b);
}

}  // namespace

TEST_CASE("conv1d equals PyTorch's F.conv1d with stride, padding, dilation, groups and no bias", "[ops][conv][conv1d]") {
  const nlohmann::json ref = load();
  int checked = 0;
  for (const auto& c : ref["conv"]) {
    const Tensor x = tensor(c, "x", "x_shape").requires_grad_();
    const Tensor w = tensor(c, "w", "w_shape").requires_grad_();
    const Tensor b = bias_of(c);
    INFO("weight " << shape_str(w.shape()) << " stride " << c["stride"] << " padding " << c["padding"] << " dilation "
                   << c["dilation"] << " groups " << c["groups"] << (b.defined() ? "" : " no bias"));
    const Tensor y = conv1d(x, w, b, {.stride = i64(c, "stride"), .padding = i64(c, "padding"),
                                      .dilation = i64(c, "dilation"), .groups = i64(c, "groups")});
    check_case(c, y, conv_inputs(x, w, b), conv_keys(b));
    ++checked;
  }
  CHECK(checked == 6);
}

TEST_CASE("conv1d_same equals PyTorch's padding=\"same\" with odd and even kernels, dilation and groups", "[ops][conv][conv1d]") {
  const nlohmann::json ref = load();
  int checked = 0;
  for (const auto& c : ref["same"]) {
    const Tensor x = tensor(c, "x", "x_shape").requires_grad_();
    const Tensor w = tensor(c, "w", "w_shape").requires_grad_();
    const Tensor b = bias_of(c);
    INFO("weight " << shape_str(w.shape()) << " dilation " << c["dilation"] << " groups " << c["groups"]);
    const Tensor y = conv1d_same(x, w, b, i64(c, "dilation"), i64(c, "groups"));
    CHECK(y.size(2) == x.size(2));
    check_case(c, y, {x, w, b}, {"gx", "gw", "gb"});
    ++checked;
  }
  CHECK(checked == 5);
}

TEST_CASE("Conv1d with padding_mode zeros, reflect, replicate, circular and padding_same equals PyTorch's nn.Conv1d", "[ops][conv][conv1d][nn]") {
  const nlohmann::json ref = load();
  int checked = 0;
  for (const auto& c : ref["module"]) {
    const bool same = c["padding"].is_string();
    nn::Conv1d conv({.in = i64(c, "in"), .out = i64(c, "out"), .kernel = i64(c, "kernel"), .stride = i64(c, "stride"),
                     .padding = same ? 0 : i64(c, "padding"), .dilation = i64(c, "dilation"),
                     .groups = i64(c, "groups"), .bias = c["bias"].get<bool>(), .padding_same = same,
                     .padding_mode = mode_of(c["mode"])});
    conv.to(DType::F64);
    load_params(conv, c);
    const Tensor x = tensor(c, "x", "x_shape").requires_grad_();
    INFO(c["mode"].get<std::string>() << " weight " << shape_str(conv.weight.shape()) << " stride " << c["stride"]
                                      << " padding " << c["padding"] << " dilation " << c["dilation"] << " groups "
                                      << c["groups"]);
    check_case(c, conv(x), conv_inputs(x, conv.weight, conv.bias), conv_keys(conv.bias));
    ++checked;
  }
  CHECK(checked == 6);
}

TEST_CASE("conv_transpose1d and ConvTranspose1d equal PyTorch's with stride, padding, output_padding, dilation, groups", "[ops][conv][conv1d][nn]") {
  const nlohmann::json ref = load();
  int checked = 0;
  for (const auto& c : ref["transpose"]) {
    const Tensor x = tensor(c, "x", "x_shape").requires_grad_();
    const Tensor w = tensor(c, "w", "w_shape").requires_grad_();
    const Tensor b = bias_of(c);
    INFO("weight " << shape_str(w.shape()) << " stride " << c["stride"] << " padding " << c["padding"]
                   << " output_padding " << c["output_padding"] << " dilation " << c["dilation"] << " groups "
                   << c["groups"]);
    const Tensor y = conv_transpose1d(x, w, b,
                                      {.stride = i64(c, "stride"), .padding = i64(c, "padding"),
                                       .dilation = i64(c, "dilation"), .groups = i64(c, "groups")},
                                      i64(c, "output_padding"));
    check_case(c, y, conv_inputs(x, w, b), conv_keys(b));

    nn::ConvTranspose1d layer({.in = i64(c, "in"), .out = i64(c, "out"), .kernel = i64(c, "kernel"),
                               .stride = i64(c, "stride"), .padding = i64(c, "padding"),
                               .output_padding = i64(c, "output_padding"), .dilation = i64(c, "dilation"),
                               .groups = i64(c, "groups"), .bias = b.defined()});
    layer.to(DType::F64);
    REQUIRE(layer.weight.shape() == w.shape());
    load_params(layer, c);
    const Tensor x2 = tensor(c, "x", "x_shape").requires_grad_();
    check_case(c, layer(x2), conv_inputs(x2, layer.weight, layer.bias), conv_keys(layer.bias));
    ++checked;
  }
  CHECK(checked == 4);
}

TEST_CASE("max_pool1d and MaxPool1d equal PyTorch's with stride, padding, dilation and ceil_mode", "[ops][pool][conv1d][nn]") {
  const nlohmann::json ref = load();
  int checked = 0;
  for (const auto& c : ref["max_pool"]) {
    const int64_t k = i64(c, "kernel"), s = i64(c, "stride"), p = i64(c, "padding"), d = i64(c, "dilation");
    const bool ceil = c["ceil_mode"].get<bool>();
    INFO("kernel " << k << " stride " << s << " padding " << p << " dilation " << d << " ceil_mode " << ceil);
    const Tensor x = tensor(c, "x", "x_shape").requires_grad_();
    check_case(c, max_pool1d(x, k, s, p, d, ceil), {x}, {"gx"});
    nn::MaxPool1d layer({.kernel = k, .stride = s, .padding = p, .dilation = d, .ceil_mode = ceil});
    check_close(layer(x), vec(c, "y"));
    ++checked;
  }
  CHECK(checked == 7);
}

TEST_CASE("avg_pool1d and AvgPool1d equal PyTorch's with count_include_pad and ceil_mode", "[ops][pool][conv1d][nn]") {
  const nlohmann::json ref = load();
  int checked = 0;
  for (const auto& c : ref["avg_pool"]) {
    const int64_t k = i64(c, "kernel"), s = i64(c, "stride"), p = i64(c, "padding");
    const bool inc = c["count_include_pad"].get<bool>(), ceil = c["ceil_mode"].get<bool>();
    INFO("kernel " << k << " stride " << s << " padding " << p << " count_include_pad " << inc << " ceil_mode "
                   << ceil);
    const Tensor x = tensor(c, "x", "x_shape").requires_grad_();
    check_case(c, avg_pool1d(x, k, s, p, inc, ceil), {x}, {"gx"});
    nn::AvgPool1d layer({.kernel = k, .stride = s, .padding = p, .count_include_pad = inc, .ceil_mode = ceil});
    check_close(layer(x), vec(c, "y"));
    ++checked;
  }
  CHECK(checked == 7);
}

TEST_CASE("adaptive_avg_pool1d and AdaptiveAvgPool1d equal PyTorch's for outputs dividing L or not, above L/2 and above L", "[ops][pool][conv1d][nn]") {
  const nlohmann::json ref = load();
  int checked = 0;
  for (const auto& c : ref["adaptive"]) {
    const int64_t out = i64(c, "output");
    const Tensor x = tensor(c, "x", "x_shape").requires_grad_();
    INFO("L " << x.size(2) << " output " << out);
    check_case(c, adaptive_avg_pool1d(x, out), {x}, {"gx"});
    nn::AdaptiveAvgPool1d layer({.output = out});
    check_close(layer(x), vec(c, "y"));
    ++checked;
  }
  CHECK(checked == 7);
}

TEST_CASE("Conv1d and ConvTranspose1d: parameter names, shapes and PyTorch's default init", "[nn][conv][conv1d]") {
  manual_seed(71);  // the default init draws from the default generator
  nn::Conv1d conv({.in = 16, .out = 32, .kernel = 5});
  REQUIRE(names(conv.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  REQUIRE(conv.weight.shape() == Shape{32, 16, 5});
  REQUIRE(conv.bias.shape() == Shape{32});
  CHECK(conv.weight.dtype() == DType::F32);
  check_default_init(conv.weight, 16 * 5);  // fan_in = in/groups * k
  check_default_init(conv.bias, 16 * 5);
  const Tensor x = randn({2, 16, 20});
  REQUIRE(conv(x).shape() == Shape{2, 32, 16});
  CHECK(values(conv(x)) == values(conv1d(x, conv.weight, conv.bias)));

  nn::Conv1d grouped({.in = 8, .out = 12, .kernel = 3, .groups = 4, .bias = false});
  REQUIRE(names(grouped.named_parameters()) == std::vector<std::string>{"weight"});
  REQUIRE(grouped.weight.shape() == Shape{12, 2, 3});
  CHECK(!grouped.bias.defined());
  check_default_init(grouped.weight, 2 * 3);

  // weight [in, out/groups, k], fan_in = out/groups * k as PyTorch's
  nn::ConvTranspose1d transposed({.in = 6, .out = 4, .kernel = 3, .groups = 2});
  REQUIRE(names(transposed.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  REQUIRE(transposed.weight.shape() == Shape{6, 2, 3});
  REQUIRE(transposed.bias.shape() == Shape{4});
  check_default_init(transposed.weight, 2 * 3);
  check_default_init(transposed.bias, 2 * 3);
  CHECK(transposed(randn({1, 6, 5})).shape() == Shape{1, 4, 7});

  CHECK(nn::MaxPool1d({.kernel = 2}).parameters().empty());
  CHECK(nn::AvgPool1d({.kernel = 2}).parameters().empty());
  CHECK(nn::AdaptiveAvgPool1d({.output = 3}).parameters().empty());
}

TEST_CASE("conv1d under bf16 autocast on the CPU lowers to bf16, max_pool1d and the other pools keep the dtype", "[ops][amp][conv1d]") {
  const Tensor x = randn({2, 3, 9}), w = randn({4, 3, 3}), b = randn({4});
  const Tensor want = conv1d(x, w, b, {.padding = 1}), want_pool = max_pool1d(x, 2);
  nn::Conv1d layer({.in = 3, .out = 4, .kernel = 3});
  amp::Autocast autocast({.device = DeviceType::CPU, .dtype = DType::BF16});
  const Tensor y = conv1d(x, w, b, {.padding = 1});
  CHECK(y.dtype() == DType::BF16);
  // loosely the f32 result: bf16 inputs and output, 9 products per output
  const std::vector<double> got = values(y), ref = values(want);
  REQUIRE(got.size() == ref.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(std::fabs(got[i] - ref[i]) <= 0.05 * (1 + std::fabs(ref[i])));
  CHECK(conv1d_same(x, w, b).dtype() == DType::BF16);
  CHECK(conv_transpose1d(x, randn({3, 2, 3})).dtype() == DType::BF16);
  CHECK(layer(x).dtype() == DType::BF16);
  CHECK(max_pool1d(x, 2).dtype() == DType::F32);
  CHECK(values(max_pool1d(x, 2)) == values(want_pool));  // no cast: the same values
  CHECK(max_pool1d(to(x, DType::BF16), 2).dtype() == DType::BF16);
  CHECK(avg_pool1d(x, 3, 2, 1).dtype() == DType::F32);
  CHECK(adaptive_avg_pool1d(x, 4).dtype() == DType::F32);
}

TEST_CASE("conv1d, Conv1d and max_pool1d: bad inputs are named errors", "[ops][conv][conv1d][nn]") {
  MG_REQUIRE_ERROR(conv1d(zeros({1, 2, 3, 8}), zeros({3, 2, 3})), "conv1d: expected x [N, C, L]");
  MG_REQUIRE_ERROR(conv1d(zeros({1, 2, 8}), zeros({3, 4, 3})), "conv1d: expected weight");
  MG_REQUIRE_ERROR(conv1d(zeros({1, 4, 8}), zeros({4, 4, 3}), {}, {.groups = 2}), "conv1d: expected weight");
  MG_REQUIRE_ERROR(conv1d(zeros({1, 2, 4}), zeros({3, 2, 5})), "conv1d: kernel");
  MG_REQUIRE_ERROR(conv1d(zeros({1, 2, 4}), zeros({3, 2, 4}), {}, {.padding = 1, .dilation = 2}), "conv1d: kernel");
  CHECK(conv1d(zeros({1, 2, 4}), zeros({3, 2, 5}), {}, {.padding = 1}).shape() == Shape{1, 3, 2});
  MG_REQUIRE_ERROR(nn::Conv1d({.in = 2, .out = 3, .kernel = 3, .stride = 2, .padding_same = true}),
                   "Conv1d: padding_same needs stride 1");
  MG_REQUIRE_ERROR(max_pool1d(zeros({8}), 2), "max_pool1d: expected x [N, C, L]");
  nn::Conv1d layer({.in = 2, .out = 3, .kernel = 3});
  MG_REQUIRE_ERROR(layer(zeros({1, 4, 8})), "Conv1d(2, 3, kernel=3, stride=1): expected input [N, 2, L] (or an unbatched [2, L]), got [1, 4, 8]");
  MG_REQUIRE_ERROR(layer(zeros({1, 2, 1})), "Conv1d(2, 3, kernel=3, stride=1): conv1d: kernel 3 (dilated 3) is longer");
}
