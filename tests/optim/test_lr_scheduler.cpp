// Learning-rate schedulers: StepLR, MultiStepLR and OneCycleLR lr (and momentum) sequences against
// PyTorch 1.13 (tests/data/reference/optim.txt, to 1e-12 relative); the warmup schedules against
// their formulas; initial_lr in the group options; state dicts; errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "core/factory.h"
#include "optim_test_util.h"
#include "test_paths.h"

using namespace mg;

namespace {

constexpr double kRtol = 1e-12;

// |got - want| <= kRtol * |want| for every element (exact for 0); returns the largest relative error.
double check_close(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO(what << " element " << i << ": got " << got[i] << ", want " << want[i]);
    REQUIRE(std::fabs(got[i] - want[i]) <= kRtol * std::fabs(want[i]));
    if (want[i] != 0) worst = std::max(worst, std::fabs(got[i] - want[i]) / std::fabs(want[i]));
  }
  return worst;
}

// One parameter group per lr, each with a parameter [2]; SGD with `momentum` or Adam with beta1.
std::unique_ptr<optim::Optimizer> make_opt(int64_t kind, const std::vector<double>& lrs, double momentum) {
  std::vector<optim::ParamGroupSpec> groups;
  for (double lr : lrs) groups.push_back({{zeros({2}).requires_grad_()}, {{"lr", lr}}});
  if (kind == test::kSGD) return std::make_unique<optim::SGD>(groups, optim::SGDOptions{.momentum = momentum});
  return std::make_unique<optim::Adam>(groups, optim::AdamOptions{.betas = {momentum, 0.999}});
}

std::vector<double> momentums(const optim::Optimizer& o) {
  std::vector<double> out;
  for (const optim::ParamGroup& g : o.param_groups()) out.push_back(g.option(g.has_option("momentum") ? "momentum" : "beta1"));
  return out;
}

std::unique_ptr<optim::LRScheduler> make_scheduler(const test::ReferenceFile& f, const std::string& c, optim::Optimizer& o) {
  switch (f.int_value(c + ".scheduler")) {
    case 0:
      return std::make_unique<optim::StepLR>(o, optim::StepLROptions{.step_size = f.int_value(c + ".step_size"),
                                                                     .gamma = f.f64_value(c + ".gamma")});
    case 1:
      return std::make_unique<optim::MultiStepLR>(o, optim::MultiStepLROptions{.milestones = f.ints(c + ".milestones"),
                                                                               .gamma = f.f64_value(c + ".gamma")});
    default:
      return std::make_unique<optim::OneCycleLR>(
          o, optim::OneCycleLROptions{
                 .max_lr = test::values(f.tensor(c + ".max_lr")),
                 .total_steps = f.int_value(c + ".total_steps"),
                 .pct_start = f.f64_value(c + ".pct_start"),
                 .anneal_strategy = f.int_value(c + ".anneal") == 0 ? optim::AnnealStrategy::Cos : optim::AnnealStrategy::Linear,
                 .cycle_momentum = f.int_value(c + ".cycle_momentum") != 0,
                 .base_momentum = {f.f64_value(c + ".base_momentum")},
                 .max_momentum = {f.f64_value(c + ".max_momentum")},
                 .div_factor = f.f64_value(c + ".div_factor"),
                 .final_div_factor = f.f64_value(c + ".final_div_factor"),
                 .three_phase = f.int_value(c + ".three_phase") != 0});
  }
}

}  // namespace

TEST_CASE("schedulers: StepLR, MultiStepLR and OneCycleLR follow PyTorch's lr and momentum", "[optim]") {
  const test::ReferenceFile f = test::load_reference("optim.txt");
  int cases = 0;
  for (const std::string& c : f.cases()) {
    if (!f.has(c + ".scheduler")) continue;
    ++cases;
    DYNAMIC_SECTION("case " << c) {
      const std::vector<double> lrs0 = test::values(f.tensor(c + ".lrs0"));
      auto o = make_opt(f.int_value(c + ".optimizer"), lrs0, f.f64_value(c + ".momentum0"));
      auto s = make_scheduler(f, c, *o);
      const Tensor want_lr = f.tensor(c + ".lrs");
      const Tensor want_m = f.tensor(c + ".momentums");
      const int64_t n = want_lr.size(0) - 1;
      double worst = 0;
      for (int64_t t = 0; t <= n; ++t) {
        if (t > 0) {
          o->step();
          s->step();
        }
        CHECK(s->last_epoch() == t);
        worst = std::max(worst, check_close(s->get_last_lr(), test::values(want_lr.select(0, t)),
                                            c + " lr at step " + std::to_string(t)));
        std::vector<double> group_lrs;
        for (const optim::ParamGroup& g : o->param_groups()) group_lrs.push_back(g.lr());
        CHECK(group_lrs == s->get_last_lr());
        worst = std::max(worst, check_close(momentums(*o), test::values(want_m.select(0, t)),
                                            c + " momentum at step " + std::to_string(t)));
      }
      test::report(c + " (lr, momentum)", worst);
      if (f.int_value(c + ".scheduler") == 2) {
        MG_REQUIRE_ERROR(s->step(), "OneCycleLR: tried to step " + std::to_string(n + 1) + " times; total_steps is " + std::to_string(n));
        CHECK(s->last_epoch() == n);
      }
    }
  }
  CHECK(cases == 5);
}

