// Optimizer state dicts: the layout (keyed by parameter position as PyTorch's), a round trip that
// continues bit-identically (3 steps, save, load into a fresh optimizer, 2 more steps in both), and
// loading errors that name the mismatch and change nothing.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "core/factory.h"
#include "optim_test_util.h"

using namespace mg;
using test::bits_equal;

namespace {

// Two groups: {p0 [4, 3], p1 [5]} and {p2 [2], p3 [3] (never has a gradient)}.
Tensors make_params(DType dtype) {
  Generator gen(11);
  Tensors ps;
  for (const Shape& s : std::vector<Shape>{{4, 3}, {5}, {2}, {3}}) ps.push_back(to(randn(s, {}, &gen), dtype).requires_grad_());
  return ps;
}

std::unique_ptr<optim::Optimizer> make(int64_t kind, const Tensors& ps, double lr) {
  const optim::OptionMap g1 = {{"lr", lr / 2}};
  const std::vector<optim::ParamGroupSpec> groups = {{{ps[0], ps[1]}}, {{ps[2], ps[3]}, g1}};
  switch (kind) {
    case test::kSGD: return std::make_unique<optim::SGD>(groups, optim::SGDOptions{.lr = lr, .momentum = 0.9, .dampening = 0.1});
    case test::kAdam: return std::make_unique<optim::Adam>(groups, optim::AdamOptions{.lr = lr, .betas = {0.9, 0.6}, .amsgrad = true});
    case test::kAdamW: return std::make_unique<optim::AdamW>(groups, optim::AdamWOptions{.lr = lr, .amsgrad = true});
    case test::kRMSprop:
      return std::make_unique<optim::RMSprop>(groups, optim::RMSpropOptions{.lr = lr, .momentum = 0.5, .centered = true});
    case test::kAdagrad:
      return std::make_unique<optim::Adagrad>(groups, optim::AdagradOptions{.lr = lr, .lr_decay = 0.1, .initial_accumulator_value = 0.3});
    case test::kAdamax: return std::make_unique<optim::Adamax>(groups, optim::AdamaxOptions{.lr = lr, .betas = {0.8, 0.9}});
    case test::kNAdam: return std::make_unique<optim::NAdam>(groups, optim::NAdamOptions{.lr = lr, .momentum_decay = 0.01});
    case test::kRAdam: return std::make_unique<optim::RAdam>(groups, optim::RAdamOptions{.lr = lr, .betas = {0.9, 0.9}});
    case test::kAdadelta: return std::make_unique<optim::Adadelta>(groups, optim::AdadeltaOptions{.lr = lr, .rho = 0.7, .eps = 0.1});
    case test::kRprop: return std::make_unique<optim::Rprop>(groups, optim::RpropOptions{.lr = lr, .etas = {0.4, 1.5}});
    case test::kASGD: return std::make_unique<optim::ASGD>(groups, optim::ASGDOptions{.lr = lr, .lambd = 0.1, .t0 = 2});
    case test::kAdafactor:
      return std::make_unique<optim::Adafactor>(groups, optim::AdafactorOptions{.lr = lr, .d = 1.5, .weight_decay = 0.1});
    case test::kLAMB: return std::make_unique<optim::LAMB>(groups, optim::LAMBOptions{.lr = lr});
  }
  FAIL("no options for optimizer kind " << kind);
  return nullptr;
}

void set_grads(const Tensors& ps, int step) {
  Generator gen(500 + uint64_t(step));
  for (std::size_t k = 0; k + 1 < ps.size(); ++k) ps[k].set_grad(to(randn(ps[k].shape(), {}, &gen), ps[k].dtype()));
}

Tensors copies(const Tensors& ps) {
  Tensors out;
  for (const Tensor& p : ps) out.push_back(clone(p.detach()).requires_grad_());
  return out;
}

}  // namespace

TEST_CASE("optimizer state dict: layout keyed by parameter position", "[optim]") {
  const Tensors ps = make_params(DType::F32);
  auto opt = make(test::kAdam, ps, 0.1);
  set_grads(ps, 0);
  opt->step();
  opt->step();
  const StateDict s = opt->state_dict();
  CHECK(s.strings.at("optimizer") == "Adam");
  CHECK(s.ints.at("step_count") == 2);
  CHECK(s.ints.at("num_groups") == 2);
  CHECK(s.ints.at("num_params") == 4);
  CHECK(s.strings.at("group.0.params") == "0,1");
  CHECK(s.strings.at("group.1.params") == "2,3");
  CHECK(s.floats.at("group.0.lr") == 0.1);
  CHECK(s.floats.at("group.1.lr") == 0.05);
  CHECK(s.floats.at("group.1.beta2") == 0.6);
  CHECK(s.floats.at("group.1.amsgrad") == 1.0);
  CHECK(s.ints.at("state.2.step") == 2);
  CHECK(s.ints.count("state.3.step") == 0);  // never had a gradient: no state, as PyTorch
  CHECK(s.has_tensor("state.0.exp_avg"));
  CHECK(s.has_tensor("state.1.exp_avg_sq"));
  CHECK(s.has_tensor("state.2.max_exp_avg_sq"));
  CHECK(!s.has_tensor("state.3.exp_avg"));
  CHECK(s.tensors.size() == 9);
  // Copies, not the live buffers.
  const Tensor& m = s.tensor_at("test", "state.0.exp_avg");
  CHECK(!m.is_same(opt->state(ps[0])->buffers.at("exp_avg")));
  CHECK(bits_equal(m, opt->state(ps[0])->buffers.at("exp_avg")));
  CHECK(m.shape() == Shape{4, 3});
}

