// Weight averaging (nn/averaged_model.h, optim/swa_lr.h): AveragedModel's SWA and EMA averages,
// buffers, state-dict keys and update_bn's statistics equal PyTorch 2.15's torch.optim.swa_utils in
// f64 (numbers printed by PyTorch for the same weights and batches); SWALR's and MultiplicativeLR's
// lrs equal PyTorch's; the f32-average-of-a-bf16-model contract; refusals.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/factory.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "optim/optim.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

void require_close(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-13) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    CHECK(std::fabs(got[i] - want[i]) <= tol * (1.0 + std::fabs(want[i])));
  }
}

// Linear(2, 3) then BatchNorm1d(3) in f64 with fixed weights (PyTorch's script builds the same).
std::shared_ptr<nn::Sequential> small_model() {
  auto fc = nn::make<nn::Linear>({.in = 2, .out = 3});
  auto net = std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::UnaryModule>>{fc, nn::make<nn::BatchNorm1d>({.features = 3})});
  net->to(DType::F64);
  NoGradGuard no_grad;
  fc->weight.copy_(from_vector<double>({0.5, -1.0, 2.0, 0.25, -0.75, 1.5}, {3, 2}));
  fc->bias.copy_(from_vector<double>({0.1, -0.2, 0.3}, {3}));
  return net;
}

// Batch k of PyTorch's script: a fixed [4, 2] batch times (k + 1).
Tensor batch(int k) {
  return from_vector<double>({1.0, 2.0, -0.5, 0.25, 3.0, -1.0, 0.0, 0.5}, {4, 2}) * double(k + 1);
}

// Three training steps of the script: a forward in training mode (batch norm's statistics move),
// then the weight scaled and shifted and the bias lowered, then an update of the average.
void train_and_average(nn::Sequential& net, nn::AveragedModelBase& avg) {
  auto& fc = dynamic_cast<nn::Linear&>(*net[0]);
  for (int k = 0; k < 3; ++k) {
    net.train();
    net(batch(k));
    {
      NoGradGuard no_grad;
      fc.weight.mul_(1.5).add_(0.125 * k);
      fc.bias.add_(-0.3);
    }
    avg.update_parameters(net);
  }
}

std::vector<std::string> keys(const nn::Module& m) {
  std::vector<std::string> k;
  for (const auto& [name, t] : m.state_dict()) k.push_back(name);
  return k;
}

}  // namespace

TEST_CASE("AveragedModel (SWA) equals PyTorch's: the mean of the updates, buffers copied, PyTorch's state keys",
          "[nn][swa]") {
  auto net = small_model();
  nn::AveragedModel<nn::Sequential> swa(small_model(), *net);
  CHECK(swa.n_averaged() == 0);
  train_and_average(*net, swa);
  CHECK(swa.n_averaged() == 3);
  CHECK(keys(swa) == std::vector<std::string>{"n_averaged", "module.0.weight", "module.0.bias", "module.1.weight",
                                               "module.1.bias", "module.1.running_mean", "module.1.running_var",
                                               "module.1.num_batches_tracked"});
  const auto& avg = *swa.module();
  require_close(values(avg.state_dict()[0].second), {1.375, -2.1875, 4.9375, 0.78125, -1.59375, 3.75});
  require_close(values(avg.state_dict()[1].second), {-0.5, -0.8, -0.3});
  // Without use_buffers the statistics are the model's (copied at every update).
  require_close(values(avg.state_dict()[4].second), {-0.01068125000000001, 1.8157375000000004, 0.04351874999999992});
  require_close(values(avg.state_dict()[5].second), {17.1641337890625, 50.26388598632813, 37.433118164062506});
  CHECK(values(avg.state_dict()[6].second) == std::vector<double>{3});
  // The model was not touched by the average.
  CHECK(values(dynamic_cast<nn::Linear&>(*(*net)[0]).weight) != values(avg.state_dict()[0].second));
}

TEST_CASE("AveragedModel (EMA, use_buffers) equals PyTorch's get_ema_multi_avg_fn, integer buffers truncated",
          "[nn][swa]") {
  auto net = small_model();
  nn::AveragedModel<nn::Sequential> ema(small_model(), *net,
                                        {.averaging = nn::Averaging::Exponential, .decay = 0.9, .use_buffers = true});
  train_and_average(*net, ema);
  const nn::NamedTensors s = ema.module()->state_dict();
  require_close(values(s[0].second), {0.9325, -1.7, 3.565, 0.49374999999999997, -1.26125, 2.6875});
  require_close(values(s[1].second), {-0.287, -0.587, -0.08699999999999998});
  require_close(values(s[4].second), {0.0060418750000000064, 0.37512718749999996, 0.03108187499999998});
  require_close(values(s[5].second), {3.02861337890625, 7.323917211914062, 5.6933868164062496});
  // num_batches_tracked: 1, then 1 + 0.1 (2 - 1) = 1.1 -> 1, then 1.2 -> 1, as PyTorch's.
  CHECK(values(s[6].second) == std::vector<double>{1});
  CHECK(ema.layer_name() == "AveragedModel(averaging=exponential, decay=0.9, use_buffers=true)");
}

