// Bilinear, LocalResponseNorm, RReLU, AlphaDropout and FeatureAlphaDropout. bilinear,
// local_response_norm and eval-mode rrelu against PyTorch 2.15 in f64
// (tests/data/reference/torch_layers_more.json, tools/reference/gen_torch_layers_more.py): outputs
// and the gradients of every input (1e-12). The random ones by their definitions: rrelu's training
// slopes lie in [lower, upper] and are its gradient; alpha dropout keeps or saturates each element
// (or channel) by one mask and keeps a standard normal input's mean 0 and variance 1. Then autocast
// dtypes, the modules and the refusals.
#include <catch2/catch.hpp>

#include <cmath>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "core/factory.h"
#include "core/generator.h"
#include "nn/nn.h"
#include "ops/layer_composites.h"
#include "ops/ops.h"
#include "reference/json_reference.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

TEST_CASE("bilinear, local_response_norm and eval rrelu equal PyTorch's in f64, gradients included",
          "[nn][layers_more]") {
  const nlohmann::json ref = load_json_reference("torch_layers_more.json");
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    const std::string name = c["name"];
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
    if (name.starts_with("bilinear")) {
      y = bilinear(in[0], in[1], in[2], in[3]);
    } else if (name.starts_with("lrn")) {
      y = local_response_norm(in[0], kw["size"], kw["alpha"], kw["beta"], kw["k"]);
    } else {
      REQUIRE(name == "rrelu_eval");
      y = rrelu(in[0], kw["lower"], kw["upper"], false);
    }
    REQUIRE(y.shape() == Shape(c["y_shape"].get<std::vector<int64_t>>()));
    check_json_close(y, c["y"], 1e-12, 1e-14);
    const Tensors g = autograd::grad({sum(y * json_tensor(c["r"], c["y_shape"]))}, wrt);
    for (std::size_t i = 0; i < g.size(); ++i) check_json_close(g[i], c["grads"][i], 1e-12, 1e-14);
    ++checked;
  }
  CHECK(checked == 7);
}

TEST_CASE("rrelu in training draws each slope from [lower, upper], and the slope is its gradient", "[nn][layers_more]") {
  Generator gen(5);
  const Tensor x = (randn({4000}, {.dtype = DType::F64}, &gen) - 0.5).requires_grad_();
  const Tensor y = rrelu(x, 0.1, 0.3, true, &gen);
  const Tensor g = autograd::grad({sum(y)}, {x})[0];
  const std::vector<double> xs = values(x), ys = values(y), gs = values(g);
  double slope_sum = 0;
  int negatives = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    if (xs[i] > 0) {
      REQUIRE(ys[i] == xs[i]);
      REQUIRE(gs[i] == 1.0);
      continue;
    }
    REQUIRE(gs[i] >= 0.1);
    REQUIRE(gs[i] <= 0.3);
    REQUIRE(ys[i] == Approx(gs[i] * xs[i]).epsilon(1e-15));
    slope_sum += gs[i];
    ++negatives;
  }
  REQUIRE(negatives > 1000);
  CHECK(slope_sum / negatives == Approx(0.2).margin(0.01));
  // The same stream position repeats; eval uses the mean slope.
  Generator again(5);
  const Tensor x2 = randn({4000}, {.dtype = DType::F64}, &again) - 0.5;
  CHECK(values(rrelu(x2, 0.1, 0.3, true, &again)) == ys);
  nn::RReLU layer({.lower = 0.1, .upper = 0.3});
  layer.eval();
  CHECK(values(layer.forward(from_vector<double>({-2.0, 3.0}, {2}))) == std::vector<double>{-0.4, 3.0});
}

TEST_CASE("alpha_dropout keeps or saturates by one mask and keeps mean 0 and variance 1", "[nn][layers_more]") {
  constexpr double kAlpha = 1.7580993408473766;
  for (bool feature : {false, true}) {
    INFO("feature " << feature);
    Generator gen(17);
    const double p = 0.3;
    const Tensor x = randn({64, 50, 40}, {.dtype = DType::F64}, &gen);
    const Tensor y = nn::alpha_dropout(x, p, true, feature, &gen);
    const double a = 1.0 / std::sqrt((kAlpha * kAlpha * p + 1) * (1 - p)), b = kAlpha * a * p;
    // Each element is a·x + b (kept) or a·(-alpha') + b (dropped).
    const std::vector<double> xs = values(x), ys = values(y);
    std::size_t dropped = 0;
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const bool kept = std::abs(ys[i] - (a * xs[i] + b)) < 1e-12;
      const bool drop = std::abs(ys[i] - (b - kAlpha * a)) < 1e-12;
      REQUIRE((kept || drop));
      if (!kept) ++dropped;
      // Feature mode: one decision per (dim 0, dim 1) slice of 40 elements.
      if (feature && i % 40 != 0) REQUIRE(kept == (std::abs(ys[i - 1] - (a * xs[i - 1] + b)) < 1e-12));
    }
    CHECK(double(dropped) / double(xs.size()) == Approx(p).margin(0.03));
    CHECK(mean(y).item<double>() == Approx(0.0).margin(0.03));
    CHECK(var(y).item<double>() == Approx(1.0).margin(0.05));
  }
  const Tensor x = randn({3, 4});
  CHECK(values(nn::alpha_dropout(x, 0.5)) == values(x));  // training defaults to false, as F.alpha_dropout
  CHECK(values(nn::alpha_dropout(randn({4}), 0.5, false, true)).size() == 4);  // eval: no dim check either
  {
    // bf16: computed in f32 and rounded once (the same mask: the same generator position).
    Generator g1(3), g2(3);
    const Tensor xb = randn({50, 40}).to(DType::BF16);
    const Tensor low = nn::alpha_dropout(xb, 0.2, true, false, &g1);
    CHECK(low.dtype() == DType::BF16);
    CHECK(values(low) == values(nn::alpha_dropout(xb.to(DType::F32), 0.2, true, false, &g2).to(DType::BF16)));
  }
  CHECK(values(nn::alpha_dropout(x, 0.5, false)) == values(x));
  CHECK(values(nn::alpha_dropout(x, 1.0, true)) == std::vector<double>(12, 0.0));
  nn::FeatureAlphaDropout layer({.p = 0.2});
  layer.eval();
  CHECK(values(layer.forward(x)) == values(x));
}

