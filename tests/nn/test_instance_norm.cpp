// nn::InstanceNorm1d / InstanceNorm2d (nn/instance_norm.h) against PyTorch 2.15's in f64
// (tests/data/reference/torch_instance_norm.json, written by tools/reference/gen_torch_instance_norm.py):
// affine or not, batched and unbatched, another eps; the output and the gradients of x, weight and
// bias (1e-11); with track_running_stats, two training steps (outputs and running statistics) and
// eval (output and gradients). Then bf16 (Keep: bf16 out) and the refusals.
#include <catch2/catch.hpp>

#include "autograd/engine.h"
#include "core/factory.h"
#include "amp/autocast.h"
#include "autograd/grad_mode.h"
#include "nn/instance_norm.h"
#include "nn/normalization.h"
#include "ops/ops.h"
#include "reference/json_reference.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

TEST_CASE("InstanceNorm1d and InstanceNorm2d equal PyTorch's in f64: outputs and gradients", "[nn][norm]") {
  const nlohmann::json ref = load_json_reference("torch_instance_norm.json");
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    INFO(c["name"].get<std::string>());
    const nn::InstanceNormOptions o{.num_features = c["channels"].get<int64_t>(), .eps = c["eps"].get<double>(),
                                    .affine = c["affine"].get<bool>()};
    std::shared_ptr<nn::InstanceNorm> m;
    if (c["layer"] == "InstanceNorm1d") m = nn::make<nn::InstanceNorm1d>(o);
    else m = nn::make<nn::InstanceNorm2d>(o);
    m->to(DType::F64);
    const nlohmann::json cshape = nlohmann::json::array({c["channels"]});
    if (o.affine) {
      NoGradGuard no_grad;
      m->weight.copy_(json_tensor(c["weight"], cshape));
      m->bias.copy_(json_tensor(c["bias"], cshape));
    }
    const Tensor x = json_tensor(c["x"], c["shape"]).requires_grad_();
    const Tensor y = m->forward(x);
    REQUIRE(y.shape() == x.shape());
    check_json_close(y, c["y"], 1e-11, 1e-13);
    Tensors wrt = {x};
    if (o.affine) wrt.insert(wrt.end(), {m->weight, m->bias});
    const Tensors g = autograd::grad({sum(y * json_tensor(c["r"], c["shape"]))}, wrt);
    check_json_close(g[0], c["grad_x"], 1e-11, 1e-13);
    if (o.affine) {
      check_json_close(g[1], c["grad_weight"], 1e-11, 1e-13);
      check_json_close(g[2], c["grad_bias"], 1e-11, 1e-13);
    }
    ++checked;
  }
  CHECK(checked == 5);
}

