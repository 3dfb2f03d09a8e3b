// Adafactor beyond the shared optimizer tests (test_optimizers.cpp runs its five quadratic cases
// against PyTorch 2.15): a 3-D, a [1, 5] and a 0-d parameter against PyTorch, the factored state's
// shapes and memory, the default eps1 per dtype, option errors, state-dict shape checks, and the
// precision plan's count of its state.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "amp/initialize.h"
#include "amp/precision_plan.h"
#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "core/generator.h"
#include "core/parallel.h"
#include "core/state_dict.h"
#include "nn/activation.h"
#include "nn/container.h"
#include "nn/linear.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "optim/generic_path.h"
#include "optim/optim.h"
#include "optim_test_util.h"
#include "test_util.h"

using namespace mg;

namespace {

// adafactor_shapes of optim_extra.txt (tools/reference/gen_torch_optim_extra.py) in `dtype`.
void run_shapes_reference(DType dtype, double rtol) {
  const test::ReferenceFile f = test::load_reference("optim_extra.txt");
  Tensors ps;
  for (int k = 0; k < 3; ++k) {
    ps.push_back(to(f.tensor("adafactor_shapes.p" + std::to_string(k) + ".init"), dtype).requires_grad_());
  }
  REQUIRE(ps[0].shape() == Shape{2, 3, 4});
  REQUIRE(ps[1].shape() == Shape{1, 5});
  REQUIRE(ps[2].dim() == 0);
  optim::Adafactor opt(ps, {.lr = 0.05, .d = 1.2, .weight_decay = 0.1});
  const int64_t steps = f.tensor("adafactor_shapes.p0.steps").size(0);
  for (int64_t s = 0; s < steps; ++s) {
    for (int k = 0; k < 3; ++k) {
      const Tensor g = f.tensor("adafactor_shapes.p" + std::to_string(k) + ".grads").select(0, s);
      ps[std::size_t(k)].set_grad(to(g, dtype));
    }
    opt.step();
    for (int k = 0; k < 3; ++k) {
      const std::string n = "adafactor_shapes.p" + std::to_string(k) + ".steps";
      const double e = test::rel_error(ps[std::size_t(k)], test::stored_row(f, n, s));
      INFO(dtype_name(dtype) << " " << n << " step " << s + 1 << ": relative error " << e);
      CHECK(e <= rtol);
      test::report(n + " (" + dtype_name(dtype) + ")", e);
    }
  }
  for (int k = 0; k < 3; ++k) {
    const std::string prefix = "adafactor_shapes.p" + std::to_string(k) + ".state.";
    const optim::ParamState* st = opt.state(ps[std::size_t(k)]);
    REQUIRE(st != nullptr);
    CHECK(st->step == f.int_value(prefix + "step"));
    int stored = 0;
    for (const std::string& n : f.names()) {
      if (n.rfind(prefix, 0) != 0 || n == prefix + "step") continue;
      ++stored;
      const std::string buf = n.substr(prefix.size());
      INFO(dtype_name(dtype) << " state " << n);
      REQUIRE(st->buffers.count(buf) == 1);
      CHECK(st->buffers.at(buf).shape() == f.tensor(n).shape());
      CHECK(test::rel_error(st->buffers.at(buf), test::values(f.tensor(n))) <= rtol);
    }
    CHECK(int(st->buffers.size()) == stored);
  }
}

}  // namespace

TEST_CASE("Adafactor: a 3-D, a [1, 5] and a 0-d parameter match PyTorch 2.15 in f64 and f32", "[optim][adafactor]") {
  run_shapes_reference(DType::F64, 1e-12);
  run_shapes_reference(DType::F32, 2e-6);
}

