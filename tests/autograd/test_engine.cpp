// The autograd engine: accumulation, shared subgraphs, retain_graph, grad(), double backward,
// in-place version checks, hooks, grad mode.
#include <catch2/catch.hpp>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;
using Catch::Matchers::Approx;

namespace {
Tensor leaf(std::vector<double> v, Shape shape = {}) {
  return from_vector<double>(v, shape).requires_grad_();
}
}  // namespace

TEST_CASE("gradient of a scalar function of a leaf", "[autograd]") {
  Tensor x = leaf({1, 2, 3});
  // y = sum(x^2 + 3x) -> dy/dx = 2x + 3 = [5, 7, 9]
  Tensor y = sum(x * x + 3.0 * x);
  y.backward();
  REQUIRE(values(x.grad()) == std::vector<double>{5, 7, 9});
  REQUIRE(y.grad_fn() != nullptr);
  REQUIRE(x.is_leaf());
}

TEST_CASE("shared subgraph: both paths contribute", "[autograd]") {
  Tensor x = leaf({2.0});
  Tensor a = x * x;        // a = x^2, used twice
  Tensor y = a * a + a;    // y = x^4 + x^2 -> dy/dx = 4x^3 + 2x = 32 + 4 = 36
  y.sum().backward();
  REQUIRE(values(x.grad())[0] == 36.0);
}

TEST_CASE("gradients accumulate across two backward calls", "[autograd]") {
  Tensor x = leaf({1.0, -1.0});
  (x * 3.0).sum().backward();
  (x * x).sum().backward();
  // 3 + 2x = [5, 1]
  REQUIRE(values(x.grad()) == std::vector<double>{5, 1});
  // .grad is a dense tensor of the leaf's shape that can be updated in place
  REQUIRE(x.grad().is_contiguous());
  REQUIRE(x.grad().shape() == Shape{2});
}

TEST_CASE("a second backward through freed buffers is an error naming the node", "[autograd]") {
  Tensor x = leaf({1.0, 2.0});
  Tensor y = (exp(x)).sum();
  y.backward();
  MG_REQUIRE_ERROR(y.backward(), "exp_backward: tried to backward through the graph a second time");
  MG_REQUIRE_ERROR(y.backward(), "hint: pass retain_graph=true");
}

TEST_CASE("retain_graph allows a second backward", "[autograd]") {
  Tensor x = leaf({0.0, 1.0});
  Tensor y = exp(x).sum();
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  REQUIRE_THAT(values(x.grad()), Approx(std::vector<double>{2.0, 2.0 * std::exp(1.0)}));
}

TEST_CASE("grad() returns gradients without touching .grad", "[autograd]") {
  Tensor x = leaf({1.0, 2.0});
  Tensor w = leaf({3.0, 4.0});
  Tensor y = sum(x * w);
  Tensors g = autograd::grad({y}, {x});
  REQUIRE(values(g[0]) == std::vector<double>{3, 4});
  REQUIRE(!x.grad().defined());
  REQUIRE(!w.grad().defined());
}

TEST_CASE("grad() reports unused inputs unless allow_unused", "[autograd]") {
  Tensor x = leaf({1.0});
  Tensor z = leaf({1.0});
  Tensor y = sum(x * 2.0);
  MG_REQUIRE_ERROR(autograd::grad({y}, {z}, {}, true), "grad: input 0 ([1] f64 cpu) was not used");
  Tensors g = autograd::grad({y}, {x, z}, {}, true, false, /*allow_unused=*/true);
  REQUIRE(values(g[0]) == std::vector<double>{2});
  REQUIRE(!g[1].defined());
}

