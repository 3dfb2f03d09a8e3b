// Engine and custom-function behaviour at the edges a PyTorch user relies on, each checked against
// PyTorch 2.15's values: grad() with respect to a non-leaf leaves the graph usable, grad mode is
// restored per node, a leaf changed after the graph was built, custom functions that save their
// output (freed) or return an input (not writable in place), clamp's gradient at its bounds, and
// fill_/zero_ keeping a tensor in the graph.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "ops/custom_function.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;
using Catch::Matchers::Approx;

namespace {

Tensor leaf(std::vector<double> v) { return from_vector<double>(v).requires_grad_(); }
Tensor constant(std::vector<double> v) { return from_vector<double>(v); }

// exp, saving its own output for backward (d e^x = e^x).
struct ExpSavingOutput : Function<ExpSavingOutput> {
  static constexpr const char* name = "exp_saving_output";
  static constexpr CastPolicy policy = CastPolicy::Keep;
  static Tensors forward(FunctionCtx& ctx, const Tensors& in) {
    Tensor y = exp(in[0]);
    ctx.save_for_backward({y});
    return {y};
  }
  static Tensors backward(FunctionCtx& ctx, const Tensors& g) { return {g[0] * ctx.saved()[0]}; }
};

// Identity forward with a reversed gradient: the output is the input itself.
struct ReverseGradient : Function<ReverseGradient> {
  static constexpr const char* name = "reverse_gradient";
  static constexpr CastPolicy policy = CastPolicy::Keep;
  static Tensors forward(FunctionCtx&, const Tensors& in) { return {in[0]}; }
  static Tensors backward(FunctionCtx&, const Tensors& g) { return {neg(g[0])}; }
};

// Returns a view of its input.
struct FirstTwo : Function<FirstTwo> {
  static constexpr const char* name = "first_two";
  static constexpr CastPolicy policy = CastPolicy::Keep;
  static Tensors forward(FunctionCtx&, const Tensors& in) { return {in[0].slice(0, 0, 2)}; }
  static Tensors backward(FunctionCtx&, const Tensors& g) {
    return {cat({g[0], zeros({1}, {.dtype = g[0].dtype()})}, 0)};
  }
};

}  // namespace

TEST_CASE("grad with respect to a non-leaf neither runs nor frees that tensor's history", "[autograd]") {
  // PyTorch: w.grad = [0.0296, 1.9e-6] after the second backward (the Grad-CAM pattern).
  Tensor w = leaf({1, 2});
  Tensor h = tanh(constant({3, 4}) * w);
  const Tensor gh = autograd::grad({sum(h * h)}, {h})[0];
  CHECK_THAT(values(gh), Approx(values(2.0 * h.detach())).epsilon(1e-15));
  CHECK_FALSE(w.grad().defined());  // nothing beyond h ran
  sum(h * constant({1, 1})).backward();
  const std::vector<double> t = {std::tanh(3.0), std::tanh(8.0)};
  // 1 - tanh(8)^2 cancels: compared to 1e-6 of its value
  CHECK_THAT(values(w.grad()), Approx(std::vector<double>{3 * (1 - t[0] * t[0]), 4 * (1 - t[1] * t[1])}).epsilon(1e-6));

  // A root that leads to no requested input does not run either: its freed history is no error.
  Tensor x = leaf({0.5});
  Tensor q = leaf({2.0});
  Tensor y = exp(x);
  y.backward();  // frees exp's saved tensors
  const Tensors r = autograd::grad({y, q * 3.0}, {q}, {}, false, false, /*allow_unused=*/true);
  CHECK(values(r[0]) == std::vector<double>{3.0});

  // A captured node that also leads to another requested input still runs.
  Tensor a = leaf({1.5});
  Tensor b = a * a;
  const Tensors both = autograd::grad({sum(b * 2.0)}, {b, a});
  CHECK(values(both[0]) == std::vector<double>{2.0});
  CHECK(values(both[1]) == std::vector<double>{6.0});
}

TEST_CASE("a hook that turns grad mode on affects its own node only", "[autograd][hooks]") {
  Tensor x = leaf({1, 2});
  Tensor w = leaf({3, 4});
  Tensor y = x * w;
  Tensor z = y * 3.0;
  z.register_hook([](const Tensor&) {
    GradMode::set_enabled(true);
    return Tensor();
  });
  sum(z).backward();
  CHECK(values(x.grad()) == std::vector<double>{9, 12});
  CHECK(x.grad().grad_fn() == nullptr);  // PyTorch: no history on a plain backward's gradients
  CHECK_FALSE(x.grad().requires_grad());
  CHECK(GradMode::is_enabled());  // the caller's mode is restored
}

