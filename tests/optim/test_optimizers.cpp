// SGD, Adam, AdamW, LAMB, RMSprop and Adagrad: the first five steps against PyTorch (LAMB against
// its formula in torch tensor math): tools/reference/gen_optim_reference.py wrote
// tests/data/reference/optim.txt with PyTorch 1.13, tools/reference/gen_torch_optim_extra.py wrote
// optim_extra.txt (maximize, Adam's decoupled_weight_decay, RMSprop, Adagrad, ..., Rprop, ASGD) with PyTorch 2.15
// (f64 to 1e-12, f32 to 2e-6 relative to each tensor's magnitude);
// the multi-tensor path bit-identical to the per-parameter path; f16/bf16 parameters updated in
// f32 and rounded once; skipped parameters; step counting; zero_grad; param groups; option errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/factory.h"
#include "optim/functors.h"
#include "optim/lr_scheduler.h"
#include "optim_test_util.h"

using namespace mg;
using test::bits_equal;

namespace {

constexpr double kRtolF64 = 1e-12;
constexpr double kRtolF32 = 2e-6;

struct MaxErr {
  double f64 = 0, f32 = 0;
};

// Runs one reference case in `dtype` and checks every step and the final state.
void run_reference_case(const test::ReferenceFile& f, const std::string& c, DType dtype, MaxErr& worst,
                        double rtol_f32 = kRtolF32) {
  const double rtol = dtype == DType::F64 ? kRtolF64 : rtol_f32;
  const int64_t kind = f.int_value(c + ".kind");
  const optim::OptionMap opt = test::options_with_prefix(f, c + ".opt.");
  const optim::OptionMap over = test::options_with_prefix(f, c + ".group1.");
  Tensor w[2], a[2], cc[2];
  for (int k = 0; k < 2; ++k) {
    const std::string n = c + ".w" + std::to_string(k + 1);
    w[k] = to(f.tensor(n + ".init"), dtype).requires_grad_();
    a[k] = to(f.tensor(c + ".a" + std::to_string(k + 1)), dtype);
    cc[k] = to(f.tensor(c + ".c" + std::to_string(k + 1)), dtype);
  }
  std::vector<optim::ParamGroupSpec> groups;
  if (over.empty()) {
    groups = {{{w[0], w[1]}, opt}};
  } else {
    optim::OptionMap g1 = opt;
    for (const auto& [k, v] : over) g1[k] = v;
    groups = {{{w[0]}, opt}, {{w[1]}, g1}};
  }
  auto o = test::make_optimizer(kind, groups);
  const int64_t steps = f.tensor(c + ".w1.steps").size(0);  // 5, or more for a case that needs them
  for (int64_t step = 0; step < steps; ++step) {
    for (int k = 0; k < 2; ++k) w[k].set_grad(test::quadratic_grad(w[k], a[k], cc[k]));
    o->step();
    for (int k = 0; k < 2; ++k) {
      const std::string n = c + ".w" + std::to_string(k + 1) + ".steps";
      const double e = test::rel_error(w[k], test::stored_row(f, n, step));
      INFO(dtype_name(dtype) << " " << n << " step " << step + 1 << ": relative error " << e);
      REQUIRE(e <= rtol);
      (dtype == DType::F64 ? worst.f64 : worst.f32) = std::max(dtype == DType::F64 ? worst.f64 : worst.f32, e);
    }
  }
  CHECK(o->step_count() == steps);
  for (int k = 0; k < 2; ++k) {
    const std::string prefix = c + ".w" + std::to_string(k + 1) + ".state.";
    const optim::ParamState* st = o->state(w[k]);
    REQUIRE(st != nullptr);
    // torch's SGD counts no steps; mixgrad counts the updates of every parameter.
    CHECK(st->step == (f.has(prefix + "step") ? f.int_value(prefix + "step") : steps));
    int stored = 0;
    for (const std::string& n : f.names()) {
      if (n.rfind(prefix, 0) != 0 || n == prefix + "step") continue;
      const std::string buf = n.substr(prefix.size());
      INFO(dtype_name(dtype) << " state " << n);
      if (st->scalars.count(buf)) {  // a per-parameter scalar (ASGD's eta, mu): a double on both sides
        CHECK(st->scalars.at(buf) == Approx(f.f64_value(n)).epsilon(1e-14));
        continue;
      }
      ++stored;
      REQUIRE(st->buffers.count(buf) == 1);
      const Tensor& b = st->buffers.at(buf);
      CHECK(b.dtype() == dtype);  // f32 state for f32, f64 for f64
      const double e = test::rel_error(b, test::values(f.tensor(n)));
      REQUIRE(e <= rtol);
      (dtype == DType::F64 ? worst.f64 : worst.f32) = std::max(dtype == DType::F64 ? worst.f64 : worst.f32, e);
    }
    CHECK(int(st->buffers.size()) == stored);  // no buffer PyTorch does not keep
  }
}

// Parameters spanning several chunks, a tiny one, an empty one, and one without a gradient.
std::vector<Shape> test_shapes() { return {{70001}, {3, 5}, {optim::kChunkSize}, {1}, {0}, {4, 4}}; }

Tensors make_params(const std::vector<DType>& dtypes, uint64_t seed) {
  Generator gen(seed);
  Tensors ps;
  const std::vector<Shape> shapes = test_shapes();
  for (std::size_t k = 0; k < shapes.size(); ++k) {
    const DType dt = dtypes[k % dtypes.size()];
    ps.push_back(to(randn(shapes[k], {}, &gen), dt).requires_grad_());
  }
  return ps;
}

Tensors clones(const Tensors& ps) {
  Tensors out;
  NoGradGuard no_grad;
  for (const Tensor& p : ps) out.push_back(clone(p.detach()).requires_grad_());
  return out;
}

// Deterministic gradients for step `step` (none for the last parameter).
void set_grads(const Tensors& ps, int step) {
  Generator gen(1000 + uint64_t(step));
  for (std::size_t k = 0; k + 1 < ps.size(); ++k) {
    ps[k].set_grad(to(randn(ps[k].shape(), {}, &gen), ps[k].dtype()));
  }
}

// One optimizer of each kind with options that exercise every branch, on the given parameters.
std::unique_ptr<optim::Optimizer> make_full(int64_t kind, const Tensors& ps, bool multi_tensor) {
  switch (kind) {
    case test::kSGD:
      return std::make_unique<optim::SGD>(
          ps, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true, .weight_decay = 1e-2, .multi_tensor = multi_tensor});
    case test::kAdam:
      return std::make_unique<optim::Adam>(
          ps, optim::AdamOptions{.lr = 0.01, .betas = {0.9, 0.5}, .weight_decay = 0.1, .amsgrad = true, .multi_tensor = multi_tensor});
    case test::kAdamW:
      return std::make_unique<optim::AdamW>(
          ps, optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true, .multi_tensor = multi_tensor});
    case test::kRMSprop:
      return std::make_unique<optim::RMSprop>(
          ps, optim::RMSpropOptions{.lr = 0.01, .alpha = 0.9, .weight_decay = 0.05, .momentum = 0.5, .centered = true,
                                    .maximize = true, .multi_tensor = multi_tensor});
    case test::kAdagrad:
      return std::make_unique<optim::Adagrad>(
          ps, optim::AdagradOptions{.lr = 0.05, .lr_decay = 0.1, .weight_decay = 0.02, .initial_accumulator_value = 0.1,
                                    .multi_tensor = multi_tensor});
    case test::kAdamax:
      return std::make_unique<optim::Adamax>(
          ps, optim::AdamaxOptions{.lr = 0.01, .betas = {0.8, 0.9}, .weight_decay = 0.05, .multi_tensor = multi_tensor});
    case test::kNAdam:
      return std::make_unique<optim::NAdam>(
          ps, optim::NAdamOptions{.lr = 0.01, .weight_decay = 0.1, .decoupled_weight_decay = true, .multi_tensor = multi_tensor});
    case test::kRAdam:
      // beta2 0.9: rho_t passes 5 at step 6 of the kSteps, so both branches run
      return std::make_unique<optim::RAdam>(
          ps, optim::RAdamOptions{.lr = 0.01, .betas = {0.9, 0.9}, .weight_decay = 0.05, .multi_tensor = multi_tensor});
    case test::kAdadelta:
      return std::make_unique<optim::Adadelta>(
          ps, optim::AdadeltaOptions{.lr = 0.5, .rho = 0.8, .weight_decay = 0.02, .multi_tensor = multi_tensor});
    case test::kRprop:
      // A small eta range and tight step bounds, so growth, shrinking and both clamps occur.
      return std::make_unique<optim::Rprop>(
          ps, optim::RpropOptions{.lr = 0.02, .etas = {0.4, 1.6}, .step_sizes = {1e-3, 0.05}, .maximize = true,
                                  .multi_tensor = multi_tensor});
    case test::kASGD:
      // t0 = 3: the average starts within the steps; lambd large enough that the decay shows.
      return std::make_unique<optim::ASGD>(
          ps, optim::ASGDOptions{.lr = 0.05, .lambd = 0.2, .alpha = 0.6, .t0 = 3, .weight_decay = 0.01,
                                 .multi_tensor = multi_tensor});
    case test::kAdafactor:
      // No multi-tensor loop (a fused pass per parameter): multi_tensor does not apply. eps1 given, so
      // the low-precision test compares the same options (its default follows the dtype); d 1.2
      // and the weight decay so that every branch runs.
      return std::make_unique<optim::Adafactor>(
          ps, optim::AdafactorOptions{.lr = 0.05, .eps1 = 1e-6, .d = 1.2, .weight_decay = 0.05, .maximize = true});
    case test::kLAMB:
      return std::make_unique<optim::LAMB>(ps, optim::LAMBOptions{.lr = 0.01, .multi_tensor = multi_tensor});
  }
  FAIL("no options for optimizer kind " << kind);
  return nullptr;
}

