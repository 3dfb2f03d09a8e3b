// The Apex-style front door: O0–O3 property tables, validated overrides, amp::initialize's checks,
// O2 master weights, scale_loss (several losses, delay_unscale, overflow skips), forward casts,
// the amp state dict and the precision plan.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "amp/autocast.h"
#include "amp/initialize.h"
#include "amp/precision_plan.h"
#include "core/autocast_state.h"
#include "core/factory.h"
#include "nn/models/resnet.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "test_util.h"

using namespace mg;

namespace {

// Every test leaves amp uninitialized and collects amp's messages instead of printing them.
struct AmpFixture {
  AmpFixture() {
    amp::set_log_sink([this](const std::string& s) { log += s; });
  }
  ~AmpFixture() {
    amp::reset();
    amp::set_log_sink(nullptr);
  }
  std::string log;
};

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed, bool batch_norm = false) {
  manual_seed(seed);
  std::vector<std::shared_ptr<nn::UnaryModule>> layers{nn::make<nn::Linear>({.in = 8, .out = 16})};
  if (batch_norm) layers.push_back(nn::make<nn::BatchNorm1d>({.features = 16}));
  layers.push_back(nn::make<nn::ReLU>());
  layers.push_back(nn::make<nn::Linear>({.in = 16, .out = 4}));
  return std::make_shared<nn::Sequential>(layers);
}