TEST_CASE("double backward: gradient of a gradient norm", "[autograd]") {
  // f(x) = sum(x^3); g = df/dx = 3x^2; penalty = sum(g^2) = 9 sum(x^4); d penalty/dx = 36 x^3
  Tensor x = leaf({1.0, -2.0, 0.5});
  Tensor f = sum(x * x * x);
  Tensor g = autograd::grad({f}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
  REQUIRE(g.requires_grad());
  REQUIRE_THAT(values(g), Approx(std::vector<double>{3, 12, 0.75}));
  Tensor penalty = sum(g * g);
  penalty.backward();
  REQUIRE_THAT(values(x.grad()), Approx(std::vector<double>{36, -288, 4.5}));
}

TEST_CASE("double backward through exp and tanh (saved outputs keep their history)", "[autograd]") {
  // d/dx exp(x) = exp(x); d2/dx2 = exp(x).  d/dx tanh = 1 - t^2; d2 = -2 t (1 - t^2)
  Tensor x = leaf({0.3});
  Tensor g1 = autograd::grad({exp(x).sum()}, {x}, {}, std::nullopt, true)[0];
  Tensor g2 = autograd::grad({g1.sum()}, {x})[0];
  REQUIRE(values(g2)[0] == Catch::Detail::Approx(std::exp(0.3)));
  Tensor h1 = autograd::grad({tanh(x).sum()}, {x}, {}, std::nullopt, true)[0];
  Tensor h2 = autograd::grad({h1.sum()}, {x})[0];
  const double t = std::tanh(0.3);
  REQUIRE(values(h2)[0] == Catch::Detail::Approx(-2 * t * (1 - t * t)));
}

TEST_CASE("non-scalar backward needs an explicit gradient", "[autograd]") {
  Tensor x = leaf({1.0, 2.0});
  Tensor y = x * 2.0;
  MG_REQUIRE_ERROR(y.backward(), "backward: a gradient can be created implicitly only for one-element outputs");
  y.backward(from_vector<double>({1.0, 10.0}));
  REQUIRE(values(x.grad()) == std::vector<double>{2, 20});
  MG_REQUIRE_ERROR((x * 2.0).backward(from_vector<double>({1.0, 2.0, 3.0})),
                   "backward: gradient [3] f64 cpu does not match output 0 [2] f64 cpu");
}

TEST_CASE("backward of a tensor that does not require grad is an error", "[autograd]") {
  Tensor x = from_vector<double>({1.0});
  MG_REQUIRE_ERROR((x * 2.0).sum().backward(), "does not require grad and has no grad_fn");
}

TEST_CASE("in-place modification of a saved tensor is detected", "[autograd]") {
  Tensor x = leaf({1.0, 2.0});
  Tensor a = x * 1.0;
  Tensor y = a * a;  // saves a
  {
    NoGradGuard no_grad;
    a.add_(1.0);
  }
  MG_REQUIRE_ERROR(y.sum().backward(), "mul_backward: a tensor saved for backward ([2] f64 cpu) was modified by an in-place operation (version 0 -> 1)");
}

TEST_CASE("in-place ops on a non-leaf rebase its history", "[autograd]") {
  Tensor x = leaf({1.0, 2.0});
  Tensor y = x * 2.0;
  y.add_(1.0);   // y = 2x + 1
  y.mul_(3.0);   // y = 6x + 3 -> dy/dx = 6
  REQUIRE(values(y) == std::vector<double>{9, 15});
  y.sum().backward();
  REQUIRE(values(x.grad()) == std::vector<double>{6, 6});
}

TEST_CASE("in-place on a leaf that requires grad is refused", "[autograd]") {
  Tensor x = leaf({1.0});
  MG_REQUIRE_ERROR(x.add_(1.0), "add_: a leaf tensor that requires grad ([1] f64 cpu) cannot be modified in place");
  {
    NoGradGuard no_grad;  // optimizer-style update
    x.add_(1.0);
  }
  REQUIRE(values(x)[0] == 2.0);
}

TEST_CASE("a view of a base modified in place takes the base's current history, as PyTorch's", "[autograd]") {
  // b was modified outside autograd, so its history still says b = x; the view's regenerated
  // history follows it (PyTorch 2.15: x.grad = [2, 2, 0]).
  Tensor x = leaf({1.0, 2.0, 3.0});
  Tensor b = x * 1.0;
  Tensor v = b.slice(0, 0, 2);
  {
    NoGradGuard no_grad;
    b.mul_(2.0);
  }
  sum(v * 2.0).backward();
  CHECK(values(x.grad()) == std::vector<double>{2, 2, 0});
}

TEST_CASE("tensor hooks see and can replace the gradient", "[autograd]") {
  Tensor x = leaf({1.0, 2.0});
  Tensor y = x * 3.0;
  std::vector<double> seen;
  y.register_hook([&](const Tensor& g) {
    seen = values(g);
    return g * 10.0;  // replace
  });
  y.sum().backward();
  REQUIRE(seen == std::vector<double>{1, 1});
  REQUIRE(values(x.grad()) == std::vector<double>{30, 30});
}

TEST_CASE("hooks on leaves and retain_grad on non-leaves", "[autograd]") {
  Tensor x = leaf({1.0, 2.0});
  int calls = 0;
  x.register_hook([&](const Tensor& g) {
    ++calls;
    return Tensor();
  });
  Tensor h = x * x;
  h.retain_grad();
  (h * 2.0).sum().backward();
  REQUIRE(calls == 1);
  REQUIRE(values(h.grad()) == std::vector<double>{2, 2});
  REQUIRE(values(x.grad()) == std::vector<double>{4, 8});
}

TEST_CASE("retain_grad: once per tensor, after every hook, following an in-place op (PyTorch's rules)",
          "[autograd]") {
  {
    Tensor x = leaf({1.0, 2.0, 3.0});
    Tensor y = x * 2.0;
    y.retain_grad();
    y.retain_grad();  // a second call changes nothing
    sum(y).backward();
    CHECK(values(y.grad()) == std::vector<double>{1, 1, 1});
  }
  {
    // .grad is the gradient after the tensor's hooks, whatever their order of registration.
    Tensor x = leaf({1.0, 2.0});
    Tensor y = x * 2.0;
    y.retain_grad();
    y.register_hook([](const Tensor& g) { return g * 10.0; });
    sum(y).backward();
    CHECK(values(y.grad()) == std::vector<double>{10, 10});
    CHECK(values(x.grad()) == std::vector<double>{20, 20});
  }
  {
    // After y.mul_(3) the retained gradient is the new value's.
    Tensor x = leaf({1.0, 2.0, 3.0});
    Tensor y = x * 2.0;
    y.retain_grad();
    y.mul_(3.0);
    sum(y).backward();
    CHECK(values(y.grad()) == std::vector<double>{1, 1, 1});
    CHECK(values(x.grad()) == std::vector<double>{6, 6, 6});
  }
  {
    // Several retained tensors from one source keep their own gradients.
    Tensor x = leaf({1.0, 2.0, 3.0, 4.0});
    const Tensors parts = chunk(x * 1.0, 2);
    parts[0].retain_grad();
    parts[1].retain_grad();
    sum(parts[0] * 2.0 + parts[1] * 3.0).backward();
    CHECK(values(parts[0].grad()) == std::vector<double>{2, 2});
    CHECK(values(parts[1].grad()) == std::vector<double>{3, 3});
  }
  {
    // Under create_graph the retained gradient keeps its history.
    Tensor x = leaf({2.0});
    Tensor y = x * x;
    y.retain_grad();
    sum(y * y).backward({}, false, /*create_graph=*/true);  // d/dy y^2 = 2y = 8
    CHECK(values(y.grad()) == std::vector<double>{8});
    CHECK(y.grad().requires_grad());
    // y.grad's history reaches a node that saved y: a reference cycle until .grad is cleared (as
    // in PyTorch, whose docs advise autograd::grad for create_graph for this reason).
    y.set_grad(Tensor());
    x.set_grad(Tensor());
  }
}

TEST_CASE("a hook may not change a gradient's dtype, shape or device", "[autograd]") {
  Tensor x = leaf({1.0, 2.0}, {2});
  x.register_hook([](const Tensor&) { return ones({2}, {.dtype = DType::F32}); });
  MG_REQUIRE_ERROR(sum(x * 2.0).backward(), "hook: a gradient hook on AccumulateGrad returned [2] f32");
  Tensor y = leaf({1.0, 2.0}, {2});
  Tensor z = y * 2.0;
  z.register_hook([](const Tensor&) { return ones({3}, {.dtype = DType::F64}); });
  MG_REQUIRE_ERROR(sum(z).backward(), "but the gradient is [2] f64");
}

TEST_CASE("under create_graph a leaf's .grad owns its memory: later backwards add into it alone", "[autograd]") {
  {
    // x + y hands the same gradient to both leaves; each .grad must be its own tensor.
    Tensor x = leaf({1, 2}, {2}), y = leaf({3, 4}, {2});
    Tensor s = x + y;
    sum(s * s).backward({}, false, /*create_graph=*/true);
    CHECK(values(x.grad()) == std::vector<double>{8, 12});
    CHECK(values(y.grad()) == std::vector<double>{8, 12});
    sum(x * 10.0).backward();
    CHECK(values(x.grad()) == std::vector<double>{18, 22});
    CHECK(values(y.grad()) == std::vector<double>{8, 12});
  }
  {
    // The caller's gradient tensor is not taken as .grad, so it is not written later.
    Tensor x = leaf({1, 2}, {2});
    const Tensor g = from_vector<double>({7, 8}, {2});
    x.backward(g, false, /*create_graph=*/true);
    CHECK_FALSE(x.grad().is_same(g));
    sum(x).backward();
    CHECK(values(g) == std::vector<double>{7, 8});
    CHECK(values(x.grad()) == std::vector<double>{8, 9});
  }
  {
    // sum's gradient is an expanded view; accumulating into it later works.
    Tensor x = leaf({1, 2}, {2});
    sum(x).backward({}, false, /*create_graph=*/true);
    sum(x * x).backward();
    CHECK(values(x.grad()) == std::vector<double>{3, 5});
  }
  {
    // The copy keeps its history: a double backward through .grad still works.
    Tensor x = leaf({3}, {1});
    Tensor y = x * x * x;  // dy/dx = 3x^2, d2y/dx2 = 6x
    y.backward(from_vector<double>({1}, {1}), false, /*create_graph=*/true);
    Tensor g = x.grad();
    CHECK(values(g) == std::vector<double>{27});
    REQUIRE(g.requires_grad());
    x.set_grad(Tensor());
    g.backward(from_vector<double>({1}, {1}));
    CHECK(values(x.grad()) == std::vector<double>{18});
  }
}

TEST_CASE("NoGradGuard stops recording - detach cuts history", "[autograd]") {
  Tensor x = leaf({1.0});
  {
    NoGradGuard no_grad;
    Tensor y = x * 2.0;
    REQUIRE(!y.requires_grad());
    REQUIRE(y.grad_fn() == nullptr);
  }
  REQUIRE(GradMode::is_enabled());
  Tensor d = (x * 2.0).detach();
  REQUIRE(!d.requires_grad());
  REQUIRE(d.is_leaf());
}

TEST_CASE("requires_grad_ is for floating tensors and leaves", "[autograd]") {
  Tensor i = arange(0, 3);
  MG_REQUIRE_ERROR(i.requires_grad_(), "requires_grad_: only floating tensors can require grad; got [3] i64 cpu");
  Tensor x = leaf({1.0});
  Tensor y = x * 2.0;
  MG_REQUIRE_ERROR(y.requires_grad_(false), "cannot set requires_grad=false on a non-leaf tensor");
}

TEST_CASE("broadcasting gradients are summed back to input shapes", "[autograd]") {
  Tensor a = from_vector<double>({1, 2, 3}, {3, 1}).requires_grad_();
  Tensor b = from_vector<double>({10, 20, 30, 40}, {1, 4}).requires_grad_();
  // c[i][j] = a[i] * b[j]; dL/da[i] = sum_j b[j] = 100; dL/db[j] = sum_i a[i] = 6
  sum(a * b).backward();
  REQUIRE(values(a.grad()) == std::vector<double>{100, 100, 100});
  REQUIRE(values(b.grad()) == std::vector<double>{6, 6, 6, 6});
  REQUIRE(a.grad().shape() == Shape{3, 1});
}

TEST_CASE("casts are differentiable: an f32 leaf used in f16 math gets an f32 gradient", "[autograd]") {
  Tensor w = from_vector<float>({0.5f, 2.0f}).requires_grad_();
  Tensor y = sum(to(w, DType::F16) * 4.0);
  REQUIRE(y.dtype() == DType::F16);
  y.backward();
  REQUIRE(w.grad().dtype() == DType::F32);
  REQUIRE(values(w.grad()) == std::vector<double>{4, 4});
}

TEST_CASE("a long chain does not overflow the stack", "[autograd]") {
  Tensor x = leaf({1.0});
  Tensor y = x;
  for (int i = 0; i < 20000; ++i) y = y * 1.0;
  y.sum().backward();
  REQUIRE(values(x.grad())[0] == 1.0);
}

TEST_CASE("freeing a graph of 300k nodes in a chain does not overflow the stack", "[autograd]") {
  // PyTorch frees such a chain iteratively too; recursion through ~Node crashed here (SIGSEGV)
  // once the graph's last output went, with or without a backward.
  Tensor x = leaf({1.0});
  Tensor w = leaf({1.0});
  {
    Tensor y = x;
    for (int i = 0; i < 300000; ++i) y = i % 2 ? y * 1.0 : y * w;  // w * y saves y: a second path
    REQUIRE(y.grad_fn() != nullptr);
  }
  Tensor z = x;
  for (int i = 0; i < 300000; ++i) z = z + 1.0;
  z.sum().backward();
  CHECK(values(x.grad())[0] == 1.0);
}

TEST_CASE("set_grad refuses a gradient in the tensor's own memory", "[autograd]") {
  // PyTorch: x.grad = x raises "can't assign Variable as its own grad"; backward would add the
  // gradient into the weight itself.
  Tensor w = leaf({1.0, 1.0, 1.0});
  MG_REQUIRE_ERROR(w.set_grad(w), "set_grad: the gradient shares the tensor's own memory");
  MG_REQUIRE_ERROR(w.set_grad(w.detach()), "set_grad: the gradient shares the tensor's own memory");
  w.set_grad(w.detach().clone());
  (w * 2.0).sum().backward();
  CHECK(values(w) == std::vector<double>{1, 1, 1});
  CHECK(values(w.grad()) == std::vector<double>{3, 3, 3});
}
