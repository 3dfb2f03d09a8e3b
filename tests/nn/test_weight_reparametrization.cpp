// weight_norm and spectral_norm (nn/weight_norm.h, nn/spectral_norm.h): values, buffers and
// gradients equal PyTorch 2.15's torch.nn.utils.weight_norm / spectral_norm in f64 (numbers
// printed by PyTorch for the same weights and u, v), spectral norm's estimate converging to the
// largest singular value, state-dict names, default dims, removal, and errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "core/factory.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

void require_close(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-12) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    CHECK(std::fabs(got[i] - want[i]) <= tol * (1.0 + std::fabs(want[i])));
  }
}

std::vector<std::string> state_keys(const nn::Module& m) {
  std::vector<std::string> keys;
  for (const auto& [name, t] : m.state_dict()) keys.push_back(name);
  std::sort(keys.begin(), keys.end());
  return keys;
}

std::shared_ptr<nn::Linear> fixed_linear() {
  auto fc = nn::make<nn::Linear>({.in = 2, .out = 3, .bias = false});
  fc->to(DType::F64);
  {
    NoGradGuard no_grad;
    fc->weight.copy_(from_vector<double>({0.5, -1.0, 2.0, 0.25, -0.75, 1.5}, {3, 2}));
  }
  return fc;
}

const Tensor kX = from_vector<double>({1.0, 2.0, -0.5, 0.25}, {2, 2});
const Tensor kC = from_vector<double>({1.0, -2.0, 0.5, 0.25, 1.0, -1.0}, {2, 3});

}  // namespace

TEST_CASE("weight_norm equals PyTorch's: g and v parameters, values and gradients", "[nn][weight_norm]") {
  auto fc = fixed_linear();
  const Tensor original = fc->weight;
  const nn::ReparametrizationHandle h = nn::weight_norm(*fc, &nn::Linear::weight);
  CHECK(state_keys(*fc) == std::vector<std::string>{"weight_g", "weight_v"});
  Tensor g = fc->named_parameters()[0].second, v = fc->named_parameters()[1].second;
  CHECK(g.shape() == Shape{3, 1});
  CHECK(v.is_same(original));  // the direction is the old weight: w is unchanged at first
  require_close(values(fc->weight), values(original));
  {
    NoGradGuard no_grad;
    g.mul_(from_vector<double>({2.0, 0.5, 1.0}, {3, 1}));
  }
  const Tensor y = (*fc)(kX);
  sum(y * kC).backward();
  require_close(values(y), {-3.0, 1.25, 2.25, -1.0, -0.46875, 0.75});
  require_close(values(g.grad()), {-1.4534441853748632, -2.945824946493701, 0.22360679774997896});
  require_close(values(v.grad()), {3.05, 1.5250000000000004, 0.2115384615384619, -1.6923076923076923, 1.1, 0.55});

  // Removal folds g * v / ||v|| into one parameter `weight` again.
  const std::vector<double> folded = values(fc->weight);
  nn::remove_weight_norm(*fc, &nn::Linear::weight, h);
  CHECK(state_keys(*fc) == std::vector<std::string>{"weight"});
  CHECK(fc->weight.is_leaf());
  CHECK(fc->weight.requires_grad());
  CHECK(fc->parameters()[0].is_same(fc->weight));
  require_close(values(fc->weight), folded);
  CHECK_THROWS(nn::remove_weight_norm(*fc, &nn::Linear::weight, h));  // nothing to remove any more
}

TEST_CASE("weight_norm's dims: a conv's g is [out, 1, 1, 1], dim = nullopt gives one number", "[nn][weight_norm]") {
  manual_seed(3);
  auto conv = nn::make<nn::Conv2d>({.in = 2, .out = 4, .kernel = 3});
  nn::weight_norm(*conv, &nn::Conv2d::weight);
  CHECK(conv->named_parameters()[0].first == "bias");
  const Tensor g = conv->named_parameters()[1].second;
  CHECK(conv->named_parameters()[1].first == "weight_g");
  CHECK(g.shape() == Shape{4, 1, 1, 1});
  const Tensor x = randn({1, 2, 5, 5});
  const Tensor y = (*conv)(x);
  CHECK(y.shape() == Shape{1, 4, 3, 3});

  auto fc = fixed_linear();
  nn::weight_norm(*fc, &nn::Linear::weight, std::nullopt);
  const Tensor g0 = fc->named_parameters()[0].second;
  CHECK(g0.dim() == 0);
  CHECK(g0.item<double>() == Approx(std::sqrt(0.25 + 1.0 + 4.0 + 0.0625 + 0.5625 + 2.25)));
  // dim 1 (a [1, in] magnitude, one per input column).
  auto fc2 = fixed_linear();
  nn::weight_norm(*fc2, &nn::Linear::weight, 1);
  CHECK(fc2->named_parameters()[0].second.shape() == Shape{1, 2});
  require_close(values((*fc2)(kX)), values(matmul(kX, transpose(fixed_linear()->weight, 0, 1))));
}