TEST_CASE("schedulers: warmup + cosine and warmup + linear follow their formulas", "[optim]") {
  SECTION("cosine with linear warmup to min_lr") {
    auto o = make_opt(test::kSGD, {0.1, 0.2}, 0.0);
    optim::WarmupCosineLR s(*o, {.warmup_steps = 4, .total_steps = 12, .min_lr = 0.001});
    const auto lr = [&](double base, int64_t t) {
      if (t < 4) return base * double(t) / 4.0;                                   // 0, base/4, base/2, 3 base/4
      if (t >= 12) return 0.001;
      return 0.001 + (base - 0.001) * (1.0 + std::cos(std::numbers::pi * double(t - 4) / 8.0)) / 2.0;
    };
    for (int64_t t = 0; t <= 14; ++t) {
      if (t > 0) s.step();
      check_close(s.get_last_lr(), {lr(0.1, t), lr(0.2, t)}, "cosine step " + std::to_string(t));
    }
    // Golden points: t = 2 is half the warmup, t = 8 half the cosine (the mean of base and min_lr).
    auto o2 = make_opt(test::kSGD, {0.1}, 0.0);
    optim::WarmupCosineLR s2(*o2, {.warmup_steps = 4, .total_steps = 12, .min_lr = 0.001});
    CHECK(s2.get_last_lr()[0] == 0.0);
    s2.step();
    s2.step();
    CHECK(s2.get_last_lr()[0] == Approx(0.05));
    s2.step();
    s2.step();
    CHECK(s2.get_last_lr()[0] == Approx(0.1));
    for (int i = 0; i < 4; ++i) s2.step();
    CHECK(s2.get_last_lr()[0] == Approx(0.0505));
    for (int i = 0; i < 4; ++i) s2.step();
    CHECK(s2.get_last_lr()[0] == Approx(0.001));
  }
  SECTION("linear warmup + linear decay (BERT)") {
    auto o = make_opt(test::kAdam, {0.1}, 0.9);
    optim::WarmupLinearLR s(*o, {.warmup_steps = 2, .total_steps = 6});
    // t:      0    1     2    3      4     5      6   7
    const std::vector<double> want = {0.0, 0.05, 0.1, 0.075, 0.05, 0.025, 0.0, 0.0};
    for (std::size_t t = 0; t < want.size(); ++t) {
      if (t > 0) s.step();
      INFO("step " << t);
      CHECK(s.get_last_lr()[0] == Approx(want[t]).margin(1e-15));
    }
  }
  SECTION("no warmup") {
    auto o = make_opt(test::kSGD, {0.1}, 0.0);
    optim::WarmupLinearLR s(*o, {.warmup_steps = 0, .total_steps = 4});
    CHECK(s.get_last_lr()[0] == 0.1);
    s.step();
    CHECK(s.get_last_lr()[0] == Approx(0.075));
  }
}

TEST_CASE("schedulers: initial_lr lives in the group options - chained schedulers keep it", "[optim]") {
  auto o = make_opt(test::kSGD, {0.1}, 0.9);
  optim::StepLR a(*o, {.step_size = 2, .gamma = 0.5});
  CHECK(o->param_groups()[0].option("initial_lr") == 0.1);
  a.step();
  a.step();
  CHECK(o->param_groups()[0].lr() == 0.05);
  optim::MultiStepLR b(*o, {.milestones = {1}, .gamma = 0.1});  // base = initial_lr, not the current lr
  CHECK(b.base_lrs()[0] == 0.1);
  b.step();
  CHECK(o->param_groups()[0].lr() == Approx(0.005));
  // OneCycle writes its own schedule into the groups.
  optim::OneCycleLR c(*o, {.max_lr = {1.0}, .total_steps = 10});
  CHECK(o->param_groups()[0].option("initial_lr") == 0.04);
  CHECK(o->param_groups()[0].option("max_lr") == 1.0);
  CHECK(o->param_groups()[0].option("min_lr") == Approx(4e-6));
  CHECK(o->param_groups()[0].option("momentum") == Approx(0.95));
}

TEST_CASE("schedulers: state dict round trip with the optimizer's", "[optim]") {
  auto o = make_opt(test::kSGD, {0.1, 0.05}, 0.9);
  optim::OneCycleLR s(*o, {.max_lr = {0.1, 0.05}, .total_steps = 12});
  for (int i = 0; i < 5; ++i) {
    o->step();
    s.step();
  }
  const StateDict so = o->state_dict();
  const StateDict ss = s.state_dict();
  CHECK(ss.strings.at("scheduler") == "OneCycleLR");
  CHECK(ss.ints.at("last_epoch") == 5);
  CHECK(ss.floats.at("last_lr.1") == s.get_last_lr()[1]);
  CHECK(so.floats.at("group.0.max_lr") == 0.1);

  auto o2 = make_opt(test::kSGD, {0.3, 0.3}, 0.5);
  optim::OneCycleLR s2(*o2, {.max_lr = {0.1, 0.05}, .total_steps = 12});
  o2->load_state_dict(so);
  s2.load_state_dict(ss);
  CHECK(s2.last_epoch() == 5);
  CHECK(s2.get_last_lr() == s.get_last_lr());
  for (int i = 0; i < 7; ++i) {
    o->step();
    s.step();
    o2->step();
    s2.step();
    CHECK(s2.get_last_lr() == s.get_last_lr());
    CHECK(momentums(*o2) == momentums(*o));
  }

  optim::StepLR other(*o2, {.step_size = 1});
  MG_REQUIRE_ERROR(other.load_state_dict(ss), "StepLR: load_state_dict: the state belongs to a OneCycleLR scheduler, not StepLR");
  auto o3 = make_opt(test::kSGD, {0.1}, 0.9);
  optim::OneCycleLR s3(*o3, {.max_lr = {0.1}, .total_steps = 12});
  MG_REQUIRE_ERROR(s3.load_state_dict(ss), "OneCycleLR: load_state_dict: the state has 2 param groups but the scheduler has 1");
  CHECK(s3.last_epoch() == 0);
}

TEST_CASE("schedulers: bad options give clear errors", "[optim]") {
  auto o = make_opt(test::kSGD, {0.1, 0.1}, 0.9);
  MG_REQUIRE_ERROR(optim::StepLR(*o, {.step_size = 0}), "StepLR: step_size must be > 0, got 0");
  MG_REQUIRE_ERROR(optim::MultiStepLR(*o, {.milestones = {5, 2}}), "MultiStepLR: milestones must be non-decreasing, got [5, 2]");
  MG_REQUIRE_ERROR(optim::WarmupCosineLR(*o, {.warmup_steps = 10, .total_steps = 5}),
                   "WarmupCosineLR: total_steps must be > 0 and >= warmup_steps (10), got 5");
  MG_REQUIRE_ERROR(optim::WarmupLinearLR(*o, {.warmup_steps = -1, .total_steps = 5}), "WarmupLinearLR: warmup_steps must be >= 0, got -1");
  MG_REQUIRE_ERROR(optim::WarmupCosineLR(*o, {.total_steps = 5, .min_lr = -1}), "WarmupCosineLR: min_lr must be >= 0, got -1");
  MG_REQUIRE_ERROR(optim::OneCycleLR(*o, {.max_lr = {0.1, 0.2, 0.3}, .total_steps = 10}),
                   "OneCycleLR: max_lr has 3 values; expected 1 or one per param group (2)");
  MG_REQUIRE_ERROR(optim::OneCycleLR(*o, {.max_lr = {0.1}, .total_steps = 0}), "OneCycleLR: total_steps must be > 0, got 0");
  MG_REQUIRE_ERROR(optim::OneCycleLR(*o, {.max_lr = {0.1}, .total_steps = 10, .pct_start = 1.5}),
                   "OneCycleLR: pct_start must be in [0, 1], got 1.5");
  // A group added after the scheduler was created.
  optim::StepLR s(*o, {.step_size = 1});
  o->add_param_group({zeros({1}).requires_grad_()});
  MG_REQUIRE_ERROR(s.step(), "StepLR: the optimizer has 3 param groups but the scheduler was created for 2");
}