// Steps of the multi-tensor and low-precision tests: RAdam's rectified branch starts at step 6.
constexpr int kSteps = 7;

const char* kind_name(int64_t kind) {
  static const char* names[] = {"SGD",   "Adam",  "AdamW", "LAMB",     "RMSprop", "Adagrad",
                                "Adamax", "NAdam", "RAdam", "Adadelta", "Rprop", "ASGD", "Adafactor"};
  return names[kind];
}

}  // namespace

// Runs every optimizer case of a reference file in f64 and f32 (f32 tolerance per case); returns
// how many there were.
int run_reference_file(const std::string& file, const std::function<double(const test::ReferenceFile&, const std::string&)>& rtol_f32) {
  const test::ReferenceFile f = test::load_reference(file);
  int cases = 0;
  for (const std::string& c : f.cases()) {
    if (!f.has(c + ".kind")) continue;
    ++cases;
    DYNAMIC_SECTION("case " << c) {
      MaxErr e;
      run_reference_case(f, c, DType::F64, e);
      run_reference_case(f, c, DType::F32, e, rtol_f32(f, c));
      test::report(c + " (f64)", e.f64);
      test::report(c + " (f32)", e.f32);
    }
  }
  return cases;
}

TEST_CASE("optimizers: the first five steps match PyTorch (LAMB: its formula) in f64 and f32", "[optim]") {
  CHECK(run_reference_file("optim.txt", [](const test::ReferenceFile&, const std::string&) { return kRtolF32; }) == 17);
}