TEST_CASE("optimizer state dict: a round trip continues bit-identically", "[optim]") {
  for (int64_t kind = 0; kind < test::kNumOptimizerKinds; ++kind) {
    for (DType dt : {DType::F32, DType::BF16, DType::F64}) {
      DYNAMIC_SECTION("kind " << kind << " " << dtype_name(dt)) {
        const Tensors a = make_params(dt);
        auto oa = make(kind, a, 0.1);
        for (int step = 0; step < 4; ++step) {  // and 3 more after the load: RAdam rectifies from step 6
          set_grads(a, step);
          oa->step();
        }
        const StateDict saved = oa->state_dict();
        const Tensors b = copies(a);
        auto ob = make(kind, b, 0.7);  // other options: the state dict restores them
        ob->load_state_dict(saved);
        CHECK(ob->param_groups()[0].lr() == 0.1);
        CHECK(ob->param_groups()[1].lr() == 0.05);
        CHECK(ob->step_count() == 4);
        for (int step = 4; step < 7; ++step) {
          set_grads(a, step);
          set_grads(b, step);
          oa->step();
          ob->step();
        }
        for (std::size_t k = 0; k < a.size(); ++k) {
          INFO("parameter " << k);
          CHECK(bits_equal(a[k], b[k]));
          const optim::ParamState* sa = oa->state(a[k]);
          const optim::ParamState* sb = ob->state(b[k]);
          REQUIRE((sa == nullptr) == (sb == nullptr));
          if (!sa) continue;
          CHECK(sa->step == sb->step);
          CHECK(sa->buffers.size() == sb->buffers.size());
          for (const auto& [name, t] : sa->buffers) CHECK(bits_equal(t, sb->buffers.at(name)));
        }
        CHECK(!bits_equal(a[0], make_params(dt)[0]));
        // Loading copied the tensors: the saved dict did not follow the later steps.
        REQUIRE(saved.tensors[0].first == oa->state_dict().tensors[0].first);
        CHECK(!bits_equal(saved.tensors[0].second, oa->state_dict().tensors[0].second));
      }
    }
  }
}

TEST_CASE("optimizer state dict: state saved from an f32 copy loads into f16 parameters as f32 state", "[optim]") {
  Tensor p = ones({3}).requires_grad_();
  optim::SGD a({p}, {.lr = 0.1, .momentum = 0.9});
  p.set_grad(full({3}, 0.5));
  a.step();
  StateDict s = a.state_dict();
  s.tensors[0].second = to(s.tensors[0].second, DType::F64);  // e.g. written as f64 by another tool
  Tensor q = ones({3}, {.dtype = DType::F16}).requires_grad_();
  optim::SGD b({q}, {.lr = 0.1, .momentum = 0.9});
  b.load_state_dict(s);
  CHECK(b.state(q)->buffers.at("momentum_buffer").dtype() == DType::F32);
  CHECK(test::values(b.state(q)->buffers.at("momentum_buffer")) == std::vector<double>{0.5, 0.5, 0.5});
}

TEST_CASE("optimizer state dict: a state saved before maximize existed loads with maximize off", "[optim]") {
  for (int64_t kind : {test::kSGD, test::kAdam, test::kAdamW, test::kLAMB}) {
    DYNAMIC_SECTION("kind " << kind) {
      const Tensors a = make_params(DType::F32);
      auto oa = make(kind, a, 0.1);
      set_grads(a, 0);
      oa->step();
      StateDict old = oa->state_dict();
      for (int g = 0; g < 2; ++g) {
        REQUIRE(old.floats.erase("group." + std::to_string(g) + ".maximize") == 1);
        old.floats.erase("group." + std::to_string(g) + ".decoupled_weight_decay");  // Adam's, also later
      }
      const Tensors b = copies(a);
      auto ob = make(kind, b, 0.3);
      ob->param_groups()[0].set_option("maximize", 1.0);
      ob->load_state_dict(old);
      CHECK(ob->param_groups()[0].option("maximize") == 0.0);
      CHECK(ob->param_groups()[1].option("maximize") == 0.0);
      set_grads(a, 1);
      set_grads(b, 1);
      oa->step();
      ob->step();
      for (std::size_t k = 0; k < a.size(); ++k) CHECK(bits_equal(a[k], b[k]));
    }
  }
}

