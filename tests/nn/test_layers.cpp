// The nn layer library: per layer the parameter names, shapes and PyTorch's default init, forward
// values against the ops they wrap or hand-computed numbers, output shapes of the geometry options,
// containers (Sequential naming, at<T>, ModuleList, Functional) and the printed tree, loss modules
// with their options, train/eval behaviour of Dropout and BatchNorm (running statistics exactly),
// to(f16) keeping batch norm in f32, and the error texts of bad inputs and bad options.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "core/generator.h"
#include "nn/nn.h"
#include "ops/norm.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

Tensor f64(const std::vector<double>& v, Shape s = {}) { return from_vector<double>(v, s); }
Tensor i64(const std::vector<int64_t>& v, Shape s = {}) { return from_vector<int64_t>(v, s); }

Tensor rnd(const Shape& s, uint64_t seed, DType dt = DType::F64) {
  Generator g(seed);
  return randn(s, {.dtype = dt}, &g);
}

// Overwrites a parameter's values without recording history.
void assign(const Tensor& p, const Tensor& v) {
  NoGradGuard no_grad;
  Tensor(p).copy_(v);
}

void require_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    REQUIRE(std::fabs(got[i] - want[i]) <= tol * (1.0 + std::fabs(want[i])));
  }
}

std::vector<std::string> names(const nn::NamedTensors& list) {
  std::vector<std::string> out;
  for (const auto& [n, t] : list) out.push_back(n);
  return out;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : values(t)) m = std::max(m, std::fabs(v));
  return m;
}