TEST_CASE("optimizers: maximize, Adam's decoupled_weight_decay, RMSprop, Adagrad, Adamax, NAdam, RAdam, Adadelta, Rprop, ASGD and Adafactor match PyTorch 2.15 in f64 and f32",
          "[optim]") {
  // Centered RMSprop divides by sqrt(sq - ga^2), a difference that cancels: PyTorch's own f32 run
  // of rmsprop_centered_momentum_maximize is 1.7e-6 off its f64 one in the momentum buffer, so f32
  // rounding (and its FMA contraction, which the sanitizer build changes) is allowed 1e-5 there.
  const auto rtol = [](const test::ReferenceFile& f, const std::string& c) {
    const auto on = [&](const std::string& n) { return f.has(n) && f.f64_value(n) != 0.0; };
    return on(c + ".opt.centered") || on(c + ".group1.centered") ? 1e-5 : kRtolF32;
  };
  CHECK(run_reference_file("optim_extra.txt", rtol) == 35);
}

TEST_CASE("optimizers: maximize ascends - the step is the minimizing step of the negated gradient", "[optim]") {
  for (int64_t kind = 0; kind < test::kNumOptimizerKinds; ++kind) {
    DYNAMIC_SECTION(kind_name(kind)) {
      const Tensors a = make_params({DType::F32}, 5);
      const Tensors b = clones(a);
      optim::OptionMap up = {{"lr", 0.01}, {"maximize", 1}};
      auto ascend = test::make_optimizer(kind, {{a, up}});
      auto descend = test::make_optimizer(kind, {{b, {{"lr", 0.01}}}});
      for (int step = 0; step < 3; ++step) {
        set_grads(a, step);
        set_grads(b, step);
        NoGradGuard no_grad;
        for (std::size_t k = 0; k + 1 < b.size(); ++k) b[k].set_grad(neg(b[k].grad()));
        ascend->step();
        descend->step();
      }
      for (std::size_t k = 0; k < a.size(); ++k) CHECK(bits_equal(a[k], b[k]));
      CHECK(!bits_equal(a[0], make_params({DType::F32}, 5)[0]));
    }
  }
}

TEST_CASE("optimizers: the multi-tensor path is bit-identical to the per-parameter path", "[optim]") {
  const std::vector<std::vector<DType>> dtype_sets = {
      {DType::F32}, {DType::F16}, {DType::BF16}, {DType::F64}, {DType::F32, DType::F16, DType::BF16}};
  for (int64_t kind = 0; kind < test::kNumOptimizerKinds; ++kind) {
    if (kind == test::kAdafactor) continue;  // no multi_tensor option: one fused pass per parameter
    for (const auto& dts : dtype_sets) {
      DYNAMIC_SECTION(kind_name(kind) << " " << dtype_name(dts[0]) << (dts.size() > 1 ? " mixed" : "")) {
        const Tensors a = make_params(dts, 7);
        const Tensors b = clones(a);
        auto fused = make_full(kind, a, true);
        auto single = make_full(kind, b, false);
        for (int step = 0; step < kSteps; ++step) {
          set_grads(a, step);
          set_grads(b, step);
          fused->step();
          single->step();
        }
        for (std::size_t k = 0; k < a.size(); ++k) {
          INFO("parameter " << k << " " << describe(a[k]));
          CHECK(bits_equal(a[k], b[k]));
          const optim::ParamState* sa = fused->state(a[k]);
          const optim::ParamState* sb = single->state(b[k]);
          REQUIRE((sa == nullptr) == (sb == nullptr));
          if (!sa) continue;
          CHECK(sa->step == kSteps);
          for (const auto& [name, t] : sa->buffers) CHECK(bits_equal(t, sb->buffers.at(name)));
        }
        // The parameters moved, and the one without a gradient did not.
        const Tensors start = make_params(dts, 7);
        CHECK(!bits_equal(a[0], start[0]));
        CHECK(bits_equal(a.back(), start.back()));
      }
    }
  }
}