TEST_CASE("InstanceNorm with track_running_stats equals PyTorch's: training updates, eval output and gradients",
          "[nn][norm]") {
  const nlohmann::json ref = load_json_reference("torch_instance_norm.json");
  int checked = 0;
  for (const auto& c : ref["tracking"]) {
    INFO(c["name"].get<std::string>());
    const nn::InstanceNormOptions o{.num_features = c["channels"].get<int64_t>(),
                                    .momentum = c["momentum"].get<double>(),
                                    .affine = c["affine"].get<bool>(),
                                    .track_running_stats = true};
    std::shared_ptr<nn::InstanceNorm> m;
    if (c["layer"] == "InstanceNorm1d") m = nn::make<nn::InstanceNorm1d>(o);
    else m = nn::make<nn::InstanceNorm2d>(o);
    m->to(DType::F64);
    const nlohmann::json cshape = nlohmann::json::array({c["channels"]});
    if (o.affine) {
      NoGradGuard no_grad;
      m->weight.copy_(json_tensor(c["weight"], cshape));
      m->bias.copy_(json_tensor(c["bias"], cshape));
    }
    for (const auto& step : c["steps"]) {
      check_json_close(m->forward(json_tensor(step["x"], c["shape"])), step["y"], 1e-11, 1e-13);
      check_json_close(m->running_mean, step["running_mean"], 1e-12, 1e-14);
      check_json_close(m->running_var, step["running_var"], 1e-12, 1e-14);
    }
    m->eval();
    const Tensor x = json_tensor(c["eval_x"], c["shape"]).requires_grad_();
    const Tensor y = m->forward(x);
    check_json_close(y, c["eval_y"], 1e-11, 1e-13);
    Tensors wrt = {x};
    if (o.affine) wrt.insert(wrt.end(), {m->weight, m->bias});
    const Tensors g = autograd::grad({sum(y * json_tensor(c["r"], c["shape"]))}, wrt);
    check_json_close(g[0], c["grad_x"], 1e-11, 1e-13);
    if (o.affine) {
      check_json_close(g[1], c["grad_weight"], 1e-11, 1e-13);
      check_json_close(g[2], c["grad_bias"], 1e-11, 1e-13);
    }
    CHECK(m->num_batches_tracked.item<int64_t>() == c["num_batches_tracked"].get<int64_t>());
    ++checked;
  }
  CHECK(checked == 3);
  // PyTorch's state dict names and order.
  nn::InstanceNorm2d m({.num_features = 2, .affine = true, .track_running_stats = true});
  std::vector<std::string> names;
  for (const auto& [n, t] : m.state_dict()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
  // Eval with running statistics takes any spatial size (1x1 maps too), as PyTorch.
  m.eval();
  CHECK(m.forward(randn({3, 2, 1, 1})).shape() == Shape{3, 2, 1, 1});
  m.train();
  // bf16 input: statistics in f32, the f32 buffers updated, the output bf16.
  const Tensor xb = randn({2, 2, 3, 3}).to(DType::BF16);
  CHECK(m.forward(xb).dtype() == DType::BF16);
  CHECK(m.running_mean.dtype() == DType::F32);
  CHECK(values(m.running_var) != std::vector<double>{1.0, 1.0});
}

TEST_CASE("InstanceNorm keeps bf16 and names its refusals", "[nn][norm]") {
  manual_seed(4);
  nn::InstanceNorm2d m({.num_features = 3, .affine = true});
  const Tensor x = randn({2, 3, 4, 4});
  const Tensor yb = m.forward(x.to(DType::BF16).to(DType::F32));
  m.to(DType::BF16);
  const Tensor y = m.forward(x.to(DType::BF16));
  CHECK(y.dtype() == DType::BF16);
  CHECK((y.to(DType::F32) - yb).abs().max().item<double>() < 0.05);
  // Under autocast too, in training and in eval, as PyTorch's (no autocast policy): the statistics
  // in f32, the output in the input's dtype.
  nn::InstanceNorm2d tracked({.num_features = 3, .track_running_stats = true});
  {
    amp::Autocast ac({.dtype = DType::BF16});
    CHECK(tracked.forward(x.to(DType::BF16)).dtype() == DType::BF16);
    tracked.eval();
    CHECK(tracked.forward(x.to(DType::BF16)).dtype() == DType::BF16);
    CHECK(tracked.forward(x).dtype() == DType::F32);
  }
  MG_REQUIRE_ERROR(m.forward(zeros({2, 4, 4, 4}, {.dtype = DType::BF16})), "expected 3 channels");
  MG_REQUIRE_ERROR(m.forward(zeros({3, 4})), "expected x [N, C, H, W] or [C, H, W]");
  MG_REQUIRE_ERROR(nn::InstanceNorm1d({.num_features = 2}).forward(zeros({3, 2, 1})),
                   "expected more than 1 spatial element per channel");
  MG_REQUIRE_ERROR(nn::InstanceNorm2d({.num_features = 2, .momentum = 1.5, .track_running_stats = true}),
                   "momentum must be in [0, 1]");
  MG_REQUIRE_ERROR(nn::InstanceNorm1d({.num_features = 0}), "num_features must be positive");
}

TEST_CASE("InstanceNorm with momentum = nullopt keeps its running statistics, as PyTorch's None, and the norms reset",
          "[nn][norm]") {
  // PyTorch 2.15: InstanceNorm1d(2, momentum=None, track_running_stats=True) after a training call
  // still has running_mean [0, 0], running_var [1, 1].
  manual_seed(6);
  nn::InstanceNorm1d frozen({.num_features = 2, .momentum = std::nullopt, .track_running_stats = true});
  frozen.forward(randn({3, 2, 5}) * 3.0 + 1.0);
  CHECK(values(frozen.running_mean) == std::vector<double>{0, 0});
  CHECK(values(frozen.running_var) == std::vector<double>{1, 1});
  CHECK(frozen.str().find("momentum=None") != std::string::npos);

  // reset_running_stats / reset_parameters, in place (the same tensors).
  nn::InstanceNorm1d moving({.num_features = 2, .affine = true, .track_running_stats = true});
  moving.forward(randn({3, 2, 5}) * 3.0 + 1.0);
  CHECK(values(moving.running_mean) != std::vector<double>{0, 0});
  const Tensor held = moving.running_var;
  {
    NoGradGuard no_grad;
    moving.weight.fill_(2.0);
  }
  moving.reset_parameters();
  CHECK(values(moving.running_mean) == std::vector<double>{0, 0});
  CHECK(values(held) == std::vector<double>{1, 1});
  CHECK(values(moving.weight) == std::vector<double>{1, 1});

  nn::BatchNorm1d bn({.features = 2});
  bn.forward(randn({4, 2}) + 2.0);
  {
    NoGradGuard no_grad;
    bn.bias.fill_(0.5);
  }
  bn.reset_parameters();
  CHECK(values(bn.running_mean) == std::vector<double>{0, 0});
  CHECK(values(bn.bias) == std::vector<double>{0, 0});
  CHECK(bn.num_batches_tracked.item<int64_t>() == 0);
  nn::LayerNorm ln({.shape = {2}});
  nn::GroupNorm gn({.groups = 1, .channels = 2});
  nn::RMSNorm rms({.shape = {2}});
  {
    NoGradGuard no_grad;
    for (Tensor t : {ln.weight, ln.bias, gn.weight, gn.bias, rms.weight}) t.fill_(3.0);
  }
  ln.reset_parameters();
  gn.reset_parameters();
  rms.reset_parameters();
  CHECK(values(ln.weight) == std::vector<double>{1, 1});
  CHECK(values(ln.bias) == std::vector<double>{0, 0});
  CHECK(values(gn.weight) == std::vector<double>{1, 1});
  CHECK(values(gn.bias) == std::vector<double>{0, 0});
  CHECK(values(rms.weight) == std::vector<double>{1, 1});
}

TEST_CASE("instance_norm (the function) is the layers' computation: input statistics, running ones, refusals",
          "[nn][norm]") {
  manual_seed(12);
  nn::InstanceNorm2d layer({.num_features = 3, .momentum = 0.2, .affine = true, .track_running_stats = true});
  {
    NoGradGuard no_grad;
    layer.weight.copy_(randn({3}));
    layer.bias.copy_(randn({3}));
  }
  const Tensor x = randn({2, 3, 4, 5});
  Tensor rm = zeros({3}), rv = ones({3});
  const Tensor want = layer(x);  // training: input statistics, running ones updated
  const Tensor got = nn::instance_norm(x, rm, rv, layer.weight, layer.bias, true, 0.2, 1e-5);
  CHECK(values(got) == values(want));
  CHECK(values(rm) == values(layer.running_mean));
  CHECK(values(rv) == values(layer.running_var));
  layer.eval();
  CHECK(values(nn::instance_norm(x, rm, rv, layer.weight, layer.bias, /*use_input_stats=*/false)) == values(layer(x)));
  // no running statistics, no affine: plain per-instance normalisation
  const std::vector<double> plain = values(nn::instance_norm(x));
  const std::vector<double> mean_of_first = values(mean(nn::instance_norm(x).reshape({6, 20}), {1}));
  for (const double m : mean_of_first) CHECK(m == Approx(0).margin(1e-6));
  CHECK(plain.size() == 120);
  MG_REQUIRE_ERROR(nn::instance_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false),
                   "instance_norm: use_input_stats = false needs running_mean and running_var");
  MG_REQUIRE_ERROR(nn::instance_norm(randn({2, 3, 1})), "instance_norm: expected more than 1 spatial element");
  MG_REQUIRE_ERROR(nn::instance_norm(x, zeros({4})), "instance_norm: expected [3] for x [2, 3, 4, 5] f32 cpu, got [4] f32 cpu");
  MG_REQUIRE_ERROR(nn::instance_norm(randn({2, 3})), "instance_norm: expected a floating x [N, C, *]");
}