TEST_CASE("optimizer state dict: a mismatch is a clear error and nothing is applied", "[optim]") {
  const Tensors a = make_params(DType::F32);
  auto oa = make(test::kAdam, a, 0.1);
  set_grads(a, 0);
  oa->step();
  const StateDict good = oa->state_dict();

  const Tensors b = copies(a);
  auto ob = make(test::kAdam, b, 0.3);
  const auto untouched = [&] {
    CHECK(ob->param_groups()[0].lr() == 0.3);
    CHECK(ob->step_count() == 0);
    for (const Tensor& p : b) CHECK(ob->state(p) == nullptr);
  };

  // Another optimizer's state.
  auto sgd = make(test::kSGD, copies(a), 0.1);
  MG_REQUIRE_ERROR(ob->load_state_dict(sgd->state_dict()), "Adam: load_state_dict: the state belongs to a SGD optimizer, not Adam");
  // Groups and parameters.
  {
    const Tensors c = copies(a);
    optim::Adam one_group(c);
    MG_REQUIRE_ERROR(one_group.load_state_dict(good), "Adam: load_state_dict: the state has 2 parameter groups but the optimizer has 1");
    const Tensors d = copies(a);
    optim::Adam other_split(std::vector<optim::ParamGroupSpec>{{{d[0]}}, {{d[1], d[2], d[3]}}});
    MG_REQUIRE_ERROR(other_split.load_state_dict(good), "Adam: load_state_dict: param group 0 has 1 parameters but the saved group has 2 (positions 0,1)");
    const Tensors e = copies(a);
    optim::Adam fewer(std::vector<optim::ParamGroupSpec>{{{e[0], e[1]}}, {{e[2]}}});
    MG_REQUIRE_ERROR(fewer.load_state_dict(good), "Adam: load_state_dict: the state has 4 parameters but the optimizer has 3");
  }
  StateDict s = good;
  s.tensors[1].second = zeros({3, 4});  // state.0.exp_avg_sq, transposed shape
  MG_REQUIRE_ERROR(ob->load_state_dict(s), "Adam: load_state_dict: 'state.0.exp_avg_sq' is [3, 4] f32 cpu but parameter 0 ([4, 3] f32 cpu) needs [4, 3]");
  untouched();

  s = good;
  s.tensors.emplace_back("state.1.momentum_buffer", zeros({5}));
  MG_REQUIRE_ERROR(ob->load_state_dict(s), "Adam: load_state_dict: unknown state tensor 'state.1.momentum_buffer'; Adam keeps exp_avg, exp_avg_sq, max_exp_avg_sq");
  untouched();

  s = good;
  s.tensors.emplace_back("state.7.exp_avg", zeros({5}));
  MG_REQUIRE_ERROR(ob->load_state_dict(s), "Adam: load_state_dict: state for parameter 7 but the optimizer has 4 parameters");

  s = good;
  s.floats["group.1.beta1"] = 1.5;
  MG_REQUIRE_ERROR(ob->load_state_dict(s), "Adam: load_state_dict: param group 1: beta1 must be in [0, 1), got 1.5");
  untouched();

  s = good;
  s.floats.erase("group.0.eps");
  MG_REQUIRE_ERROR(ob->load_state_dict(s), "Adam: load_state_dict: saved param group 0 has no option 'eps'");

  s = good;
  s.ints.erase("state.0.step");
  MG_REQUIRE_ERROR(ob->load_state_dict(s), "Adam: load_state_dict: 'state.0.exp_avg' has no 'state.0.step'");

  // A moment missing for a parameter that stepped: refused, not started at zero under its step count.
  s = good;
  std::erase_if(s.tensors, [](const auto& kv) { return kv.first == "state.0.exp_avg_sq"; });
  MG_REQUIRE_ERROR(ob->load_state_dict(s), "Adam: load_state_dict: 'state.0.exp_avg_sq' is missing; parameter 0 took 1 steps, and Adam keeps 'exp_avg_sq' for every parameter that did");
  untouched();
  // SGD's momentum buffer may be missing (momentum can be switched on after steps without it).
  {
    const Tensors c = copies(a);
    auto sgd_a = make(test::kSGD, c, 0.1);
    set_grads(c, 0);
    sgd_a->step();
    StateDict no_momentum = sgd_a->state_dict();
    std::erase_if(no_momentum.tensors, [](const auto& kv) { return kv.first.find("momentum_buffer") != std::string::npos; });
    auto sgd_b = make(test::kSGD, copies(a), 0.1);
    sgd_b->load_state_dict(no_momentum);
  }

  s = good;
  s.ints.erase("step_count");
  MG_REQUIRE_ERROR(ob->load_state_dict(s), "Adam: load_state_dict: state has no integer 'step_count'");
  untouched();

  ob->load_state_dict(good);
  CHECK(ob->param_groups()[0].lr() == 0.1);
  CHECK(ob->step_count() == 1);
}