TEST_CASE("ExponentialLR, CosineAnnealingLR (alone, past two periods, chained), LambdaLR and LinearLR equal PyTorch's lrs",
          "[optim][lr_scheduler]") {
  // tests/data/reference/torch_lr_schedules.json, written by tools/reference/gen_torch_lr_schedules.py
  // with PyTorch 2.15: two groups (lr 0.1 and 0.03), the lrs after each of 25 steps.
  std::ifstream f(test::source_dir() + "/tests/data/reference/torch_lr_schedules.json");
  REQUIRE(f.good());
  const nlohmann::json ref = nlohmann::json::parse(f);
  using Make = std::function<std::vector<std::unique_ptr<optim::LRScheduler>>(optim::Optimizer&)>;
  const std::vector<std::pair<std::string, Make>> cases = {
      {"exponential_0.9", [](optim::Optimizer& o) {
         std::vector<std::unique_ptr<optim::LRScheduler>> v;
         v.push_back(std::make_unique<optim::ExponentialLR>(o, optim::ExponentialLROptions{.gamma = 0.9}));
         return v;
       }},
      {"cosine_tmax5_eta0.01", [](optim::Optimizer& o) {
         std::vector<std::unique_ptr<optim::LRScheduler>> v;
         v.push_back(std::make_unique<optim::CosineAnnealingLR>(o, optim::CosineAnnealingLROptions{.t_max = 5, .eta_min = 0.01}));
         return v;
       }},
      {"cosine_tmax7", [](optim::Optimizer& o) {
         std::vector<std::unique_ptr<optim::LRScheduler>> v;
         v.push_back(std::make_unique<optim::CosineAnnealingLR>(o, optim::CosineAnnealingLROptions{.t_max = 7}));
         return v;
       }},
      {"cosine_tmax4_then_exponential_0.95", [](optim::Optimizer& o) {
         std::vector<std::unique_ptr<optim::LRScheduler>> v;
         v.push_back(std::make_unique<optim::CosineAnnealingLR>(o, optim::CosineAnnealingLROptions{.t_max = 4, .eta_min = 0.001}));
         v.push_back(std::make_unique<optim::ExponentialLR>(o, optim::ExponentialLROptions{.gamma = 0.95}));
         return v;
       }},
      {"linear_start0.25_iters4", [](optim::Optimizer& o) {
         std::vector<std::unique_ptr<optim::LRScheduler>> v;
         v.push_back(std::make_unique<optim::LinearLR>(o, optim::LinearLROptions{.start_factor = 0.25, .total_iters = 4}));
         return v;
       }},
      {"linear_default_then_exponential_0.9", [](optim::Optimizer& o) {
         std::vector<std::unique_ptr<optim::LRScheduler>> v;
         v.push_back(std::make_unique<optim::LinearLR>(o, optim::LinearLROptions{}));
         v.push_back(std::make_unique<optim::ExponentialLR>(o, optim::ExponentialLROptions{.gamma = 0.9}));
         return v;
       }},
      {"constant_0.5_iters4", [](optim::Optimizer& o) {
         std::vector<std::unique_ptr<optim::LRScheduler>> v;
         v.push_back(std::make_unique<optim::ConstantLR>(o, optim::ConstantLROptions{.factor = 0.5, .total_iters = 4}));
         return v;
       }},
      {"constant_default_then_exponential_0.9", [](optim::Optimizer& o) {
         std::vector<std::unique_ptr<optim::LRScheduler>> v;
         v.push_back(std::make_unique<optim::ConstantLR>(o, optim::ConstantLROptions{}));
         v.push_back(std::make_unique<optim::ExponentialLR>(o, optim::ExponentialLROptions{.gamma = 0.9}));
         return v;
       }},
      {"warm_restarts_t3", [](optim::Optimizer& o) {
         std::vector<std::unique_ptr<optim::LRScheduler>> v;
         v.push_back(std::make_unique<optim::CosineAnnealingWarmRestarts>(
             o, optim::CosineAnnealingWarmRestartsOptions{.t_0 = 3, .eta_min = 0.002}));
         return v;
       }},
      {"warm_restarts_t2_mult2", [](optim::Optimizer& o) {
         std::vector<std::unique_ptr<optim::LRScheduler>> v;
         v.push_back(std::make_unique<optim::CosineAnnealingWarmRestarts>(
             o, optim::CosineAnnealingWarmRestartsOptions{.t_0 = 2, .t_mult = 2}));
         return v;
       }},
      {"sequential_constant2_warm_restarts", [](optim::Optimizer& o) {
         std::vector<std::unique_ptr<optim::LRScheduler>> parts;
         parts.push_back(std::make_unique<optim::ConstantLR>(o, optim::ConstantLROptions{.factor = 0.1, .total_iters = 2}));
         parts.push_back(std::make_unique<optim::CosineAnnealingWarmRestarts>(
             o, optim::CosineAnnealingWarmRestartsOptions{.t_0 = 4, .t_mult = 2, .eta_min = 0.001}));
         std::vector<std::unique_ptr<optim::LRScheduler>> v;
         v.push_back(std::make_unique<optim::SequentialLR>(o, std::move(parts), std::vector<int64_t>{2}));
         return v;
       }},
      {"polynomial_iters6_power2", [](optim::Optimizer& o) {
         std::vector<std::unique_ptr<optim::LRScheduler>> v;
         v.push_back(std::make_unique<optim::PolynomialLR>(o, optim::PolynomialLROptions{.total_iters = 6, .power = 2.0}));
         return v;
       }},
      {"polynomial_default_then_exponential_0.9", [](optim::Optimizer& o) {
         std::vector<std::unique_ptr<optim::LRScheduler>> v;
         v.push_back(std::make_unique<optim::PolynomialLR>(o, optim::PolynomialLROptions{}));
         v.push_back(std::make_unique<optim::ExponentialLR>(o, optim::ExponentialLROptions{.gamma = 0.9}));
         return v;
       }},
      {"sequential_linear3_cosine8", [](optim::Optimizer& o) {
         std::vector<std::unique_ptr<optim::LRScheduler>> parts;
         parts.push_back(std::make_unique<optim::LinearLR>(o, optim::LinearLROptions{.start_factor = 0.2, .total_iters = 3}));
         parts.push_back(
             std::make_unique<optim::CosineAnnealingLR>(o, optim::CosineAnnealingLROptions{.t_max = 8, .eta_min = 0.001}));
         std::vector<std::unique_ptr<optim::LRScheduler>> v;
         v.push_back(std::make_unique<optim::SequentialLR>(o, std::move(parts), std::vector<int64_t>{3}));
         return v;
       }},
      {"sequential_exponential_step_linear", [](optim::Optimizer& o) {
         std::vector<std::unique_ptr<optim::LRScheduler>> parts;
         parts.push_back(std::make_unique<optim::ExponentialLR>(o, optim::ExponentialLROptions{.gamma = 0.8}));
         parts.push_back(std::make_unique<optim::StepLR>(o, optim::StepLROptions{.step_size = 2, .gamma = 0.5}));
         parts.push_back(std::make_unique<optim::LinearLR>(o, optim::LinearLROptions{.start_factor = 0.5, .total_iters = 4}));
         std::vector<std::unique_ptr<optim::LRScheduler>> v;
         v.push_back(std::make_unique<optim::SequentialLR>(o, std::move(parts), std::vector<int64_t>{4, 10}));
         return v;
       }},
      {"cyclic_triangular_up3_down5", [](optim::Optimizer& o) {
         std::vector<std::unique_ptr<optim::LRScheduler>> v;
         v.push_back(std::make_unique<optim::CyclicLR>(
             o, optim::CyclicLROptions{.base_lr = {0.01}, .max_lr = {0.1, 0.05}, .step_size_up = 3, .step_size_down = 5,
                                       .cycle_momentum = false}));
         return v;
       }},
      {"cyclic_triangular2_up4", [](optim::Optimizer& o) {
         std::vector<std::unique_ptr<optim::LRScheduler>> v;
         v.push_back(std::make_unique<optim::CyclicLR>(
             o, optim::CyclicLROptions{.base_lr = {0.02, 0.001}, .max_lr = {0.2}, .step_size_up = 4,
                                       .mode = optim::CyclicMode::Triangular2, .cycle_momentum = false}));
         return v;
       }},
      {"cyclic_exp_range_up3_down2", [](optim::Optimizer& o) {
         std::vector<std::unique_ptr<optim::LRScheduler>> v;
         v.push_back(std::make_unique<optim::CyclicLR>(
             o, optim::CyclicLROptions{.base_lr = {0.01}, .max_lr = {0.1}, .step_size_up = 3, .step_size_down = 2,
                                       .mode = optim::CyclicMode::ExpRange, .gamma = 0.95, .cycle_momentum = false}));
         return v;
       }},
      {"cyclic_scale_fn_iterations", [](optim::Optimizer& o) {
         std::vector<std::unique_ptr<optim::LRScheduler>> v;
         v.push_back(std::make_unique<optim::CyclicLR>(
             o, optim::CyclicLROptions{.base_lr = {0.01}, .max_lr = {0.1}, .step_size_up = 2,
                                       .scale_fn = [](double x) { return 1.0 / (1.0 + 0.1 * x); },
                                       .scale_mode = optim::ScaleMode::Iterations, .cycle_momentum = false}));
         return v;
       }},
      {"sequential_cyclic_constant", [](optim::Optimizer& o) {
         std::vector<std::unique_ptr<optim::LRScheduler>> parts;
         parts.push_back(std::make_unique<optim::CyclicLR>(
             o, optim::CyclicLROptions{.base_lr = {0.01}, .max_lr = {0.1}, .step_size_up = 2, .cycle_momentum = false}));
         parts.push_back(std::make_unique<optim::ConstantLR>(o, optim::ConstantLROptions{.factor = 0.5, .total_iters = 2}));
         std::vector<std::unique_ptr<optim::LRScheduler>> v;
         v.push_back(std::make_unique<optim::SequentialLR>(o, std::move(parts), std::vector<int64_t>{3}));
         return v;
       }},
      {"chained_constant_exponential", [](optim::Optimizer& o) {
         std::vector<std::unique_ptr<optim::LRScheduler>> parts;
         parts.push_back(std::make_unique<optim::ConstantLR>(o, optim::ConstantLROptions{.factor = 0.1, .total_iters = 2}));
         parts.push_back(std::make_unique<optim::ExponentialLR>(o, optim::ExponentialLROptions{.gamma = 0.9}));
         std::vector<std::unique_ptr<optim::LRScheduler>> v;
         v.push_back(std::make_unique<optim::ChainedScheduler>(o, std::move(parts)));
         return v;
       }},
      {"chained_linear_step_polynomial", [](optim::Optimizer& o) {
         std::vector<std::unique_ptr<optim::LRScheduler>> parts;
         parts.push_back(std::make_unique<optim::LinearLR>(o, optim::LinearLROptions{.start_factor = 0.5, .total_iters = 3}));
         parts.push_back(std::make_unique<optim::StepLR>(o, optim::StepLROptions{.step_size = 4, .gamma = 0.5}));
         parts.push_back(std::make_unique<optim::PolynomialLR>(o, optim::PolynomialLROptions{.total_iters = 20, .power = 1.5}));
         std::vector<std::unique_ptr<optim::LRScheduler>> v;
         v.push_back(std::make_unique<optim::ChainedScheduler>(o, std::move(parts)));
         return v;
       }},
      {"lambda_inverse_and_square", [](optim::Optimizer& o) {
         std::vector<std::unique_ptr<optim::LRScheduler>> v;
         v.push_back(std::make_unique<optim::LambdaLR>(
             o, optim::LambdaLROptions{.factors = {[](int64_t t) { return 1.0 / (1.0 + double(t)); },
                                                   [](int64_t t) { return std::pow(0.97, double(t * t)); }}}));
         return v;
       }},
  };
  const std::vector<double> lrs = ref["lrs"].get<std::vector<double>>();
  for (const auto& [name, make] : cases) {
    INFO(name);
    const auto& want = ref["cases"][name];
    REQUIRE(want.size() == std::size_t(ref["steps"].get<int>() + 1));
    auto opt = make_opt(test::kSGD, lrs, 0.0);
    auto scheds = make(*opt);
    for (std::size_t step = 0; step < want.size(); ++step) {
      if (step > 0) {
        opt->step();
        for (auto& s : scheds) s->step();
      }
      std::vector<double> got;
      for (const auto& g : opt->param_groups()) got.push_back(g.lr());
      INFO("step " << step);
      check_close(got, want[step].get<std::vector<double>>(), name);
    }
  }
  MG_REQUIRE_ERROR(optim::CosineAnnealingLR(*make_opt(test::kSGD, lrs, 0.0), {.t_max = 0}),
                   "CosineAnnealingLR: t_max must be > 0, got 0");
  MG_REQUIRE_ERROR(optim::LambdaLR(*make_opt(test::kSGD, lrs, 0.0), {.factors = {nullptr, nullptr, nullptr}}),
                   "LambdaLR: expected one factor function or one per param group (2), got 3");
}