TEST_CASE("weight_norm trains under an optimizer and survives to(dtype)", "[nn][weight_norm]") {
  manual_seed(5);
  auto fc = nn::make<nn::Linear>({.in = 3, .out = 2});
  nn::weight_norm(*fc, &nn::Linear::weight);
  const Tensor x = randn({4, 3});
  const Tensor g = fc->named_parameters()[1].second;  // bias, weight_g, weight_v
  const std::vector<double> before = values(g);
  sum((*fc)(x)).backward();
  {
    NoGradGuard no_grad;
    for (Tensor p : fc->parameters()) p.sub_(p.grad() * 0.1);
  }
  CHECK(values(g) != before);
  fc->to(DType::BF16);
  const Tensor y = (*fc)(x.to(DType::BF16));
  CHECK(y.dtype() == DType::BF16);
  CHECK(fc->weight.dtype() == DType::BF16);
}

TEST_CASE("spectral_norm equals PyTorch's: buffers, one power iteration, values and gradients",
          "[nn][spectral_norm]") {
  auto fc = fixed_linear();
  Generator gen(1);
  const nn::ReparametrizationHandle h = nn::spectral_norm(*fc, &nn::Linear::weight, {.generator = &gen});
  CHECK(state_keys(*fc) == std::vector<std::string>{"weight_orig", "weight_u", "weight_v"});
  CHECK(h.dim == 0);
  const Tensor orig = fc->named_parameters()[0].second;
  Tensor u = fc->named_buffers()[0].second, v = fc->named_buffers()[1].second;
  REQUIRE(u.shape() == Shape{3});
  REQUIRE(v.shape() == Shape{2});
  CHECK(norm(u).item<double>() == Approx(1.0));  // normalized normal draws
  {
    NoGradGuard no_grad;
    u.copy_(from_vector<double>({0.6, 0.0, 0.8}, {3}));
    v.copy_(from_vector<double>({1.0, 0.0}, {2}));
  }
  const Tensor y = (*fc)(kX);  // training: one power iteration first
  sum(y * kC).backward();
  const std::vector<double> want_y{-0.7061267297367756, 1.176877882894626,   1.0591900946051633,
                                   -0.2353755765789252, -0.4413292060854847, 0.3530633648683878};
  require_close(values(y), want_y);
  require_close(values(u), {-0.5263157894736842, -0.3157894736842105, 0.7894736842105263});
  require_close(values(v), {-0.4472135954999579, 0.8944271909999159});
  require_close(values(orig.grad()), {0.7868129557801051, 0.22111285985409423, -0.9519344648344341,
                                      -2.215203660462322, -0.09160739199262874, 1.477780455169346});
  // Eval mode: the stored u and v, no iteration.
  fc->eval();
  require_close(values((*fc)(kX)), want_y);
  require_close(values(u), {-0.5263157894736842, -0.3157894736842105, 0.7894736842105263});

  // Removal keeps W / sigma as the weight.
  const std::vector<double> w = values(fc->weight);
  nn::remove_spectral_norm(*fc, &nn::Linear::weight, h);
  CHECK(state_keys(*fc) == std::vector<std::string>{"weight"});
  require_close(values(fc->weight), w);
  CHECK(fc->buffers().empty());
}

TEST_CASE("spectral_norm's sigma converges to the largest singular value", "[nn][spectral_norm]") {
  // W = [[3, 0], [0, 2], [0, 0]] rotated by orthogonal matrices keeps singular values {3, 2}.
  auto fc = nn::make<nn::Linear>({.in = 2, .out = 3, .bias = false});
  fc->to(DType::F64);
  const double c = std::cos(0.4), s = std::sin(0.4);
  const Tensor rot = from_vector<double>({c, -s, s, c}, {2, 2});
  const Tensor w = matmul(from_vector<double>({3, 0, 0, 2, 0, 0}, {3, 2}), rot);
  {
    NoGradGuard no_grad;
    fc->weight.copy_(w);
  }
  Generator gen(7);
  nn::spectral_norm(*fc, &nn::Linear::weight, {.n_power_iterations = 60, .generator = &gen});
  (*fc)(zeros({1, 2}, {.dtype = DType::F64}));
  require_close(values(fc->weight), values(w / 3.0), 1e-9);
}

