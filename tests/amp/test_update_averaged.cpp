// amp::update_averaged: weight averaging of an O2 model folds in the optimizer's f32 masters, not
// the model's bf16 copies (which SGD's small steps leave unchanged while the masters move).
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "amp/initialize.h"
#include "amp/update_averaged.h"
#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "nn/averaged_model.h"
#include "nn/linear.h"
#include "ops/ops.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace mg;

namespace {

struct AmpSink {  // amp's messages collected, amp reset afterwards
  AmpSink() { amp::set_log_sink([](const std::string&) {}); }
  ~AmpSink() {
    amp::reset();
    amp::set_log_sink(nullptr);
  }
};

}  // namespace

TEST_CASE("amp::update_averaged averages the O2 masters, update_parameters the bf16 model copies",
          "[amp][averaged]") {
  AmpSink sink;
  manual_seed(3);
  auto net = std::make_shared<nn::Linear>(nn::LinearOptions{.in = 16, .out = 8});
  nn::AveragedModel<nn::Linear> by_master(std::make_shared<nn::Linear>(nn::LinearOptions{.in = 16, .out = 8}), *net);
  nn::AveragedModel<nn::Linear> by_model(std::make_shared<nn::Linear>(nn::LinearOptions{.in = 16, .out = 8}), *net);
  optim::SGD opt(net->parameters(), {.lr = 1e-6});
  amp::initialize(net, opt, {.opt_level = "O2", .dtype = "bf16", .verbosity = 0});
  REQUIRE(net->weight.dtype() == DType::BF16);
  REQUIRE(by_master.module()->weight.dtype() == DType::F32);  // built before the cast: an f32 average
  const Tensor x = randn({32, 16});
  for (int s = 0; s < 5; ++s) {
    opt.zero_grad();
    amp::scale_loss(amp::forward(*net, x).sum(), opt).backward();
    opt.step();
    amp::update_averaged(by_master, *net, opt);
    by_model.update_parameters(*net);
  }
  const Tensor master = opt.master_pairs()[0].master;  // the weight's
  REQUIRE(master.dtype() == DType::F32);
  // SGD's steps of 1e-6 x 32 move the masters by less than half a bf16 ulp of most weights: the
  // model's copy did not follow, so its average still holds (nearly) the start; the masters' did.
  const std::vector<double> w_master = test::values(master), w_model = test::values(to(net->weight.detach(), DType::F32));
  const std::vector<double> a_master = test::values(by_master.module()->weight);
  const std::vector<double> a_model = test::values(by_model.module()->weight);
  int closer = 0;
  for (std::size_t i = 0; i < w_master.size(); ++i) {
    if (std::fabs(a_master[i] - w_master[i]) < std::fabs(a_model[i] - w_master[i])) ++closer;
  }
  CHECK(closer > int(w_master.size()) * 3 / 4);
  CHECK(by_master.n_averaged() == 5);

  // What the average receives: exactly the master (f32), and the model's own tensor where the
  // optimizer keeps no master (none here at O0).
  std::vector<DType> seen;
  nn::AveragedModel<nn::Linear> probe(std::make_shared<nn::Linear>(nn::LinearOptions{.in = 16, .out = 8}), *net,
                                      {.average = [&](const Tensor& avg, const Tensor& m, int64_t) {
                                        seen.push_back(m.dtype());
                                        return avg;
                                      }});
  amp::update_averaged(probe, *net, opt);  // n = 0: copies, the custom average is not called
  amp::update_averaged(probe, *net, opt);
  CHECK(seen == std::vector<DType>{DType::F32, DType::F32});
  CHECK(test::values(probe.module()->weight) == test::values(master));  // the first update copied the master itself
}

TEST_CASE("AveragedModel::update_parameters with a source refuses a replacement of another shape, changing nothing",
          "[amp][averaged]") {
  manual_seed(4);
  auto net = std::make_shared<nn::Linear>(nn::LinearOptions{.in = 4, .out = 2});
  nn::AveragedModel<nn::Linear> avg(std::make_shared<nn::Linear>(nn::LinearOptions{.in = 4, .out = 2}), *net);
  const Tensor before = clone(avg.module()->weight);
  MG_REQUIRE_ERROR(avg.update_parameters(*net, [](const Tensor&) { return zeros({3}); }), "the source of 'weight' is");
  CHECK(test::values(avg.module()->weight) == test::values(before));
  CHECK(avg.n_averaged() == 0);
}