TEST_CASE("OneCycleLR cycles per-group momenta (Adam's beta1) as PyTorch 2.15", "[optim][lr_scheduler]") {
  std::ifstream f(test::source_dir() + "/tests/data/reference/torch_lr_schedules.json");
  REQUIRE(f.good());
  const nlohmann::json ref = nlohmann::json::parse(f);
  const nlohmann::json& c = ref["momentum_cases"]["onecycle_adam_beta1_per_group"];
  auto opt = make_opt(test::kAdam, ref["lrs"].get<std::vector<double>>(), 0.9);
  optim::OneCycleLR sched(*opt, {.max_lr = {0.1, 0.05}, .total_steps = int64_t(c["lrs"].size()), .pct_start = 0.4,
                                 .base_momentum = {0.85, 0.7}, .max_momentum = {0.95, 0.9}});
  for (std::size_t step = 0; step < c["lrs"].size(); ++step) {
    if (step > 0) sched.step();
    std::vector<double> got;
    for (const auto& g : opt->param_groups()) got.push_back(g.lr());
    INFO("step " << step);
    check_close(got, c["lrs"][step].get<std::vector<double>>(), "onecycle");
    check_close(momentums(*opt), c["momentums"][step].get<std::vector<double>>(), "onecycle momentum");
  }
  MG_REQUIRE_ERROR(optim::OneCycleLR(*opt, {.max_lr = {0.1}, .total_steps = 5, .base_momentum = {0.5, 1.0}}),
                   "OneCycleLR: base_momentum and max_momentum must be in [0, 1), got 1 and 0.95 (param group 1)");
}