TEST_CASE("AveragedModel starts as a copy of the model, and takes a custom average function",
          "[nn][swa]") {
  auto net = small_model();
  auto copy = small_model();
  {
    NoGradGuard no_grad;
    dynamic_cast<nn::Linear&>(*(*copy)[0]).weight.fill_(7.0);
  }
  nn::AveragedModel<nn::Sequential> swa(copy, *net);
  CHECK(values(dynamic_cast<nn::Linear&>(*(*copy)[0]).weight) ==
        values(dynamic_cast<nn::Linear&>(*(*net)[0]).weight));  // PyTorch's deepcopy

  SECTION("a custom average (the maximum) gets the count so far") {
    std::vector<int64_t> counts;
    nn::AveragedModel<nn::Sequential> mx(small_model(), *net,
                                         {.average = [&](const Tensor& a, const Tensor& m, int64_t n) {
                                           counts.push_back(n);
                                           return maximum(a, m);
                                         }});
    mx.update_parameters(*net);  // the first update copies
    auto& fc = dynamic_cast<nn::Linear&>(*(*net)[0]);
    {
      NoGradGuard no_grad;
      fc.weight.copy_(from_vector<double>({1.0, -2.0, 1.0, 1.0, -1.0, 1.0}, {3, 2}));
    }
    mx.update_parameters(*net);
    require_close(values(dynamic_cast<nn::Linear&>(*(*mx.module())[0]).weight), {1.0, -1.0, 2.0, 1.0, -0.75, 1.5});
    CHECK(counts == std::vector<int64_t>{1, 1, 1, 1});  // the four parameters of the second update
  }
  SECTION("a custom average that fails part-way changes nothing") {
    nn::AveragedModel<nn::Sequential> bad(small_model(), *net, {.average = [](const Tensor& a, const Tensor&, int64_t) {
                                            return a.dim() == 1 ? sum(a) : a * 2.0;  // the weight fine, the bias not
                                          }});
    bad.update_parameters(*net);
    const std::vector<double> before = values(bad.module()->state_dict()[0].second);
    MG_REQUIRE_ERROR(bad.update_parameters(*net), "AveragedModel: the average function returned [] for '0.bias' of shape [3]");
    CHECK(values(bad.module()->state_dict()[0].second) == before);
    CHECK(bad.n_averaged() == 1);
  }
}

TEST_CASE("AveragedModel of a bf16 model: an f32 average follows it, a bf16 one stalls (the documented contract)",
          "[nn][swa][amp]") {
  const auto make = [] {
    auto fc = nn::make<nn::Linear>({.in = 1, .out = 1, .bias = false});
    NoGradGuard no_grad;
    fc->weight.fill_(1.0);
    return fc;
  };
  auto model = make();
  model->to(DType::BF16);
  auto f32_avg = make();  // stays f32
  auto bf16_avg = make();
  bf16_avg->to(DType::BF16);
  const nn::AveragedModelOptions ema{.averaging = nn::Averaging::Exponential, .decay = 0.999};
  nn::AveragedModel<nn::Linear> a32(f32_avg, *model, ema), a16(bf16_avg, *model, ema);
  a32.update_parameters(*model);
  a16.update_parameters(*model);
  {
    NoGradGuard no_grad;
    model->weight.fill_(1.5);
  }
  for (int i = 0; i < 100; ++i) {
    a32.update_parameters(*model);
    a16.update_parameters(*model);
  }
  // f32: 1.5 - 0.5 * 0.999^100 = 1.04764 (each step rounded to f32 once).
  CHECK(std::fabs(values(f32_avg->weight)[0] - (1.5 - 0.5 * std::pow(0.999, 100))) < 1e-5);
  CHECK(f32_avg->weight.dtype() == DType::F32);
  // bf16: each step's 0.0005 is under half an ulp of 1.0 (2^-8): the average never moves.
  CHECK(values(bf16_avg->weight)[0] == 1.0);
}

TEST_CASE("AveragedModel's count survives a state-dict round trip", "[nn][swa]") {
  auto net = small_model();
  nn::AveragedModel<nn::Sequential> swa(small_model(), *net);
  train_and_average(*net, swa);
  nn::AveragedModel<nn::Sequential> restored(small_model(), *small_model());
  restored.load_state_dict(swa.state_dict());
  CHECK(restored.n_averaged() == 3);
  // The next update weighs the model by 1/4 in both.
  swa.update_parameters(*net);
  restored.update_parameters(*net);
  CHECK(values(restored.module()->state_dict()[0].second) == values(swa.module()->state_dict()[0].second));
  CHECK(restored.n_averaged() == 4);
}