TEST_CASE("a leaf changed after its graph was built", "[autograd][errors]") {
  SECTION("requires_grad_(false): no gradient, as PyTorch") {
    Tensor x = leaf({1, 2});
    Tensor y = sum(x * x);
    x.requires_grad_(false);
    y.backward();
    CHECK_FALSE(x.grad().defined());
  }
  SECTION("written in place since: refused, as PyTorch") {
    Tensor x = leaf({1, 2});
    Tensor w = leaf({1, 1});
    Tensor y = x * 2.0;
    x.requires_grad_(false);
    x.add_(w);  // x is now an op's output
    MG_REQUIRE_ERROR(sum(y).backward(), "has been moved into the graph interior");
  }
  SECTION("a new shape (set_data): a named error, not an internal one") {
    Tensor x = leaf({1, 2});
    Tensor y = sum(x * 2.0);  // saves nothing of x: the gradient reaches the leaf
    x.set_data(from_vector<double>({1, 2, 3}));
    MG_REQUIRE_ERROR(y.backward(), "the gradient of leaf [3] f64 cpu is [2] f64 cpu: the leaf's shape changed");
  }
  SECTION("a new dtype (set_data): refused, not an f64 .grad on a bf16 leaf") {
    Tensor x = leaf({1, 2});
    Tensor y = sum(x * 2.0);
    x.set_data(x.detach().to(DType::BF16));
    MG_REQUIRE_ERROR(y.backward(), "the gradient of leaf [2] bf16 cpu is [2] f64 cpu: .grad must have the leaf's dtype");
    CHECK(!x.grad().defined());
  }
}

TEST_CASE("a custom function that saves its own output is freed with it", "[autograd][custom]") {
  std::weak_ptr<autograd::Node> node;
  Tensor x = leaf({0.0, 1.0});
  {
    Tensor y = ExpSavingOutput::apply({x})[0];
    node = y.grad_fn();
    REQUIRE_FALSE(node.expired());
    // backward still sees the saved output, with its history (double backward).
    const Tensor g = autograd::grad({sum(y)}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true)[0];
    CHECK_THAT(values(g), Approx(std::vector<double>{1.0, std::exp(1.0)}).epsilon(1e-15));
    CHECK(g.requires_grad());
  }
  CHECK(node.expired());  // y -> node -> ctx -> saved y was a cycle, never freed
}

TEST_CASE("a custom function's output that shares memory with an input is not written in place", "[autograd][custom][errors]") {
  // PyTorch: "Output 0 of ... is a view and is being modified inplace ... This behavior is forbidden".
  Tensor x = leaf({1, 2});
  Tensor y = x * 1.0;
  Tensor o = ReverseGradient::apply({y})[0];
  MG_REQUIRE_ERROR(o.mul_(3.0), "mul_scalar_: ");
  MG_REQUIRE_ERROR(o.mul_(3.0), "shares memory with an input of the custom function (or checkpoint) that returned it");
  MG_REQUIRE_ERROR(o.slice(0, 0, 1).add_(1.0), "would bypass the function's backward");
  CHECK(values(y) == std::vector<double>{1, 2});  // unchanged
  Tensor v = FirstTwo::apply({leaf({1, 2, 3})})[0];
  MG_REQUIRE_ERROR(v.zero_(), "shares memory with an input");
  // A view of an output that is itself a view of a non-leaf input: refused too (it was accepted,
  // and the written output then skipped the function's backward for its other elements).
  Tensor z = leaf({1, 2, 3}) * 1.0;
  Tensor w = FirstTwo::apply({z})[0];
  MG_REQUIRE_ERROR(w.slice(0, 0, 1).mul_(2.0), "shares memory with an input of the custom function");
  MG_REQUIRE_ERROR(w.slice(0, 0, 2).slice(0, 1, 2).mul_(2.0), "shares memory with an input of the custom function");
  CHECK(values(z) == std::vector<double>{1, 2, 3});
  // Reading it is fine, and its custom backward runs.
  sum(o * constant({5, 7})).backward();
  CHECK(values(x.grad()) == std::vector<double>{-5, -7});
  // A copy can be written.
  Tensor c = clone(ReverseGradient::apply({y})[0]);
  c.mul_(2.0);
  CHECK(values(c) == std::vector<double>{2, 4});
}