TEST_CASE("Adafactor: a matrix keeps a row and a column, a vector its own shape", "[optim][adafactor]") {
  Tensor w = randn({64, 32}).requires_grad_();
  Tensor stack = randn({3, 8, 5}).requires_grad_();
  Tensor b = randn({32}).requires_grad_();
  optim::Adafactor opt({w, stack, b});
  const optim::OptionMap& options = opt.param_groups()[0].options;
  CHECK(opt.planned_state_values(w, options) == 64 + 32);
  CHECK(opt.planned_state_values(stack, options) == 3 * 8 + 3 * 5);
  CHECK(opt.planned_state_values(b, options) == 32);
  for (Tensor* p : {&w, &stack, &b}) p->set_grad(randn(p->shape()));
  opt.step();
  const optim::ParamState* sw = opt.state(w);
  REQUIRE(sw != nullptr);
  CHECK(sw->buffers.size() == 2);
  CHECK(sw->buffers.at("row_var").shape() == Shape{64, 1});
  CHECK(sw->buffers.at("col_var").shape() == Shape{1, 32});
  CHECK(opt.state(stack)->buffers.at("row_var").shape() == Shape{3, 8, 1});
  CHECK(opt.state(stack)->buffers.at("col_var").shape() == Shape{3, 1, 5});
  CHECK(opt.state(b)->buffers.size() == 1);
  CHECK(opt.state(b)->buffers.at("variance").shape() == Shape{32});
  // (64 + 32) + (24 + 15) + 32 f32 values, against Adam's 2 x 2,272.
  CHECK(opt.state_bytes() == (96 + 39 + 32) * 4);
}

TEST_CASE("Adafactor: eps1's default is the parameter dtype's machine epsilon, as PyTorch's", "[optim][adafactor]") {
  // A bf16 parameter with the default eps1 steps as an f32 copy of it with eps1 = 2^-7 (bf16's
  // epsilon), rounded once; with f32's 2^-23 it would not, since the gradients are small enough
  // that the floor max(V, eps1^2) decides.
  for (DType low : {DType::BF16, DType::F16}) {
    const double eps = low == DType::BF16 ? 0x1p-7 : 0x1p-10;
    Generator gen(5);
    const Tensor w0 = to(randn({6, 10}, {}, &gen), low);
    Tensor p16 = clone(w0).requires_grad_();
    Tensor p32 = to(w0, DType::F32).requires_grad_();
    Tensor p32_f32eps = to(w0, DType::F32).requires_grad_();
    optim::Adafactor o16({p16}, {.lr = 0.1});
    optim::Adafactor o32({p32}, {.lr = 0.1, .eps1 = eps});
    optim::Adafactor o32_default({p32_f32eps}, {.lr = 0.1});
    const Tensor g = to(randn({6, 10}, {}, &gen) * 1e-3, low);
    p16.set_grad(g);
    p32.set_grad(to(g, DType::F32));
    p32_f32eps.set_grad(to(g, DType::F32));
    o16.step();
    o32.step();
    o32_default.step();
    INFO(dtype_name(low));
    CHECK(test::bits_equal(p16, to(p32.detach(), low)));
    CHECK(!test::bits_equal(p16, to(p32_f32eps.detach(), low)));
  }
}

TEST_CASE("Adafactor: options out of range are named errors", "[optim][adafactor]") {
  const Tensors ps = {randn({3, 2}).requires_grad_()};
  MG_REQUIRE_ERROR(optim::Adafactor(ps, {.lr = -1.0}), "Adafactor: lr must be >= 0");
  MG_REQUIRE_ERROR(optim::Adafactor(ps, {.beta2_decay = 0.5}), "beta2_decay must be <= 0");
  MG_REQUIRE_ERROR(optim::Adafactor(ps, {.beta2_decay = NAN}), "beta2_decay must be <= 0");
  MG_REQUIRE_ERROR(optim::Adafactor(ps, {.eps1 = -0.5}), "eps1 must be >= 0, or -1");
  MG_REQUIRE_ERROR(optim::Adafactor(ps, {.eps2 = -1e-3}), "eps2 must be >= 0");
  MG_REQUIRE_ERROR(optim::Adafactor(ps, {.d = 0.5}), "the clipping threshold d must be >= 1");
  MG_REQUIRE_ERROR(optim::Adafactor(ps, {.weight_decay = -0.1}), "weight_decay must be >= 0");
  optim::Adafactor ok(ps, {.eps1 = 0.0, .eps2 = 0.0});  // the bounds themselves are allowed
  CHECK(ok.param_groups()[0].option("eps1") == 0.0);
}