TEST_CASE("AveragedModel refuses another architecture, itself, and a decay outside [0, 1]", "[nn][swa]") {
  auto net = small_model();
  auto other = std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::UnaryModule>>{nn::make<nn::Linear>({.in = 2, .out = 4})});
  MG_REQUIRE_ERROR(nn::AveragedModel<nn::Sequential>(other, *net),
                   "AveragedModel: parameter '0.weight' is [4, 2] in the averaged copy but [3, 2] in the model");
  auto no_bn = std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::UnaryModule>>{nn::make<nn::Linear>({.in = 2, .out = 3})});
  MG_REQUIRE_ERROR(nn::AveragedModel<nn::Sequential>(no_bn, *net),
                   "AveragedModel: the averaged copy has 2 parameters but the model has 4");
  MG_REQUIRE_ERROR(nn::AveragedModel<nn::Sequential>(net, *net), "the averaged module is the model itself");
  MG_REQUIRE_ERROR(nn::AveragedModel<nn::Sequential>(nullptr, *net), "the averaged module is null");
  MG_REQUIRE_ERROR(
      nn::AveragedModel<nn::Sequential>(small_model(), *net, {.averaging = nn::Averaging::Exponential, .decay = 1.5}),
      "AveragedModel: decay must be in [0, 1], got 1.5");
  nn::AveragedModel<nn::Sequential> swa(small_model(), *net);
  MG_REQUIRE_ERROR(swa.update_parameters(*no_bn), "the two must have the same architecture");
  MG_REQUIRE_ERROR(swa.update_parameters(*swa.module()), "update_parameters was given the averaged copy itself");
  CHECK(swa.n_averaged() == 0);
}

TEST_CASE("update_bn equals PyTorch's: statistics averaged over the batches, modes and momentum restored",
          "[nn][swa]") {
  auto net = small_model();
  net->eval();
  auto& bn = dynamic_cast<nn::BatchNorm&>(*(*net)[1]);
  int calls = 0;
  nn::update_bn(*net, [&] {
    CHECK(net->is_training());
    CHECK(!GradMode::is_enabled());
    for (const Tensor& x : {batch(0), slice(batch(1), 0, 0, 3), batch(2)}) (*net)(x);
    ++calls;
  });
  CHECK(calls == 1);
  require_close(values(bn.running_mean), {0.21111111111111105, 3.9041666666666672, 0.1333333333333333});
  require_close(values(bn.running_var), {15.777777777777777, 44.22026909722223, 35.5});
  CHECK(values(bn.num_batches_tracked) == std::vector<double>{3});
  CHECK(bn.options().momentum == 0.1);
  CHECK(!net->is_training());
  CHECK(!bn.is_training());

  SECTION("each module's own mode comes back, also after an error") {
    net->train();
    (*net)[0]->eval();
    REQUIRE_THROWS_AS(nn::update_bn(*net, [] { throw std::runtime_error("loader failed"); }), std::runtime_error);
    CHECK(net->is_training());
    CHECK(!(*net)[0]->is_training());
    CHECK(bn.options().momentum == 0.1);
  }
  SECTION("a model without batch norm runs nothing") {
    auto plain = nn::make<nn::Linear>({.in = 2, .out = 3});
    bool ran = false;
    nn::update_bn(*plain, [&] { ran = true; });
    CHECK(!ran);
  }
}