std::vector<double> flat(const Tensors& ts) {
  std::vector<double> out;
  for (const Tensor& t : ts) {
    const std::vector<double> v = test::values(t);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace

TEST_CASE("amp: O0-O3 property tables follow DESIGN §5 and Apex", "[amp][initialize]") {
  using amp::OptLevel;
  const amp::Properties o0 = amp::opt_level_properties(OptLevel::O0);
  CHECK(o0.cast_model_type == DType::F32);
  CHECK(!o0.patch_functions);
  CHECK(!o0.master_weights);
  CHECK(!o0.loss_scale.dynamic);
  CHECK(o0.loss_scale.value == 1.0);
  const amp::Properties o1 = amp::opt_level_properties(OptLevel::O1);
  CHECK(!o1.cast_model_type);
  CHECK(o1.patch_functions);
  CHECK(!o1.keep_batchnorm_fp32);
  CHECK(o1.loss_scale.dynamic);
  const amp::Properties o2 = amp::opt_level_properties(OptLevel::O2);
  CHECK(o2.cast_model_type == DType::F16);
  CHECK(!o2.patch_functions);
  CHECK(o2.keep_batchnorm_fp32 == true);
  CHECK(o2.master_weights);
  CHECK(o2.loss_scale.dynamic);
  const amp::Properties o3 = amp::opt_level_properties(OptLevel::O3);
  CHECK(o3.cast_model_type == DType::F16);
  CHECK(o3.keep_batchnorm_fp32 == false);
  CHECK(!o3.master_weights);
  CHECK(!o3.loss_scale.dynamic);
  // bf16: the same levels without loss scaling by default.
  CHECK(amp::opt_level_properties(OptLevel::O1, DType::BF16).loss_scale.dynamic == false);
  CHECK(amp::opt_level_properties(OptLevel::O2, DType::BF16).cast_model_type == DType::BF16);
  // Resolved defaults: Apex's max scale 2^24 with dynamic scaling, outputs cast back to f32 at O2.
  const amp::Properties r2 = amp::resolve_properties({.opt_level = "O2"});
  CHECK(r2.max_loss_scale == 16777216.0);
  CHECK(r2.cast_model_outputs == DType::F32);
}

TEST_CASE("amp: overrides are parsed from strings and validated with explanations", "[amp][initialize]") {
  const amp::Properties p = amp::resolve_properties(
      {.opt_level = "O2", .dtype = "bf16", .keep_batchnorm_fp32 = "False", .loss_scale = "128", .num_losses = 2});
  CHECK(p.dtype == DType::BF16);
  CHECK(p.cast_model_type == DType::BF16);
  CHECK(p.keep_batchnorm_fp32 == false);
  CHECK(!p.loss_scale.dynamic);
  CHECK(p.loss_scale.value == 128.0);
  CHECK(p.num_losses == 2);
  CHECK(amp::resolve_properties({.opt_level = "O3", .dtype = "bf16", .loss_scale = "dynamic"}).loss_scale.dynamic);
  // cast_model_type bf16 without dtype is bf16's level: its static scale of 1, not f16's dynamic one.
  const amp::Properties cast_bf16 = amp::resolve_properties({.opt_level = "O2", .cast_model_type = "bf16"});
  CHECK(cast_bf16.dtype == DType::BF16);
  CHECK(!cast_bf16.loss_scale.dynamic);
  CHECK(cast_bf16.loss_scale.value == 1.0);
  // f16 parameters without masters cannot be unscaled in place: refused when resolving already.
  MG_REQUIRE_ERROR(amp::resolve_properties({.opt_level = "O3", .loss_scale = "dynamic"}),
                   "O3 with dynamic loss scaling on f16 parameters without f32 master weights");
  CHECK(amp::resolve_properties({.opt_level = "O1", .loss_scale = 512.0}).loss_scale.value == 512.0);
  CHECK(amp::resolve_properties({.opt_level = "O1", .patch_functions = "true"}).patch_functions);

  MG_REQUIRE_ERROR(amp::resolve_properties({.opt_level = "00"}), "the capital letter O: \"O0\"");
  MG_REQUIRE_ERROR(amp::resolve_properties({.opt_level = "O4"}), "unknown opt_level \"O4\"");
  MG_REQUIRE_ERROR(amp::resolve_properties({.opt_level = "o2"}), "capital letter O: \"O2\"");
  MG_REQUIRE_ERROR(amp::resolve_properties({.opt_level = "O1", .master_weights = true}),
                   "they are their own master weights");
  MG_REQUIRE_ERROR(amp::resolve_properties({.opt_level = "O1", .cast_model_type = "f16"}),
                   "O1 inserts casts around ops");
  MG_REQUIRE_ERROR(amp::resolve_properties({.opt_level = "O2", .keep_batchnorm_fp32 = "yes"}),
                   "keep_batchnorm_fp32 must be true or false");
  MG_REQUIRE_ERROR(amp::resolve_properties({.opt_level = "O1", .keep_batchnorm_fp32 = true}),
                   "keep_batchnorm_fp32 makes no sense with O1");
  MG_REQUIRE_ERROR(amp::resolve_properties({.opt_level = "O2", .loss_scale = "lots"}), "loss_scale must be a finite number");
  MG_REQUIRE_ERROR(amp::resolve_properties({.opt_level = "O2", .loss_scale = -4.0}), "positive number");
  MG_REQUIRE_ERROR(amp::resolve_properties({.opt_level = "O3", .min_loss_scale = 1.0}),
                   "only applies to dynamic loss scaling");
  MG_REQUIRE_ERROR(amp::resolve_properties({.opt_level = "O2", .min_loss_scale = 8.0, .max_loss_scale = 4.0}),
                   "exceeds max_loss_scale");
  MG_REQUIRE_ERROR(amp::resolve_properties({.opt_level = "O2", .dtype = "f32"}), "use opt_level O0");
  MG_REQUIRE_ERROR(amp::resolve_properties({.opt_level = "O2", .dtype = "int8"}), "must be a floating dtype");
  MG_REQUIRE_ERROR(amp::resolve_properties({.opt_level = "O2", .cast_model_type = "f32"}), "would undo the level");
  MG_REQUIRE_ERROR(amp::resolve_properties({.opt_level = "O1", .num_losses = 0}), "num_losses must be >= 1");
}

namespace {
struct FakeDataParallel : nn::Module {
  explicit FakeDataParallel(std::shared_ptr<nn::Module> inner) : Module("DistributedDataParallel") {
    register_module("module", std::move(inner));
  }
};
}  // namespace

TEST_CASE("amp: O1 is reset only from the thread whose autocast it turned on", "[amp][initialize][threads]") {
  auto model = nn::make<nn::Linear>({.in = 4, .out = 2});
  optim::SGD sgd(model->parameters(), {.lr = 0.1});
  amp::initialize(std::shared_ptr<nn::Module>(model), sgd, {.opt_level = "O1", .dtype = "bf16"});
  std::string message;
  std::thread([&] { message = test::error_of([] { amp::reset(); }); }).join();
  CHECK_THAT(message, Catch::Matchers::Contains("amp::reset: O1 turned autocast on for the thread that called amp::initialize"));
  CHECK(amp::is_initialized());  // nothing changed
  CHECK(autocast_state(DeviceType::CPU).enabled);
  amp::reset();
  CHECK_FALSE(autocast_state(DeviceType::CPU).enabled);
}

TEST_CASE("amp: initialize rejects what Apex rejects, with the fix in the message", "[amp][initialize]") {
  AmpFixture fx;
  auto mlp = make_mlp(1);
  optim::SGD sgd(mlp->parameters(), {.lr = 0.1});

  auto half = make_mlp(2);
  half->to(DType::F16);
  optim::SGD half_sgd(half->parameters(), {.lr = 0.1});
  MG_REQUIRE_ERROR(amp::initialize(half, half_sgd, {.opt_level = "O2"}), "do not cast the model yourself");

  auto other = make_mlp(3);
  optim::SGD other_sgd(other->parameters(), {.lr = 0.1});
  MG_REQUIRE_ERROR(amp::initialize(mlp, other_sgd, {.opt_level = "O1"}), "is not a parameter of the models passed");

  auto wrapped = std::make_shared<FakeDataParallel>(make_mlp(4));
  MG_REQUIRE_ERROR(amp::initialize(wrapped, {.opt_level = "O1"}), "then wrap it for data parallel");

  // A bad override changes nothing: the model is still f32 and the optimizer has no gate.
  MG_REQUIRE_ERROR(amp::initialize(mlp, sgd, {.opt_level = "O2", .keep_batchnorm_fp32 = "maybe"}), "true or false");
  CHECK(mlp->parameters()[0].dtype() == DType::F32);
  CHECK(!sgd.has_step_gate());
  CHECK(!amp::is_initialized());

  // O2 after the optimizer stepped cannot add masters: refused before the model is cast.
  auto stepped = make_mlp(5);
  optim::SGD stepped_sgd(stepped->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (const Tensor& p : stepped->parameters()) p.set_grad(ones_like(p));
  stepped_sgd.step();
  MG_REQUIRE_ERROR(amp::initialize(stepped, stepped_sgd, {.opt_level = "O2"}),
                   "master weights must be set up before the first step");
  for (const Tensor& p : stepped->parameters()) CHECK(p.dtype() == DType::F32);
  CHECK(!amp::is_initialized());

  amp::initialize(mlp, sgd, {.opt_level = "O1", .verbosity = 0});
  const Tensor x = randn({4, 8});
  const Tensor loss = amp::forward(*mlp, x).sum();
  MG_REQUIRE_ERROR(amp::scale_loss(loss, other_sgd), "was not passed to amp::initialize");
  MG_REQUIRE_ERROR(amp::scale_loss(loss, sgd, {.loss_id = 1}), "num_losses = 1");
  // delay_unscale leaves scaled gradients: stepping then would apply them scaled.
  amp::scale_loss(loss, sgd, {.delay_unscale = true}).backward();
  MG_REQUIRE_ERROR(sgd.step(), "the gradients are still scaled");
}

TEST_CASE("amp: after reset an optimizer steps as a plain optimizer - it may die before reset", "[amp][initialize]") {
  AmpFixture fx;
  auto mlp = make_mlp(7);
  optim::SGD sgd(mlp->parameters(), {.lr = 0.1});
  amp::initialize(mlp, sgd, {.opt_level = "O1", .verbosity = 0});
  amp::reset();
  mlp->forward(randn({2, 8})).sum().backward();
  const std::vector<double> before = flat(sgd.parameters());
  sgd.step();  // no amp state: not gated, no error
  CHECK_FALSE(sgd.last_step_skipped());
  CHECK(flat(sgd.parameters()) != before);
  amp::initialize(mlp, sgd, {.opt_level = "O1", .verbosity = 0});  // the same optimizer again
  {
    auto other = make_mlp(8);
    optim::SGD short_lived(other->parameters(), {.lr = 0.1});
    amp::initialize(other, short_lived, {.opt_level = "O1", .verbosity = 0});
  }
  amp::reset();  // the optimizer it knew is gone: reset must not touch it (ASan checks)
}

TEST_CASE("amp: O0-O3 give the expected dtypes of parameters, activations and gradients", "[amp][initialize]") {
  AmpFixture fx;
  struct Expect {
    const char* level;
    DType weight, bn_weight, logits, model_grad;
    bool masters;
  };
  for (const Expect& e : {Expect{"O0", DType::F32, DType::F32, DType::F32, DType::F32, false},
                          Expect{"O1", DType::F32, DType::F32, DType::F16, DType::F32, false},
                          Expect{"O2", DType::F16, DType::F32, DType::F32, DType::F32, true},
                          Expect{"O3", DType::F16, DType::F16, DType::F32, DType::F16, false}}) {
    INFO("opt_level " << e.level);
    auto mlp = make_mlp(5, /*batch_norm=*/true);
    optim::SGD sgd(mlp->parameters(), {.lr = 0.01, .momentum = 0.9});
    auto [net, opt] = amp::initialize(mlp, sgd, {.opt_level = e.level, .verbosity = 0});
    CHECK(net.get() == mlp.get());
    CHECK(&opt == &sgd);
    const auto* lin = dynamic_cast<nn::Linear*>((*net)[0].get());
    const auto* bn = dynamic_cast<nn::BatchNorm1d*>((*net)[1].get());
    REQUIRE(lin);
    REQUIRE(bn);
    CHECK(lin->weight.dtype() == e.weight);
    CHECK(bn->weight.dtype() == e.bn_weight);
    CHECK(bn->running_mean.dtype() == e.bn_weight);
    CHECK(opt.has_master_weights() == e.masters);
    CHECK(amp::is_autocast_enabled() == (std::string(e.level) == "O1"));

    const Tensor x = randn({6, 8});
    const Tensor logits = amp::forward(*net, x);
    CHECK(logits.dtype() == e.logits);
    const Tensor loss = cross_entropy(logits, Tensor(randint(0, 4, {6})));
    CHECK(loss.dtype() == DType::F32);
    amp::scale_loss(loss, opt).backward();
    for (const Tensor& p : amp::master_params(opt)) {
      REQUIRE(p.grad().defined());
      CHECK(p.grad().dtype() == (e.masters ? DType::F32 : e.model_grad));
    }
    if (e.masters) {
      for (const optim::MasterPair& m : opt.master_pairs()) CHECK(!m.model.grad().defined());  // moved to the masters
    }
    const std::vector<double> before = flat(opt.parameters());
    opt.step();
    CHECK(!opt.last_step_skipped());
    CHECK(max_abs_diff(before, flat(opt.parameters())) > 0);
    if (e.masters) {
      for (const optim::MasterPair& m : opt.master_pairs()) {
        CHECK(test::values(m.model) == test::values(to(m.master, m.model.dtype())));  // copied back, rounded once
      }
    }
    amp::reset();
    CHECK(!amp::is_autocast_enabled());
  }
}

TEST_CASE("amp: master weights keep updates that f16 weights round away - zero_grad clears both", "[amp][initialize]") {
  AmpFixture fx;
  manual_seed(11);
  auto lin = nn::make<nn::Linear>({.in = 4, .out = 1, .bias = false});
  {
    NoGradGuard g;
    Tensor(lin->weight).fill_(1.0);
  }
  optim::SGD sgd(lin->parameters(), {.lr = 1e-4});
  amp::initialize(lin, sgd, {.opt_level = "O2", .loss_scale = 1.0, .verbosity = 0});
  const Tensor x = ones({1, 4});
  // d(sum(w·x))/dw = 1: each step moves w by 1e-4, below half an f16 ulp at 1.0 (2^-11 ≈ 4.9e-4).
  for (int i = 0; i < 10; ++i) {
    sgd.zero_grad();
    amp::scale_loss(amp::forward(*lin, x).sum(), sgd).backward();
    sgd.step();
  }
  const double master = test::values(sgd.master_pairs()[0].master)[0];
  CHECK(master == Approx(1.0 - 10 * 1e-4).epsilon(1e-6));
  // The f16 model weight is the master rounded once: 0.999 -> 0.99902 (f16 spacing 2^-11 below 1).
  CHECK(test::values(lin->weight)[0] == double(float(Half(float(master)))));
  CHECK(test::values(lin->weight)[0] < 1.0);  // pure f16 SGD would have stayed at exactly 1.0

  // zero_grad clears the masters' and the model's gradients.
  amp::scale_loss(amp::forward(*lin, x).sum(), sgd, {.delay_unscale = true}).backward();
  CHECK(lin->weight.grad().defined());
  amp::scale_loss(amp::forward(*lin, x).sum(), sgd).backward();
  CHECK(sgd.master_pairs()[0].master.grad().defined());
  sgd.zero_grad();
  CHECK(!lin->weight.grad().defined());
  CHECK(!sgd.master_pairs()[0].master.grad().defined());
}

// Apex's add_param_group makes f32 masters for the new group's half parameters; without them the
// new layer would step in f16 and lose every update below half an ulp.
TEST_CASE("amp: a group added after O2's initialize gets f32 masters, and a mastered parameter is refused",
          "[amp][initialize]") {
  AmpFixture fx;
  auto body = nn::make<nn::Linear>({.in = 4, .out = 1, .bias = false});
  auto head = nn::make<nn::Linear>({.in = 4, .out = 1, .bias = false});
  head->to(DType::F16);
  {
    NoGradGuard g;
    Tensor(head->weight).fill_(1.0);
  }
  optim::SGD sgd(body->parameters(), {.lr = 1e-4});
  amp::initialize(body, sgd, {.opt_level = "O2", .loss_scale = 1.0, .verbosity = 0});
  MG_REQUIRE_ERROR(sgd.add_param_group(body->parameters()), "is already optimized through its f32 master");
  sgd.add_param_group(head->parameters());
  REQUIRE(sgd.master_pairs().size() == 2);
  CHECK(sgd.master_pairs()[1].model.is_same(head->weight));
  CHECK(sgd.param_groups()[1].params[0].dtype() == DType::F32);
  const Tensor x = ones({1, 4}, {.dtype = DType::F16});
  for (int i = 0; i < 10; ++i) {
    sgd.zero_grad();
    amp::scale_loss(head->forward(x).sum(), sgd).backward();
    sgd.step();
  }
  CHECK(test::values(sgd.master_pairs()[1].master)[0] == Approx(1.0 - 10 * 1e-4).epsilon(1e-6));
  CHECK(test::values(head->weight)[0] < 1.0);  // pure f16 SGD would have stayed at exactly 1.0
}

TEST_CASE("amp: O2 without scale_loss still steps the masters from the model gradients", "[amp][initialize]") {
  AmpFixture fx;
  auto mlp = make_mlp(12);
  optim::Adam adam(mlp->parameters(), {.lr = 1e-3});
  amp::initialize(mlp, adam, {.opt_level = "O2", .dtype = "bf16", .verbosity = 0});
  const Tensor o = amp::forward(*mlp, randn({5, 8}));
  const Tensor loss = mul(o, o).mean();
  loss.backward();  // bf16 needs no scaling
  const std::vector<double> before = flat(adam.parameters());
  adam.step();
  CHECK(max_abs_diff(before, flat(adam.parameters())) > 0);
  for (const optim::MasterPair& m : adam.master_pairs()) {
    CHECK(test::values(m.model) == test::values(to(m.master, DType::BF16)));
  }
}

TEST_CASE("amp: scale_loss with two losses and two loss scalers equals the unscaled sum", "[amp][initialize]") {
  AmpFixture fx;
  // O0 with dynamic scaling: f32 throughout and power-of-two scales, so unscaling is exact and the
  // gradients must equal those of an unscaled backward of both losses bit for bit.
  auto ref = make_mlp(21);
  auto mlp = make_mlp(21);
  const Tensor x = randn({6, 8});
  const Tensor y = randint(0, 4, {6});
  {
    const Tensor out = ref->forward(x);
    cross_entropy(out, y).backward(Tensor(), true);
    mul(out, out).mean().backward();
  }
  optim::SGD sgd(mlp->parameters(), {.lr = 0.1});
  amp::initialize(mlp, sgd, {.opt_level = "O0", .loss_scale = "dynamic", .num_losses = 2, .verbosity = 0});
  const Tensor out = amp::forward(*mlp, x);
  amp::scale_loss(cross_entropy(out, y), sgd, {.loss_id = 0}).backward(/*retain_graph=*/true);
  amp::scale_loss(mul(out, out).mean(), sgd, {.loss_id = 1}).backward();
  std::vector<double> want, got;
  for (const Tensor& p : ref->parameters()) {
    auto v = test::values(p.grad());
    want.insert(want.end(), v.begin(), v.end());
  }
  for (const Tensor& p : mlp->parameters()) {
    auto v = test::values(p.grad());
    got.insert(got.end(), v.begin(), v.end());
  }
  CHECK(got == want);
  CHECK(amp::loss_scale(0) == 65536.0);
  CHECK(amp::loss_scale(1) == 65536.0);
  CHECK(amp::loss_scaler(1).iterations() == 1);
}

TEST_CASE("amp: delay_unscale accumulates 4 micro-batches like one big batch", "[amp][initialize]") {
  AmpFixture fx;
  auto big = make_mlp(31);
  auto micro = make_mlp(31);
  const Tensor x = randn({16, 8});
  const Tensor y = randint(0, 4, {16});
  optim::SGD sgd_big(big->parameters(), {.lr = 0.1});
  cross_entropy(big->forward(x), y).backward();
  sgd_big.step();

  optim::SGD sgd(micro->parameters(), {.lr = 0.1});
  amp::initialize(micro, sgd, {.opt_level = "O0", .loss_scale = "dynamic", .verbosity = 0});
  for (int k = 0; k < 4; ++k) {
    const Tensor xs = x.slice(0, 4 * k, 4 * k + 4), ys = y.slice(0, 4 * k, 4 * k + 4);
    const Tensor loss = cross_entropy(amp::forward(*micro, xs), ys) / 4.0;
    amp::scale_loss(loss, sgd, {.delay_unscale = k < 3}).backward();
  }
  sgd.step();
  // Summation order differs (4 partial sums of 4 rows vs one of 16): f32 rounding only.
  CHECK(max_abs_diff(flat(big->parameters()), flat(micro->parameters())) < 1e-6);
}

TEST_CASE("amp: scale_loss scales an f16 loss in f32, as Apex's loss.float() * scale", "[amp][initialize]") {
  // O2 with f16 outputs: a loss of 10 times the initial 65536 is inf in f16 (every iteration would
  // be skipped until the scale fell below 6550), finite in f32.
  AmpFixture fx;
  auto mlp = make_mlp(42);
  optim::SGD sgd(mlp->parameters(), {.lr = 0.01});
  amp::initialize(mlp, sgd, {.opt_level = "O2", .cast_model_outputs = "f16", .verbosity = 0});
  for (const double scale : {65536.0, 32768.0}) {
    const Tensor out = amp::forward(*mlp, randn({4, 8}));
    REQUIRE(out.dtype() == DType::F16);
    const Tensor loss = out.mean() * 0.001 + 10.0;  // f16, about 10
    amp::ScaledLoss scaled = amp::scale_loss(loss, sgd);
    CHECK(scaled.value().dtype() == DType::F32);
    CHECK(std::isfinite(scaled.value().item<double>()));
    CHECK(std::fabs(scaled.value().item<double>() - 10.0 * scale) < 0.01 * scale);
    scaled.backward();
    sgd.step();
    // As in PyTorch the first backward's seed, 65536, is inf once cast to the f16 loss: skipped.
    // Then the scale is 32768 and the step runs (an f16 scaled loss would stay inf until < 6550).
    CHECK(sgd.last_step_skipped() == (scale == 65536.0));
  }
}

TEST_CASE("amp: an overflow skips the step, backs off the scale and says so", "[amp][initialize]") {
  AmpFixture fx;
  auto mlp = make_mlp(41);
  optim::SGD sgd(mlp->parameters(), {.lr = 0.1, .momentum = 0.9});
  amp::initialize(mlp, sgd, {.opt_level = "O1"});
  optim::StepLR sched(sgd, {.step_size = 1, .gamma = 0.5});
  CHECK_THAT(fx.log, Catch::Matchers::Contains("opt_level O1"));
  const Tensor x = randn({4, 8});
  // A huge loss factor: the f16 gradients of the autocast linears overflow.
  amp::scale_loss(amp::forward(*mlp, x).to(DType::F32).sum() * 1e6, sgd).backward();
  const std::vector<double> before = flat(sgd.parameters());
  sgd.step();
  CHECK(sgd.last_step_skipped());
  CHECK(sgd.step_count() == 0);
  CHECK_FALSE(sched.optimizer_stepped());  // a scheduler can tell the update did not happen
  CHECK(flat(sgd.parameters()) == before);
  CHECK(amp::loss_scale() == 32768.0);
  CHECK(amp::loss_scaler().skipped_iterations() == 1);
  CHECK_THAT(fx.log, Catch::Matchers::Contains("gradient overflow"));
  CHECK_THAT(fx.log, Catch::Matchers::Contains("loss scaler 0 reducing the loss scale to 32768"));
  // The next clean iteration steps.
  sgd.zero_grad();
  amp::scale_loss(amp::forward(*mlp, x).to(DType::F32).mean(), sgd).backward();
  sgd.step();
  CHECK(!sgd.last_step_skipped());
  CHECK(sgd.step_count() == 1);
  CHECK(sched.optimizer_stepped());
  sched.step();
  CHECK_FALSE(sched.optimizer_stepped());
}

TEST_CASE("amp: an overflow at the scale's floor is an error, and a caller who catches it still skips the step",
          "[amp][initialize]") {
  AmpFixture fx;
  auto mlp = make_mlp(45);
  optim::SGD sgd(mlp->parameters(), {.lr = 0.1});
  amp::initialize(mlp, sgd, {.opt_level = "O1", .min_loss_scale = "65536"});  // starts at its floor
  const Tensor x = randn({4, 8});
  const std::vector<double> before = flat(sgd.parameters());
  MG_REQUIRE_ERROR(amp::scale_loss(amp::forward(*mlp, x).to(DType::F32).sum() * 1e30, sgd).backward(),
                   "already at its floor");
  sgd.step();  // the gradients are inf/NaN: skipped, not applied
  CHECK(sgd.last_step_skipped());
  CHECK(flat(sgd.parameters()) == before);
}

TEST_CASE("amp: after a skipped O2 step the next loss overwrites the master gradients, not adds to them",
          "[amp][initialize]") {
  AmpFixture fx;
  auto mlp = make_mlp(46);
  optim::SGD sgd(mlp->parameters(), {.lr = 0.1});
  amp::initialize(mlp, sgd, {.opt_level = "O2"});
  const Tensor x = randn({4, 8});
  amp::scale_loss(amp::forward(*mlp, x).to(DType::F32).sum() * 1e30, sgd).backward();
  sgd.step();
  REQUIRE(sgd.last_step_skipped());
  mlp->zero_grad();  // the model's gradients only: the masters still hold the inf of the skipped step
  amp::scale_loss(amp::forward(*mlp, x).to(DType::F32).mean(), sgd).backward();
  sgd.step();
  CHECK(!sgd.last_step_skipped());
  for (double v : flat(sgd.parameters())) CHECK(std::isfinite(v));
}

TEST_CASE("amp: O2 accepts an optimizer holding only batch-norm parameters (kept f32, no masters)", "[amp][initialize]") {
  AmpFixture fx;
  auto mlp = make_mlp(47, /*batch_norm=*/true);
  auto bn = mlp->at<nn::BatchNorm1d>(1);
  Tensors weights;
  for (const Tensor& p : mlp->parameters()) {
    if (!p.is_same(bn->weight) && !p.is_same(bn->bias)) weights.push_back(p);
  }
  optim::SGD main_opt(weights, {.lr = 0.1, .weight_decay = 1e-4});
  optim::SGD bn_opt({bn->weight, bn->bias}, {.lr = 0.1});
  amp::initialize_models({mlp}, {&main_opt, &bn_opt}, {.opt_level = "O2"});
  CHECK(main_opt.has_master_weights());
  CHECK(!bn_opt.has_master_weights());
  CHECK(bn->weight.dtype() == DType::F32);
  const Tensor before = bn->weight.detach().clone();
  amp::scale_loss(amp::forward(*mlp, randn({4, 8})).to(DType::F32).mean(), {&main_opt, &bn_opt}).backward();
  main_opt.step();
  bn_opt.step();
  CHECK(!bn_opt.last_step_skipped());
  CHECK(test::values(bn->weight) != test::values(before));
}

TEST_CASE("amp: a scale_loss refused for one optimizer leaves the others' gradients in place", "[amp][initialize]") {
  AmpFixture fx;
  auto mlp = make_mlp(48);
  optim::SGD sgd(mlp->parameters(), {.lr = 0.1});
  optim::SGD stranger(make_mlp(49)->parameters(), {.lr = 0.1});
  amp::initialize(mlp, sgd, {.opt_level = "O1"});
  const Tensor x = randn({4, 8});
  amp::scale_loss(amp::forward(*mlp, x).to(DType::F32).mean(), sgd).backward();
  const std::vector<double> first = flat([&] {
    Tensors g;
    for (const Tensor& p : sgd.parameters()) g.push_back(p.grad());
    return g;
  }());
  MG_REQUIRE_ERROR(amp::scale_loss(amp::forward(*mlp, x).to(DType::F32).mean(), {&sgd, &stranger}),
                   "optimizer was not passed to amp::initialize");
  Tensors after;
  for (const Tensor& p : sgd.parameters()) after.push_back(p.grad());
  for (const Tensor& g : after) REQUIRE(g.defined());
  CHECK(flat(after) == first);
}

TEST_CASE("amp: with amp disabled the loss scale is 1, as a disabled GradScaler's", "[amp][initialize]") {
  AmpFixture fx;
  auto mlp = make_mlp(50);
  optim::SGD sgd(mlp->parameters(), {.lr = 0.1});
  amp::initialize(mlp, sgd, {.enabled = false, .opt_level = "O1"});
  CHECK(amp::loss_scale() == 1.0);
  CHECK(!amp::loss_scaler().is_enabled());
  CHECK(amp::state_dict().ints.at("num_losses") == 1);
}

TEST_CASE("amp: a static loss scale skips an overflowing step, keeps its scale, and resumes static", "[amp][initialize]") {
  AmpFixture fx;
  auto mlp = make_mlp(42);
  optim::SGD sgd(mlp->parameters(), {.lr = 0.1});
  amp::initialize(mlp, sgd, {.opt_level = "O1", .loss_scale = "128"});
  const Tensor x = randn({4, 8});
  amp::scale_loss(amp::forward(*mlp, x).to(DType::F32).sum() * 1e6, sgd).backward();
  sgd.step();
  CHECK(sgd.last_step_skipped());
  CHECK(amp::loss_scale() == 128.0);
  CHECK(amp::loss_scaler().skipped_iterations() == 1);
  CHECK_THAT(fx.log, Catch::Matchers::Contains("loss scaler 0 keeping its static scale 128"));
  for (int i = 0; i < 3; ++i) {  // clean steps never grow a static scale
    sgd.zero_grad();
    amp::scale_loss(amp::forward(*mlp, x).to(DType::F32).mean(), sgd).backward();
    sgd.step();
    CHECK(!sgd.last_step_skipped());
  }
  CHECK(amp::loss_scale() == 128.0);
  // A checkpoint written before GradScaler saved "dynamic" loads as the scaler amp made: static.
  StateDict s = amp::state_dict();
  CHECK(s.ints.at("loss_scaler.0.dynamic") == 0);
  s.ints.erase("loss_scaler.0.dynamic");
  amp::load_state_dict(s);
  CHECK(!amp::loss_scaler().options().dynamic);
  // The loss scaling must match, as the opt level must; nothing is loaded otherwise.
  StateDict other = amp::state_dict();
  other.floats["loss_scaler.0.scale"] = 256;
  MG_REQUIRE_ERROR(amp::load_state_dict(other), "loss scaler 0 was saved with the static loss scale 256 but amp was "
                                                "initialized with 128");
  other = amp::state_dict();
  other.ints["loss_scaler.0.dynamic"] = 1;
  MG_REQUIRE_ERROR(amp::load_state_dict(other), "loss scaler 0 was saved with a dynamic loss scale but amp was "
                                                "initialized with a static one");
  other = amp::state_dict();
  other.ints["loss_scaler.0.skipped"] = 7;
  other.floats.erase("loss_scaler.0.growth_factor");
  MG_REQUIRE_ERROR(amp::load_state_dict(other), "growth_factor");
  CHECK(amp::loss_scaler().skipped_iterations() == 1);  // unchanged
}

namespace {
// A user batch type with a to(dtype) method, and a model that takes it (the O2 custom-batch scenario).
struct PairBatch {
  Tensor features;  // floating: cast
  Tensor labels;    // integer: unchanged
  PairBatch to(DType dtype) const { return {mg::to(features, dtype), labels}; }
};
struct BatchModel : nn::Module {
  BatchModel() : Module("BatchModel") { fc = register_module<nn::Linear>("fc", {.in = 8, .out = 4}); }
  Tensor forward(const PairBatch& b) {
    seen_dtype = b.features.dtype();
    return cross_entropy(fc->forward(b.features).to(DType::F32), b.labels, Reduction::None);
  }
  std::shared_ptr<nn::Linear> fc;
  DType seen_dtype = DType::F32;
};
}  // namespace

TEST_CASE("amp: forward casts tensors inside vectors, maps and batch types - O2 with a custom batch trains",
          "[amp][initialize][scenario]") {
  AmpFixture fx;
  const Tensor f = randn({2, 8}), ids = randint(0, 4, {2});
  const std::vector<Tensor> v = amp::cast_floating(std::vector<Tensor>{f, ids}, DType::BF16);
  CHECK(v[0].dtype() == DType::BF16);
  CHECK(v[1].dtype() == ids.dtype());
  const auto m = amp::cast_floating(std::map<std::string, Tensor>{{"x", f}}, DType::F16);
  CHECK(m.at("x").dtype() == DType::F16);
  CHECK(amp::cast_floating(PairBatch{f, ids}, DType::F16).features.dtype() == DType::F16);
  CHECK(amp::cast_floating(3.5, DType::F16) == 3.5);

  manual_seed(51);
  auto model = std::make_shared<BatchModel>();
  optim::SGD sgd(model->parameters(), {.lr = 0.5});
  amp::initialize(model, sgd, {.opt_level = "O2", .dtype = "bf16", .verbosity = 0});
  const PairBatch batch{randn({32, 8}), randint(0, 4, {32})};
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    sgd.zero_grad();
    const Tensor losses = amp::forward(*model, batch);
    CHECK(model->seen_dtype == DType::BF16);
    CHECK(losses.dtype() == DType::F32);
    const Tensor loss = losses.mean();
    amp::scale_loss(loss, sgd).backward();
    sgd.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  CHECK(last < 0.8 * first);
}

TEST_CASE("amp: state dict of the loss scalers round-trips and is checked", "[amp][initialize]") {
  AmpFixture fx;
  auto mlp = make_mlp(61);
  optim::SGD sgd(mlp->parameters(), {.lr = 0.1});
  amp::initialize(mlp, sgd, {.opt_level = "O1", .num_losses = 2, .verbosity = 0});
  amp::scale_loss(amp::forward(*mlp, randn({2, 8})).to(DType::F32).sum() * 1e6, sgd, {.loss_id = 1}).backward();
  const StateDict s = amp::state_dict();
  CHECK(s.floats.at("loss_scaler.1.scale") == 32768.0);
  CHECK(s.ints.at("loss_scaler.1.skipped") == 1);
  CHECK(s.floats.at("loss_scaler.0.scale") == 65536.0);

  amp::reset();
  auto mlp2 = make_mlp(61);
  optim::SGD sgd2(mlp2->parameters(), {.lr = 0.1});
  amp::initialize(mlp2, sgd2, {.opt_level = "O1", .num_losses = 2, .verbosity = 0});
  amp::load_state_dict(s);
  CHECK(amp::loss_scale(1) == 32768.0);
  CHECK(amp::loss_scaler(1).skipped_iterations() == 1);

  amp::reset();
  auto mlp3 = make_mlp(61);
  optim::SGD sgd3(mlp3->parameters(), {.lr = 0.1});
  amp::initialize(mlp3, sgd3, {.opt_level = "O3", .verbosity = 0});
  MG_REQUIRE_ERROR(amp::load_state_dict(s), "saved at opt_level O1");
}

TEST_CASE("amp: a disabled amp loads its own state dict, and refuses an enabled one's", "[amp][initialize]") {
  // Its scalers are disabled whatever the level's loss scale says (O1 f16: dynamic; O3: static);
  // the load checked them against an enabled scaler and always threw (PyTorch's disabled
  // GradScaler loads its own state).
  AmpFixture fx;
  for (const char* level : {"O1", "O3"}) {
    INFO(level);
    amp::reset();
    auto mlp = make_mlp(62);
    optim::SGD sgd(mlp->parameters(), {.lr = 0.1});
    amp::initialize(mlp, sgd, {.enabled = false, .opt_level = level, .verbosity = 0});
    const StateDict off = amp::state_dict();
    amp::load_state_dict(off);
    CHECK_FALSE(amp::loss_scaler(0).is_enabled());

    amp::reset();
    auto mlp2 = make_mlp(62);
    optim::SGD sgd2(mlp2->parameters(), {.lr = 0.1});
    amp::initialize(mlp2, sgd2, {.opt_level = level, .verbosity = 0});
    MG_REQUIRE_ERROR(amp::load_state_dict(off), "disabled");  // an enabled amp refuses a disabled one's state
    const StateDict on = amp::state_dict();
    amp::reset();
    auto mlp3 = make_mlp(62);
    optim::SGD sgd3(mlp3->parameters(), {.lr = 0.1});
    amp::initialize(mlp3, sgd3, {.enabled = false, .opt_level = level, .verbosity = 0});
    MG_REQUIRE_ERROR(amp::load_state_dict(on), "enabled");
  }
}

TEST_CASE("amp: O2 optimizer state dict carries the f32 masters - resume continues bit-identically",
          "[amp][initialize]") {
  AmpFixture fx;
  const Tensor x = randn({8, 8});
  const Tensor y = randint(0, 4, {8});
  auto train_step = [&](nn::Sequential& net, optim::Optimizer& opt) {
    opt.zero_grad();
    const Tensor loss = cross_entropy(amp::forward(net, x), y);
    amp::scale_loss(loss, opt).backward();
    opt.step();
    return loss.item<float>();
  };
  auto a = make_mlp(71, true);
  optim::Adam adam(a->parameters(), {.lr = 1e-2});
  amp::initialize(a, adam, {.opt_level = "O2", .verbosity = 0});
  for (int i = 0; i < 3; ++i) train_step(*a, adam);
  auto model_state = a->state_dict();
  for (auto& [name, t] : model_state) t = clone(t);  // state_dict() aliases the live tensors
  const StateDict opt_state = adam.state_dict();
  const StateDict amp_state = amp::state_dict();
  CHECK(opt_state.tensors.size() > 0);
  bool has_master = false;
  for (const auto& [k, t] : opt_state.tensors) has_master |= k.rfind("master.", 0) == 0 && t.dtype() == DType::F32;
  CHECK(has_master);
  std::vector<float> straight;
  for (int i = 0; i < 3; ++i) straight.push_back(train_step(*a, adam));
  amp::reset();

  auto b = make_mlp(99, true);  // different initial weights: everything comes from the state
  optim::Adam adam_b(b->parameters(), {.lr = 1e-2});
  amp::initialize(b, adam_b, {.opt_level = "O2", .verbosity = 0});
  b->load_state_dict(model_state);
  adam_b.load_state_dict(opt_state);
  amp::load_state_dict(amp_state);
  std::vector<float> resumed;
  for (int i = 0; i < 3; ++i) resumed.push_back(train_step(*b, adam_b));
  CHECK(resumed == straight);
  CHECK(flat(a->parameters()) == flat(b->parameters()));

  // A state with masters cannot go into an optimizer without them.
  auto c = make_mlp(5, true);
  optim::Adam adam_c(c->parameters(), {.lr = 1e-2});
  MG_REQUIRE_ERROR(adam_c.load_state_dict(opt_state), "holds an f32 master weight");
}

TEST_CASE("amp: the precision plan lists dtypes, masters and memory", "[amp][initialize]") {
  AmpFixture fx;
  manual_seed(81);
  auto net = std::make_shared<nn::models::ResNet>(nn::models::ResNetConfig::cifar(8, 1, 10));
  optim::SGD sgd(net->parameters(), {.lr = 0.1, .momentum = 0.9});
  amp::initialize(net, sgd, {.opt_level = "O2", .dtype = "bf16", .verbosity = 0});
  const std::string plan = amp::precision_plan(*net, &sgd);
  INFO(plan);
  CHECK_THAT(plan, Catch::Matchers::Contains("precision plan: ResNet at O2"));
  CHECK_THAT(plan, Catch::Matchers::Contains("layer1.0.conv1"));
  CHECK_THAT(plan, Catch::Matchers::Contains("f32 (optimizer)"));
  CHECK_THAT(plan, Catch::Matchers::Contains("bf16 in/out, f32 statistics"));
  CHECK_THAT(plan, Catch::Matchers::Contains("inputs to bf16, outputs to f32"));
  CHECK_THAT(plan, Catch::Matchers::Contains("SGD: 1 f32 buffer per parameter"));
  amp::reset();

  auto net1 = std::make_shared<nn::models::ResNet>(nn::models::ResNetConfig::cifar(8, 1, 10));
  optim::SGD sgd1(net1->parameters(), {.lr = 0.1});
  amp::initialize(net1, sgd1, {.opt_level = "O1", .verbosity = 0});
  const std::string plan1 = amp::precision_plan(*net1, &sgd1);
  INFO(plan1);
  CHECK_THAT(plan1, Catch::Matchers::Contains("autocast        : on (f16)"));
  CHECK_THAT(plan1, Catch::Matchers::Contains("master weights  : none"));
  amp::reset();

  // RMSprop's buffers follow its options; Adagrad keeps one.
  auto net2 = std::make_shared<nn::models::ResNet>(nn::models::ResNetConfig::cifar(8, 1, 10));
  optim::RMSprop rms(net2->parameters(), {.lr = 0.01, .momentum = 0.9, .centered = true});
  CHECK_THAT(amp::precision_plan(*net2, &rms), Catch::Matchers::Contains("RMSprop: 3 f32 buffers per parameter"));
  optim::RMSprop plain(net2->parameters(), {.lr = 0.01});
  CHECK_THAT(amp::precision_plan(*net2, &plain), Catch::Matchers::Contains("RMSprop: 1 f32 buffer per parameter"));
  optim::Adagrad ada(net2->parameters(), {.lr = 0.01});
  CHECK_THAT(amp::precision_plan(*net2, &ada), Catch::Matchers::Contains("Adagrad: 1 f32 buffer per parameter"));
  optim::NAdam nadam(net2->parameters(), {.lr = 0.01});
  CHECK_THAT(amp::precision_plan(*net2, &nadam), Catch::Matchers::Contains("NAdam: 2 f32 buffers per parameter"));
  optim::Adadelta adadelta(net2->parameters());
  CHECK_THAT(amp::precision_plan(*net2, &adadelta), Catch::Matchers::Contains("Adadelta: 2 f32 buffers per parameter"));
}

TEST_CASE("amp: the dynamic loss scale starts at min(max_loss_scale, 2^16), raised to min_loss_scale",
          "[amp][initialize]") {
  AmpFixture fx;
  auto mlp = make_mlp(31);
  optim::SGD sgd(mlp->parameters(), {.lr = 0.1});
  amp::initialize(mlp, sgd, {.opt_level = "O1", .max_loss_scale = "1024", .verbosity = 0});
  CHECK(amp::loss_scale() == 1024.0);  // Apex: min(max_loss_scale, init_scale)
  CHECK_THAT(amp::precision_plan(*mlp, &sgd), Catch::Matchers::Contains("dynamic (from 1024, x2"));  // as it starts
  amp::initialize(mlp, sgd, {.opt_level = "O1", .min_loss_scale = 1e6, .verbosity = 0});
  CHECK(amp::loss_scale() == 1e6);
  amp::initialize(mlp, sgd, {.opt_level = "O2", .verbosity = 0});
  CHECK(amp::loss_scale() == 65536.0);  // the default, inside the default bounds [none, 2^24]
}

TEST_CASE("amp: O3 with dynamic scaling on f16 parameters is refused - static scales and bf16 train",
          "[amp][initialize]") {
  AmpFixture fx;
  auto mlp = make_mlp(32);
  optim::SGD sgd(mlp->parameters(), {.lr = 0.1});
  MG_REQUIRE_ERROR(amp::initialize(mlp, sgd, {.opt_level = "O3", .loss_scale = "dynamic", .verbosity = 0}),
                   "amp::initialize: O3 with dynamic loss scaling on f16 parameters without f32 master weights");
  MG_REQUIRE_ERROR(amp::initialize(mlp, sgd, {.opt_level = "O3", .loss_scale = "dynamic", .verbosity = 0}),
                   "hint: use opt_level O2 (f32 master weights), dtype bf16, or a static loss_scale");
  // O2 without its masters is the same case.
  MG_REQUIRE_ERROR(amp::initialize(mlp, sgd, {.opt_level = "O2", .master_weights = false, .verbosity = 0}),
                   "O2 with dynamic loss scaling on f16 parameters");
  CHECK(!amp::is_initialized());
  CHECK(mlp->parameters()[0].dtype() == DType::F32);  // refused before anything changed

  const Tensor x = randn({4, 8});
  for (const auto& [dtype, scale] : {std::pair<const char*, const char*>{"f16", "128"}, {"bf16", "dynamic"}, {"bf16", "1"}}) {
    auto m = make_mlp(33);
    optim::SGD opt(m->parameters(), {.lr = 0.1});
    amp::initialize(m, opt, {.opt_level = "O3", .dtype = dtype, .loss_scale = scale, .verbosity = 0});
    const std::vector<double> before = flat(opt.parameters());
    opt.zero_grad();
    const Tensor y = amp::forward(*m, x).to(DType::F32);
    amp::scale_loss((y * y).mean(), opt).backward();
    opt.step();
    INFO("O3 " << dtype << " loss_scale " << scale);
    CHECK(!opt.last_step_skipped());
    CHECK(flat(opt.parameters()) != before);
    amp::reset();
  }
}

TEST_CASE("amp: O1's weight casts are dropped after every scale_loss backward, and by reset", "[amp][initialize]") {
  AmpFixture fx;
  auto mlp = make_mlp(6);
  optim::SGD sgd(mlp->parameters(), {.lr = 0.01});
  auto [net, opt] = amp::initialize(mlp, sgd, {.opt_level = "O1", .dtype = "bf16", .verbosity = 0});
  for (int it = 0; it < 200; ++it) {
    const Tensor x = randn({6, 8}).requires_grad_();  // a fresh leaf per step: cached too (an input gradient)
    const Tensor loss = cross_entropy(amp::forward(*net, x), Tensor(randint(0, 4, {6})));
    CHECK(amp::weight_cache_size() > 0);
    amp::scale_loss(loss, opt).backward();
    REQUIRE(amp::weight_cache_size() == 0);  // it grew by one entry per step before
    opt.step();
    opt.zero_grad();
  }
  (void)amp::forward(*net, randn({6, 8}));
  CHECK(amp::weight_cache_size() > 0);
  amp::reset();
  CHECK(amp::weight_cache_size() == 0);
}

TEST_CASE("amp: initialize and reset at O1 inside an Autocast region are refused", "[amp][initialize]") {
  AmpFixture fx;
  auto mlp = make_mlp(7);
  optim::SGD sgd(mlp->parameters(), {.lr = 0.01});
  {
    amp::Autocast region({.dtype = DType::BF16});
    // The region's exit would restore the state it saved, turning O1 off (or back on after reset).
    MG_REQUIRE_ERROR(amp::initialize(mlp, sgd, {.opt_level = "O1", .verbosity = 0}),
                     "amp::initialize: called inside an Autocast region");
    CHECK_FALSE(amp::is_initialized());
  }
  amp::initialize(mlp, sgd, {.opt_level = "O1", .dtype = "bf16", .verbosity = 0});
  {
    amp::Autocast region;
    MG_REQUIRE_ERROR(amp::reset(), "amp::reset: called inside an Autocast region");
    CHECK(amp::is_initialized());
  }
  amp::reset();
  CHECK_FALSE(amp::is_autocast_enabled());
  CHECK(matmul(ones({2, 2}), ones({2, 2})).dtype() == DType::F32);
}