TEST_CASE("CyclicLR cycles SGD's momentum and Adam's beta1 as PyTorch 2.15", "[optim][lr_scheduler]") {
  std::ifstream f(test::source_dir() + "/tests/data/reference/torch_lr_schedules.json");
  REQUIRE(f.good());
  const nlohmann::json ref = nlohmann::json::parse(f);
  const std::vector<double> lrs = ref["lrs"].get<std::vector<double>>();
  const std::map<std::string, optim::CyclicLROptions> cases = {
      {"cyclic_sgd_momentum_up3_down4", {.base_lr = {0.01}, .max_lr = {0.1}, .step_size_up = 3, .step_size_down = 4}},
      {"cyclic_adam_beta1_triangular2",
       {.base_lr = {0.001}, .max_lr = {0.01, 0.004}, .step_size_up = 2, .mode = optim::CyclicMode::Triangular2,
        .base_momentum = {0.85}, .max_momentum = {0.95}}},
      {"cyclic_sgd_momentum_per_group",
       {.base_lr = {0.01}, .max_lr = {0.1}, .step_size_up = 2, .step_size_down = 3, .base_momentum = {0.8, 0.6},
        .max_momentum = {0.9, 0.95}}},
  };
  REQUIRE(ref["momentum_cases"].size() == cases.size() + 1);  // + the OneCycleLR case below
  for (const auto& [name, options] : cases) {
    INFO(name);
    const nlohmann::json& c = ref["momentum_cases"][name];
    const bool sgd = c["optimizer"] == "sgd";
    auto opt = make_opt(sgd ? test::kSGD : test::kAdam, lrs, sgd ? 0.5 : 0.9);
    optim::CyclicLR sched(*opt, options);
    for (std::size_t step = 0; step < c["lrs"].size(); ++step) {
      if (step > 0) sched.step();
      std::vector<double> got;
      for (const auto& g : opt->param_groups()) got.push_back(g.lr());
      INFO("step " << step);
      check_close(got, c["lrs"][step].get<std::vector<double>>(), name);
      check_close(momentums(*opt), c["momentums"][step].get<std::vector<double>>(), name + " momentum");
    }
  }
  auto opt = make_opt(test::kSGD, lrs, 0.5);
  MG_REQUIRE_ERROR(optim::CyclicLR(*opt, {.base_lr = {0.1}, .max_lr = {1, 2, 3}}),
                   "CyclicLR: max_lr has 3 values; expected 1 or one per param group (2)");
  MG_REQUIRE_ERROR(optim::CyclicLR(*opt, {.base_lr = {-0.1}, .max_lr = {1}}), "CyclicLR: base_lr must be >= 0, got -0.1");
  MG_REQUIRE_ERROR(optim::CyclicLR(*opt, {.base_lr = {0.1}, .max_lr = {1}, .step_size_up = 0}),
                   "CyclicLR: step_size_up must be > 0, got 0");
  MG_REQUIRE_ERROR(optim::CyclicLR(*opt, {.base_lr = {0.1}, .max_lr = {1}, .step_size_down = -2}),
                   "CyclicLR: step_size_down must be >= 0 (or -1: as step_size_up), got -2");
  MG_REQUIRE_ERROR(optim::CyclicLR(*opt, {.base_lr = {0.1}, .max_lr = {1}, .max_momentum = {1.0}}),
                   "CyclicLR: base_momentum and max_momentum must be in [0, 1), got 0.8 and 1 (param group 0)");
  MG_REQUIRE_ERROR(optim::CyclicLR(*opt, {.base_lr = {0.1}, .max_lr = {1}, .max_momentum = {0.9, 1.2}}),
                   "got 0.8 and 1.2 (param group 1)");
  MG_REQUIRE_ERROR(optim::CyclicLR(*opt, {.base_lr = {0.1}, .max_lr = {1}, .base_momentum = {0.1, 0.2, 0.3}}),
                   "CyclicLR: base_momentum has 3 values; expected 1 or one per param group (2)");
  auto p = zeros({2}).requires_grad_();
  optim::Adagrad adagrad({p});
  MG_REQUIRE_ERROR(optim::CyclicLR(adagrad, {.base_lr = {0.1}, .max_lr = {1}}),
                   "CyclicLR: cycle_momentum needs an optimizer with a 'momentum' or 'beta1' option; Adagrad has neither");
  CHECK(adagrad.param_groups()[0].lr() == 0.01);  // refused before anything changed
  CHECK(!adagrad.param_groups()[0].has_option("initial_lr"));
  optim::CyclicLR no_momentum(adagrad, {.base_lr = {0.1}, .max_lr = {1}, .cycle_momentum = false});
  CHECK(adagrad.param_groups()[0].lr() == 0.1);
  CHECK(adagrad.param_groups()[0].option("initial_lr") == 0.1);  // the base lr, as PyTorch's (the lr was 0.01)
}