TEST_CASE("optimizers: f16/bf16 parameters are updated in f32 with f32 state and rounded once", "[optim]") {
  for (DType low : {DType::F16, DType::BF16}) {
    for (int64_t kind = 0; kind < test::kNumOptimizerKinds; ++kind) {
      DYNAMIC_SECTION(kind_name(kind) << " " << dtype_name(low)) {
        const Tensors p16 = make_params({low}, 3);
        Tensors p32;
        {
          NoGradGuard no_grad;
          for (const Tensor& p : p16) p32.push_back(to(p.detach(), DType::F32).requires_grad_());
        }
        auto o16 = make_full(kind, p16, true);
        auto o32 = make_full(kind, p32, true);
        for (int step = 0; step < kSteps; ++step) {
          set_grads(p16, step);
          for (std::size_t k = 0; k + 1 < p16.size(); ++k) p32[k].set_grad(to(p16[k].grad(), DType::F32));
          {
            // The f32 shadow starts every step from the rounded low-precision values.
            NoGradGuard no_grad;
            for (std::size_t k = 0; k < p16.size(); ++k) p32[k].copy_(to(p16[k].detach(), DType::F32));
          }
          o16->step();
          o32->step();
          for (std::size_t k = 0; k < p16.size(); ++k) {
            INFO("step " << step << " parameter " << k);
            CHECK(bits_equal(p16[k], to(p32[k].detach(), low)));
          }
        }
        const optim::ParamState* st = o16->state(p16[0]);
        REQUIRE(st != nullptr);
        for (const auto& [name, t] : st->buffers) {
          INFO("state " << name);
          CHECK(t.dtype() == DType::F32);
          CHECK(bits_equal(t, o32->state(p32[0])->buffers.at(name)));
        }
      }
    }
  }
}

TEST_CASE("optimizers: parameters without a gradient are skipped - steps are counted per parameter", "[optim]") {
  Tensor a = ones({3}).requires_grad_();
  Tensor b = ones({2}).requires_grad_();
  optim::Adam opt({a, b}, {.lr = 0.1});
  CHECK(opt.step_count() == 0);
  opt.step();  // no gradients at all: a counted step that changes nothing
  CHECK(opt.step_count() == 1);
  CHECK(test::values(a) == std::vector<double>{1, 1, 1});
  CHECK(opt.state(a) == nullptr);

  a.set_grad(full({3}, 2.0));
  opt.step();
  CHECK(opt.state(a)->step == 1);
  CHECK(opt.state(b) == nullptr);
  CHECK(test::values(b) == std::vector<double>{1, 1});
  // Adam's first step moves each element by lr (m / sqrt(v) = sign(g) after bias correction).
  CHECK(test::values(a)[0] == Approx(0.9).epsilon(1e-6));

  b.set_grad(full({2}, -1.0));
  opt.step();
  CHECK(opt.state(a)->step == 2);
  CHECK(opt.state(b)->step == 1);  // its own bias correction: first step moves it by lr
  CHECK(test::values(b)[0] == Approx(1.1).epsilon(1e-6));
  CHECK(opt.step_count() == 3);
}

TEST_CASE("optimizers: an update bumps the parameter's version", "[optim]") {
  Tensor a = ones({3}).requires_grad_();
  optim::SGD opt({a}, {.lr = 0.1});
  a.set_grad(ones({3}));
  const uint64_t v = a.version();
  opt.step();
  CHECK(a.version() > v);
  CHECK(test::values(a) == std::vector<double>{0.9f, 0.9f, 0.9f});
}