TEST_CASE("spectral_norm's default dim is 1 for transposed convolutions, as PyTorch's", "[nn][spectral_norm]") {
  manual_seed(2);
  auto up = nn::make<nn::ConvTranspose2d>({.in = 3, .out = 5, .kernel = 2});
  const nn::ReparametrizationHandle h = nn::spectral_norm(*up, &nn::ConvTranspose2d::weight);
  CHECK(h.dim == 1);
  CHECK(up->named_buffers()[0].second.shape() == Shape{5});       // u: out channels
  CHECK(up->named_buffers()[1].second.shape() == Shape{3 * 2 * 2});  // v: the rest
  CHECK((*up)(randn({1, 3, 4, 4})).shape() == Shape{1, 5, 5, 5});
  auto conv = nn::make<nn::Conv2d>({.in = 3, .out = 5, .kernel = 2});
  CHECK(nn::spectral_norm(*conv, &nn::Conv2d::weight).dim == 0);
  nn::remove_spectral_norm(*up, &nn::ConvTranspose2d::weight, h);
  CHECK(up->weight.shape() == Shape{3, 5, 2, 2});
}

TEST_CASE("weight reparametrizations refuse a member that is not the named parameter, and a foreign handle",
          "[nn][errors]") {
  auto fc = fixed_linear();
  MG_REQUIRE_ERROR(nn::weight_norm(*fc, &nn::Linear::bias), "weight_norm: the tensor given is not Linear(");
  MG_REQUIRE_ERROR(nn::weight_norm(*fc, &nn::Linear::weight, 0, "kernel"), "weight_norm: Linear(");
  MG_REQUIRE_ERROR(nn::weight_norm(*fc, &nn::Linear::weight, 2), "weight_norm");
  MG_REQUIRE_ERROR(nn::spectral_norm(*fc, &nn::Linear::weight, {.n_power_iterations = -1}),
                   "spectral_norm: n_power_iterations must be >= 0, got -1");
  MG_REQUIRE_ERROR(nn::spectral_norm(*fc, &nn::Linear::weight, {.eps = 0.0}),
                   "spectral_norm: eps must be a positive number");
  MG_REQUIRE_ERROR(fc->unregister_parameter("nope"), "Linear: no parameter named \"nope\" to unregister");
  MG_REQUIRE_ERROR(fc->unregister_buffer("nope"), "Linear: no buffer named \"nope\" to unregister");
  // After a refused call the layer is untouched.
  CHECK(state_keys(*fc) == std::vector<std::string>{"weight"});

  // A handle of another member, or of the other reparametrization, is refused before anything
  // changes (the wrong hook would have come off and the right one kept rewriting the member).
  auto both = nn::make<nn::Linear>({.in = 2, .out = 2});
  const auto hw = nn::weight_norm(*both, &nn::Linear::weight);
  const auto hb = nn::weight_norm(*both, &nn::Linear::bias, 0, "bias");
  MG_REQUIRE_ERROR(nn::remove_weight_norm(*both, &nn::Linear::weight, hb),
                   "remove_weight_norm: the handle belongs to parameter \"bias\" of another member");
  MG_REQUIRE_ERROR(nn::remove_spectral_norm(*both, &nn::Linear::weight, hw),
                   "remove_spectral_norm: the handle was returned by weight_norm");
  CHECK(state_keys(*both) == std::vector<std::string>{"bias_g", "bias_v", "weight_g", "weight_v"});
  nn::remove_weight_norm(*both, &nn::Linear::weight, hw);
  nn::remove_weight_norm(*both, &nn::Linear::bias, hb);
  CHECK(state_keys(*both) == std::vector<std::string>{"bias", "weight"});
}