// PyTorch's default Linear/Conv init: U(-b, b) with b = 1/sqrt(fan_in). Every value within b (up to
// the f32 rounding of b) and, for `n` >= 2000 values, the largest within 2% of b
// (P = 0.98^n < 1e-17), so a wrong fan (e.g. without the receptive field) fails.
void check_default_init(const Tensor& w, double fan_in) {
  const double b = 1.0 / std::sqrt(fan_in);
  const double m = max_abs(w);
  INFO("bound " << b << ", max |w| " << m << ", numel " << w.numel());
  CHECK(m <= b * (1 + 1e-6));
  if (w.numel() >= 2000) CHECK(m > 0.98 * b);
  CHECK(m > 0);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Linear, Identity, Flatten
// ---------------------------------------------------------------------------------------------

TEST_CASE("Linear: parameters, PyTorch's default init and the linear op", "[nn][layers]") {
  manual_seed(51);  // the default init draws from the default generator
  nn::Linear fc({.in = 64, .out = 32});
  REQUIRE(names(fc.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  REQUIRE(fc.weight.shape() == Shape{32, 64});
  REQUIRE(fc.bias.shape() == Shape{32});
  REQUIRE(fc.weight.dtype() == DType::F32);
  check_default_init(fc.weight, 64);
  check_default_init(fc.bias, 64);
  CHECK(fc.layer_name() == "Linear(in=64, out=32, bias=true)");

  const Tensor x = rnd({5, 64}, 1, DType::F32);
  CHECK(values(fc(x)) == values(linear(x, fc.weight, fc.bias)));
  // leading dims are kept: [2, 3, 64] -> [2, 3, 32]
  const Tensor x3 = rnd({2, 3, 64}, 2, DType::F32);
  REQUIRE(fc(x3).shape() == Shape{2, 3, 32});
  CHECK(values(fc(x3)) == values(linear(x3, fc.weight, fc.bias)));

  // by hand: w = [[1, 2], [0, -1]], b = [0.5, 1]: [3, 4] -> [3 + 8 + 0.5, -4 + 1]
  nn::Linear small({.in = 2, .out = 2});
  small.to(DType::F64);
  assign(small.weight, f64({1, 2, 0, -1}, {2, 2}));
  assign(small.bias, f64({0.5, 1}));
  CHECK(values(small(f64({3, 4}, {1, 2}))) == std::vector<double>{11.5, -3});

  nn::Linear nobias({.in = 3, .out = 2, .bias = false});
  CHECK(!nobias.bias.defined());
  CHECK(names(nobias.named_parameters()) == std::vector<std::string>{"weight"});
  CHECK(nobias.layer_name() == "Linear(in=3, out=2, bias=false)");
  require_close(values(nobias(ones({1, 3}))), values(sum(nobias.weight, {1})), 1e-6);
}

TEST_CASE("Identity returns its input - Flatten merges the chosen dims", "[nn][layers]") {
  const Tensor x = arange(0, 120, 1, {.dtype = DType::F32}).reshape({2, 3, 4, 5});
  nn::Identity id;
  CHECK(id(x).is_same(x));
  CHECK(id.parameters().empty());

  nn::Flatten flat;
  REQUIRE(flat(x).shape() == Shape{2, 60});
  CHECK(values(flat(x)) == values(x));
  REQUIRE(nn::Flatten({.start_dim = 2})(x).shape() == Shape{2, 3, 20});
  REQUIRE(nn::Flatten({.start_dim = 0, .end_dim = 1})(x).shape() == Shape{6, 4, 5});
  REQUIRE(nn::Flatten({.start_dim = 1, .end_dim = 2})(x).shape() == Shape{2, 12, 5});
  CHECK(values(nn::Flatten({.start_dim = 0, .end_dim = -1})(x)) == values(x));
}

// ---------------------------------------------------------------------------------------------
// Convolutions
// ---------------------------------------------------------------------------------------------

TEST_CASE("Conv2d: parameters, default init with groups, Size2 options", "[nn][layers][conv]") {
  manual_seed(56);  // the default init draws from the default generator
  nn::Conv2d conv({.in = 16, .out = 32, .kernel = 3});
  REQUIRE(names(conv.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  REQUIRE(conv.weight.shape() == Shape{32, 16, 3, 3});
  REQUIRE(conv.bias.shape() == Shape{32});
  check_default_init(conv.weight, 16 * 9);  // fan_in = in * kH * kW
  check_default_init(conv.bias, 16 * 9);
  CHECK(conv.options().kernel == nn::Size2(3, 3));
  CHECK(conv.layer_name() == "Conv2d(16, 32, kernel=3, stride=1)");

  // groups: weight [out, in/groups, kH, kW], fan_in = in/groups * kH * kW
  nn::Conv2d grouped({.in = 16, .out = 32, .kernel = 3, .groups = 4, .bias = false});
  REQUIRE(grouped.weight.shape() == Shape{32, 4, 3, 3});
  CHECK(!grouped.bias.defined());
  check_default_init(grouped.weight, 4 * 9);
  CHECK(grouped.layer_name() == "Conv2d(16, 32, kernel=3, stride=1, groups=4, bias=false)");

  // `.kernel = 3` is square, `.kernel = {3, 1}` is height 3, width 1
  nn::Conv2d tall({.in = 2, .out = 4, .kernel = {3, 1}, .stride = {2, 1}, .padding = {1, 0}});
  REQUIRE(tall.weight.shape() == Shape{4, 2, 3, 1});
  CHECK(tall.options().kernel == nn::Size2(3, 1));
  CHECK(tall.options().stride.h == 2);
  CHECK(tall.options().stride.w == 1);
  CHECK(tall.layer_name() == "Conv2d(2, 4, kernel=3x1, stride=2x1, padding=1x0)");
  CHECK(nn::Size2(3).str() == "3");
  CHECK(nn::Size2(3, 1).str() == "3x1");
  CHECK(nn::Size2(5).array() == std::array<int64_t, 2>{5, 5});
}

TEST_CASE("Conv2d: output shapes and values of stride, padding, dilation and groups", "[nn][layers][conv]") {
  // by hand: a 2x2 kernel of ones over 0..8 in a 3x3 plane sums each 2x2 window
  nn::Conv2d ones2({.in = 1, .out = 1, .kernel = 2, .bias = false});
  ones2.to(DType::F64);
  assign(ones2.weight, ones({1, 1, 2, 2}, {.dtype = DType::F64}));
  const Tensor plane = arange(0, 9, 1, {.dtype = DType::F64}).reshape({1, 1, 3, 3});
  CHECK(values(ones2(plane)) == std::vector<double>{8, 12, 20, 24});

  struct Case {
    nn::Conv2dOptions o;
    Shape out;
  };
  // x [2, 4, 9, 7]; Ho = (H + 2p - d(k - 1) - 1) / s + 1
  const std::vector<Case> cases = {
      {{.in = 4, .out = 6, .kernel = 3}, {2, 6, 7, 5}},
      {{.in = 4, .out = 6, .kernel = 3, .stride = 2, .padding = 1}, {2, 6, 5, 4}},
      {{.in = 4, .out = 6, .kernel = {3, 1}, .stride = {2, 1}, .padding = {1, 0}, .groups = 2}, {2, 6, 5, 7}},
      {{.in = 4, .out = 8, .kernel = 3, .dilation = 2}, {2, 8, 5, 3}},
      {{.in = 4, .out = 4, .kernel = 3, .padding = 1, .groups = 4}, {2, 4, 9, 7}},  // depthwise
      {{.in = 4, .out = 6, .kernel = {1, 7}, .stride = 3}, {2, 6, 3, 1}},
  };
  const Tensor x = rnd({2, 4, 9, 7}, 3);
  for (const Case& c : cases) {
    nn::Conv2d conv(c.o);
    conv.to(DType::F64);
    INFO(conv.layer_name());
    const Tensor y = conv(x);
    REQUIRE(y.shape() == c.out);
    const mg::Conv2dOptions op{.stride = c.o.stride.array(), .padding = c.o.padding.array(),
                               .dilation = c.o.dilation.array(), .groups = c.o.groups};
    CHECK(values(y) == values(conv2d(x, conv.weight, conv.bias, op)));
  }
}

TEST_CASE("ConvTranspose2d: weight layout, output_padding and the op", "[nn][layers][conv]") {
  manual_seed(54);  // the default init draws from the default generator
  // x [1, 4, 5, 5]; Ho = (H - 1) s - 2p + d (k - 1) + output_padding + 1
  nn::ConvTranspose2d up({.in = 4, .out = 6, .kernel = 3, .stride = 2, .padding = 1, .output_padding = 1});
  REQUIRE(up.weight.shape() == Shape{4, 6, 3, 3});  // [in, out/groups, kH, kW]
  REQUIRE(up.bias.shape() == Shape{6});
  check_default_init(up.weight, 6 * 9);  // PyTorch: fan_in from dim 1 = out/groups * kH * kW
  check_default_init(up.bias, 6 * 9);
  CHECK(up.layer_name() == "ConvTranspose2d(4, 6, kernel=3, stride=2, padding=1, output_padding=1)");
  up.to(DType::F64);
  const Tensor x = rnd({1, 4, 5, 5}, 4);
  const Tensor y = up(x);
  REQUIRE(y.shape() == Shape{1, 6, 10, 10});  // 4 * 2 - 2 + 2 + 1 + 1
  CHECK(values(y) == values(conv_transpose2d(x, up.weight, up.bias, {.stride = {2, 2}, .padding = {1, 1}}, {1, 1})));
  // without output_padding: 9
  nn::ConvTranspose2d up9({.in = 4, .out = 6, .kernel = 3, .stride = 2, .padding = 1});
  REQUIRE(up9(to(x, DType::F32)).shape() == Shape{1, 6, 9, 9});
  // groups and a non-square kernel: weight [in, out/groups, 2, 3]
  nn::ConvTranspose2d g({.in = 4, .out = 6, .kernel = {2, 3}, .stride = {2, 1}, .groups = 2});
  REQUIRE(g.weight.shape() == Shape{4, 3, 2, 3});
  REQUIRE(g(to(x, DType::F32)).shape() == Shape{1, 6, 10, 7});
  // by hand: one input pixel 2 through a 2x2 kernel [[1, 2], [3, 4]] with stride 2 writes 2 * kernel
  nn::ConvTranspose2d one({.in = 1, .out = 1, .kernel = 2, .stride = 2, .bias = false});
  one.to(DType::F64);
  assign(one.weight, f64({1, 2, 3, 4}, {1, 1, 2, 2}));
  CHECK(values(one(f64({2}, {1, 1, 1, 1}))) == std::vector<double>{2, 4, 6, 8});
}

// ---------------------------------------------------------------------------------------------
// Normalisation
// ---------------------------------------------------------------------------------------------

TEST_CASE("BatchNorm: parameters and buffers as PyTorch's state dict", "[nn][layers][norm]") {
  nn::BatchNorm2d bn({.features = 3});
  REQUIRE(names(bn.state_dict()) ==
          std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
  REQUIRE(names(bn.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  CHECK(values(bn.weight) == std::vector<double>{1, 1, 1});
  CHECK(values(bn.bias) == std::vector<double>{0, 0, 0});
  CHECK(values(bn.running_mean) == std::vector<double>{0, 0, 0});
  CHECK(values(bn.running_var) == std::vector<double>{1, 1, 1});
  CHECK(bn.running_mean.dtype() == DType::F32);
  CHECK(bn.num_batches_tracked.dtype() == DType::I64);
  CHECK(bn.num_batches_tracked.shape() == Shape{});
  CHECK(bn.num_batches_tracked.item<int64_t>() == 0);
  CHECK(!bn.running_mean.requires_grad());
  CHECK(bn.layer_name() == "BatchNorm2d(3, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)");

  nn::BatchNorm1d plain({.features = 2, .momentum = std::nullopt, .affine = false, .track_running_stats = false});
  CHECK(plain.state_dict().empty());
  CHECK(!plain.weight.defined());
  CHECK(plain.layer_name() == "BatchNorm1d(2, eps=1e-05, momentum=None, affine=false, track_running_stats=false)");
  // BatchNorm1d takes [N, C] and [N, C, L]
  nn::BatchNorm1d bn1({.features = 2});
  const Tensor x2 = f64({1, 10, 3, 30}, {2, 2});
  bn1.to(DType::F64);
  // per channel {1, 3} and {10, 30}: normalised to -1, +1 (biased var 1 and 100, eps 1e-5)
  require_close(values(bn1(x2)), {-1 / std::sqrt(1 + 1e-5), -10 / std::sqrt(100 + 1e-5), 1 / std::sqrt(1 + 1e-5),
                                  10 / std::sqrt(100 + 1e-5)},
                1e-12);
  REQUIRE(bn1(rnd({4, 2, 5}, 5)).shape() == Shape{4, 2, 5});
}

TEST_CASE("BatchNorm2d training: batch statistics, momentum 0.1 running stats, eval uses them", "[nn][layers][norm][train]") {
  // x [2, 2, 1, 2]: channel 0 holds {1, 2, 3, 4} (mean 2.5, biased var 1.25, unbiased 5/3),
  // channel 1 holds {0, 0, 2, 6} (mean 2, biased var 6, unbiased 8).
  const Tensor x = f64({1, 2, 0, 0, 3, 4, 2, 6}, {2, 2, 1, 2});
  nn::BatchNorm2d bn({.features = 2});
  bn.to(DType::F64);
  assign(bn.weight, f64({2, 1}));
  assign(bn.bias, f64({0.5, -1}));
  const double eps = 1e-5;
  auto norm = [&](double v, double mean, double var, double w, double b) { return (v - mean) / std::sqrt(var + eps) * w + b; };

  const Tensor y = bn(x);
  require_close(values(y),
                {norm(1, 2.5, 1.25, 2, 0.5), norm(2, 2.5, 1.25, 2, 0.5), norm(0, 2, 6, 1, -1), norm(0, 2, 6, 1, -1),
                 norm(3, 2.5, 1.25, 2, 0.5), norm(4, 2.5, 1.25, 2, 0.5), norm(2, 2, 6, 1, -1), norm(6, 2, 6, 1, -1)},
                1e-12);
  // running = 0.9 running + 0.1 batch (unbiased var)
  require_close(values(bn.running_mean), {0.25, 0.2}, 1e-12);
  require_close(values(bn.running_var), {0.9 + 0.1 * 5.0 / 3.0, 0.9 + 0.8}, 1e-12);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  bn(x);
  require_close(values(bn.running_mean), {0.9 * 0.25 + 0.25, 0.9 * 0.2 + 0.2}, 1e-12);
  require_close(values(bn.running_var), {0.9 * (0.9 + 0.5 / 3.0) + 0.5 / 3.0, 0.9 * 1.7 + 0.8}, 1e-12);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 2);

  // eval: the running statistics normalise and stay unchanged
  bn.eval();
  const std::vector<double> rm = values(bn.running_mean), rv = values(bn.running_var);
  const Tensor z = bn(x);
  require_close(values(z), {norm(1, rm[0], rv[0], 2, 0.5), norm(2, rm[0], rv[0], 2, 0.5), norm(0, rm[1], rv[1], 1, -1),
                            norm(0, rm[1], rv[1], 1, -1), norm(3, rm[0], rv[0], 2, 0.5), norm(4, rm[0], rv[0], 2, 0.5),
                            norm(2, rm[1], rv[1], 1, -1), norm(6, rm[1], rv[1], 1, -1)},
                1e-12);
  CHECK(values(bn.running_mean) == rm);
  CHECK(values(bn.running_var) == rv);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 2);
  // reset_running_stats restores the initial buffers
  bn.reset_running_stats();
  CHECK(values(bn.running_mean) == std::vector<double>{0, 0});
  CHECK(values(bn.running_var) == std::vector<double>{1, 1});
  CHECK(bn.num_batches_tracked.item<int64_t>() == 0);
}

TEST_CASE("BatchNorm2d momentum nullopt keeps the cumulative average of the batch statistics", "[nn][layers][norm][train]") {
  nn::BatchNorm2d bn({.features = 2, .momentum = std::nullopt});
  bn.to(DType::F64);
  const Tensor x = f64({1, 2, 0, 0, 3, 4, 2, 6}, {2, 2, 1, 2});
  // batch 1: means [2.5, 2], unbiased vars [5/3, 8]; batch 2 = 2x + 1: means [6, 5], vars [20/3, 32];
  // batch 3 = -x: means [-2.5, -2], vars [5/3, 8]. The running values are the plain averages.
  bn(x);
  require_close(values(bn.running_mean), {2.5, 2}, 1e-12);
  require_close(values(bn.running_var), {5.0 / 3.0, 8}, 1e-12);
  bn(x * 2.0 + 1.0);
  require_close(values(bn.running_mean), {(2.5 + 6) / 2, (2 + 5) / 2.0}, 1e-12);
  require_close(values(bn.running_var), {(5.0 / 3.0 + 20.0 / 3.0) / 2, (8 + 32) / 2.0}, 1e-12);
  bn(-x);
  require_close(values(bn.running_mean), {(2.5 + 6 - 2.5) / 3, (2 + 5 - 2) / 3.0}, 1e-12);
  require_close(values(bn.running_var), {(5.0 / 3.0 + 20.0 / 3.0 + 5.0 / 3.0) / 3, (8 + 32 + 8) / 3.0}, 1e-12);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 3);
}

TEST_CASE("BatchNorm2d without running statistics normalises with the batch in eval too", "[nn][layers][norm][train]") {
  nn::BatchNorm2d bn({.features = 3, .track_running_stats = false});
  bn.to(DType::F64);
  CHECK(names(bn.state_dict()) == std::vector<std::string>{"weight", "bias"});
  const Tensor x = rnd({4, 3, 2, 2}, 6);
  const std::vector<double> train_out = values(bn(x));
  bn.eval();
  CHECK(values(bn(x)) == train_out);
  // every channel of the output has mean 0 and biased variance 1 (up to eps)
  const std::vector<double> m = values(mean(bn(x), {0, 2, 3}));
  require_close(m, {0, 0, 0}, 1e-12);
  const std::vector<double> v = values(var(bn(x), {0, 2, 3}, 0.0));
  for (double vi : v) CHECK(vi == Approx(1.0).epsilon(1e-3));
}

TEST_CASE("LayerNorm, GroupNorm and RMSNorm: ones/zeros and their values", "[nn][layers][norm]") {
  nn::LayerNorm ln({.shape = {4}});
  REQUIRE(names(ln.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  CHECK(values(ln.weight) == std::vector<double>{1, 1, 1, 1});
  CHECK(values(ln.bias) == std::vector<double>{0, 0, 0, 0});
  CHECK(ln.buffers().empty());
  ln.to(DType::F64);
  // [1, 2, 3, 4]: mean 2.5, biased var 1.25
  const double s = std::sqrt(1.25 + 1e-5);
  require_close(values(ln(f64({1, 2, 3, 4}, {1, 4}))), {-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s}, 1e-12);
  assign(ln.weight, f64({1, 2, 3, 4}));
  assign(ln.bias, f64({0, 1, 0, -1}));
  const Tensor x = rnd({3, 5, 4}, 7);
  CHECK(values(ln(x)) == values(layer_norm(x, {4}, ln.weight, ln.bias, 1e-5)));
  // two trailing dims
  nn::LayerNorm ln2({.shape = {2, 3}, .eps = 1e-12});
  CHECK(ln2.weight.shape() == Shape{2, 3});
  ln2.to(DType::F64);
  const Tensor x2 = rnd({4, 2, 3}, 8);
  CHECK(values(ln2(x2)) == values(layer_norm(x2, {2, 3}, ln2.weight, ln2.bias, 1e-12)));
  nn::LayerNorm plain({.shape = {4}, .elementwise_affine = false});
  CHECK(plain.parameters().empty());
  nn::LayerNorm nobias({.shape = {4}, .bias = false});
  CHECK(names(nobias.named_parameters()) == std::vector<std::string>{"weight"});

  nn::GroupNorm gn({.groups = 2, .channels = 4});
  CHECK(values(gn.weight) == std::vector<double>{1, 1, 1, 1});
  CHECK(values(gn.bias) == std::vector<double>{0, 0, 0, 0});
  gn.to(DType::F64);
  assign(gn.weight, f64({1, 2, 3, 4}));
  const Tensor xg = rnd({2, 4, 3, 3}, 9);
  CHECK(values(gn(xg)) == values(group_norm(xg, 2, gn.weight, gn.bias, 1e-5)));
  // by hand: one group of {1, 3} per sample (channels 0, 1 with one position each)
  nn::GroupNorm gn1({.groups = 1, .channels = 2, .affine = false});
  require_close(values(gn1(f64({1, 3}, {1, 2, 1}))), {-1 / std::sqrt(1 + 1e-5), 1 / std::sqrt(1 + 1e-5)}, 1e-12);

  nn::RMSNorm rms({.shape = {2}});
  CHECK(values(rms.weight) == std::vector<double>{1, 1});
  rms.to(DType::F64);
  // [3, 4]: mean square 12.5
  // eps unset: the machine epsilon of the math's dtype (f64 here), as PyTorch's eps=None.
  const double e64 = std::numeric_limits<double>::epsilon();
  require_close(values(rms(f64({3, 4}, {1, 2}))), {3 / std::sqrt(12.5 + e64), 4 / std::sqrt(12.5 + e64)}, 1e-12);
  // Small activations show the eps: f32's is 1.19e-7 (not 1e-5 or 1e-6), the layer and the op alike.
  nn::RMSNorm rms32({.shape = {2}});
  const Tensor small = f64({3e-4, 4e-4}, {1, 2}).to(DType::F32);
  const double e32 = std::numeric_limits<float>::epsilon(), ms = 12.5e-8;
  require_close(values(rms32(small)), {3e-4 / std::sqrt(ms + e32), 4e-4 / std::sqrt(ms + e32)}, 1e-5);
  CHECK(values(rms_norm(small, {2})) == values(rms32(small)));
  nn::RMSNorm rms_eps({.shape = {2}, .eps = 1e-6});
  require_close(values(rms_eps(small)), {3e-4 / std::sqrt(ms + 1e-6), 4e-4 / std::sqrt(ms + 1e-6)}, 1e-5);
}

// ---------------------------------------------------------------------------------------------
// Embedding, Dropout, activations, pooling
// ---------------------------------------------------------------------------------------------

TEST_CASE("Embedding: N(0, 1) init, zero padding row, row lookup, no gradient to padding", "[nn][layers]") {
  manual_seed(54);  // the default init draws from the default generator
  nn::Embedding emb({.num = 1000, .dim = 64, .padding_idx = 3});
  REQUIRE(names(emb.named_parameters()) == std::vector<std::string>{"weight"});
  REQUIRE(emb.weight.shape() == Shape{1000, 64});
  CHECK(emb.layer_name() == "Embedding(1000, 64, padding_idx=3)");
  // N(0, 1) over 64000 values (the zero row aside): mean within 5/sqrt(n), std within 5/sqrt(2n)
  const std::vector<double> w = values(emb.weight);
  double s = 0, sq = 0;
  for (double v : w) s += v, sq += v * v;
  const double n = double(w.size()) - 64;
  const double m = s / n, sd = std::sqrt(sq / n - m * m);
  CHECK(std::fabs(m) < 5 / std::sqrt(n));
  CHECK(std::fabs(sd - 1) < 5 / std::sqrt(2 * n));
  CHECK(values(emb.weight.select(0, 3)) == std::vector<double>(64, 0.0));

  // lookup: [2, 3] indices -> [2, 3, 64] rows; i32 indices give the same
  const Tensor idx = i64({5, 3, 999, 0, 5, 1}, {2, 3});
  const Tensor y = emb(idx);
  REQUIRE(y.shape() == Shape{2, 3, 64});
  CHECK(values(y.select(0, 0).select(0, 0)) == values(emb.weight.select(0, 5)));
  CHECK(values(y.select(0, 0).select(0, 2)) == values(emb.weight.select(0, 999)));
  CHECK(values(y.select(0, 0).select(0, 1)) == std::vector<double>(64, 0.0));
  CHECK(values(emb(to(idx, DType::I32))) == values(y));
  // gradient: row 5 picked twice gets 2, the padding row nothing
  sum(y).backward();
  const Tensor g = emb.weight.grad();
  CHECK(values(g.select(0, 5)) == std::vector<double>(64, 2.0));
  CHECK(values(g.select(0, 1)) == std::vector<double>(64, 1.0));
  CHECK(values(g.select(0, 3)) == std::vector<double>(64, 0.0));
  CHECK(values(g.select(0, 2)) == std::vector<double>(64, 0.0));

  // a negative padding_idx counts from the end
  nn::Embedding last({.num = 10, .dim = 4, .padding_idx = -1});
  CHECK(values(last.weight.select(0, 9)) == std::vector<double>(4, 0.0));
  CHECK(last.layer_name() == "Embedding(10, 4, padding_idx=9)");
  nn::Embedding nopad({.num = 10, .dim = 4});
  CHECK(nopad.layer_name() == "Embedding(10, 4)");
  CHECK(max_abs(nopad.weight.select(0, 9)) > 0);
}

TEST_CASE("Dropout zeroes about p, scales by 1/(1-p) in training and is the identity in eval", "[nn][layers][train]") {
  const int64_t n = 200000;
  const double p = 0.3;
  Generator gen(31);
  nn::Dropout drop({.p = p, .generator = &gen});
  CHECK(drop.layer_name() == "Dropout(p=0.3)");
  const Tensor x = ones({n});
  const std::vector<double> y = values(drop(x));
  const double scale = double(float(1.0 / (1.0 - p)));
  int64_t zeros_n = 0, others = 0;
  for (double v : y) {
    zeros_n += v == 0;
    others += v != 0 && std::fabs(v - scale) > 1e-6 * scale;
  }
  CHECK(others == 0);  // every kept element is scaled by 1/(1-p)
  // zero fraction within 5 standard errors sqrt(p (1 - p) / n) of p
  CHECK(std::fabs(double(zeros_n) / n - p) < 5 * std::sqrt(p * (1 - p) / n));
  // the mean is preserved in expectation
  CHECK(std::fabs(values(mean(drop(x)))[0] - 1.0) < 5 * std::sqrt(p / (1 - p) / n));

  // reproducible from the seed; a second call draws a new mask
  Generator ga(77), gb(77);
  nn::Dropout da({.p = 0.5, .generator = &ga}), db({.p = 0.5, .generator = &gb});
  const Tensor r = rnd({1000}, 10, DType::F32);
  const std::vector<double> a1 = values(da(r));
  CHECK(a1 == values(db(r)));
  CHECK(values(da(r)) != a1);

  // eval: the input unchanged; p = 0 in training too
  drop.eval();
  CHECK(values(drop(r)) == values(r));
  CHECK(!drop.is_training());
  nn::Dropout none({.p = 0.0});
  CHECK(values(none(r)) == values(r));
  // p = 1 zeroes everything
  nn::Dropout all({.p = 1.0});
  CHECK(values(all(r)) == std::vector<double>(1000, 0.0));
}

TEST_CASE("activation layers compute their formulas", "[nn][layers]") {
  const std::vector<double> xs = {-3, -1, -0.5, 0, 0.5, 1, 3};
  const Tensor x = f64(xs);
  std::vector<double> relu_w, gelu_w, gelu_t, silu_w, tanh_w, sig_w;
  for (double v : xs) {
    relu_w.push_back(std::max(v, 0.0));
    gelu_w.push_back(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
    gelu_t.push_back(0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
    silu_w.push_back(v / (1 + std::exp(-v)));
    tanh_w.push_back(std::tanh(v));
    sig_w.push_back(1 / (1 + std::exp(-v)));
  }
  require_close(values(nn::ReLU()(x)), relu_w, 1e-15);
  require_close(values(nn::GELU()(x)), gelu_w, 1e-12);
  require_close(values(nn::GELU({.approximate = GeluApprox::Tanh})(x)), gelu_t, 1e-12);
  CHECK(values(nn::GELU({.approximate = GeluApprox::Tanh})(x)) != values(nn::GELU()(x)));
  require_close(values(nn::SiLU()(x)), silu_w, 1e-12);
  require_close(values(nn::Tanh()(x)), tanh_w, 1e-12);
  require_close(values(nn::Sigmoid()(x)), sig_w, 1e-12);
  CHECK(nn::GELU({.approximate = GeluApprox::Tanh}).layer_name() == "GELU(approximate=tanh)");
  CHECK(nn::ReLU().layer_name() == "ReLU()");
  // the keep policy: an f16 input stays f16
  CHECK(nn::GELU()(to(x, DType::F16)).dtype() == DType::F16);
  CHECK(nn::ReLU().parameters().empty());
}

TEST_CASE("the piecewise activation layers: their ops with PyTorch's defaults, names, bad options", "[nn][layers]") {
  const Tensor x = f64({-7, -3, -1.5, -0.5, 0, 0.5, 1.5, 3, 7});
  const auto same = [&](nn::UnaryModule& m, const Tensor& want) { CHECK(values(m(x)) == values(want)); };
  nn::LeakyReLU leaky;
  same(leaky, leaky_relu(x, 0.01));
  nn::LeakyReLU leaky2({.negative_slope = 0.2});
  same(leaky2, leaky_relu(x, 0.2));
  nn::ELU elu_m;
  same(elu_m, elu(x, 1.0));
  nn::ELU elu_a({.alpha = 0.5});
  same(elu_a, elu(x, 0.5));
  nn::SELU selu_m;
  same(selu_m, selu(x));
  nn::CELU celu_m({.alpha = 2.0});
  same(celu_m, celu(x, 2.0));
  nn::Hardswish hs;
  same(hs, hardswish(x));
  nn::Hardsigmoid hsig;
  same(hsig, hardsigmoid(x));
  nn::Mish mish_m;
  same(mish_m, mish(x));
  nn::Hardtanh ht;
  same(ht, clamp(x, -1.0, 1.0));
  nn::Hardtanh ht2({.min_val = -2.0, .max_val = 0.5});
  same(ht2, clamp(x, -2.0, 0.5));
  nn::ReLU6 r6;
  same(r6, clamp(x, 0.0, 6.0));
  nn::Softplus sp({.beta = 2.0, .threshold = 5.0});
  same(sp, softplus(x, 2.0, 5.0));
  // values by hand at a few points: SELU's constants, CELU's alpha (e^{x / alpha}), hardswish's kinks
  CHECK(values(selu(f64({-1.0, 2.0}))) ==
        std::vector<double>{kSeluScale * kSeluAlpha * std::expm1(-1.0), kSeluScale * 2.0});
  CHECK(values(celu(f64({-1.0}), 2.0))[0] == Approx(2.0 * std::expm1(-0.5)).epsilon(1e-15));
  CHECK(values(hardswish(f64({-3.0, -1.0, 3.0})))[1] == Approx(-1.0 * 2.0 / 6.0).epsilon(1e-15));
  CHECK(leaky2.layer_name() == "LeakyReLU(negative_slope=0.2)");
  CHECK(elu_a.layer_name() == "ELU(alpha=0.5)");
  CHECK(ht2.layer_name() == "Hardtanh(min_val=-2, max_val=0.5)");
  CHECK(sp.layer_name() == "Softplus(beta=2, threshold=5)");
  CHECK(mish_m.layer_name() == "Mish()");
  // the keep policy: f16 in, f16 out, under autocast too
  CHECK(nn::Mish()(to(x, DType::F16)).dtype() == DType::F16);
  CHECK(nn::LeakyReLU()(to(x, DType::BF16)).dtype() == DType::BF16);
  // bad options: at construction, and in the ops
  MG_REQUIRE_ERROR(nn::LeakyReLU({.negative_slope = NAN}), "LeakyReLU: negative_slope must be finite, got nan");
  MG_REQUIRE_ERROR(nn::CELU({.alpha = 0.0}), "CELU: alpha must be finite and not 0, got 0");
  MG_REQUIRE_ERROR(nn::ELU({.alpha = INFINITY}), "ELU: alpha must be finite, got inf");
  MG_REQUIRE_ERROR(nn::Hardtanh({.min_val = 1.0, .max_val = -1.0}), "Hardtanh: max_val (-1) must be greater than min_val (1)");
  MG_REQUIRE_ERROR(nn::Hardtanh({.min_val = 1.0, .max_val = 1.0}), "must be greater than min_val");  // PyTorch asserts it
  MG_REQUIRE_ERROR(nn::Softplus({.beta = 0.0}), "Softplus: beta must be finite and not 0, got 0");
  MG_REQUIRE_ERROR(celu(x, 0.0), "celu: alpha must be finite and not 0, got 0");
  MG_REQUIRE_ERROR(leaky_relu(x, INFINITY), "leaky_relu: negative_slope must be finite, got inf");
  MG_REQUIRE_ERROR(hardtanh(x, 2.0, 1.0), "hardtanh: min_val (2) is greater than max_val (1)");
  MG_REQUIRE_ERROR(mish(ones({2}, {.dtype = DType::I64})), "mish");
  MG_REQUIRE_ERROR(hardswish(Tensor()), "hardswish");
}

TEST_CASE("pooling layers: values by hand and against the ops", "[nn][layers][pool]") {
  // x [1, 1, 4, 4] = 0..15
  const Tensor x = arange(0, 16, 1, {.dtype = DType::F64}).reshape({1, 1, 4, 4});
  nn::MaxPool2d mp({.kernel = 2});
  CHECK(values(mp(x)) == std::vector<double>{5, 7, 13, 15});  // stride defaults to the kernel
  CHECK(mp.layer_name() == "MaxPool2d(kernel=2, stride=2, padding=0)");
  nn::AvgPool2d ap({.kernel = 2});
  CHECK(values(ap(x)) == std::vector<double>{2.5, 4.5, 10.5, 12.5});
  // kernel 3, stride 2, padding 1: the first window covers {0, 1, 4, 5} and 5 padding zeros
  nn::AvgPool2d with_pad({.kernel = 3, .stride = 2, .padding = 1});
  nn::AvgPool2d no_pad({.kernel = 3, .stride = 2, .padding = 1, .count_include_pad = false});
  REQUIRE(with_pad(x).shape() == Shape{1, 1, 2, 2});
  CHECK(values(with_pad(x))[0] == Approx(10.0 / 9.0).epsilon(1e-15));
  CHECK(values(no_pad(x))[0] == Approx(10.0 / 4.0).epsilon(1e-15));
  CHECK(no_pad.layer_name() == "AvgPool2d(kernel=3, stride=2, padding=1, count_include_pad=false)");
  nn::MaxPool2d mp3({.kernel = 3, .stride = 2, .padding = 1});
  CHECK(values(mp3(x)) == std::vector<double>{5, 7, 13, 15});

  const Tensor r = rnd({2, 3, 7, 6}, 11);
  nn::MaxPool2d mpd({.kernel = {3, 2}, .stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}});
  CHECK(values(mpd(r)) == values(max_pool2d(r, {3, 2}, {2, 1}, {1, 0}, {1, 2})));
  CHECK(mpd.layer_name() == "MaxPool2d(kernel=3x2, stride=2x1, padding=1x0, dilation=1x2)");
  nn::AvgPool2d apr({.kernel = {2, 3}, .stride = 2});
  CHECK(values(apr(r)) == values(avg_pool2d(r, {2, 3}, {2, 2}, {0, 0}, true)));

  // adaptive: output 1 is the global mean, {2, 1} the mean of each half
  nn::AdaptiveAvgPool2d gap({.output = 1});
  REQUIRE(gap(x).shape() == Shape{1, 1, 1, 1});
  CHECK(values(gap(x)) == std::vector<double>{7.5});
  CHECK(values(nn::AdaptiveAvgPool2d({.output = {2, 1}})(x)) == std::vector<double>{3.5, 11.5});
  CHECK(values(nn::AdaptiveAvgPool2d({.output = {3, 2}})(r)) == values(adaptive_avg_pool2d(r, {3, 2})));
  CHECK(gap.layer_name() == "AdaptiveAvgPool2d(output=1)");
}

// ---------------------------------------------------------------------------------------------
// Containers
// ---------------------------------------------------------------------------------------------

TEST_CASE("Sequential: positional names, forward, at<T>, push_back and the printed tree", "[nn][layers][container]") {
  nn::Sequential net({nn::make<nn::Conv2d>({.in = 3, .out = 4, .kernel = 3, .padding = 1, .bias = false}),
                      nn::make<nn::BatchNorm2d>({.features = 4}), nn::make<nn::ReLU>(), nn::make<nn::Flatten>(),
                      nn::make<nn::Linear>({.in = 64, .out = 10})});
  REQUIRE(net.size() == 5);
  CHECK(names(net.named_parameters()) ==
        std::vector<std::string>{"0.weight", "1.weight", "1.bias", "4.weight", "4.bias"});
  CHECK(names(net.named_buffers()) ==
        std::vector<std::string>{"1.running_mean", "1.running_var", "1.num_batches_tracked"});
  CHECK(net.num_parameters() == 4 * 3 * 9 + 4 + 4 + 64 * 10 + 10);
  CHECK(net.str() ==
        "Sequential(\n"
        "  (0): Conv2d(3, 4, kernel=3, stride=1, padding=1, bias=false)\n"
        "  (1): BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)\n"
        "  (2): ReLU()\n"
        "  (3): Flatten(start_dim=1, end_dim=-1)\n"
        "  (4): Linear(in=64, out=10, bias=true)\n"
        ")");

  // forward is the layers in order
  net.to(DType::F64);
  net.eval();
  const Tensor x = rnd({2, 3, 4, 4}, 12);
  auto conv = net.at<nn::Conv2d>(0);
  auto bn = net.at<nn::BatchNorm2d>(1);
  auto fc = net.at<nn::Linear>(4);
  CHECK(conv->weight.is_same(net.parameters()[0]));
  const Tensor want = linear(relu(batch_norm(conv2d(x, conv->weight, Tensor(), {.padding = {1, 1}}), bn->weight, bn->bias,
                                             bn->running_mean, bn->running_var, false))
                                 .flatten(1),
                             fc->weight, fc->bias);
  require_close(values(net(x)), values(want), 1e-12);
  CHECK(!net[2]->is_training());  // eval reached the children

  MG_REQUIRE_ERROR(net.at<nn::Linear>(0), "Sequential: layer 0 is a Conv2d, not the requested type");
  REQUIRE_THROWS_AS(net[5], IndexError);
  MG_REQUIRE_ERROR(net[5], "Sequential: index 5 is out of range for 5 layers");
  CHECK(net[-1] == net[4]);  // from the end, as PyTorch's seq[-1]
  CHECK(net.at<nn::Linear>(-1) == fc);
  MG_REQUIRE_ERROR(net[-6], "Sequential: index -6 is out of range for 5 layers");

  // push_back: by position or by name; nested containers indent
  nn::Sequential outer;
  outer.push_back(std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::UnaryModule>>{nn::make<nn::Linear>({.in = 2, .out = 2})}));
  outer.push_back("act", nn::make<nn::Tanh>());
  outer.push_back(nn::make<nn::Linear>({.in = 2, .out = 1, .bias = false}));
  CHECK(names(outer.named_parameters()) == std::vector<std::string>{"0.0.weight", "0.0.bias", "2.weight"});
  CHECK(outer.str() ==
        "Sequential(\n"
        "  (0): Sequential(\n"
        "    (0): Linear(in=2, out=2, bias=true)\n"
        "  )\n"
        "  (act): Tanh()\n"
        "  (2): Linear(in=2, out=1, bias=false)\n"
        ")");
  MG_REQUIRE_ERROR(outer.push_back("act", nn::make<nn::ReLU>()),
                   "Sequential: module name \"act\" is already registered");
  const Tensor in = rnd({3, 2}, 13, DType::F32);
  auto inner = outer.at<nn::Sequential>(0)->at<nn::Linear>(0);
  auto head = outer.at<nn::Linear>(2);
  CHECK(values(outer(in)) == values(linear(tanh(linear(in, inner->weight, inner->bias)), head->weight)));
}

namespace {
// A model written with register_module<M>(name, options) and a ModuleList.
struct Tower : nn::Module {
  explicit Tower(int64_t depth) : Module("Tower") {
    embed = register_module<nn::Linear>("embed", {.in = 3, .out = 4});
    blocks = register_module("blocks", std::make_shared<nn::ModuleList>());
    for (int64_t i = 0; i < depth; ++i) blocks->push_back(nn::make<nn::Linear>({.in = 4, .out = 4, .bias = false}));
    norm = register_module<nn::BatchNorm1d>("norm", {.features = 4});
  }
  Tensor forward(const Tensor& x) {
    Tensor h = embed->forward(x);
    for (const auto& m : *blocks) h = relu(std::dynamic_pointer_cast<nn::Linear>(m)->forward(h));
    return norm->forward(h);
  }
  std::shared_ptr<nn::Linear> embed;
  std::shared_ptr<nn::ModuleList> blocks;
  std::shared_ptr<nn::BatchNorm1d> norm;
};
}  // namespace

TEST_CASE("ModuleList, register_module with options, and Functional", "[nn][layers][container]") {
  Tower tower(2);
  CHECK(names(tower.state_dict()) ==
        std::vector<std::string>{"embed.weight", "embed.bias", "blocks.0.weight", "blocks.1.weight", "norm.weight",
                                 "norm.bias", "norm.running_mean", "norm.running_var", "norm.num_batches_tracked"});
  REQUIRE(tower.blocks->size() == 2);
  CHECK(tower.blocks->at<nn::Linear>(1)->options().in == 4);
  CHECK(tower.blocks->at<nn::Linear>(1)->weight.is_same(tower.parameters()[3]));
  MG_REQUIRE_ERROR(tower.blocks->at<nn::ReLU>(0), "ModuleList: module 0 is a Linear, not the requested type");
  MG_REQUIRE_ERROR((*tower.blocks)[2], "ModuleList: index 2 is out of range for 2 modules");
  CHECK((*tower.blocks)[-2] == (*tower.blocks)[0]);
  MG_REQUIRE_ERROR((*tower.blocks)[-3], "ModuleList: index -3 is out of range for 2 modules");
  int count = 0;
  for (const auto& m : *tower.blocks) count += m->type_name() == "Linear";
  CHECK(count == 2);
  CHECK(tower.str() ==
        "Tower(\n"
        "  (embed): Linear(in=3, out=4, bias=true)\n"
        "  (blocks): ModuleList(\n"
        "    (0): Linear(in=4, out=4, bias=false)\n"
        "    (1): Linear(in=4, out=4, bias=false)\n"
        "  )\n"
        "  (norm): BatchNorm1d(4, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)\n"
        ")");
  REQUIRE(tower.forward(rnd({5, 3}, 14, DType::F32)).shape() == Shape{5, 4});
  CHECK(tower.norm->num_batches_tracked.item<int64_t>() == 1);

  // Functional: a parameter-free layer from a function, with an optional type name
  nn::Functional twice([](const Tensor& x) { return x * 2.0; }, "Twice");
  CHECK(twice.type_name() == "Twice");
  CHECK(twice.str() == "Twice()");
  CHECK(twice.parameters().empty());
  CHECK(values(twice(f64({1, -2}))) == std::vector<double>{2, -4});
  nn::Sequential seq({nn::make<nn::Linear>({.in = 6, .out = 2}),
                      std::make_shared<nn::Functional>([](const Tensor& x) { return softmax(x, -1); })});
  CHECK(seq.str() ==
        "Sequential(\n"
        "  (0): Linear(in=6, out=2, bias=true)\n"
        "  (1): Functional()\n"
        ")");
  const Tensor in = rnd({3, 6}, 15, DType::F32);
  auto fc = seq.at<nn::Linear>(0);
  CHECK(values(seq(in)) == values(softmax(linear(in, fc->weight, fc->bias), -1)));
  // a reshape inside a Sequential
  nn::Sequential reshaper({std::make_shared<nn::Functional>([](const Tensor& x) { return x.reshape({-1, 6}); }),
                           nn::make<nn::Linear>({.in = 6, .out = 1})});
  REQUIRE(reshaper(rnd({2, 3, 2}, 16, DType::F32)).shape() == Shape{2, 1});
}

// ---------------------------------------------------------------------------------------------
// Losses
// ---------------------------------------------------------------------------------------------

TEST_CASE("loss modules equal their ops with options, and hand-computed values", "[nn][layers][loss]") {
  // cross entropy: logits [[1, 2, 3], [1, 1, 1]], targets [2, 0]
  const Tensor logits = f64({1, 2, 3, 1, 1, 1}, {2, 3});
  const Tensor target = i64({2, 0});
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  nn::CrossEntropyLoss ce;
  CHECK(ce(logits, target).item<double>() == Approx(((lse - 3) + std::log(3.0)) / 2).epsilon(1e-14));
  CHECK(ce.layer_name() == "CrossEntropyLoss(reduction=mean, ignore_index=-100, label_smoothing=0)");
  // label smoothing 0.2 and ignore_index 0 (the second row is ignored), summed:
  // 0.8 (lse - 3) + 0.2 mean_c(lse - x_c) = 0.8 (lse - 3) + 0.2 (lse - 2)
  nn::CrossEntropyLoss ce_opt({.reduction = Reduction::Sum, .ignore_index = 0, .label_smoothing = 0.2});
  CHECK(ce_opt(logits, target).item<double>() == Approx(0.8 * (lse - 3) + 0.2 * (lse - 2)).epsilon(1e-14));
  const Tensor big = rnd({4, 5, 3}, 17);
  const Tensor big_t = i64({0, 4, 2, 1, 3, 3, -100, 0, 1, 2, 4, 4}, {4, 3});
  nn::CrossEntropyLoss ce_none({.reduction = Reduction::None, .label_smoothing = 0.1});
  CHECK(values(ce_none(big, big_t)) == values(cross_entropy(big, big_t, Reduction::None, -100, 0.1)));
  REQUIRE(ce_none(big, big_t).shape() == Shape{4, 3});
  CHECK(values(nn::CrossEntropyLoss()(big, big_t)) == values(cross_entropy(big, big_t)));

  // nll: -log p[t], ignore_index skips
  const Tensor logp = log_softmax(logits, 1);
  nn::NLLLoss nll({.reduction = Reduction::Sum, .ignore_index = 2});
  CHECK(nll(logp, target).item<double>() == Approx(std::log(3.0)).epsilon(1e-14));
  CHECK(values(nn::NLLLoss()(logp, target)) == values(ce(logits, target)));

  // regression: x [1, 2, 3], y [1.5, 2, 1]: d = [-0.5, 0, 2]
  const Tensor xr = f64({1, 2, 3}), yr = f64({1.5, 2, 1});
  CHECK(nn::MSELoss()(xr, yr).item<double>() == Approx(4.25 / 3).epsilon(1e-15));
  CHECK(nn::MSELoss({.reduction = Reduction::Sum})(xr, yr).item<double>() == 4.25);
  CHECK(values(nn::MSELoss({.reduction = Reduction::None})(xr, yr)) == std::vector<double>{0.25, 0, 4});
  CHECK(nn::L1Loss()(xr, yr).item<double>() == Approx(2.5 / 3).epsilon(1e-15));
  CHECK(values(nn::L1Loss({.reduction = Reduction::None})(xr, yr)) == std::vector<double>{0.5, 0, 2});
  // smooth L1 with beta 0.5 on d = [0.25, 1, -2]: 0.5 d^2 / beta below beta, |d| - beta / 2 above
  const Tensor d = f64({0.25, 1, -2});
  nn::SmoothL1Loss sl1({.reduction = Reduction::None, .beta = 0.5});
  CHECK(values(sl1(d, zeros_like(d))) == std::vector<double>{0.0625, 0.75, 1.75});
  CHECK(nn::SmoothL1Loss()(d, zeros_like(d)).item<double>() == Approx((0.03125 + 0.5 + 1.5) / 3).epsilon(1e-15));
  CHECK(values(nn::SmoothL1Loss({.beta = 0.0})(d, zeros_like(d))) == values(nn::L1Loss()(d, zeros_like(d))));

  // BCE with logits and pos_weight [3, 0.5]: x [[0.5, -1]], t [[1, 0]]:
  // [3 log(1 + e^-0.5), log(1 + e^-1)]
  const Tensor bx = f64({0.5, -1}, {1, 2}), bt = f64({1, 0}, {1, 2});
  nn::BCEWithLogitsLoss bce_pw({.reduction = Reduction::None, .pos_weight = f64({3, 0.5})});
  require_close(values(bce_pw(bx, bt)), {3 * std::log1p(std::exp(-0.5)), std::log1p(std::exp(-1.0))}, 1e-15);
  const Tensor sx = rnd({4, 2}, 18), st = sigmoid(rnd({4, 2}, 19));
  nn::BCEWithLogitsLoss bce_sum({.reduction = Reduction::Sum, .pos_weight = f64({2, 0.25})});
  CHECK(values(bce_sum(sx, st)) == values(binary_cross_entropy_with_logits(sx, st, f64({2, 0.25}), Reduction::Sum)));
  require_close(values(nn::BCEWithLogitsLoss()(sx, st)), values(nn::BCELoss()(sigmoid(sx), st)), 1e-12);
  // BCE on probabilities: p [0.8, 0.3], t [1, 0]
  CHECK(nn::BCELoss()(f64({0.8, 0.3}), f64({1, 0})).item<double>() ==
        Approx(-(std::log(0.8) + std::log(0.7)) / 2).epsilon(1e-14));

  // KL divergence: input log q, target p; batchmean divides the sum by N = 2
  const Tensor q = f64({0.2, 0.3, 0.5, 0.6, 0.3, 0.1}, {2, 3});
  const Tensor pt = f64({0.1, 0.1, 0.8, 0.4, 0.4, 0.2}, {2, 3});
  const std::vector<double> qv = values(q), pv = values(pt);
  double kl = 0;
  for (std::size_t i = 0; i < qv.size(); ++i) kl += pv[i] * (std::log(pv[i]) - std::log(qv[i]));
  nn::KLDivLoss kld({.reduction = Reduction::BatchMean});
  CHECK(kld(log(q), pt).item<double>() == Approx(kl / 2).epsilon(1e-14));
  nn::KLDivLoss kld_log({.reduction = Reduction::BatchMean, .log_target = true});
  CHECK(kld_log(log(q), log(pt)).item<double>() == Approx(kl / 2).epsilon(1e-14));
  CHECK(nn::KLDivLoss()(log(q), pt).item<double>() == Approx(kl / 6).epsilon(1e-14));  // mean over elements
  CHECK(values(nn::KLDivLoss({.reduction = Reduction::None, .log_target = true})(log(q), log(pt))) ==
        values(kl_div(log(q), log(pt), Reduction::None, true)));

  // losses are modules without parameters and feed backward
  const Tensor w = rnd({2, 3}, 20).requires_grad_();
  ce(w, target).backward();
  REQUIRE(w.grad().defined());
  CHECK(ce.parameters().empty());
}

// ---------------------------------------------------------------------------------------------
// Mixed precision: keep batch norm in f32
// ---------------------------------------------------------------------------------------------

TEST_CASE("to(f16, is_batch_norm) keeps batch norm f32 - conv(f16) -> BN -> ReLU stays f16", "[nn][layers][amp]") {
  manual_seed(40);
  nn::Sequential net({nn::make<nn::Conv2d>({.in = 3, .out = 4, .kernel = 3, .padding = 1, .bias = false}),
                      nn::make<nn::BatchNorm2d>({.features = 4}), nn::make<nn::ReLU>()});
  auto conv = net.at<nn::Conv2d>(0);
  auto bn = net.at<nn::BatchNorm2d>(1);
  assign(bn->weight, f64({1, 2, 0.5, 1}));
  assign(bn->bias, f64({0, 0.1, -0.1, 0.2}));
  const Tensor w32 = conv->weight.clone();
  CHECK(!nn::is_batch_norm(*conv));
  CHECK(nn::is_batch_norm(*bn));
  CHECK(nn::is_batch_norm(nn::BatchNorm1d({.features = 2})));

  net.to(DType::F16, nn::is_batch_norm);
  CHECK(conv->weight.dtype() == DType::F16);
  CHECK(values(conv->weight) == values(to(w32, DType::F16)));
  for (const auto& [name, t] : bn->state_dict()) {
    INFO(name);
    CHECK(t.dtype() == (name == "num_batches_tracked" ? DType::I64 : DType::F32));
  }
  // without the predicate everything floating becomes f16
  nn::BatchNorm2d all16({.features = 2});
  all16.to(DType::F16);
  CHECK(all16.running_var.dtype() == DType::F16);
  CHECK(all16.num_batches_tracked.dtype() == DType::I64);

  const Tensor x = to(rnd({2, 3, 5, 5}, 41, DType::F32), DType::F16);
  const Tensor y = net(x);
  CHECK(y.dtype() == DType::F16);
  // f32 reference from the same f16 values: conv, batch statistics, relu
  const Tensor h = conv2d(to(x, DType::F32), to(conv->weight, DType::F32), Tensor(), {.padding = {1, 1}});
  Tensor rm = zeros({4}), rv = ones({4});
  const Tensor want = relu(batch_norm(h, bn->weight, bn->bias, rm, rv, true));
  require_close(values(y), values(want), 4e-3);
  // the running statistics are updated in f32 from the f16 batch
  CHECK(bn->running_mean.dtype() == DType::F32);
  require_close(values(bn->running_mean), values(rm), 1e-3);
  require_close(values(bn->running_var), values(rv), 1e-3);
  CHECK(bn->num_batches_tracked.item<int64_t>() == 1);
  // gradients arrive in each parameter's dtype
  sum(to(y, DType::F32)).backward();
  CHECK(conv->weight.grad().dtype() == DType::F16);
  CHECK(bn->weight.grad().dtype() == DType::F32);
  // eval with f32 running statistics still returns f16
  net.eval();
  CHECK(net(x).dtype() == DType::F16);
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

TEST_CASE("bad layer inputs name the layer and both shapes", "[nn][layers][errors]") {
  nn::Linear fc({.in = 4, .out = 2});
  REQUIRE_THROWS_AS(fc(ones({2, 3})), ShapeError);
  MG_REQUIRE_ERROR(fc(ones({2, 3})),
                   "Linear(in=4, out=2, bias=true): input has 3 features but the layer expects 4; got input [2, 3], "
                   "weight [2, 4]");

  nn::Conv2d conv({.in = 3, .out = 8, .kernel = 3});
  REQUIRE_THROWS_AS(conv(ones({5, 5})), ShapeError);
  MG_REQUIRE_ERROR(conv(ones({5, 5})),
                   "Conv2d(3, 8, kernel=3, stride=1): expected input [N, 3, H, W] (4-D with 3 channels, or an unbatched "
                   "[3, H, W]), got input [5, 5], weight [8, 3, 3, 3]");
  MG_REQUIRE_ERROR(conv(ones({1, 4, 5, 5})), "got input [1, 4, 5, 5], weight [8, 3, 3, 3]");
  nn::Conv2d big({.in = 3, .out = 8, .kernel = 5});
  MG_REQUIRE_ERROR(big(ones({1, 3, 4, 4})),
                   "Conv2d(3, 8, kernel=5, stride=1): kernel 5 (dilated 5x5) is larger than the padded input 4x4; got "
                   "input [1, 3, 4, 4], weight [8, 3, 5, 5]");
  REQUIRE(nn::Conv2d({.in = 3, .out = 8, .kernel = 5, .padding = 1})(ones({1, 3, 4, 4})).shape() == Shape{1, 8, 2, 2});
  nn::Conv2d dilated({.in = 3, .out = 8, .kernel = 3, .dilation = {2, 1}});
  MG_REQUIRE_ERROR(dilated(ones({1, 3, 4, 4})), "kernel 3 (dilated 5x3) is larger than the padded input 4x4");
  nn::ConvTranspose2d up({.in = 4, .out = 2, .kernel = 2});
  MG_REQUIRE_ERROR(up(ones({1, 3, 5, 5})), "ConvTranspose2d(4, 2, kernel=2, stride=1): expected input [N, 4, H, W]");

  nn::Embedding emb({.num = 10, .dim = 3});
  REQUIRE_THROWS_AS(emb(i64({1, 10})), IndexError);
  MG_REQUIRE_ERROR(emb(i64({1, 10})), "Embedding(10, 3): embedding: index 10 is out of range for a table of 10 rows");
  MG_REQUIRE_ERROR(emb(i64({1, 10})), "[10, 3]");
  MG_REQUIRE_ERROR(emb(i64({-1})), "Embedding(10, 3): embedding: index -1 is out of range");
  REQUIRE_THROWS_AS(emb(f64({1, 2})), DTypeError);
  MG_REQUIRE_ERROR(emb(f64({1, 2})), "Embedding(10, 3): expected i64 or i32 indices, got [2] f64 cpu");
  MG_REQUIRE_ERROR(emb(zeros({2}, {.dtype = DType::U8})), "Embedding(10, 3): expected i64 or i32 indices, got [2] u8 cpu");

  nn::CrossEntropyLoss ce;
  REQUIRE_THROWS_AS(ce(zeros({2, 3}), i64({0, 3})), IndexError);
  MG_REQUIRE_ERROR(ce(zeros({2, 3}), i64({0, 3})),
                   "CrossEntropyLoss(reduction=mean, ignore_index=-100, label_smoothing=0): cross_entropy: target 3 is "
                   "out of range for 3 classes");
  MG_REQUIRE_ERROR(ce(zeros({2, 3}), i64({0, 3})), "input [2, 3]");
  MG_REQUIRE_ERROR(ce(zeros({2, 3}), i64({0, 3})), "target [2]");
  MG_REQUIRE_ERROR(ce(zeros({2, 3}), i64({-5, 0})), "target -5 is out of range");
  MG_REQUIRE_ERROR(nn::NLLLoss()(zeros({2, 3}), i64({0, 7})), "NLLLoss(): nll_loss: target 7 is out of range");

  nn::BatchNorm2d bn({.features = 4});
  REQUIRE_THROWS_AS(bn(ones({2, 4, 3})), ShapeError);
  MG_REQUIRE_ERROR(bn(ones({2, 4, 3})),
                   "BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true): expected a 4-D "
                   "input [N, 4, ...] with 4 channels, got input [2, 4, 3]");
  MG_REQUIRE_ERROR(bn(ones({2, 3, 2, 2})), "with 4 channels, got input [2, 3, 2, 2]");
  MG_REQUIRE_ERROR(nn::BatchNorm1d({.features = 2})(ones({2, 2, 2, 2})), "expected a 2-D or 3-D input [N, 2, ...]");
  // training needs more than one value per channel
  MG_REQUIRE_ERROR(bn(ones({1, 4, 1, 1})), "batch_norm: expected more than 1 value per channel when training");
  CHECK(bn.num_batches_tracked.item<int64_t>() == 0);  // a refused batch is not counted

  nn::LayerNorm ln({.shape = {4}});
  REQUIRE_THROWS_AS(ln(ones({2, 3})), ShapeError);
  MG_REQUIRE_ERROR(ln(ones({2, 3})), "LayerNorm([4], eps=1e-05, elementwise_affine=true): expected input [..., 4], got input [2, 3]");
  MG_REQUIRE_ERROR(nn::LayerNorm({.shape = {2, 3}})(ones({3, 2})), "expected input [..., 2, 3], got input [3, 2]");
  MG_REQUIRE_ERROR(nn::GroupNorm({.groups = 2, .channels = 4})(ones({2, 6, 3})),
                   "GroupNorm(2, 4, eps=1e-05, affine=true): expected input [N, 4, ...], got input [2, 6, 3]");
  MG_REQUIRE_ERROR(nn::RMSNorm({.shape = {8}})(ones({2, 4})), "RMSNorm([8], eps=None, elementwise_affine=true): expected input [..., 8], got input [2, 4]");

  nn::MaxPool2d mp({.kernel = 3});
  MG_REQUIRE_ERROR(mp(ones({1, 1, 2, 2})),
                   "MaxPool2d(kernel=3, stride=3, padding=0): window 3 is larger than the padded input 2x2; got input [1, 1, 2, 2]");
  MG_REQUIRE_ERROR(mp(ones({2, 2})), "MaxPool2d(kernel=3, stride=3, padding=0): expected a 4-D input [N, C, H, W] (or an "
                                    "unbatched [C, H, W]), got input [2, 2]");
  MG_REQUIRE_ERROR(nn::AdaptiveAvgPool2d({.output = 2})(ones({4, 4})), "AdaptiveAvgPool2d(output=2): expected a 4-D input");

  // inside a Sequential the failing layer still names itself
  nn::Sequential seq({nn::make<nn::Linear>({.in = 4, .out = 3}), nn::make<nn::ReLU>(), nn::make<nn::Linear>({.in = 2, .out = 1})});
  MG_REQUIRE_ERROR(seq(ones({5, 4})), "Linear(in=2, out=1, bias=true): input has 3 features but the layer expects 2");
}

TEST_CASE("bad constructor options are refused with the layer name", "[nn][layers][errors]") {
  MG_REQUIRE_ERROR(nn::Linear({.in = -1, .out = 2}), "Linear: in and out must not be negative, got in=-1, out=2");
  MG_REQUIRE_ERROR(nn::Conv2d({.in = 4, .out = 6, .kernel = 3, .groups = 3}),
                   "Conv2d: groups (3) must divide in (4) and out (6)");
  MG_REQUIRE_ERROR(nn::Conv2d({.in = 4, .out = 6, .kernel = 3, .groups = 4}), "Conv2d: groups (4) must divide");
  MG_REQUIRE_ERROR(nn::Conv2d({.in = 3, .out = 8}), "Conv2d: kernel must be positive, got 0\n  hint: set .kernel");
  MG_REQUIRE_ERROR(nn::Conv2d({.in = 3, .out = 8, .kernel = {3, 0}}), "Conv2d: kernel must be positive, got 3x0");
  MG_REQUIRE_ERROR(nn::Conv2d({.in = 3, .out = 8, .kernel = 3, .stride = 0}),
                   "Conv2d: stride and dilation must be positive, got stride=0, dilation=1");
  MG_REQUIRE_ERROR(nn::Conv2d({.in = 3, .out = 8, .kernel = 3, .padding = -1}), "Conv2d: padding must be non-negative, got -1");
  MG_REQUIRE_ERROR(nn::ConvTranspose2d({.in = 4, .out = 6, .kernel = 3, .stride = 2, .output_padding = 2}),
                   "ConvTranspose2d: output_padding 2 must be smaller than the stride or the dilation");
  MG_REQUIRE_ERROR(nn::ConvTranspose2d({.in = 4, .out = 6, .kernel = 3, .groups = 4}), "ConvTranspose2d: groups (4) must divide");
  MG_REQUIRE_ERROR(nn::Dropout({.p = 1.5}), "Dropout: p must be in [0, 1], got 1.5");
  MG_REQUIRE_ERROR(nn::Dropout({.p = -0.1}), "Dropout: p must be in [0, 1], got -0.1");
  MG_REQUIRE_ERROR(nn::MaxPool2d({.kernel = 0}), "MaxPool2d: kernel must be positive, got 0");
  MG_REQUIRE_ERROR(nn::MaxPool2d({.kernel = 2, .dilation = 0}), "MaxPool2d: dilation must be positive, got 0");
  MG_REQUIRE_ERROR(nn::AvgPool2d({.kernel = 3, .padding = 2}),
                   "AvgPool2d: padding 2 must be non-negative and at most half the kernel 3");
  MG_REQUIRE_ERROR(nn::AdaptiveAvgPool2d({.output = {2, -1}}), "AdaptiveAvgPool2d: output size must not be negative, got 2x-1");
  MG_REQUIRE_ERROR(nn::BatchNorm2d({.features = 0}), "BatchNorm2d: features must be positive, got 0");
  MG_REQUIRE_ERROR(nn::BatchNorm2d({.features = 2, .momentum = 1.5}), "BatchNorm2d: momentum must be in [0, 1], got 1.5");
  MG_REQUIRE_ERROR(nn::BatchNorm1d({.features = 2, .eps = -1e-5}), "BatchNorm1d: eps must be >= 0, got -1e-05");
  MG_REQUIRE_ERROR(nn::LayerNorm({.shape = {}}), "LayerNorm: shape must name at least one dim");
  MG_REQUIRE_ERROR(nn::LayerNorm({.shape = {4, 0}}), "LayerNorm: shape dims must be positive, got [4, 0]");
  MG_REQUIRE_ERROR(nn::GroupNorm({.groups = 3, .channels = 4}), "GroupNorm: groups (3) must be positive and divide channels (4)");
  MG_REQUIRE_ERROR(nn::RMSNorm({.shape = {}}), "RMSNorm: shape must name at least one dim");
  MG_REQUIRE_ERROR(nn::Embedding({.num = 0, .dim = 4}), "Embedding: num and dim must be positive, got num=0, dim=4");
  REQUIRE_THROWS_AS(nn::Embedding({.num = 10, .dim = 4, .padding_idx = 10}), IndexError);
  MG_REQUIRE_ERROR(nn::Embedding({.num = 10, .dim = 4, .padding_idx = -11}), "Embedding: padding_idx -11 is out of range for 10 embeddings");
  MG_REQUIRE_ERROR(nn::CrossEntropyLoss({.label_smoothing = 1.5}), "CrossEntropyLoss: label_smoothing must be in [0, 1], got 1.5");
  MG_REQUIRE_ERROR(nn::SmoothL1Loss({.beta = -1}), "SmoothL1Loss: beta must be non-negative, got -1");
}

TEST_CASE("BatchNorm in training takes an empty batch as PyTorch: empty output, running statistics kept",
          "[nn][layers][norm][train]") {
  for (const Shape& s : std::vector<Shape>{{0, 3, 4, 4}, {2, 3, 0, 0}}) {
    INFO(str_cat(s));
    nn::BatchNorm2d bn({.features = 3});
    Tensor x = randn(s).requires_grad_();
    const Tensor y = bn.forward(x);
    CHECK(y.shape() == s);
    CHECK(values(bn.running_mean) == std::vector<double>(3, 0.0));
    CHECK(values(bn.running_var) == std::vector<double>(3, 1.0));
    CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
    sum(y).backward();
    CHECK(values(bn.weight.grad()) == std::vector<double>(3, 0.0));
    CHECK(values(bn.bias.grad()) == std::vector<double>(3, 0.0));
  }
  nn::BatchNorm1d bn1({.features = 3});
  CHECK(bn1.forward(randn({0, 3})).shape() == Shape{0, 3});
  // Exactly one value per channel is still refused: it has no variance.
  nn::BatchNorm2d one({.features = 3});
  MG_REQUIRE_ERROR(one.forward(randn({1, 3, 1, 1})), "batch_norm: expected more than 1 value per channel when training");
}

TEST_CASE("BCEWithLogitsLoss keeps pos_weight as a buffer, as PyTorch", "[nn][layers][loss]") {
  nn::BCEWithLogitsLoss loss({.pos_weight = full({4}, 2.0)});
  const nn::NamedTensors sd = loss.state_dict();
  REQUIRE(sd.size() == 1);
  CHECK(sd[0].first == "pos_weight");
  loss.to(DType::F64);
  CHECK(loss.state_dict()[0].second.dtype() == DType::F64);
  loss.load_state_dict({{"pos_weight", full({4}, 3.0)}});
  // loss = (1 - t) x + (1 + (pw - 1) t) softplus(-x) at x = 0, t = 1: pw log 2
  const Tensor l = loss.forward(zeros({2, 4}, {.dtype = DType::F64}), ones({2, 4}, {.dtype = DType::F64}));
  CHECK(l.item<double>() == Approx(3 * std::log(2.0)));
  CHECK(nn::BCEWithLogitsLoss().state_dict().empty());
}

TEST_CASE("norm layers refuse a negative eps and accept 0, as PyTorch's", "[nn][layers][norm]") {
  MG_REQUIRE_ERROR(nn::GroupNorm({.groups = 2, .channels = 4, .eps = -1.0}), "GroupNorm: eps must be >= 0, got -1");
  MG_REQUIRE_ERROR(nn::RMSNorm({.shape = {4}, .eps = -1.0}), "RMSNorm: eps must be >= 0, got -1");
  // eps = 0 is accepted, as PyTorch 2.15's layers accept it (only batch norm's training forward
  // refuses it, below): the layers normalise by the plain standard deviation.
  CHECK(values(nn::GroupNorm({.groups = 2, .channels = 4, .eps = 0.0}).forward(
            from_vector<float>({1, 3, 1, 3, 0, 4, 4, 0}, {1, 4, 2}))) ==
        std::vector<double>{-1, 1, -1, 1, -1, 1, 1, -1});
  CHECK_NOTHROW(nn::LayerNorm({.shape = {4}, .eps = 0.0}));
  CHECK_NOTHROW(nn::RMSNorm({.shape = {4}, .eps = 0.0}));
  auto bn0 = nn::BatchNorm1d({.features = 2, .eps = 0});
  MG_REQUIRE_ERROR(bn0.forward(ones({3, 2})), "batch_norm: eps must be positive in training, got 0");
  bn0.eval();
  CHECK(bn0.forward(ones({3, 2})).shape() == Shape{3, 2});
}

TEST_CASE("Linear names a 0-d input as such", "[nn][layers][errors]") {
  nn::Linear lin({.in = 3, .out = 2});
  MG_REQUIRE_ERROR(lin.forward(full({}, 1.0)), "expected an input [..., 3], got a 0-d input");
}

TEST_CASE("BCEWithLogitsLoss refuses a pos_weight that requires grad (its buffer has none)", "[nn][layers][loss]") {
  MG_REQUIRE_ERROR(nn::BCEWithLogitsLoss({.pos_weight = full({3}, 2.0).requires_grad_()}),
                   "BCEWithLogitsLoss: pos_weight [3] f32 cpu requires grad");
}

TEST_CASE("ModuleDict holds modules by key in insertion order", "[nn][layers][container]") {
  struct Heads : nn::Module {
    Heads() : Module("Heads") {
      heads = register_module("heads", std::make_shared<nn::ModuleDict>(std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>>{
                                           {"cls", nn::make<nn::Linear>({.in = 4, .out = 2})}}));
      heads->insert("tag", nn::make<nn::Linear>({.in = 4, .out = 3, .bias = false}));
    }
    std::shared_ptr<nn::ModuleDict> heads;
  } net;
  CHECK(names(net.named_parameters()) == std::vector<std::string>{"heads.cls.weight", "heads.cls.bias", "heads.tag.weight"});
  CHECK(net.heads->keys() == std::vector<std::string>{"cls", "tag"});
  CHECK(net.heads->size() == 2);
  CHECK(net.heads->contains("tag"));
  CHECK(!net.heads->contains("pos"));
  const Tensor h = rnd({5, 4}, 3, DType::F32);
  auto tag = net.heads->at<nn::Linear>("tag");
  CHECK(values((*tag)(h)) == values(linear(h, tag->weight)));
  int n = 0;
  for (const auto& [key, m] : *net.heads) n += (key == "cls" || key == "tag") && m->type_name() == "Linear";
  CHECK(n == 2);
  MG_REQUIRE_ERROR((*net.heads)["pos"], "ModuleDict: no module \"pos\" (keys: \"cls\", \"tag\")");
  REQUIRE_THROWS_AS((*net.heads)["pos"], IndexError);
  MG_REQUIRE_ERROR(net.heads->at<nn::ReLU>("cls"), "ModuleDict: module \"cls\" is a Linear, not the requested type");
  MG_REQUIRE_ERROR(net.heads->insert("cls", nn::make<nn::ReLU>()), "ModuleDict: module name \"cls\" is already registered");
  MG_REQUIRE_ERROR(net.heads->insert("a.b", nn::make<nn::ReLU>()), "must be non-empty and contain no '.'");
  CHECK(net.str() ==
        "Heads(\n"
        "  (heads): ModuleDict(\n"
        "    (cls): Linear(in=4, out=2, bias=true)\n"
        "    (tag): Linear(in=4, out=3, bias=false)\n"
        "  )\n"
        ")");
}