TEST_CASE("ChainedScheduler: a resume continues every scheduler, and bad arguments are refused", "[optim][lr_scheduler]") {
  const auto make = [](optim::Optimizer& o) {
    std::vector<std::unique_ptr<optim::LRScheduler>> parts;
    parts.push_back(std::make_unique<optim::LinearLR>(o, optim::LinearLROptions{.start_factor = 0.2, .total_iters = 3}));
    parts.push_back(std::make_unique<optim::CyclicLR>(
        o, optim::CyclicLROptions{.base_lr = {0.01}, .max_lr = {0.1}, .step_size_up = 2}));
    return std::make_unique<optim::ChainedScheduler>(o, std::move(parts));
  };
  auto p = zeros({2}).requires_grad_();
  optim::SGD o1({p}, {.lr = 0.1, .momentum = 0.9});
  auto s1 = make(o1);
  for (int i = 0; i < 5; ++i) s1->step();
  optim::SGD o2({p}, {.lr = 0.1, .momentum = 0.9});
  auto s2 = make(o2);
  o2.load_state_dict(o1.state_dict());
  s2->load_state_dict(s1->state_dict());
  for (int i = 0; i < 6; ++i) {
    s1->step();
    s2->step();
    CHECK(o2.param_groups()[0].lr() == o1.param_groups()[0].lr());
    CHECK(o2.param_groups()[0].option("momentum") == o1.param_groups()[0].option("momentum"));
  }
  CHECK(s2->schedulers()[1]->last_epoch() == 11);
  CHECK(s2->get_last_lr() == std::vector<double>{o2.param_groups()[0].lr()});
  optim::SGD o3({p}, {.lr = 0.1});
  MG_REQUIRE_ERROR(optim::ChainedScheduler(o3, {}), "ChainedScheduler: expected at least one scheduler, got none");
  std::vector<std::unique_ptr<optim::LRScheduler>> other;
  other.push_back(std::make_unique<optim::ExponentialLR>(o1, optim::ExponentialLROptions{}));
  MG_REQUIRE_ERROR(optim::ChainedScheduler(o3, std::move(other)),
                   "ChainedScheduler: scheduler 0 (ExponentialLR) belongs to another optimizer");
  StateDict missing = s1->state_dict();
  missing.strings.erase("schedulers.1.scheduler");
  MG_REQUIRE_ERROR(s2->load_state_dict(missing), "ChainedScheduler: load_state_dict: the state has no scheduler 1");
  StateDict swapped = s1->state_dict();
  swapped.strings["schedulers.0.scheduler"] = "StepLR";
  const int64_t before = s2->schedulers()[1]->last_epoch();
  MG_REQUIRE_ERROR(s2->load_state_dict(swapped), "ChainedScheduler: load_state_dict: scheduler 0 of the state is a StepLR, not LinearLR");
  CHECK(s2->schedulers()[1]->last_epoch() == before);  // nothing loaded
  // A part that fails its own checks (here the second) leaves the first unloaded too.
  StateDict bad_groups = s1->state_dict();
  bad_groups.ints["schedulers.1.num_groups"] = 3;
  const int64_t first_before = s2->schedulers()[0]->last_epoch();
  for (int i = 0; i < 2; ++i) s1->step();
  StateDict later = s1->state_dict();
  later.ints["schedulers.1.num_groups"] = 3;
  MG_REQUIRE_ERROR(s2->load_state_dict(later), "CyclicLR: load_state_dict: the state has 3 param groups but the scheduler has 1");
  CHECK(s2->schedulers()[0]->last_epoch() == first_before);
}

TEST_CASE("SequentialLR: a resume continues every scheduler, and bad arguments are refused", "[optim][lr_scheduler]") {
  const auto make = [](optim::Optimizer& o) {
    std::vector<std::unique_ptr<optim::LRScheduler>> parts;
    parts.push_back(std::make_unique<optim::LinearLR>(o, optim::LinearLROptions{.start_factor = 0.2, .total_iters = 3}));
    parts.push_back(std::make_unique<optim::PolynomialLR>(o, optim::PolynomialLROptions{.total_iters = 9, .power = 1.5}));
    return std::make_unique<optim::SequentialLR>(o, std::move(parts), std::vector<int64_t>{3});
  };
  auto p = zeros({2}).requires_grad_();
  optim::SGD o1({p}, {.lr = 0.1});
  auto s1 = make(o1);
  for (int i = 0; i < 6; ++i) s1->step();
  optim::SGD o2({p}, {.lr = 0.1});
  auto s2 = make(o2);
  o2.load_state_dict(o1.state_dict());
  s2->load_state_dict(s1->state_dict());
  for (int i = 0; i < 5; ++i) {
    s1->step();
    s2->step();
    CHECK(o2.param_groups()[0].lr() == o1.param_groups()[0].lr());
  }
  CHECK(s2->schedulers()[1]->last_epoch() == s1->schedulers()[1]->last_epoch());
  optim::SGD o3({p}, {.lr = 0.1});
  std::vector<std::unique_ptr<optim::LRScheduler>> one;
  one.push_back(std::make_unique<optim::ExponentialLR>(o3, optim::ExponentialLROptions{}));
  MG_REQUIRE_ERROR(optim::SequentialLR(o3, std::move(one), {2}),
                   "SequentialLR: expected one milestone fewer than the 1 schedulers, got 1");
  std::vector<std::unique_ptr<optim::LRScheduler>> other;
  other.push_back(std::make_unique<optim::ExponentialLR>(o1, optim::ExponentialLROptions{}));
  other.push_back(std::make_unique<optim::ExponentialLR>(o3, optim::ExponentialLROptions{}));
  MG_REQUIRE_ERROR(optim::SequentialLR(o3, std::move(other), {2}), "SequentialLR: scheduler 0 (ExponentialLR) belongs to another optimizer");
  std::vector<std::unique_ptr<optim::LRScheduler>> two;
  two.push_back(std::make_unique<optim::ExponentialLR>(o3, optim::ExponentialLROptions{}));
  two.push_back(std::make_unique<optim::ExponentialLR>(o3, optim::ExponentialLROptions{}));
  two.push_back(std::make_unique<optim::ExponentialLR>(o3, optim::ExponentialLROptions{}));
  MG_REQUIRE_ERROR(optim::SequentialLR(o3, std::move(two), {3, 3}), "SequentialLR: milestones must be positive and strictly increasing, got 3 at 1");
  MG_REQUIRE_ERROR(optim::PolynomialLR(o3, {.total_iters = 0}), "PolynomialLR: total_iters must be > 0, got 0");
  MG_REQUIRE_ERROR(optim::ConstantLR(o3, {.factor = 0.0}), "ConstantLR: factor must be in (0, 1], got 0");
  MG_REQUIRE_ERROR(optim::CosineAnnealingWarmRestarts(o3, {.t_0 = 2, .t_mult = 0}),
                   "CosineAnnealingWarmRestarts: t_mult must be >= 1, got 0");
  {  // a huge t_mult: the second period (10^19 steps) saturates instead of overflowing (UBSan checks)
    auto q = zeros({2}).requires_grad_();
    optim::SGD o4({q}, {.lr = 1.0});
    optim::CosineAnnealingWarmRestarts huge(o4, {.t_0 = 10, .t_mult = int64_t(1e18)});
    for (int k = 0; k < 12; ++k) huge.step();
    CHECK(o4.param_groups()[0].lr() == Approx((1.0 + std::cos(std::numbers::pi * 2.0 / 9.223372036854775807e18)) / 2.0));
  }
}

