// A user's own module, written as in LibTorch: `struct Block : nn::Module { Block(int64_t d) {...} }`
// needs no type-name string; the name comes from the class (namespaces and enclosing scopes
// dropped) and shows in printing and errors, the explicit Module("Mlp") form still wins, built-in
// layers keep their names, and a custom module with a submodule and parameters trains (loss
// falls), prints its tree and round-trips its state dict under unchanged keys.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "nn/nn.h"
#include "ops/ops.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

// At global scope, as in a user's program.
struct Block : nn::Module {
  Block(int64_t d) { w = register_parameter("w", ones({d})); }
  Tensor w;
};

struct Mlp : nn::Module {
  Mlp() : Module("MyMlp") {}  // the explicit form
};

// Records the type name seen inside its own constructor.
struct Base : nn::Module {
  Base() { seen_in_constructor = type_name(); }
  std::string seen_in_constructor;
};
struct Derived : Base {};

// Registers the same name twice: the error must name the derived class.
struct Dup : nn::Module {
  Dup() {
    register_parameter("w", ones({2}));
    register_parameter("w", ones({2}));
  }
};

namespace my::detail {
struct Block : nn::Module {};
template <typename T>
struct Wrap : nn::Module {};
}  // namespace my::detail

namespace {
struct Hidden : nn::Module {};

// A unary layer written by the user: scale * relu(x).
struct ScaledRelu : nn::UnaryModule {
  ScaledRelu(double scale) : scale_(scale) {}
  Tensor forward(const Tensor& x) override { return x.relu() * scale_; }
  double scale_;
};

// A custom model with a built-in submodule, a custom submodule and parameters of its own.
struct Tiny : nn::Module {
  Tiny(int64_t in, int64_t hidden) {
    fc = register_module<nn::Linear>("fc", {.in = in, .out = hidden});
    act = register_module("act", std::make_shared<ScaledRelu>(1.0));
    v = register_parameter("v", randn({hidden}) * 0.1);
    b = register_parameter("b", zeros({1}));
  }
  Tensor forward(const Tensor& x) { return act->forward(fc->forward(x)).matmul(v).add(b); }  // x [N, in] -> [N]
  std::shared_ptr<nn::Linear> fc;
  std::shared_ptr<ScaledRelu> act;
  Tensor v, b;
};
}  // namespace

TEST_CASE("a module's type name comes from its class when none is given", "[nn][module]") {
  Block block(3);
  CHECK(block.type_name() == "Block");
  CHECK(block.str() == "Block()");
  CHECK(block.layer_name() == "Block()");
  CHECK(my::detail::Block().type_name() == "Block");  // namespaces dropped
  CHECK(my::detail::Wrap<my::detail::Block>().type_name() == "Wrap<my::detail::Block>");  // arguments kept
  CHECK(Hidden().type_name() == "Hidden");             // "(anonymous namespace)::" dropped
  struct Local : nn::Module {};
  CHECK(Local().type_name() == "Local");               // "<function>()::" dropped
  CHECK(nn::Module().type_name() == "Module");
  CHECK(ScaledRelu(2.0).type_name() == "ScaledRelu");
}

TEST_CASE("the explicit type name wins and built-in layers keep theirs", "[nn][module]") {
  CHECK(Mlp().type_name() == "MyMlp");
  CHECK(nn::Module("").type_name() == "Module");  // empty: derived
  CHECK(nn::Linear({.in = 2, .out = 3}).type_name() == "Linear");
  CHECK(nn::LayerNorm({.shape = {4}}).type_name() == "LayerNorm");
  CHECK(nn::ReLU().type_name() == "ReLU");
  CHECK(nn::Sequential().type_name() == "Sequential");
}

TEST_CASE("the type name is looked up at each call: inside a constructor it is the class being built",
          "[nn][module]") {
  Derived d;
  CHECK(d.seen_in_constructor == "Base");
  CHECK(d.type_name() == "Derived");
  MG_REQUIRE_ERROR(Dup(), "Dup: parameter name \"w\" is already registered");
}

TEST_CASE("derived type names in errors", "[nn][module][errors]") {
  Tiny net(3, 4);
  MG_REQUIRE_ERROR(net.to(DType::I64), "Tiny.to: modules convert to a floating dtype");
  MG_REQUIRE_ERROR(net.load_state_dict({{"v", zeros({4})}}), "Tiny.load_state_dict: the state does not match");
  MG_REQUIRE_ERROR(net.register_buffer("", zeros({1})), "Tiny: buffer name \"\" must be non-empty");
}

TEST_CASE("type names are safe to read from several threads", "[nn][module]") {
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&wrong, t] {
      for (int i = 0; i < 200; ++i) {
        const std::string a = (t % 2 ? Hidden().type_name() : ScaledRelu(1.0).type_name());
        if (a != (t % 2 ? "Hidden" : "ScaledRelu")) ++wrong;
        if (Block(1).type_name() != "Block") ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(wrong == 0);
}

TEST_CASE("a custom module with submodules and parameters trains, prints and saves", "[nn][module]") {
  manual_seed(3);
  Tiny net(3, 8);
  CHECK(net.str() ==
        "Tiny(\n"
        "  (fc): Linear(in=3, out=8, bias=true)\n"
        "  (act): ScaledRelu()\n"
        ")");
  std::vector<std::string> keys;
  for (const auto& [name, t] : net.state_dict()) keys.push_back(name);
  CHECK(keys == std::vector<std::string>{"v", "b", "fc.weight", "fc.bias"});
  CHECK(net.num_parameters() == 8 + 1 + 3 * 8 + 8);

  // Regression onto a fixed target: y = x0 - 2 x1 + 0.5 x2 + 1, a few SGD steps.
  const Tensor x = randn({64, 3});
  const Tensor y = x.matmul(from_vector<float>({1, -2, 0.5f}, {3})).add(1.0);  // [64]
  optim::SGD opt(net.parameters(), {.lr = 0.05});
  std::vector<double> losses;
  for (int step = 0; step < 30; ++step) {
    const Tensor loss = net.forward(x).sub(y).pow(2).mean();
    losses.push_back(loss.item<double>());
    opt.zero_grad();
    loss.backward();
    REQUIRE(net.v.grad().defined());
    REQUIRE(net.fc->weight.grad().defined());
    opt.step();
  }
  INFO("loss " << losses.front() << " -> " << losses.back());
  CHECK(losses.back() < 0.5 * losses.front());
  for (std::size_t i = 1; i < losses.size(); ++i) CHECK(std::isfinite(losses[i]));

  // The trained state loads into a fresh model under the same keys and gives the same output.
  Tiny copy(3, 8);
  copy.load_state_dict(net.state_dict());
  NoGradGuard no_grad;
  CHECK(values(copy.forward(x)) == values(net.forward(x)));
}