TEST_CASE("spectral_norm's estimate ignores autocast, and the member holds the raw weight until the first call",
          "[nn][spectral_norm][amp]") {
  // PyTorch 2.15's CPU autocast lowers neither mv nor dot: the same weight with and without it.
  Generator g1(3), g2(3);
  auto a = fixed_linear(), b = fixed_linear();
  a->to(DType::F32);
  b->to(DType::F32);
  const Tensor raw = a->weight;
  nn::spectral_norm(*a, &nn::Linear::weight, {.generator = &g1});
  nn::spectral_norm(*b, &nn::Linear::weight, {.generator = &g2});
  CHECK(values(a->weight) == values(raw));  // PyTorch's module.weight = weight.data at apply time
  CHECK_FALSE(a->weight.requires_grad());
  const Tensor x = ones({1, 2});
  (*a)(x);
  {
    amp::Autocast ac({.device = DeviceType::CPU, .dtype = DType::BF16});
    (*b)(x);
  }
  CHECK(values(a->weight) == values(b->weight));
  CHECK(b->weight.dtype() == DType::F32);
}

TEST_CASE("from_torch_parametrizations loads torch.nn.utils.parametrizations checkpoints into the hook forms",
          "[nn][weight_norm][spectral_norm]") {
  // PyTorch 2.15: parametrizations.weight_norm on Linear(2, 3) and parametrizations.spectral_norm on
  // Conv1d(2, 2, 3), with these values set, in eval mode; its outputs printed for the same inputs.
  auto fc = nn::make<nn::Linear>({.in = 2, .out = 3});
  auto conv = nn::make<nn::Conv1d>({.in = 2, .out = 2, .kernel = 3});
  nn::Sequential net(std::vector<std::shared_ptr<nn::UnaryModule>>{fc, conv});
  net.to(DType::F64);
  nn::weight_norm(*fc, &nn::Linear::weight);
  nn::spectral_norm(*conv, &nn::Conv1d::weight);
  net.eval();
  const Tensor v = from_vector<double>({1, 2, 3, 4, 5, 6}, {6});
  const nn::NamedTensors torch_state{
      {"0.bias", from_vector<double>({0.1, -0.2, 0.3}, {3})},
      {"0.parametrizations.weight.original0", from_vector<double>({2.0, 0.5, 1.0}, {3, 1})},
      {"0.parametrizations.weight.original1", from_vector<double>({0.5, -1.0, 2.0, 0.25, -0.75, 1.5}, {3, 2})},
      {"1.bias", from_vector<double>({0.05, -0.05}, {2})},
      {"1.parametrizations.weight.original", arange(0, 12, 1, {.dtype = DType::F64}).reshape({2, 2, 3}) * 0.1 - 0.5},
      {"1.parametrizations.weight.0._u", from_vector<double>({0.6, 0.8}, {2})},
      {"1.parametrizations.weight.0._v", v / std::sqrt(91.0)},
  };
  const nn::NamedTensors renamed = nn::from_torch_parametrizations(torch_state);
  std::vector<std::string> names;
  for (const auto& [k, t] : renamed) names.push_back(k);
  CHECK(names == std::vector<std::string>{"0.bias", "0.weight_g", "0.weight_v", "1.bias", "1.weight_orig", "1.weight_u",
                                          "1.weight_v"});
  net.load_state_dict(renamed);
  require_close(values((*fc)(from_vector<double>({1.0, 2.0, -0.5, 0.25}, {2, 2}))),
                {-2.5832815729997476, 0.4201736729460423, 1.641640786499874, -0.7944271909999159, -0.4325651273547659,
                 0.7472135954999579});
  require_close(values((*conv)(from_vector<double>({1.0, 2.0, -1.0, 0.5, 0.0, 1.5, -0.5, 2.0}, {1, 2, 4}))),
                {-2.067818690404416, -1.791581469916883, 1.1470279554459744, 3.080688498858702});

  // Keys at the top level, and keys that are not parametrizations, pass through.
  CHECK(nn::from_torch_parametrizations({{"parametrizations.weight.original0", kX}, {"parametrizations.weight.original1", kX},
                                          {"bias", kX}})[0].first == "weight_g");
  // Parametrizations the hook forms cannot hold are named.
  MG_REQUIRE_ERROR(nn::from_torch_parametrizations({{"fc.parametrizations.weight.original", kX}}),
                   "'fc.parametrizations.weight.original' belongs to a parametrization of 'fc.weight' that nn::weight_norm "
                   "and nn::spectral_norm cannot hold");
  MG_REQUIRE_ERROR(nn::from_torch_parametrizations({{"parametrizations.weight.original0", kX}}),
                   "cannot hold (weight norm has original0 and original1");
  MG_REQUIRE_ERROR(nn::from_torch_parametrizations({{"parametrizations.weight.original0", kX},
                                                    {"parametrizations.weight.original1", kX},
                                                    {"weight_g", kX}}),
                   "'parametrizations.weight.original0' would be renamed to 'weight_g', which the state already has");
}