TEST_CASE("Bilinear and LocalResponseNorm modules: init, dtypes under autocast, refusals", "[nn][layers_more]") {
  manual_seed(12);
  nn::Bilinear bl({.in1 = 4, .in2 = 3, .out = 5});
  CHECK(bl.weight.shape() == Shape{5, 4, 3});
  CHECK(bl.weight.abs().max().item<double>() <= 0.5);  // U(±1/sqrt(in1))
  CHECK(bl.str().find("in1_features=4, in2_features=3, out_features=5, bias=True") != std::string::npos);
  const Tensor x1 = randn({6, 4}), x2 = randn({6, 3});
  const Tensor y = bl.forward(x1, x2);
  CHECK(y.shape() == Shape{6, 5});
  {
    amp::Autocast autocast({.dtype = DType::BF16});
    CHECK(bl.forward(x1, x2).dtype() == DType::F32);  // keep: PyTorch's autocast leaves bilinear alone
    // ... and its values are f32's: the GEMM inside is not lowered again (it was, and bf16's
    // rounding of the operands showed).
    CHECK(values(bl.forward(x1, x2)) == values(y));
  }
  {
    // Under f16 autocast the product 300 * 300 * 1 = 90000 overflowed f16 inside: inf.
    amp::Autocast autocast({.dtype = DType::F16});
    const Tensor big = bilinear(full({1, 1}, 300.0), full({1, 1}, 1.0), full({1, 1, 1}, 300.0), Tensor());
    CHECK(values(big) == std::vector<double>{90000.0});
  }
  {
    amp::Autocast autocast({.dtype = DType::BF16});
    nn::LocalResponseNorm lrn({.size = 3});
    CHECK(lrn.forward(randn({2, 4, 3}).to(DType::BF16)).dtype() == DType::F32);  // fp32 policy
  }
  CHECK(local_response_norm(randn({2, 4, 3}).to(DType::BF16), 3).dtype() == DType::BF16);
  CHECK(local_response_norm(zeros({0, 4, 3}), 3).shape() == Shape{0, 4, 3});  // an empty batch, as PyTorch
  MG_REQUIRE_ERROR(bl.forward(x1, randn({5, 3})), "): bilinear: expected x1 [*, 4] and x2 [*, 3]");
  MG_REQUIRE_ERROR(bilinear(x1, x2, randn({5, 4}), Tensor()), "expected weight [out, in1, in2]");
  MG_REQUIRE_ERROR(bilinear(x1, x2, bl.weight, randn({4})), "expected bias [5]");
  MG_REQUIRE_ERROR(nn::Bilinear({.in1 = 0, .in2 = 3, .out = 5}), "Bilinear: in1, in2 and out must be positive");
  MG_REQUIRE_ERROR(nn::LocalResponseNorm({.size = 0}), "LocalResponseNorm: size must be >= 1");
  MG_REQUIRE_ERROR(nn::LocalResponseNorm({.size = 2}).forward(randn({3, 4})), "expected x [N, C, *] (3 or more dims)");
  MG_REQUIRE_ERROR(rrelu(x1, 0.5, 0.2), "expected finite lower <= upper");
  MG_REQUIRE_ERROR(nn::RReLU({.lower = 1}), "RReLU: expected finite lower <= upper");
  CHECK_NOTHROW(nn::RReLU({.lower = -1}));  // PyTorch accepts a negative lower
  MG_REQUIRE_ERROR(nn::alpha_dropout(x1, 1.5), "alpha_dropout: p must be in [0, 1]");
  MG_REQUIRE_ERROR(nn::alpha_dropout(randn({4}), 0.5, true, true), "feature_alpha_dropout: expected x of at least 2 dims");
  MG_REQUIRE_ERROR(nn::alpha_dropout(zeros({4}, {.dtype = DType::I32}), 0.5), "expected a floating tensor");
  MG_REQUIRE_ERROR(nn::AlphaDropout({.p = -0.1}), "AlphaDropout: p must be in [0, 1]");
}
