// Clipping under fp32 master weights (optim/master_grad_check.h): the two silent mistakes — the
// model's f16/bf16 gradients clipped after they went into the masters, the masters clipped
// before they hold this step's gradients — are errors that name the fix, and the right orders
// clip what the step uses (checked by the step's result, against an f32 run clipped by hand).
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "amp/initialize.h"
#include "core/factory.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "test_util.h"

using namespace mg;

namespace {

struct AmpFixture {
  AmpFixture() { amp::set_log_sink([](const std::string&) {}); }
  ~AmpFixture() {
    amp::reset();
    amp::set_log_sink(nullptr);
  }
};

// A bf16 two-layer MLP and an SGD over its parameters with f32 masters.
struct Bf16Net {
  std::shared_ptr<nn::Sequential> net;
  std::unique_ptr<optim::SGD> opt;
  explicit Bf16Net(uint64_t seed, bool masters = true) {
    manual_seed(seed);
    net = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::UnaryModule>>{
        nn::make<nn::Linear>({.in = 8, .out = 16}), nn::make<nn::ReLU>(), nn::make<nn::Linear>({.in = 16, .out = 4})});
    net->to(DType::BF16);
    opt = std::make_unique<optim::SGD>(net->parameters(), optim::SGDOptions{.lr = 0.5});
    if (masters) opt->use_master_weights();
  }
  Tensor loss() const {
    manual_seed(99);
    const Tensor x = randn({32, 8}, {.dtype = DType::BF16});
    return to((*net)(x), DType::F32).pow(2.0).mean() * 100.0;  // large gradients: clipping acts
  }
};

std::vector<float> values_of(const Tensors& ts) {
  std::vector<float> out;
  for (const Tensor& t : ts) {
    const Tensor f = to(t.detach(), DType::F32).contiguous();
    out.insert(out.end(), f.data<float>(), f.data<float>() + f.numel());
  }
  return out;
}

}  // namespace

TEST_CASE("clipping model gradients after they went into the f32 masters is an error", "[amp][clip]") {
  AmpFixture fx;
  SECTION("sync_master_grads") {
    Bf16Net n(1);
    n.loss().backward();
    n.opt->sync_master_grads();
    MG_REQUIRE_ERROR(optim::clip_grad_norm_(n.net->parameters(), 1.0),
                     "clip_grad_norm_: parameter 0 is a bf16 model parameter whose gradient SGD already took into its "
                     "f32 master weight");
    MG_REQUIRE_ERROR(optim::clip_grad_value_(n.net->parameters(), 1.0), "hint: clip the optimizer's parameters");
  }
  SECTION("GradScaler::unscale_") {
    Bf16Net n(2);
    amp::GradScaler scaler({.init_scale = 1024.0});
    scaler.scale(n.loss()).backward();
    scaler.unscale_(*n.opt);
    MG_REQUIRE_ERROR(optim::clip_grad_norm_(n.net->parameters(), 1.0), "the step reads the master");
    optim::clip_grad_norm_(n.opt->parameters(), 1.0);  // the right tensors
    CHECK(scaler.step(*n.opt));
  }
  SECTION("amp::initialize at O2 and scale_loss (which drops the model gradients)") {
    for (const char* dtype : {"f16", "bf16"}) {
      INFO(dtype);
      manual_seed(3);
      auto net = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::UnaryModule>>{
          nn::make<nn::Linear>({.in = 8, .out = 4})});
      optim::SGD sgd(net->parameters(), {.lr = 0.1});
      // Named results, not a structured binding: clang 14 cannot capture one in MG_REQUIRE_ERROR's lambda.
      auto initialized = amp::initialize(net, sgd, {.opt_level = "O2", .dtype = dtype, .verbosity = 0});
      const auto& model = initialized.first;
      optim::Optimizer& opt = initialized.second;
      amp::scale_loss(amp::forward(*model, randn({4, 8})).pow(2.0).mean(), opt).backward();
      MG_REQUIRE_ERROR(optim::clip_grad_norm_(model->parameters(), 1.0),
                       std::string("clip_grad_norm_: parameter 0 is ") + (dtype[0] == 'f' ? "an " : "a ") + dtype +
                           " model parameter");
      optim::clip_grad_norm_(amp::master_params(opt), 1.0);
      opt.step();
      amp::reset();
    }
  }
}

