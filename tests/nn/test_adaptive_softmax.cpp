// AdaptiveLogSoftmaxWithLoss against PyTorch 2.15 in f64 (tests/data/reference/
// torch_adaptive_softmax.json, written by tools/reference/gen_torch_adaptive_softmax.py): forward's
// output and loss, every gradient, log_prob and predict, for one and three clusters, head_bias, a
// batch that misses a cluster and an unbatched input; then the parameter names, bf16 and refusals.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "autograd/engine.h"
#include "core/factory.h"
#include "nn/adaptive_softmax.h"
#include "ops/ops.h"
#include "reference/json_reference.h"
#include "test_util.h"

using namespace mg;

TEST_CASE("AdaptiveLogSoftmaxWithLoss equals PyTorch's in f64: output, loss, every gradient, log_prob, predict",
          "[nn][loss]") {
  const nlohmann::json ref = test::load_json_reference("torch_adaptive_softmax.json");
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    INFO("case " << c["name"].get<std::string>());
    nn::AdaptiveLogSoftmaxWithLoss m({.in = c["in"].get<int64_t>(),
                                      .n_classes = c["n_classes"].get<int64_t>(),
                                      .cutoffs = c["cutoffs"].get<std::vector<int64_t>>(),
                                      .div_value = c["div_value"].get<double>(),
                                      .head_bias = c["head_bias"].get<bool>()});
    m.to(DType::F64);
    const nn::NamedTensors params = m.named_parameters();
    REQUIRE(params.size() == c["params"].size());  // PyTorch's names, so its state dict loads
    {
      NoGradGuard no_grad;
      for (const auto& [name, p] : params) {
        REQUIRE(c["params"].contains(name));
        REQUIRE(p.shape() == Shape(c["param_shapes"][name].get<std::vector<int64_t>>()));
        Tensor(p).copy_(test::json_tensor(c["params"][name], c["param_shapes"][name]));
      }
    }
    const Tensor x = test::json_tensor(c["x"], c["x_shape"]).requires_grad_();
    const std::vector<int64_t> target = c["target"].get<std::vector<int64_t>>();
    const Tensor t = x.dim() == 1 ? from_vector<int64_t>(target, {1}).reshape({}) : from_vector<int64_t>(target, {int64_t(target.size())});
    const auto [out, loss] = m.forward(x, t);
    REQUIRE(out.dim() == t.dim());
    test::check_json_close(out, c["output"]);
    CHECK(loss.item<double>() == Approx(c["loss"].get<double>()).epsilon(1e-12));
    Tensors wrt{x};
    for (const auto& [name, p] : params) wrt.push_back(p);
    const Tensor r = test::json_tensor(c["r"], nlohmann::json(out.shape()));
    const Tensors g = autograd::grad({loss + sum(out * r)}, wrt, {}, std::nullopt, false, /*allow_unused=*/true);
    for (size_t i = 0; i < g.size(); ++i) {
      const std::string name = i == 0 ? "input" : params[i - 1].first;
      INFO("gradient of " << name);
      test::check_json_close(g[i].defined() ? g[i] : zeros_like(wrt[i]), c["grads"][name]);
    }
    const Tensor xb = x.dim() == 1 ? x.unsqueeze(0) : x;
    test::check_json_close(m.log_prob(xb), c["log_prob"]);
    CHECK(test::values(m.predict(xb)) == c["predict"].get<std::vector<double>>());
    if (x.dim() == 1) {  // unbatched log_prob and predict (PyTorch's take only a batch): the row of one
      CHECK(test::values(m.log_prob(x)) == test::values(m.log_prob(xb)));
      CHECK(m.predict(x).dim() == 0);
    }
    ++checked;
  }
  CHECK(checked == 4);
}

TEST_CASE("AdaptiveLogSoftmaxWithLoss: probabilities sum to one, bf16 near f32, repr and refusals", "[nn][loss]") {
  nn::AdaptiveLogSoftmaxWithLoss m({.in = 12, .n_classes = 30, .cutoffs = {4, 10, 20}, .div_value = 2.0});
  const Tensor x = randn({7, 12});
  const Tensor lp = m.log_prob(x);
  REQUIRE(lp.shape() == Shape({7, 30}));
  for (double s : test::values(sum(exp(lp), {1}))) CHECK(s == Approx(1.0).epsilon(1e-5));
  const Tensor t = from_vector<int64_t>({0, 3, 4, 9, 10, 19, 29}, {7});
  const auto f32 = m.forward(x, t);
  // forward's output is log_prob at each target
  const std::vector<double> full = test::values(gather(lp, 1, t.unsqueeze(1)).squeeze(1));
  const std::vector<double> picked = test::values(f32.output);
  for (size_t i = 0; i < full.size(); ++i) CHECK(picked[i] == Approx(full[i]).epsilon(1e-5));
  m.to(DType::BF16);
  const auto bf = m.forward(x.to(DType::BF16), t);
  CHECK(std::abs(bf.loss.to(DType::F64).item<double>() - f32.loss.item<double>()) < 0.05);
  CHECK(m.str().find("cutoffs=[4, 10, 20]") != std::string::npos);

  m.to(DType::F32);
  MG_REQUIRE_ERROR(m.forward(x, from_vector<int64_t>({0, 1, 2, 3, 4, 5, 30}, {7})),
                   "target values must be in [0, 29], found values in [0, 30]");
  MG_REQUIRE_ERROR(m.forward(x, from_vector<int64_t>({0, 1, -1, 3, 4, 5, 6}, {7})), "found values in [-1, 6]");
  MG_REQUIRE_ERROR(m.forward(x, from_vector<int64_t>({0, 1}, {2})), "expected a target [7]");
  MG_REQUIRE_ERROR(m.forward(randn({7, 5}), t), "expected input [N, 12] or [12]");
  MG_REQUIRE_ERROR(m.forward(x, t.to(DType::F32)), "expected an i64 or i32 target");
  MG_REQUIRE_ERROR(nn::AdaptiveLogSoftmaxWithLoss({.in = 4, .n_classes = 10, .cutoffs = {5, 3}}),
                   "cutoffs must be unique, increasing and each in [1, n_classes - 1] = [1, 9]");
  MG_REQUIRE_ERROR(nn::AdaptiveLogSoftmaxWithLoss({.in = 4, .n_classes = 10, .cutoffs = {10}}), "cutoffs must be");
  MG_REQUIRE_ERROR(nn::AdaptiveLogSoftmaxWithLoss({.in = 4, .n_classes = 10, .cutoffs = {}}), "cutoffs must be");
  MG_REQUIRE_ERROR(nn::AdaptiveLogSoftmaxWithLoss({.in = 4, .n_classes = 10, .cutoffs = {2, 5}, .div_value = 4.0}),
                   "cluster 1 would project 4 features to 0");
}