TEST_CASE("LRScheduler: optimizer_stepped() after a resume compares with the saved step", "[optim][lr_scheduler]") {
  auto p = zeros({2}).requires_grad_();
  optim::SGD o1({p}, {.lr = 0.1});
  optim::StepLR s1(o1, {.step_size = 2});
  for (int i = 0; i < 5; ++i) {
    p.set_grad(ones({2}));
    o1.step();
    s1.step();
  }
  CHECK_FALSE(s1.optimizer_stepped());
  optim::SGD o2({p}, {.lr = 0.1});
  optim::StepLR s2(o2, {.step_size = 2});
  o2.load_state_dict(o1.state_dict());
  s2.load_state_dict(s1.state_dict());
  CHECK_FALSE(s2.optimizer_stepped());  // nothing stepped since the saved step
  p.set_grad(ones({2}));
  o2.step();
  CHECK(s2.optimizer_stepped());
  // Loaded in the other order, the same.
  optim::SGD o3({p}, {.lr = 0.1});
  optim::StepLR s3(o3, {.step_size = 2});
  s3.load_state_dict(s1.state_dict());
  o3.load_state_dict(o1.state_dict());
  CHECK_FALSE(s3.optimizer_stepped());
}

TEST_CASE("ReduceLROnPlateau equals PyTorch's lrs over fixed metrics (min/max, rel/abs, cooldown, min_lr, eps, NaN)",
          "[optim][lr_scheduler]") {
  std::ifstream f(test::source_dir() + "/tests/data/reference/torch_lr_schedules.json");
  REQUIRE(f.good());
  const nlohmann::json ref = nlohmann::json::parse(f);
  const std::vector<double> lrs = ref["lrs"].get<std::vector<double>>();
  for (const auto& [name, c] : ref["plateau"].items()) {
    INFO(name);
    const nlohmann::json& o = c["options"];
    optim::ReduceLROnPlateauOptions opts;
    if (o.contains("mode")) opts.mode = o["mode"] == "max" ? optim::PlateauMode::Max : optim::PlateauMode::Min;
    if (o.contains("factor")) opts.factor = o["factor"];
    if (o.contains("patience")) opts.patience = o["patience"];
    if (o.contains("threshold")) opts.threshold = o["threshold"];
    if (o.contains("threshold_mode")) {
      opts.threshold_mode = o["threshold_mode"] == "abs" ? optim::ThresholdMode::Absolute : optim::ThresholdMode::Relative;
    }
    if (o.contains("cooldown")) opts.cooldown = o["cooldown"];
    if (o.contains("min_lr")) {
      opts.min_lr = o["min_lr"].is_array() ? o["min_lr"].get<std::vector<double>>() : std::vector<double>{o["min_lr"].get<double>()};
    }
    if (o.contains("eps")) opts.eps = o["eps"];
    auto opt = make_opt(test::kSGD, lrs, 0.0);
    optim::ReduceLROnPlateau plateau(*opt, opts);
    for (std::size_t i = 0; i < c["metrics"].size(); ++i) {
      const nlohmann::json& m = c["metrics"][i];
      plateau.step(m.is_string() ? std::nan("") : m.get<double>());
      std::vector<double> got;
      for (const auto& g : opt->param_groups()) got.push_back(g.lr());
      INFO("step " << i);
      check_close(got, c["lrs"][i].get<std::vector<double>>(), name);
      CHECK(plateau.get_last_lr() == got);
    }
    // The state carries on: a new scheduler loaded mid-run continues as the first.
    auto opt2 = make_opt(test::kSGD, lrs, 0.0);
    optim::ReduceLROnPlateau again(*opt2, opts);
    again.load_state_dict(plateau.state_dict());
    CHECK(again.best() == plateau.best());
    CHECK(again.num_bad_epochs() == plateau.num_bad_epochs());
  }
  auto opt = make_opt(test::kSGD, lrs, 0.0);
  MG_REQUIRE_ERROR(optim::ReduceLROnPlateau(*opt, {.factor = 1.0}), "ReduceLROnPlateau: factor must be in [0, 1), got 1");
  MG_REQUIRE_ERROR(optim::ReduceLROnPlateau(*opt, {.min_lr = {0.1, 0.1, 0.1}}),
                   "ReduceLROnPlateau: min_lr needs one value or one per param group (2), got 3");
}

