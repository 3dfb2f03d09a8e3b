// Apex-style O1 and O2 training through the device-generic path (optim/generic_path.h, the path
// CUDA tensors take until the fused kernels) against the fused CPU path: an MLP, f16 and bf16,
// SGD with momentum and Adam, 30 seeded steps from the same weights on the same batches, two of
// them with inputs that overflow f16 (skipped steps under f16's dynamic loss scale). The two runs must skip the same
// steps, end on the same loss scale and stay within a few f32 ulps per step of each other.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "amp/initialize.h"
#include "core/factory.h"
#include "optim/generic_path.h"
#include "optim/optim.h"
#include "tanh_mlp.h"
#include "test_util.h"

using namespace mg;

namespace {

struct Run {
  std::vector<float> losses;
  Tensors weights;  // the model's final parameters
  int64_t skipped = 0;
  double scale = 0;
};

Run train(const std::string& level, const std::string& dtype, bool adam, bool generic) {
  manual_seed(5);
  const Tensor x = randn({32, 8}), y = randint(0, 3, {32});
  manual_seed(9);
  auto model = std::make_shared<test::Mlp>(8, 16, 3);
  std::unique_ptr<optim::Optimizer> opt;
  if (adam) opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 1e-2, .weight_decay = 1e-3});
  else opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  amp::initialize(model, *opt, {.opt_level = level, .dtype = dtype, .verbosity = 0});
  std::unique_ptr<optim::ForceGenericPathGuard> force;
  if (generic) force = std::make_unique<optim::ForceGenericPathGuard>();
  Run r;
  for (int step = 0; step < 30; ++step) {
    const int64_t b = (step % 4) * 8;
    opt->zero_grad();
    // steps 5 and 17 see inputs that overflow f16: inf/NaN gradients, a skipped step, a backoff
    const double boost = (step == 5 || step == 17) ? 1e6 : 1.0;
    const Tensor loss = cross_entropy(amp::forward(*model, x.slice(0, b, b + 8) * boost), y.slice(0, b, b + 8));
    amp::scale_loss(loss, *opt).backward();
    opt->step();
    r.losses.push_back(loss.item<float>());
  }
  for (const Tensor& p : model->parameters()) r.weights.push_back(clone(p.detach()));
  r.skipped = amp::loss_scaler().skipped_iterations();
  r.scale = amp::loss_scale();
  amp::reset();
  return r;
}

}  // namespace

TEST_CASE("O1/O2 training on the generic path tracks the fused CPU path", "[amp][generic]") {
  for (const char* level : {"O1", "O2"}) {
    for (const char* dtype : {"f16", "bf16"}) {
      for (bool adam : {false, true}) {
        INFO(level << " " << dtype << (adam ? " Adam" : " SGD"));
        const Run fused = train(level, dtype, adam, false);
        const Run generic = train(level, dtype, adam, true);
        CHECK(generic.skipped == fused.skipped);
        if (std::string(dtype) == "f16") CHECK(fused.skipped >= 2);
        CHECK(generic.scale == fused.scale);
        for (std::size_t i = 0; i < fused.losses.size(); ++i) {
          if (std::isfinite(fused.losses[i])) {
            CHECK(std::fabs(generic.losses[i] - fused.losses[i]) <= 1e-3 * std::fabs(fused.losses[i]));
          } else {
            CHECK_FALSE(std::isfinite(generic.losses[i]));
          }
        }
        REQUIRE(generic.weights.size() == fused.weights.size());
        const double tol = std::string(dtype) == "f16" ? 4 * 9.77e-4 : 4 * 7.82e-3;
        for (std::size_t k = 0; k < fused.weights.size(); ++k) {
          const std::vector<double> g = test::values(generic.weights[k]), f = test::values(fused.weights[k]);
          double scale = 1e-30, err = 0;
          for (std::size_t i = 0; i < f.size(); ++i) {
            scale = std::max(scale, std::fabs(f[i]));
            err = std::max(err, std::fabs(g[i] - f[i]));
          }
          CHECK(err <= tol * scale);
        }
      }
    }
  }
}