TEST_CASE("SWALR equals PyTorch's: cosine and linear ramps per group, anneal_epochs 0, taking over mid-ramp",
          "[optim][scheduler][swa]") {
  const auto run = [](optim::AnnealStrategy strategy, int64_t anneal) {
    Tensor p1 = zeros({1}, {.requires_grad = true}), p2 = zeros({1}, {.requires_grad = true});
    optim::SGD opt(std::vector<optim::ParamGroupSpec>{{{p1}, {{"lr", 0.1}}}, {{p2}, {{"lr", 0.4}}}}, {.lr = 0.1});
    optim::SWALR sched(opt, {.swa_lr = {0.05, 0.01}, .anneal_epochs = anneal, .anneal_strategy = strategy});
    std::vector<double> lrs;
    for (int i = 0; i <= 5; ++i) {
      if (i > 0) sched.step();
      for (const auto& g : opt.param_groups()) lrs.push_back(g.lr());
    }
    return lrs;
  };
  require_close(run(optim::AnnealStrategy::Cos, 3),
                {0.1, 0.4, 0.08750000000000001, 0.30250000000000005, 0.06250000000000001, 0.10750000000000005, 0.05, 0.01,
                 0.05, 0.01, 0.05, 0.01},
                1e-15);
  require_close(run(optim::AnnealStrategy::Linear, 3),
                {0.1, 0.4, 0.08333333333333334, 0.2700000000000001, 0.06666666666666668, 0.14, 0.05, 0.01, 0.05, 0.01,
                 0.05, 0.01},
                1e-15);
  require_close(run(optim::AnnealStrategy::Cos, 0),
                {0.05, 0.01, 0.05, 0.01, 0.05, 0.01, 0.05, 0.01, 0.05, 0.01, 0.05, 0.01}, 1e-15);

  Tensor p = zeros({1}, {.requires_grad = true});
  optim::SGD opt({p}, {.lr = 0.2});
  optim::SWALR sched(opt, {.swa_lr = {0.02}, .anneal_epochs = 4});
  CHECK(opt.param_groups()[0].option("swa_lr") == 0.02);
  std::vector<double> lrs;
  for (int i = 0; i < 6; ++i) {
    sched.step();
    if (i == 1) opt.param_groups()[0].set_lr(opt.param_groups()[0].lr() * 0.5);
    lrs.push_back(opt.param_groups()[0].lr());
  }
  require_close(lrs, {0.1736396103067893, 0.055, 0.03025126265847084, 0.02, 0.02, 0.02}, 1e-15);

  MG_REQUIRE_ERROR(optim::SWALR(opt, {.swa_lr = {0.1, 0.2}}), "SWALR: expected one swa_lr or one per param group (1), got 2");
  MG_REQUIRE_ERROR(optim::SWALR(opt, {.swa_lr = {-0.1}}), "SWALR: swa_lr must be >= 0, got -0.1");
  MG_REQUIRE_ERROR(optim::SWALR(opt, {.swa_lr = {0.1}, .anneal_epochs = -1}), "SWALR: anneal_epochs must be >= 0, got -1");
  CHECK(opt.param_groups()[0].option("swa_lr") == 0.02);  // a refusal wrote nothing
}

TEST_CASE("SWALR and MultiplicativeLR inside a SequentialLR take over from the current lr, as PyTorch's",
          "[optim][scheduler][swa]") {
  // PyTorch 2.15: StepLR(step_size 1, gamma 0.5) then, from milestone 2, the second scheduler; at
  // its milestone PyTorch runs get_lr at epoch 0 on the current lr (neither has a closed form).
  const auto run = [](bool swa, int steps) {
    Tensor p = zeros({1}, {.requires_grad = true});
    optim::SGD opt({p}, {.lr = 0.1});
    std::vector<std::unique_ptr<optim::LRScheduler>> parts;
    parts.push_back(std::make_unique<optim::StepLR>(opt, optim::StepLROptions{.step_size = 1, .gamma = 0.5}));
    if (swa) parts.push_back(std::make_unique<optim::SWALR>(opt, optim::SWALROptions{.swa_lr = {0.01}, .anneal_epochs = 3}));
    else parts.push_back(std::make_unique<optim::MultiplicativeLR>(
             opt, optim::MultiplicativeLROptions{.factors = {[](int64_t) { return 0.9; }}}));
    optim::SequentialLR seq(opt, std::move(parts), {2});
    std::vector<double> lrs{opt.param_groups()[0].lr()};
    for (int i = 0; i < steps; ++i) {
      seq.step();
      lrs.push_back(opt.param_groups()[0].lr());
    }
    return lrs;
  };
  require_close(run(true, 7), {0.1, 0.05, 0.05, 0.04000000000000001, 0.020000000000000007, 0.01, 0.01, 0.01}, 1e-15);
  require_close(run(false, 4), {0.1, 0.05, 0.045000000000000005, 0.04050000000000001, 0.03645000000000001}, 1e-15);
}

TEST_CASE("MultiplicativeLR equals PyTorch's: the factor multiplies the current lr from step 1 on",
          "[optim][scheduler]") {
  Tensor p = zeros({1}, {.requires_grad = true});
  optim::SGD opt({p}, {.lr = 0.3});
  optim::MultiplicativeLR sched(opt, {.factors = {[](int64_t e) { return 0.5 + 0.1 * double(e); }}});
  std::vector<double> lrs{opt.param_groups()[0].lr()};
  for (int i = 0; i < 4; ++i) {
    sched.step();
    lrs.push_back(opt.param_groups()[0].lr());
  }
  require_close(lrs, {0.3, 0.18, 0.126, 0.1008, 0.09072000000000001}, 1e-15);
  MG_REQUIRE_ERROR(optim::MultiplicativeLR(opt, {.factors = {}}),
                   "MultiplicativeLR: expected one factor function or one per param group (1), got 0");
}