TEST_CASE("Adafactor: a state dict with a wrong or missing factor is refused, naming it", "[optim][adafactor]") {
  Tensor w = randn({4, 3}).requires_grad_();
  Tensor b = randn({3}).requires_grad_();
  optim::Adafactor opt({w, b});
  w.set_grad(randn({4, 3}));
  b.set_grad(randn({3}));
  opt.step();
  const StateDict good = opt.state_dict();
  CHECK(good.tensor_at("test", "state.0.row_var").shape() == Shape{4, 1});
  CHECK(good.tensor_at("test", "state.0.col_var").shape() == Shape{1, 3});
  CHECK(!good.has_tensor("state.0.variance"));
  CHECK(good.tensor_at("test", "state.1.variance").shape() == Shape{3});

  Tensor w2 = clone(w.detach()).requires_grad_();
  Tensor b2 = clone(b.detach()).requires_grad_();
  optim::Adafactor other({w2, b2});
  StateDict bad = good;
  for (auto& [key, t] : bad.tensors) {
    if (key == "state.0.row_var") t = zeros({4, 3});  // PyTorch-shaped unfactored moments
  }
  MG_REQUIRE_ERROR(other.load_state_dict(bad), "'state.0.row_var' is");
  MG_REQUIRE_ERROR(other.load_state_dict(bad), "needs [4, 1]");
  StateDict wrong_kind = good;
  wrong_kind.tensors.emplace_back("state.0.variance", zeros({4, 3}));
  MG_REQUIRE_ERROR(other.load_state_dict(wrong_kind), "keeps no 'variance' for parameter 0");
  StateDict missing = good;
  std::erase_if(missing.tensors, [](const auto& kv) { return kv.first == "state.0.col_var"; });
  MG_REQUIRE_ERROR(other.load_state_dict(missing), "'state.0.col_var' is missing");

  // The good one loads and continues as the original.
  other.load_state_dict(good);
  for (int s = 0; s < 2; ++s) {
    const Tensor gw = randn({4, 3}), gb = randn({3});
    w.set_grad(gw);
    w2.set_grad(clone(gw));
    b.set_grad(gb);
    b2.set_grad(clone(gb));
    opt.step();
    other.step();
  }
  CHECK(test::bits_equal(w, w2));
  CHECK(test::bits_equal(b, b2));
}

TEST_CASE("Adafactor: the precision plan counts its factored state", "[optim][adafactor][amp]") {
  auto net = std::make_shared<nn::Linear>(nn::LinearOptions{.in = 64, .out = 32});  // weight [32, 64], bias [32]
  optim::Adafactor opt(net->parameters());
  const std::string plan = amp::precision_plan(*net, &opt);
  INFO(plan);
  // 32 + 64 + 32 = 128 values for 2,080 parameters.
  CHECK_THAT(plan, Catch::Matchers::Contains("(Adafactor: 128 f32 values for 2080 parameters)"));
  optim::Adam adam(net->parameters());
  CHECK_THAT(amp::precision_plan(*net, &adam), Catch::Matchers::Contains("(Adam: 2 f32 buffers per parameter)"));
}