TEST_CASE("a custom function's aliasing output is refused once its input is written in place", "[autograd][custom][errors]") {
  // PyTorch refuses it too ("... its base or another view of its base has been modified inplace.
  // This view was created inside a custom Function"): the output's history is the function's, its
  // values are no longer what the function returned.
  for (int as_view = 0; as_view < 2; ++as_view) {
    INFO((as_view ? "a view of the input" : "the input as is"));
    Tensor x = leaf({1, 2, 3});
    Tensor y = x * 1.0;
    Tensor o = as_view ? FirstTwo::apply({y})[0] : ReverseGradient::apply({y})[0];
    Tensor p = o.slice(0, 0, 1);
    y.mul_(2.0);
    MG_REQUIRE_ERROR(o * 3.0, "is a view whose base was modified in place after the view was taken");
    MG_REQUIRE_ERROR(p * 3.0, "is a view whose base was modified in place after the view was taken");
  }
}

TEST_CASE("a detach()ed tensor with history keeps it after a write outside autograd", "[autograd]") {
  // PyTorch 2.15: w.grad = [3, 3]. The write under NoGradGuard was taken for a write into the
  // tensor it was detached from, and every later op was refused.
  Tensor w = leaf({2, 3});
  Tensor e = zeros({2}, {.dtype = DType::F64}).detach();
  e.add_(w);
  {
    NoGradGuard no_grad;
    e.add_(1.0);
  }
  Tensor z = e * 3.0;
  CHECK(values(z) == std::vector<double>{9, 12});
  sum(z).backward();
  CHECK(values(w.grad()) == std::vector<double>{3, 3});
}

TEST_CASE("clamp's gradient is 0 at its bounds, as PyTorch 2", "[autograd][ops]") {
  const double inf = INFINITY, nan = NAN;
  auto grad_of = [&](auto f) {
    Tensor x = leaf({-inf, -1, 0, 0.5, 1, 2, inf, nan});
    sum(f(x)).backward();
    return values(x.grad());
  };
  // torch 2.15: x.clamp(0, 1), x.clamp_min(0), x.clamp_max(0) on the same x.
  CHECK(grad_of([](const Tensor& x) { return clamp(x, 0.0, 1.0); }) == std::vector<double>{0, 0, 0, 1, 0, 0, 0, 0});
  CHECK(grad_of([](const Tensor& x) { return clamp_min(x, 0.0); }) == std::vector<double>{0, 0, 0, 1, 1, 1, 1, 0});
  CHECK(grad_of([](const Tensor& x) { return clamp_max(x, 0.0); }) == std::vector<double>{1, 1, 0, 0, 0, 0, 0, 0});
}

TEST_CASE("max() and min() of a tensor holding NaN send the gradient to the NaN elements", "[autograd][ops]") {
  const double nan = NAN;
  Tensor x = leaf({1, nan, 3});
  max(x).backward();
  CHECK(values(x.grad()) == std::vector<double>{0, 1, 0});  // torch 2.15: x.max().backward()
  Tensor y = leaf({1, nan, nan});
  min(y).backward();
  CHECK(values(y.grad()) == std::vector<double>{0, 0.5, 0.5});
  Tensor z = leaf({1, nan, 3});
  amax(z, {0}).backward();  // amax keeps PyTorch's 0/0: NaN everywhere, which a GradScaler sees
  const std::vector<double> gz = values(z.grad());
  CHECK((std::isnan(gz[0]) && std::isnan(gz[1]) && std::isnan(gz[2])));
}

TEST_CASE("fill_ and zero_ keep a tensor that requires grad in the graph, with a zero gradient", "[autograd][inplace]") {
  SECTION("a view taken before the write") {  // PyTorch: w.grad = [0, 0]
    Tensor x = leaf({1, 2, 3});
    Tensor w = leaf({1, 1});
    Tensor y = x * 2.0;
    Tensor v = y.slice(0, 0, 2);
    y.zero_();
    CHECK(y.requires_grad());
    sum(v * w).backward();
    CHECK(values(w.grad()) == std::vector<double>{0, 0});
    CHECK(values(x.grad()) == std::vector<double>{0, 0, 0});
  }
  SECTION("backward through the filled tensor") {  // PyTorch: x.grad = [0, 0, 0]
    Tensor x = leaf({1, 2, 3});
    Tensor y = x * 2.0;
    y.fill_(7.0);
    CHECK(values(y) == std::vector<double>{7, 7, 7});
    sum(y).backward();
    CHECK(values(x.grad()) == std::vector<double>{0, 0, 0});
  }
  SECTION("a part filled: the rest keeps its gradient") {
    Tensor x = leaf({1, 2, 3});
    Tensor y = x * 2.0;
    y.slice(0, 1, 2).fill_(0.0);
    sum(y).backward();
    CHECK(values(x.grad()) == std::vector<double>{2, 0, 2});
  }
}