TEST_CASE("optimizers: zero_grad, parameters(), grads() and param groups", "[optim]") {
  Tensor a = ones({2}).requires_grad_(), b = ones({3}).requires_grad_(), c = ones({1}).requires_grad_();
  optim::SGD opt(std::vector<optim::ParamGroupSpec>{{{a, b}}, {{c}, {{"lr", 0.5}, {"momentum", 0.9}}}},
                 {.lr = 0.1, .weight_decay = 0.01});
  REQUIRE(opt.param_groups().size() == 2);
  CHECK(opt.param_groups()[0].lr() == 0.1);
  CHECK(opt.param_groups()[1].lr() == 0.5);
  CHECK(opt.param_groups()[1].option("momentum") == 0.9);
  CHECK(opt.param_groups()[1].option("weight_decay") == 0.01);  // from the defaults
  const Tensors ps = opt.parameters();
  REQUIRE(ps.size() == 3);
  CHECK((ps[0].is_same(a) && ps[1].is_same(b) && ps[2].is_same(c)));

  a.set_grad(ones({2}));
  c.set_grad(ones({1}));
  Tensors gs = opt.grads();
  REQUIRE(gs.size() == 3);
  CHECK((gs[0].defined() && !gs[1].defined() && gs[2].defined()));

  const Tensor ga = a.grad();
  opt.zero_grad(/*set_to_none=*/false);
  CHECK(a.grad().is_same(ga));
  CHECK(test::values(a.grad()) == std::vector<double>{0, 0});
  opt.zero_grad();
  CHECK(!a.grad().defined());
  CHECK(!c.grad().defined());

  Tensor d = ones({4}).requires_grad_();
  opt.add_param_group({d}, {{"lr", 0.25}});
  CHECK(opt.param_groups().size() == 3);
  CHECK(opt.parameters().size() == 4);
  CHECK(opt.param_groups()[2].option("momentum") == 0.0);
  d.set_grad(ones({4}));
  opt.step();
  CHECK(test::values(d)[0] == Approx(1.0 - 0.25 * (1.0 + 0.01)));

  // The group option map is what schedulers write.
  opt.param_groups()[2].set_lr(0.0);
  opt.step();
  CHECK(test::values(d)[0] == Approx(1.0 - 0.25 * (1.0 + 0.01)));
}