TEST_CASE("clipping the f32 masters before they hold the step's gradients is an error", "[amp][clip]") {
  AmpFixture fx;
  Bf16Net n(4);
  n.loss().backward();
  MG_REQUIRE_ERROR(optim::clip_grad_norm_(n.opt->parameters(), 1.0),
                   "clip_grad_norm_: parameter 0 is an f32 master weight of SGD whose gradient does not hold this "
                   "step's gradient yet");
  MG_REQUIRE_ERROR(optim::clip_grad_value_(n.opt->parameters(), 1.0), "opt.sync_master_grads() (without one)");
  // After a step the flag clears; with no new backward nothing is lost, but the model gradients are
  // still there: clipping the masters again needs a sync first.
  n.opt->sync_master_grads();
  optim::clip_grad_norm_(n.opt->parameters(), 1.0);
  n.opt->step();
  MG_REQUIRE_ERROR(optim::clip_grad_norm_(n.opt->parameters(), 1.0), "does not hold this step's gradient yet");
  n.opt->zero_grad();
  optim::clip_grad_norm_(n.opt->parameters(), 1.0);  // no gradients: nothing to lose, no error
}

TEST_CASE("a GradScaler step skipped on the host leaves the masters' gradients to be rewritten", "[amp][clip]") {
  // The host-read skip (GradScaler on the CPU) kept master_grads_synced set, so the next loss was
  // added to the inf gradients of the skipped step, and clipping before unscale_ passed silently.
  AmpFixture fx;
  Bf16Net n(5);
  amp::GradScaler scaler;
  scaler.scale(n.loss() * 1e38).backward();  // the scaled bf16 gradients overflow: a skip
  CHECK_FALSE(scaler.step(*n.opt));
  scaler.update();
  CHECK(n.opt->last_step_skipped());
  CHECK_FALSE(n.opt->master_grads_synced());
  n.net->zero_grad();
  scaler.scale(n.loss()).backward();
  MG_REQUIRE_ERROR(optim::clip_grad_norm_(n.opt->parameters(), 1.0), "does not hold this step's gradient yet");
}

TEST_CASE("both right orders clip what the step uses", "[amp][clip]") {
  AmpFixture fx;
  const double max_norm = 0.05;
  // Model gradients clipped before the sync (no scaler) and masters clipped after it must give the
  // same step, and differ from an unclipped one.
  Bf16Net before(5), after(5), unclipped(5);
  before.loss().backward();
  const double norm = optim::clip_grad_norm_(before.net->parameters(), max_norm).item<double>();
  REQUIRE(norm > 10 * max_norm);
  before.opt->step();
  after.loss().backward();
  after.opt->sync_master_grads();
  optim::clip_grad_norm_(after.opt->parameters(), max_norm);
  after.opt->step();
  unclipped.loss().backward();
  unclipped.opt->step();
  const std::vector<float> a = values_of(after.opt->parameters());
  const std::vector<float> b = values_of(before.opt->parameters());
  const std::vector<float> u = values_of(unclipped.opt->parameters());
  REQUIRE(a.size() == b.size());
  CHECK(a != u);
  // The model-side clip rounds the clipped gradients to bf16 before the f32 copy: close, not equal.
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(std::abs(a[i] - b[i]) <= 1e-3f * (1 + std::abs(a[i])));
}

TEST_CASE("an optimizer without masters, or one destroyed, does not affect clipping", "[amp][clip]") {
  AmpFixture fx;
  Bf16Net plain(6, /*masters=*/false);
  plain.loss().backward();
  optim::clip_grad_norm_(plain.net->parameters(), 1.0);
  Tensors model_params;
  {
    Bf16Net n(7);
    n.loss().backward();
    n.opt->sync_master_grads();
    model_params = n.net->parameters();
    CHECK_FALSE(test::error_of([&] { optim::clip_grad_norm_(model_params, 1.0); }).empty());
  }
  optim::clip_grad_norm_(model_params, 1.0);  // its optimizer is gone: an ordinary clip (ASan checks)
}