TEST_CASE("SequentialLR restarts a ChainedScheduler with every part's step 0", "[optim][lr_scheduler]") {
  // ConstantLR's factor is its step 0's effect: a chain restarted at lr 1 lost it (1, 0.9, 8.1, ...).
  auto p = zeros({2}).requires_grad_();
  optim::SGD o({p}, {.lr = 1.0});
  std::vector<std::unique_ptr<optim::LRScheduler>> chain;
  chain.push_back(std::make_unique<optim::ConstantLR>(o, optim::ConstantLROptions{.factor = 0.1, .total_iters = 2}));
  chain.push_back(std::make_unique<optim::ExponentialLR>(o, optim::ExponentialLROptions{.gamma = 0.9}));
  std::vector<std::unique_ptr<optim::LRScheduler>> parts;
  parts.push_back(std::make_unique<optim::ChainedScheduler>(o, std::move(chain)));
  parts.push_back(std::make_unique<optim::ExponentialLR>(o, optim::ExponentialLROptions{.gamma = 0.5}));
  optim::SequentialLR sched(o, std::move(parts), {5});
  const std::vector<double> want = {0.1, 0.09, 0.81, 0.729, 0.6561, 1.0, 0.5};  // the chain alone, then 0.5^k
  for (std::size_t t = 0; t < want.size(); ++t) {
    if (t > 0) sched.step();
    INFO("step " << t);
    CHECK(o.param_groups()[0].lr() == Approx(want[t]).epsilon(1e-12));
  }
}

// OneCycleLR rewrites the groups' initial_lr when it is built; PyTorch's SequentialLR then starts
// its first part from that initial_lr (torch 2.15: 0.004, 0.005, ..., 0.008, 0.02633...), not from
// the lr the first part saw (which gave 0.05, ..., 0.0875, then a drop to 0.008 at the milestone).
TEST_CASE("SequentialLR starts its first scheduler from the initial_lr a later one set, as PyTorch", "[optim][lr_scheduler]") {
  auto p = zeros({2}).requires_grad_();
  optim::SGD o({p}, {.lr = 0.1});
  std::vector<std::unique_ptr<optim::LRScheduler>> parts;
  parts.push_back(std::make_unique<optim::LinearLR>(o, optim::LinearLROptions{.start_factor = 0.5, .total_iters = 4}));
  parts.push_back(std::make_unique<optim::OneCycleLR>(o, optim::OneCycleLROptions{.max_lr = {0.2}, .total_steps = 20}));
  optim::SequentialLR sched(o, std::move(parts), {4});
  const std::vector<double> want = {0.004, 0.005, 0.006, 0.007000000000000001, 0.008000000000000007,
                                    0.026334368540005065, 0.07433436854000505, 0.13366563145999494};
  for (std::size_t t = 0; t < want.size(); ++t) {
    if (t > 0) sched.step();
    INFO("step " << t);
    CHECK(o.param_groups()[0].lr() == Approx(want[t]).epsilon(1e-12));
  }
}

TEST_CASE("OneCycleLR: a phase of length 0 ends at once, also where a fused multiply-add would leave 5.6e-17",
          "[optim][lr_scheduler]") {
  // pct_start 0.1 of 10 steps: the first phase is 0.1 * 10 - 1 = 0 steps, so step 0 is its end
  // (max_lr, base_momentum), as docs/optim.md says; contracted to an FMA it was 5.55e-17 long.
  auto p = zeros({2}).requires_grad_();
  optim::SGD o({p}, {.lr = 0.1, .momentum = 0.9});
  optim::OneCycleLR sched(o, {.max_lr = {1.0}, .total_steps = 10, .pct_start = 0.1});
  CHECK(o.param_groups()[0].lr() == 1.0);
  CHECK(o.param_groups()[0].option("momentum") == 0.85);
  // A refused OneCycleLR leaves the optimizer as it was (no initial_lr recorded).
  optim::SGD fresh({p}, {.lr = 0.1});
  MG_REQUIRE_ERROR(optim::OneCycleLR(fresh, {.max_lr = {1.0}, .total_steps = 0}), "total_steps must be > 0");
  CHECK_FALSE(fresh.param_groups()[0].has_option("initial_lr"));
}

TEST_CASE("ReduceLROnPlateau: a group added later takes the single min_lr, as PyTorch's", "[optim][lr_scheduler]") {
  auto p = zeros({2}).requires_grad_(), q = zeros({2}).requires_grad_();
  optim::SGD o({p}, {.lr = 1.0});
  optim::ReduceLROnPlateau sched(o, {.factor = 0.5, .patience = 0, .min_lr = {0.3}});
  o.add_param_group({q}, {{"lr", 0.4}});
  sched.step(1.0);
  sched.step(2.0);  // worse: both groups reduced, the new one to its floor
  CHECK(o.param_groups()[0].lr() == 0.5);
  CHECK(o.param_groups()[1].lr() == 0.3);
  // One min_lr per group cannot cover a new group: a named error.
  optim::SGD o2({p}, {.lr = 1.0});
  o2.add_param_group({q}, {{"lr", 0.4}});
  optim::ReduceLROnPlateau per_group(o2, {.min_lr = {0.1, 0.2}});
  auto r = zeros({2}).requires_grad_();
  o2.add_param_group({r});
  MG_REQUIRE_ERROR(per_group.step(1.0), "the optimizer has 3 param groups but the scheduler was created for 2");
}

TEST_CASE("ReduceLROnPlateau's state carries the last lrs, as PyTorch's _last_lr", "[optim][lr_scheduler]") {
  // PyTorch 2.15: after a reduction to 0.5, a scheduler loaded into a fresh one (optimizer at lr 1,
  // its state not loaded yet) reports get_last_lr() [0.5]; the lrs were read from the optimizer.
  auto p = zeros({2}).requires_grad_();
  optim::SGD o({p}, {.lr = 1.0});
  optim::ReduceLROnPlateau sched(o, {.factor = 0.5, .patience = 0});
  sched.step(1.0);
  sched.step(2.0);
  REQUIRE(sched.get_last_lr() == std::vector<double>{0.5});
  const StateDict saved = sched.state_dict();
  optim::SGD fresh({p}, {.lr = 1.0});
  optim::ReduceLROnPlateau resumed(fresh, {.factor = 0.5, .patience = 0});
  resumed.load_state_dict(saved);
  CHECK(resumed.get_last_lr() == std::vector<double>{0.5});
  // A state saved before the last lrs were (no "last_lr.0") takes the optimizer's.
  StateDict old = saved;
  old.floats.erase("last_lr.0");
  optim::ReduceLROnPlateau older(fresh, {.factor = 0.5, .patience = 0});
  older.load_state_dict(old);
  CHECK(older.get_last_lr() == std::vector<double>{1.0});
}
