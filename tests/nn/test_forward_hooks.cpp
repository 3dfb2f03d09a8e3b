// UnaryModule's forward hooks (nn/module.h): run by operator() in registration order around
// forward, inside a Sequential too; a pre-hook may replace the input and a hook the output (and
// gradients follow the replacement); a direct forward() runs none; handles remove hooks; an
// unknown handle and an empty function are refused.
#include <catch2/catch.hpp>

#include <optional>
#include <vector>

#include "core/factory.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

TEST_CASE("forward hooks capture, replace and chain, and come off by handle", "[nn][hooks]") {
  manual_seed(4);
  auto fc1 = nn::make<nn::Linear>({.in = 3, .out = 4});
  auto act = nn::make<nn::ReLU>();
  nn::Sequential net({fc1, act, nn::make<nn::Linear>({.in = 4, .out = 2})});
  const Tensor x = randn({5, 3});

  // Capturing an intermediate activation (the classic use).
  Tensor captured;
  std::vector<std::string> order;
  Shape seen_input;
  const int64_t h1 = act->register_forward_hook([&](nn::UnaryModule& m, const Tensor& in, const Tensor& out) {
    order.push_back("hook1 " + m.type_name());
    seen_input = in.shape();
    captured = out.detach();
    return std::optional<Tensor>();
  });
  const Tensor y = net(x);
  CHECK(values(captured) == values(relu((*fc1)(x))));
  CHECK(order == std::vector<std::string>{"hook1 ReLU"});
  CHECK(seen_input == Shape{5, 4});

  // A pre-hook replaces the input, a second hook the output; they run in registration order.
  const int64_t h2 = act->register_forward_pre_hook([&](nn::UnaryModule&, const Tensor& in) {
    order.push_back("pre");
    return std::optional<Tensor>(in * 0.0);
  });
  const int64_t h3 = act->register_forward_hook([&](nn::UnaryModule&, const Tensor&, const Tensor& out) {
    order.push_back("hook3");
    return std::optional<Tensor>(out + 1.0);
  });
  order.clear();
  const Tensor z = (*act)(x);
  CHECK(order == std::vector<std::string>{"pre", "hook1 ReLU", "hook3"});
  CHECK(values(z) == std::vector<double>(15, 1.0));
  CHECK(values(captured) == std::vector<double>(15, 0.0));  // hook1 saw the output before hook3's change
  // forward() itself runs no hook.
  order.clear();
  CHECK(values(act->forward(x)) == values(relu(x)));
  CHECK(order.empty());

  // Gradients follow a replaced output.
  act->remove_hook(h2);
  act->remove_hook(h3);
  const int64_t h4 = act->register_forward_hook([](nn::UnaryModule&, const Tensor&, const Tensor& out) {
    return std::optional<Tensor>(out * 3.0);
  });
  const Tensor leaf = randn({4}).abs().requires_grad_();
  sum((*act)(leaf)).backward();
  CHECK(values(leaf.grad()) == std::vector<double>(4, 3.0));

  act->remove_hook(h1);
  act->remove_hook(h4);
  CHECK(values(net(x)) == values(y));  // no hooks left: the plain call again
  MG_REQUIRE_ERROR(act->remove_hook(h1), "ReLU(): no forward hook with handle");
  MG_REQUIRE_ERROR(act->register_forward_hook(nullptr), "register_forward_hook got an empty function");
}

// A stack calls its layers' multi-input forward through call(x, run), so hooks on a layer run once
// per stack call (PyTorch: a hook on enc.layers[0] fires on every enc(x, mask=...)), and a replaced
// output feeds the next layer.
TEST_CASE("forward hooks on the layers of a TransformerEncoder run inside the stack, masks and all", "[nn][hooks]") {
  manual_seed(5);
  auto enc = nn::make<nn::TransformerEncoder>(
      {.layer = {.d_model = 8, .nhead = 2, .dim_feedforward = 16, .dropout = 0.0}, .num_layers = 2});
  const Tensor x = randn({2, 3, 8});
  const Tensor pad = from_vector<uint8_t>({0, 0, 1, 0, 0, 0}, {2, 3}).to(DType::Bool);
  int layer_calls = 0, stack_calls = 0;
  Tensor seen;
  enc->layer(0).register_forward_hook([&](nn::UnaryModule&, const Tensor&, const Tensor& y) {
    ++layer_calls;
    seen = y.detach();
    return std::optional<Tensor>();
  });
  enc->register_forward_pre_hook([&](nn::UnaryModule&, const Tensor&) {
    ++stack_calls;
    return std::optional<Tensor>();
  });
  const Tensor y = enc->forward(x, Tensor(), pad);  // a direct forward(): the stack's own hooks do not run
  CHECK(layer_calls == 1);
  CHECK(stack_calls == 0);
  CHECK(values(seen) == values(enc->layer(0).forward(x, Tensor(), pad)));
  // A hook that replaces layer 0's output: layer 1 then sees the replacement.
  enc->layer(1).register_forward_pre_hook([&](nn::UnaryModule&, const Tensor& in) {
    CHECK(values(in) == std::vector<double>(48, 0.0));
    return std::optional<Tensor>();
  });
  enc->layer(0).register_forward_hook(
      [](nn::UnaryModule&, const Tensor&, const Tensor& out) { return std::optional<Tensor>(zeros_like(out)); });
  (void)enc->call(x, [&](const Tensor& in) { return enc->forward(in, Tensor(), pad); });
  CHECK(layer_calls == 2);
  CHECK(stack_calls == 1);
  CHECK(y.shape() == x.shape());
}

TEST_CASE("a hook handle of another module is an error, not a hook of this one removed", "[nn][hooks]") {
  auto a = nn::make<nn::Linear>({.in = 2, .out = 2});
  auto b = nn::make<nn::Linear>({.in = 2, .out = 2});
  int b_calls = 0;
  const int64_t ha = a->register_forward_hook([](nn::UnaryModule&, const Tensor&, const Tensor&) { return std::optional<Tensor>(); });
  b->register_forward_hook([&](nn::UnaryModule&, const Tensor&, const Tensor&) {
    ++b_calls;
    return std::optional<Tensor>();
  });
  MG_REQUIRE_ERROR(b->remove_hook(ha), "no forward hook with handle");
  (*b)(ones({1, 2}));
  CHECK(b_calls == 1);
  a->remove_hook(ha);
}