TEST_CASE("Adafactor: a channels-last weight steps as its contiguous copy, its factors contiguous",
          "[optim][adafactor]") {
  Generator gen(17);
  const Tensor w0 = randn({4, 3, 2, 5}, {}, &gen);
  Tensor dense = clone(w0).requires_grad_();
  Tensor nhwc = contiguous(w0, MemoryFormat::ChannelsLast).requires_grad_();
  REQUIRE(nhwc.is_contiguous(MemoryFormat::ChannelsLast));
  optim::Adafactor a({dense}, {.lr = 0.1, .weight_decay = 0.1});
  optim::Adafactor b({nhwc}, {.lr = 0.1, .weight_decay = 0.1});
  for (int s = 0; s < 3; ++s) {
    const Tensor g = randn({4, 3, 2, 5}, {}, &gen);
    dense.set_grad(g);
    nhwc.set_grad(contiguous(g, MemoryFormat::ChannelsLast));
    a.step();
    b.step();
  }
  CHECK(nhwc.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK(test::rel_error(nhwc, test::values(dense)) <= 1e-6);  // the sums may run in another order
  const optim::ParamState* st = b.state(nhwc);
  CHECK(st->buffers.at("row_var").shape() == Shape{4, 3, 2, 1});
  CHECK(st->buffers.at("col_var").shape() == Shape{4, 3, 1, 5});
  CHECK(st->buffers.at("col_var").is_contiguous());
}

TEST_CASE("Adafactor: the fused CPU step does not depend on the thread count", "[optim][adafactor]") {
  // Shapes past the parallel grains: rows, column blocks of 256 and sums of more than one chunk.
  const std::vector<Shape> shapes = {{300, 700}, {2, 130, 520}, {20000}, {64, 40, 3, 3}};
  std::vector<Tensors> runs;
  const int threads = num_threads();
  for (int t : {1, 2, 3}) {
    set_num_threads(t);
    Generator gen(9);
    Tensors ps;
    for (const Shape& s : shapes) ps.push_back(randn(s, {}, &gen).requires_grad_());
    optim::Adafactor opt(ps, {.lr = 0.05, .weight_decay = 0.1});
    for (int s = 0; s < 3; ++s) {
      for (Tensor& p : ps) p.set_grad(randn(p.shape(), {}, &gen));
      opt.step();
    }
    runs.push_back(ps);
  }
  set_num_threads(threads);
  for (std::size_t k = 0; k < shapes.size(); ++k) {
    CHECK(test::bits_equal(runs[0][k], runs[1][k]));
    CHECK(test::bits_equal(runs[0][k], runs[2][k]));
  }
}

TEST_CASE("Adafactor at O2 f16: f32 masters, dynamic loss scaling, an overflow skips the step and its state",
          "[optim][adafactor][amp]") {
  struct Sink {  // amp's messages collected, amp reset afterwards
    Sink() { amp::set_log_sink([](const std::string&) {}); }
    ~Sink() {
      amp::reset();
      amp::set_log_sink(nullptr);
    }
  } sink;
  auto make_net = [] {
    manual_seed(21);
    return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::UnaryModule>>{
        nn::make<nn::Linear>({.in = 12, .out = 32}), nn::make<nn::ReLU>(), nn::make<nn::Linear>({.in = 32, .out = 3})});
  };
  Generator gen(4);
  const Tensor x = randn({64, 12}, {}, &gen), y = randn({64, 3}, {}, &gen);
  auto train = [&](const char* level, int steps, std::vector<double>* losses) {
    auto net = make_net();
    optim::Adafactor opt(net->parameters(), {.lr = 0.05});
    amp::initialize(net, opt, {.opt_level = level, .verbosity = 0});
    for (int s = 0; s < steps; ++s) {
      opt.zero_grad();
      const Tensor loss = mse_loss(to(amp::forward(*net, x), DType::F32), y);
      losses->push_back(loss.item<double>());
      amp::scale_loss(loss, opt).backward();
      opt.step();
    }
    amp::reset();
    return net;
  };
  std::vector<double> o0, o2;
  auto net0 = train("O0", 30, &o0);
  auto net2 = train("O2", 30, &o2);
  CHECK(net2->parameters()[0].dtype() == DType::F16);
  CHECK(o2.back() < 0.8 * o2.front());  // it trains
  // f16 weights and activations against f32 throughout: the losses follow O0's (3.3% apart at
  // most over these 30 steps; Adafactor's steps are relative to each weight's RMS).
  for (std::size_t s = 0; s < o0.size(); ++s) CHECK(std::fabs(o2[s] - o0[s]) <= 0.05 * o0[s]);

  // An overflow: the scaler skips the step, and Adafactor's state and step counts stay as they were.
  auto net = make_net();
  optim::Adafactor opt(net->parameters(), {.lr = 0.05});
  amp::initialize(net, opt, {.opt_level = "O2", .verbosity = 0});
  REQUIRE(opt.has_master_weights());
  const Tensor loss = mse_loss(to(amp::forward(*net, x), DType::F32), y);
  amp::scale_loss(loss, opt).backward();
  opt.step();
  const optim::ParamState* st = opt.state(opt.parameters()[0]);
  REQUIRE(st != nullptr);
  CHECK(opt.parameters()[0].dtype() == DType::F32);  // the master
  CHECK(st->buffers.at("row_var").shape() == Shape{32, 1});
  const Tensor row = clone(st->buffers.at("row_var"));
  const std::vector<double> masters = test::values(opt.parameters()[0]);
  opt.zero_grad();
  const Tensor huge = mse_loss(to(amp::forward(*net, x), DType::F32), y) * 1e30;
  amp::scale_loss(huge, opt).backward();  // inf in the f16 gradients
  opt.step();
  CHECK(opt.last_step_skipped());
  CHECK(opt.state(opt.parameters()[0])->step == 1);
  CHECK(test::bits_equal(opt.state(opt.parameters()[0])->buffers.at("row_var"), row));
  CHECK(test::values(opt.parameters()[0]) == masters);
}