TEST_CASE("optimizers: bad options and bad parameters give clear errors", "[optim]") {
  Tensor a = ones({2}).requires_grad_();
  MG_REQUIRE_ERROR(optim::SGD({a}, {.lr = -0.1}), "SGD: lr must be >= 0, got -0.1");
  MG_REQUIRE_ERROR(optim::SGD({a}, {.lr = NAN}), "SGD: lr must be >= 0, got nan");
  MG_REQUIRE_ERROR(optim::SGD({a}, {.momentum = -0.5}), "SGD: momentum must be >= 0, got -0.5");
  MG_REQUIRE_ERROR(optim::SGD({a}, {.lr = 0.1, .nesterov = true}), "SGD: nesterov momentum needs momentum > 0 and dampening = 0");
  MG_REQUIRE_ERROR(optim::SGD({a}, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                   "SGD: nesterov momentum needs dampening = 0; got dampening 0.1");
  {
    optim::SGD one({a}, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
    MG_REQUIRE_ERROR(one.add_param_group({ones({2}).requires_grad_()}, {{"momentum", 0.0}}),
                     "SGD: nesterov momentum needs momentum > 0");
  }
  MG_REQUIRE_ERROR(optim::SGD({a}, {.weight_decay = -1}), "SGD: weight_decay must be >= 0, got -1");
  MG_REQUIRE_ERROR(optim::Adam({a}, {.betas = {1.0, 0.999}}), "Adam: beta1 must be in [0, 1), got 1");
  MG_REQUIRE_ERROR(optim::Adam({a}, {.betas = {0.9, -0.1}}), "Adam: beta2 must be in [0, 1), got -0.1");
  MG_REQUIRE_ERROR(optim::Adam({a}, {.eps = -1e-8}), "Adam: eps must be >= 0");
  MG_REQUIRE_ERROR(optim::AdamW({a}, {.lr = -1}), "AdamW: lr must be >= 0, got -1");
  MG_REQUIRE_ERROR(optim::AdamW({a}, {.weight_decay = -0.01}), "AdamW: weight_decay must be >= 0, got -0.01");
  MG_REQUIRE_ERROR(optim::LAMB({a}, {.betas = {0.9, 1.5}}), "LAMB: beta2 must be in [0, 1), got 1.5");
  MG_REQUIRE_ERROR(optim::LAMB({a}, {.weight_decay = -1}), "LAMB: weight_decay must be >= 0, got -1");
  MG_REQUIRE_ERROR(optim::RMSprop({a}, {.alpha = 1.5}), "RMSprop: alpha must be in [0, 1], got 1.5");
  MG_REQUIRE_ERROR(optim::RMSprop({a}, {.eps = -1}), "RMSprop: eps must be >= 0, got -1");
  MG_REQUIRE_ERROR(optim::RMSprop({a}, {.momentum = -0.9}), "RMSprop: momentum must be >= 0, got -0.9");
  MG_REQUIRE_ERROR(optim::RMSprop({a}, {.weight_decay = -1}), "RMSprop: weight_decay must be >= 0, got -1");
  MG_REQUIRE_ERROR(optim::Adagrad({a}, {.lr_decay = -0.1}), "Adagrad: lr_decay must be >= 0, got -0.1");
  MG_REQUIRE_ERROR(optim::Adagrad({a}, {.initial_accumulator_value = -1}),
                   "Adagrad: initial_accumulator_value must be >= 0, got -1");
  MG_REQUIRE_ERROR(optim::Adagrad({a}, {.eps = -1}), "Adagrad: eps must be >= 0, got -1");
  MG_REQUIRE_ERROR(optim::Adamax({a}, {.betas = {1.0, 0.9}}), "Adamax: beta1 must be in [0, 1), got 1");
  MG_REQUIRE_ERROR(optim::Adamax({a}, {.eps = -1}), "Adamax: eps must be >= 0, got -1");
  MG_REQUIRE_ERROR(optim::NAdam({a}, {.momentum_decay = -1e-3}), "NAdam: momentum_decay must be >= 0, got -0.001");
  MG_REQUIRE_ERROR(optim::NAdam({a}, {.betas = {0.9, 1.0}}), "NAdam: beta2 must be in [0, 1), got 1");
  MG_REQUIRE_ERROR(optim::RAdam({a}, {.lr = NAN}), "RAdam: lr must be >= 0, got nan");
  MG_REQUIRE_ERROR(optim::RAdam({a}, {.weight_decay = -1}), "RAdam: weight_decay must be >= 0, got -1");
  MG_REQUIRE_ERROR(optim::Adadelta({a}, {.rho = 1.5}), "Adadelta: rho must be in [0, 1], got 1.5");
  MG_REQUIRE_ERROR(optim::Adadelta({a}, {.eps = -1}), "Adadelta: eps must be >= 0, got -1");
  MG_REQUIRE_ERROR(optim::Adam(std::vector<optim::ParamGroupSpec>{{{a}, {{"maximize", 0.5}}}}),
                   "Adam: option 'maximize' is a boolean (0 or 1), got 0.5");

  MG_REQUIRE_ERROR(optim::SGD(Tensors{}), "SGD: got an empty parameter list");
  MG_REQUIRE_ERROR(optim::SGD({a, a}), "SGD: parameter 1 appears more than once in the new group");
  MG_REQUIRE_ERROR(optim::Adam({ones({2}, {.dtype = DType::I64})}), "Adam: can only optimize floating tensors; parameter 0 of the new group is [2] i64 cpu");
  MG_REQUIRE_ERROR(optim::Adam({a * 2.0}), "Adam: can't optimize a non-leaf tensor");
  MG_REQUIRE_ERROR(optim::SGD(std::vector<optim::ParamGroupSpec>{{{a}, {{"betas", 0.9}}}}),
                   "SGD: unknown option 'betas' for a parameter group; the options are dampening, lr, maximize, momentum, multi_tensor, nesterov, weight_decay");
  MG_REQUIRE_ERROR(optim::SGD(std::vector<optim::ParamGroupSpec>{{{a}, {{"nesterov", 2}}}}),
                   "SGD: option 'nesterov' is a boolean (0 or 1), got 2");

  optim::SGD opt({a}, {.lr = 0.1});
  MG_REQUIRE_ERROR(opt.add_param_group({a}), "SGD: parameter 0 of the new group ([2] f32 cpu) is already in group 0");
  MG_REQUIRE_ERROR(opt.add_param_group({ones({1}).requires_grad_()}, {{"lr", -1}}), "SGD: lr must be >= 0, got -1");
  CHECK(opt.param_groups().size() == 1);

  // An option broken after construction (e.g. by hand) is caught at step(), before any update.
  Tensor b = ones({2}).requires_grad_();
  opt.add_param_group({b});
  a.set_grad(ones({2}));
  b.set_grad(ones({2}));
  opt.param_groups()[1].set_lr(-1.0);
  MG_REQUIRE_ERROR(opt.step(), "SGD: param group 1: lr must be >= 0, got -1");
  CHECK(test::values(a) == std::vector<double>{1, 1});
  CHECK(opt.step_count() == 0);
}

TEST_CASE("optimizers: a parameter whose dtype changed after the first step is an error - nothing is updated", "[optim]") {
  Tensor c = ones({3}).requires_grad_();
  Tensor a = ones({2}).requires_grad_();
  optim::Adam opt({c, a});
  a.set_grad(ones({2}));
  c.set_grad(ones({3}));
  opt.step();
  a.set_data(ones({2}, {.dtype = DType::F64}));
  a.set_grad(ones({2}, {.dtype = DType::F64}));
  const Tensor c_before = clone(c.detach());
  MG_REQUIRE_ERROR(opt.step(), "Adam: state 'exp_avg' of parameter 1 is [2] f32 cpu but parameter 1 ([2] f64 cpu) needs [2] f64");
  CHECK(bits_equal(c, c_before));  // parameter 0 comes first but was not updated either
  CHECK(opt.state(c)->step == 1);
  CHECK(opt.step_count() == 1);
  // A non-contiguous parameter.
  Tensor t = ones({2, 3}).transpose(0, 1).detach().requires_grad_();
  optim::SGD sgd({t});
  t.set_grad(ones({3, 2}));
  MG_REQUIRE_ERROR(sgd.step(), "SGD: parameter 0 ([3, 2] f32 cpu, strides [1, 3]) is neither contiguous nor channels-last; the update writes dense parameters");
}

TEST_CASE("optimizers: a step gate runs, skips, or hands over a flag that decides the step", "[optim]") {
  Tensor a = ones({3}).requires_grad_();
  optim::SGD opt({a}, {.lr = 0.5, .momentum = 0.9});
  auto step_with = [&](optim::StepGateDecision d, const Tensor& arg = Tensor()) {
    int calls = 0;
    opt.set_step_gate([&](optim::Optimizer&) {
      ++calls;
      return d;
    });
    a.set_grad(ones({3}));
    if (arg.defined()) opt.step_unless_found_inf(arg);
    else opt.step();
    CHECK(calls == 1);  // consulted once per step, whichever entry point
    opt.set_step_gate(nullptr);
  };
  const std::vector<double> start = test::values(a);
  step_with(false);  // a plain bool still works
  CHECK(opt.last_step_skipped());
  CHECK(opt.step_count() == 0);
  step_with(optim::StepGateDecision(full({1}, 1.0)));  // the flag says skip
  CHECK(opt.last_step_skipped());
  CHECK(opt.step_count() == 0);
  CHECK(test::values(a) == start);
  CHECK(opt.state(a) == nullptr);  // nothing was created either
  step_with(optim::StepGateDecision(zeros({1})));  // the flag says run
  CHECK(!opt.last_step_skipped());
  CHECK(opt.step_count() == 1);
  CHECK(test::values(a) == std::vector<double>{0.5, 0.5, 0.5});
  // step_unless_found_inf's flag and the gate's: either one set skips.
  step_with(optim::StepGateDecision(zeros({1})), full({1}, 1.0));
  CHECK(opt.last_step_skipped());
  step_with(optim::StepGateDecision(full({1}, 1.0)), zeros({1}));
  CHECK(opt.last_step_skipped());
  step_with(optim::StepGateDecision(false), zeros({1}));  // the gate's no wins over a clean flag
  CHECK(opt.last_step_skipped());
  step_with(true, zeros({1}));
  CHECK(!opt.last_step_skipped());
  CHECK(opt.step_count() == 2);
  opt.set_step_gate([](optim::Optimizer&) { return optim::StepGateDecision(zeros({2})); });
  MG_REQUIRE_ERROR(opt.step(), "SGD: the step gate's device flag must be a one-element f32 tensor, got");
}

TEST_CASE("optimizers: Adagrad starts each group's sums at that group's initial_accumulator_value", "[optim]") {
  // PyTorch fills every sum with the constructor's value whatever the group says; mixgrad uses the
  // group's (docs/optim.md).
  Tensor a = zeros({2}).requires_grad_();
  Tensor b = zeros({2}).requires_grad_();
  optim::Adagrad opt(std::vector<optim::ParamGroupSpec>{{{a}}, {{b}, {{"initial_accumulator_value", 1.0}}}},
                     {.lr = 0.5, .initial_accumulator_value = 0.25});
  a.set_grad(full({2}, 0.5));
  b.set_grad(full({2}, 0.5));
  opt.step();
  CHECK(test::values(opt.state(a)->buffers.at("sum")) == std::vector<double>{0.5, 0.5});    // 0.25 + 0.25
  CHECK(test::values(opt.state(b)->buffers.at("sum")) == std::vector<double>{1.25, 1.25});  // 1 + 0.25
  CHECK(test::values(b)[0] == Approx(-0.5 * 0.5 / std::sqrt(1.25)).epsilon(1e-6));
}

TEST_CASE("ASGD: a state saved without eta and mu continues from its step count, and bad options are refused",
          "[optim]") {
  const optim::ASGDOptions o{.lr = 0.1, .lambd = 0.05, .alpha = 0.5, .t0 = 2};
  Tensor a = from_vector<double>({1.0, -2.0, 0.5}, {3}).requires_grad_();
  Tensor b = from_vector<double>({1.0, -2.0, 0.5}, {3}).requires_grad_();
  optim::ASGD whole({a}, o), resumed({b}, o);
  const auto grad_at = [](int s) { return from_vector<double>({0.3 * s, -0.1, 0.2 - 0.05 * s}, {3}); };
  for (int s = 0; s < 5; ++s) {
    a.set_grad(grad_at(s));
    whole.step();
    b.set_grad(grad_at(s));
    resumed.step();
  }
  StateDict saved = resumed.state_dict();
  REQUIRE(saved.floats.erase("state.0.eta") == 1);
  REQUIRE(saved.floats.erase("state.0.mu") == 1);
  optim::ASGD loaded({b}, o);
  loaded.load_state_dict(saved);
  for (int s = 5; s < 8; ++s) {
    a.set_grad(grad_at(s));
    whole.step();
    b.set_grad(grad_at(s));
    loaded.step();
  }
  CHECK(test::bits_equal(a.detach(), b.detach()));
  CHECK(test::bits_equal(whole.state(a)->buffers.at("ax"), loaded.state(b)->buffers.at("ax")));
  MG_REQUIRE_ERROR(optim::ASGD({a}, {.alpha = -0.5}), "ASGD: alpha must be finite and >= 0, got -0.5");
  MG_REQUIRE_ERROR(optim::ASGD({a}, {.t0 = std::nan("")}), "ASGD: t0 must not be NaN");
  optim::ASGD never({a}, {.t0 = INFINITY});  // inf: never average, as PyTorch allows
  a.set_grad(grad_at(1));
  never.step();
  CHECK(never.state(a)->scalars.at("mu") == 1.0);
}

TEST_CASE("NAdam keeps PyTorch's per-parameter mu_product: a changed beta1 multiplies into it, a state dict carries it",
          "[optim]") {
  Tensor a = ones({3}).requires_grad_();
  optim::NAdam opt({a}, {.lr = 0.01, .momentum_decay = 0.004});
  const auto mu = [](double beta1, int t) { return beta1 * (1.0 - 0.5 * std::pow(0.96, t * 0.004)); };
  for (int t = 1; t <= 3; ++t) {
    if (t == 3) opt.param_groups()[0].options["beta1"] = 0.8;  // as a cycling scheduler would
    a.set_grad(full({3}, 0.5));
    opt.step();
  }
  const double want = mu(0.9, 1) * mu(0.9, 2) * mu(0.8, 3);
  CHECK(opt.state(a)->scalars.at("mu_product") == Approx(want).epsilon(1e-15));
  const StateDict saved = opt.state_dict();
  CHECK(saved.floats.at("state.0.mu_product") == opt.state(a)->scalars.at("mu_product"));
  optim::NAdam other({a}, {.lr = 0.01});
  other.load_state_dict(saved);
  CHECK(other.state(a)->scalars.at("mu_product") == opt.state(a)->scalars.at("mu_product"));
  StateDict bad = saved;
  bad.floats["state.0.mu_producct"] = 1.0;
  MG_REQUIRE_ERROR(other.load_state_dict(bad), "unexpected float 'state.0.mu_producct'");
  StateDict bad_group = saved;
  bad_group.floats["group.abc.lr"] = 0.5;  // read as group 0 by strtoll before
  MG_REQUIRE_ERROR(other.load_state_dict(bad_group), "unexpected float 'group.abc.lr'");
  // A state saved without it (an older file): rebuilt from the step with the group's beta1.
  StateDict old = saved;
  old.floats.erase("state.0.mu_product");
  other.load_state_dict(old);
  a.set_grad(full({3}, 0.5));
  other.step();
  CHECK(other.state(a)->scalars.at("mu_product") == Approx(mu(0.8, 1) * mu(0.8, 2) * mu(0.8, 3) * mu(0.8, 4)).epsilon(1e-15));
}

TEST_CASE("optimizers: the bias correction 1 - beta^t by binary exponentiation is within 2^-53 (1 + 2 t beta^t)",
          "[optim]") {
  // fn::bias_correction is what both devices compute (the CUDA kernels read t from device memory):
  // its error bound (documented in optim/functors.h) checked against long double powl.
  CHECK(fn::bias_correction(0.9, 1) == 1.0 - 0.9);
  CHECK(fn::bias_correction(0.999, 2) == 1.0 - 0.999 * 0.999);
  CHECK(fn::bias_correction(0.5, 10) == 1.0 - 1.0 / 1024.0);
  double worst = 0.0;  // the largest error as a fraction of the bound
  for (double beta : {0.3, 0.5, 0.9, 0.95, 0.99, 0.999, 0.9999, 0.99999}) {
    for (long long t = 1; t < (1LL << 40); t = t < 64 ? t + 1 : t * 3 + 1) {
      const long double power = powl((long double)beta, (long double)t);
      const long double bound = 0x1p-53L * (1.0L + 2.0L * (long double)t * power);
      worst = std::max(worst, double(fabsl((long double)fn::bias_correction(beta, t) - (1.0L - power)) / bound));
    }
  }
  CHECK(worst <= 1.0);
  CHECK(fn::bias_correction(0.9, 100000) == 1.0);  // beta^t underflows to 0: the correction is 1
}

// PyTorch checks nesterov's momentum > 0 in SGD's constructor only: OneCycleLR (base_momentum 0)
// cycles the momentum to exactly 0 at the end of its first phase, and that step is a plain SGD
// step, the buffer kept for the steps after it (torch 2.15 runs all ten steps).
TEST_CASE("SGD with nesterov steps on when a scheduler cycles its momentum to 0", "[optim]") {
  Tensor w = from_vector<double>({1.0, -2.0}).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
  optim::OneCycleLR sched(opt, {.max_lr = {0.1}, .total_steps = 10, .base_momentum = {0.0}, .max_momentum = {0.9}});
  int zero_momentum_steps = 0;
  for (int k = 0; k < 10; ++k) {
    w.set_grad(from_vector<double>({0.5, 0.25}));
    const double m = opt.param_groups()[0].option("momentum"), lr = opt.param_groups()[0].lr();
    const std::vector<double> before = test::values(w);
    REQUIRE_NOTHROW(opt.step());
    if (m == 0.0) {  // a plain step: p -= lr * g
      ++zero_momentum_steps;
      CHECK(test::values(w)[0] == before[0] - lr * 0.5);
      CHECK(test::values(w)[1] == before[1] - lr * 0.25);
    }
    sched.step();
  }
  CHECK(zero_momentum_steps >= 1);
}