TEST_CASE("Adafactor: a non-finite element of a vector spoils only itself, as PyTorch's host max", "[optim][adafactor]") {
  // PyTorch 2.15 (tools: torch.optim.Adafactor, lr 1e-2, f64): alpha = max(eps2, RMS(p)) * rho and
  // the divisor max(1, RMS(u) / d) are Python's max, which keeps the floor for a NaN.
  struct Case {
    std::vector<double> p, g, want;
  };
  const std::vector<Case> cases = {{{1, 1, 1, 1}, {INFINITY, 1e-2, 2e-2, 3e-2}, {NAN, 0.99, 0.99, 0.99}},
                                   {{NAN, 1, 2, 3}, {1e-2, 2e-2, 3e-2, 4e-2}, {NAN, 0.99999, 1.99999, 2.99999}}};
  for (bool generic : {false, true}) {
    for (DType dt : {DType::F64, DType::F32}) {
      for (const Case& c : cases) {
        INFO((generic ? "generic" : "fused") << " " << dtype_name(dt));
        Tensor p = to(from_vector<double>(c.p, {4}), dt).requires_grad_();
        optim::Adafactor opt({p}, {.lr = 1e-2});
        p.set_grad(to(from_vector<double>(c.g, {4}), dt));
        std::unique_ptr<optim::ForceGenericPathGuard> force;
        if (generic) force = std::make_unique<optim::ForceGenericPathGuard>();
        opt.step();
        const std::vector<double> got = test::values(p);
        CHECK(std::isnan(got[0]));
        for (std::size_t i = 1; i < 4; ++i) CHECK(got[i] == Approx(c.want[i]).epsilon(dt == DType::F64 ? 1e-14 : 1e-6));
      }
    }
  }
}

TEST_CASE("Adafactor: the fused CPU step equals the generic path on a conv weight (many 3 x 3 matrices) and a large matrix",
          "[optim][adafactor]") {
  for (const Shape& shape : std::vector<Shape>{{64, 32, 3, 3}, {3, 2, 250, 300}}) {
    INFO(shape_str(shape));
    Generator gen(31);
    const Tensor w0 = randn(shape, {}, &gen);
    Tensor a = clone(w0).requires_grad_(), b = clone(w0).requires_grad_();
    optim::Adafactor fused({a}, {.lr = 0.05, .weight_decay = 0.1});
    optim::Adafactor generic({b}, {.lr = 0.05, .weight_decay = 0.1});
    for (int s = 0; s < 3; ++s) {
      const Tensor g = randn(shape, {}, &gen);
      a.set_grad(g);
      b.set_grad(clone(g));
      fused.step();
      optim::ForceGenericPathGuard force;
      generic.step();
    }
    CHECK(test::rel_error(a, test::values(b)) <= 1e-6);
    for (const char* name : {"row_var", "col_var"}) {
      CHECK(test::rel_error(fused.state(a)->buffers.at(name), test::values(generic.state(b)->buffers.at(name))) <= 1e-6);
    }
  }
}

TEST_CASE("Adafactor: the precision plan does not call a factored state that happens to match a parameter's size per-parameter buffers",
          "[optim][adafactor][amp]") {
  auto net = std::make_shared<nn::Linear>(nn::LinearOptions{.in = 2, .out = 2, .bias = false});  // 2 + 2 = 4 values
  optim::Adafactor opt(net->parameters());
  CHECK_THAT(amp::precision_plan(*net, &opt), Catch::Matchers::Contains("(Adafactor: 4 f32 values for 4 parameters)"));
  auto f64 = std::make_shared<nn::Linear>(nn::LinearOptions{.in = 3, .out = 2});
  f64->to(DType::F64);
  optim::SGD sgd(f64->parameters(), {.lr = 0.1, .momentum = 0.9});
  CHECK_THAT(amp::precision_plan(*f64, &sgd), Catch::Matchers::Contains("(SGD: 1 f64 buffer per parameter)"));
}
