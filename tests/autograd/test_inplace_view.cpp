// In-place ops on views while autograd records (ops/inplace_view.h, PyTorch's CopySlices): the
// base and the view get new history, gradients match the same computation written out of place
// (f64), double backward works through it, and the cases that cannot be right are refused.
#include <catch2/catch.hpp>

#include "autograd/engine.h"
#include "autograd/node.h"
#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "ops/checkpoint.h"
#include "ops/custom_function.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

Tensor leaf(std::vector<double> v, Shape shape) { return from_vector<double>(v, shape).requires_grad_(); }

void check_close(const Tensor& got, const Tensor& want) {
  REQUIRE(got.defined());
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> g = values(got), w = values(want);
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i);
    CHECK(g[i] == Approx(w[i]).epsilon(1e-12).margin(1e-12));
  }
}

}  // namespace

TEST_CASE("rows written into a buffer that needs no gradient carry their gradients back", "[autograd][inplace]") {
  // An RNN-style loop: buf[t] = f(h[t]) filled in place, the buffer used afterwards.
  Tensor h = leaf({1, 2, 3, 4}, {2, 2});
  Tensor buf = zeros({3, 2}, {.dtype = DType::F64});
  buf.select(0, 1).copy_(h.select(0, 0) * 2.0);
  buf.select(0, 2).copy_(h.select(0, 1) * 3.0);
  CHECK(buf.requires_grad());
  CHECK(values(buf) == std::vector<double>{0, 0, 2, 4, 9, 12});
  const Tensor c = from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2});
  sum(buf * c).backward();
  CHECK(values(h.grad()) == std::vector<double>{6, 8, 15, 18});  // 2 * c[1], 3 * c[2]
}

TEST_CASE("an in-place op on a slice of a tensor with history: base and view gradients as out of place",
          "[autograd][inplace]") {
  const std::vector<double> xv = {0.5, -1, 2, 1.5, 0.25, -3}, wv = {2, -1, 0.5, 3};
  // In place: y = 2x; y[:, :2] *= w.
  Tensor x = leaf(xv, {2, 3}), w = leaf(wv, {2, 2});
  Tensor y = x * 2.0;
  Tensor v = y.slice(1, 0, 2);
  v.mul_(w);
  CHECK(v.grad_fn()->name() == "ViewOfBase");
  CHECK(y.grad_fn()->name() == "CopySlices");
  sum(y * y * y).backward();
  // The same written out of place.
  Tensor x2 = leaf(xv, {2, 3}), w2 = leaf(wv, {2, 2});
  Tensor y2 = x2 * 2.0;
  Tensor ref = cat({y2.slice(1, 0, 2) * w2, y2.slice(1, 2, 3)}, 1);
  check_close(y, ref);
  sum(ref * ref * ref).backward();
  check_close(x.grad(), x2.grad());
  check_close(w.grad(), w2.grad());

  // The view itself after the write: v = 2x[:, :2] * w.
  Tensor x3 = leaf(xv, {2, 3}), w3 = leaf(wv, {2, 2});
  Tensor y3 = x3 * 2.0;
  Tensor v3 = y3.slice(1, 0, 2);
  v3.mul_(w3);
  sum(v3 * v3).backward();
  Tensor x4 = leaf(xv, {2, 3}), w4 = leaf(wv, {2, 2});
  Tensor v4 = (x4 * 2.0).slice(1, 0, 2) * w4;
  sum(v4 * v4).backward();
  check_close(x3.grad(), x4.grad());
  check_close(w3.grad(), w4.grad());
}

TEST_CASE("an op whose backward reads its input (tanh_) on a view, and two writes in a row", "[autograd][inplace]") {
  const std::vector<double> xv = {0.3, -0.7, 1.1, 0.2, -1.4, 0.9};
  Tensor x = leaf(xv, {6});
  Tensor y = x * 1.0;
  y.slice(0, 1, 4).tanh_();
  y.slice(0, 3, 6).mul_(y.slice(0, 0, 3).detach() + 1.0);  // overlaps the first write at element 3
  sum(y * y).backward();

  Tensor x2 = leaf(xv, {6});
  Tensor a = cat({x2.slice(0, 0, 1), tanh(x2.slice(0, 1, 4)), x2.slice(0, 4, 6)}, 0);
  Tensor ref = cat({a.slice(0, 0, 3), a.slice(0, 3, 6) * (a.slice(0, 0, 3).detach() + 1.0)}, 0);
  check_close(y, ref);
  sum(ref * ref).backward();
  check_close(x.grad(), x2.grad());
}

TEST_CASE("a channels-last base and a strided view of one channel", "[autograd][inplace]") {
  Generator gen(5);
  const Tensor xv = randn({2, 3, 2, 2}, {.dtype = DType::F64}, &gen), wv = randn({2, 2, 2}, {.dtype = DType::F64}, &gen);
  Tensor x = clone(xv).requires_grad_(), w = clone(wv).requires_grad_();
  Tensor y = (x * 1.5).to(MemoryFormat::ChannelsLast);
  REQUIRE(y.is_contiguous(MemoryFormat::ChannelsLast));
  y.select(1, 1).add_(w * w);
  sum(y * y).backward();

  Tensor x2 = clone(xv).requires_grad_(), w2 = clone(wv).requires_grad_();
  Tensor y2 = x2 * 1.5;
  Tensor ref = cat({y2.slice(1, 0, 1), (y2.select(1, 1) + w2 * w2).unsqueeze(1), y2.slice(1, 2, 3)}, 1);
  check_close(y, ref);
  sum(ref * ref).backward();
  check_close(x.grad(), x2.grad());
  check_close(w.grad(), w2.grad());
}

TEST_CASE("double backward through an in-place write into a view", "[autograd][inplace]") {
  Tensor x = leaf({1.5, -2, 0.5}, {3});
  Tensor buf = zeros({3}, {.dtype = DType::F64});
  buf.slice(0, 0, 2).copy_(x.slice(0, 0, 2) * x.slice(0, 0, 2));  // buf = [x0^2, x1^2, 0]
  const Tensor g = autograd::grad({sum(buf * buf)}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
  CHECK(values(g) == std::vector<double>{4 * 1.5 * 1.5 * 1.5, 4 * -8.0, 0});  // 4 x^3
  sum(g).backward();
  CHECK(values(x.grad()) == std::vector<double>{12 * 2.25, 12 * 4.0, 0});  // 12 x^2
}

TEST_CASE("a detach()ed tensor and its views can be written with history", "[autograd][inplace]") {
  Tensor w = leaf({2, 3}, {2});
  Tensor d = (from_vector<double>({1, 1, 1}, {3}) * 1.0).detach();
  d.slice(0, 1, 3).copy_(w * w);
  sum(d).backward();
  CHECK(values(w.grad()) == std::vector<double>{4, 6});

  Tensor w2 = leaf({2, 3}, {2});
  Tensor e = zeros({2}, {.dtype = DType::F64}).detach();
  e.mul_(w2);
  e.add_(w2);
  sum(e * e).backward();  // e = 0 * w2 + w2: the gradient of sum(w2^2)
  CHECK(values(w2.grad()) == std::vector<double>{4, 6});
}

TEST_CASE("in-place ops on views that cannot be recorded right are refused", "[autograd][inplace]") {
  SECTION("a view of a leaf that requires grad") {
    Tensor w = leaf({1, 2, 3}, {3});
    MG_REQUIRE_ERROR(w.slice(0, 0, 2).mul_(2.0),
                     "mul_scalar_: a view of a leaf tensor that requires grad (the view [2] f64 cpu of [3] f64 cpu) cannot be "
                     "modified in place while grad mode is on");
    NoGradGuard no_grad;
    w.slice(0, 0, 2).mul_(2.0);  // an optimizer-style update is fine
    CHECK(values(w) == std::vector<double>{2, 4, 3});
  }
  SECTION("a view of a leaf that is itself a view (its chain's root needs no grad)") {
    // x = arange(4).view(2, 2).requires_grad_(): PyTorch refuses writes through x's views too.
    Tensor x = arange(0, 4, 1, {.dtype = DType::F64}).view({2, 2}).requires_grad_();
    MG_REQUIRE_ERROR(x.select(0, 0).fill_(7.0), "fill_: a view of a leaf tensor that requires grad");
    MG_REQUIRE_ERROR(x.t().add_(1.0), "add_: a view of a leaf tensor that requires grad");
    CHECK(values(x) == std::vector<double>{0, 1, 2, 3});  // nothing was written
  }
  SECTION("another view of the base, taken before the write, takes the base's new history") {
    // PyTorch 2.15: early = y[1:3] after y[0:2] *= w is [x1 w1, x2]: x.grad [0, 12, 2, 0], w.grad [0, 4].
    Tensor x = leaf({1, 2, 3, 4}, {4}), w = leaf({5, 6}, {2});
    Tensor y = x * 1.0;
    Tensor early = y.slice(0, 1, 3);
    y.slice(0, 0, 2).mul_(w);
    sum(early * 2.0).backward();
    CHECK(values(x.grad()) == std::vector<double>{0, 12, 2, 0});
    CHECK(values(w.grad()) == std::vector<double>{0, 4});
  }
  SECTION("an in-place write into a view that went stale reads its current history") {
    // q and k overlap; after q *= 2, k's old history would say k = x[1:3] while it holds 2 x1 at
    // its first element. k *= w must differentiate the current values: y = [2 x0, 2 x1 w0, x2 w1, x3].
    Tensor x = leaf({1, 2, 3, 4}, {4}), w = leaf({5, 6}, {2});
    Tensor y = x * 1.0;
    Tensor q = y.slice(0, 0, 2), k = y.slice(0, 1, 3);
    q.mul_(2.0);
    k.mul_(w);
    CHECK(values(y) == std::vector<double>{2, 20, 18, 4});
    sum(y).backward();
    CHECK(values(x.grad()) == std::vector<double>{2, 10, 6, 1});
    CHECK(values(w.grad()) == std::vector<double>{4, 3});
  }
  SECTION("a view that needs no gradient, taken before its base got history") {
    Tensor buf = zeros({4}, {.dtype = DType::F64});
    Tensor h = leaf({1, 2}, {2}), w = leaf({3, 4}, {2});
    Tensor tail = buf.slice(0, 1, 3);  // overlaps the write below
    buf.slice(0, 0, 2).copy_(h);
    MG_REQUIRE_ERROR(tail * w, "is a view that does not require grad, but its base was modified in place since the view was "
                               "taken and now has gradient history");
    // Also in an op nothing else makes recorded (PyTorch: h.grad [1, 1, 11] for sum(tail * 10) +
    // sum(h)); as a constant it silently dropped h's gradient through buf.
    MG_REQUIRE_ERROR(tail * 10.0, "is a view that does not require grad, but its base was modified in place");
    // And as the operand of an in-place op on a tensor that needs no gradient: out.add_(tail) read
    // it as a constant, out stayed without history and h's gradient was silently lost.
    Tensor out = zeros({2}, {.dtype = DType::F64});
    MG_REQUIRE_ERROR(out.add_(tail), "add_: input 1 ([2] f64 cpu) is a view that does not require grad, but its base");
    MG_REQUIRE_ERROR(out.copy_(tail), "is a view that does not require grad, but its base");
    MG_REQUIRE_ERROR(out.mul_(tail), "is a view that does not require grad, but its base");
    CHECK(values(out) == std::vector<double>{0, 0});  // refused before writing
    {
      NoGradGuard no_grad;  // outside autograd the values are simply read
      out.add_(tail);
      CHECK(values(out) == std::vector<double>{2, 0});
    }
    sum(buf.slice(0, 1, 3) * w).backward();
    CHECK(values(h.grad()) == std::vector<double>{0, 3});
  }
  SECTION("a view taken under NoGradGuard of a tensor that requires grad, written with grad mode on") {
    // It would change the base's values behind its history: y = 3x, then y[0] doubled unrecorded,
    // would give d sum(y * c) / dx = 3c where the values are 6 x[0].
    Tensor x = leaf({1, 2, 3}, {3});
    Tensor y = x * 3.0;
    Tensor v, wv;
    {
      NoGradGuard no_grad;
      v = y.slice(0, 0, 1);
      wv = x.slice(0, 1, 2);
    }
    MG_REQUIRE_ERROR(v.mul_(2.0), "mul_scalar_: [1] f64 cpu is a view that does not require grad of [3] f64 cpu, which does; "
                                  "writing into it in place while grad mode is on would change the base's values");
    MG_REQUIRE_ERROR(wv.zero_(), "is a view that does not require grad of [3] f64 cpu, which does");
    CHECK(values(x) == std::vector<double>{1, 2, 3});
    NoGradGuard no_grad;
    wv.zero_();  // an update outside autograd, as an optimizer's
    CHECK(values(x) == std::vector<double>{1, 0, 3});
  }
  SECTION("nothing is recorded under NoGradGuard") {
    Tensor buf = zeros({3}, {.dtype = DType::F64});
    Tensor h = leaf({1, 2}, {2});
    NoGradGuard no_grad;
    buf.slice(0, 1, 3).copy_(h);
    CHECK(!buf.requires_grad());
    CHECK(values(buf) == std::vector<double>{0, 1, 2});
  }
}

namespace {
// The identity as a user-defined function: its inputs become graph edges outside the dispatcher.
struct Identity : Function<Identity> {
  static constexpr const char* name = "identity";
  static constexpr CastPolicy policy = CastPolicy::Keep;
  static Tensors forward(FunctionCtx&, const Tensors& in) { return {in[0].clone()}; }
  static Tensors backward(FunctionCtx&, const Tensors& g) { return {g[0]}; }
};
}  // namespace

TEST_CASE("a stale view used as a root, a grad() input, a hooked tensor or a function input follows its base's history",
          "[autograd][inplace]") {
  // y = 2x, v = y[0:2], then y *= 3: v holds 6 x[0:2], and every entry point must see that
  // (PyTorch regenerates a stale view's grad_fn wherever it is read): d sum(v) / dx = [6, 6, 0, 0].
  const std::vector<double> want{6, 6, 0, 0};
  Tensor x = leaf({1, 2, 3, 4}, {4});
  auto stale_view = [&] {
    Tensor y = x * 2.0;
    Tensor v = y.slice(0, 0, 2);
    y.mul_(3.0);
    return v;
  };
  SECTION("backward from the view") {
    stale_view().backward(ones({2}, {.dtype = DType::F64}));
    CHECK(values(x.grad()) == want);
  }
  SECTION("autograd::grad of the view") {
    const Tensor g = autograd::grad({stale_view()}, {x}, {ones({2}, {.dtype = DType::F64})})[0];
    CHECK(values(g) == want);
  }
  SECTION("grad() with the view as an input") {
    Tensor v = stale_view();
    const Tensor g = autograd::grad({sum(v * 5.0)}, {v})[0];
    CHECK(values(g) == std::vector<double>{5, 5});
  }
  SECTION("a hook and a retained gradient on the view") {
    Tensor v = stale_view();
    int calls = 0;
    v.register_hook([&](const Tensor& g) {
      ++calls;
      CHECK(values(g) == std::vector<double>{1, 1});
      return Tensor();
    });
    v.retain_grad();
    sum(v).backward();
    CHECK(calls == 1);
    CHECK(values(v.grad()) == std::vector<double>{1, 1});
    CHECK(values(x.grad()) == want);
  }
  SECTION("a user-defined function's input") {
    sum(Identity::apply({stale_view()})[0]).backward();
    CHECK(values(x.grad()) == want);
  }
  SECTION("a reentrant checkpoint's input") {
    const Tensors out = checkpoint([](const Tensors& in) { return Tensors{in[0] * 1.0}; }, {stale_view()},
                                   {.reentrant = true});
    sum(out[0]).backward();
    CHECK(values(x.grad()) == want);
  }
  SECTION("a view that needs no gradient, of a base that gained history, as a function input") {
    Tensor buf = zeros({4}, {.dtype = DType::F64});
    Tensor tail = buf.slice(0, 1, 3);
    buf.slice(0, 0, 2).copy_(x.slice(0, 0, 2) * 1.0);
    MG_REQUIRE_ERROR(Identity::apply({tail, x}), "identity: input 0 ([2] f64 cpu) is a view that does not require grad, "
                                                 "but its base was modified in place");
  }
}

TEST_CASE("two gradients of one output are summed without history unless create_graph asks", "[autograd]") {
  // The roots are the leaf itself, so the sum reaches .grad as it is.
  Tensor w = leaf({1, 2}, {2});
  Tensor g1 = leaf({1, 1}, {2}), g2 = from_vector<double>({2, 2}, {2});
  autograd::backward({w, w}, {g1, g2});
  CHECK(values(w.grad()) == std::vector<double>{3, 3});
  CHECK(w.grad().grad_fn() == nullptr);  // PyTorch: .grad never has a history without create_graph
  Tensor g;
  {
    NoGradGuard no_grad;  // create_graph records the sum even when the caller's grad mode is off
    g = autograd::grad({w, w}, {w}, {g1, g2}, true, /*create_graph=*/true)[0];
  }
  REQUIRE(g.requires_grad());
  sum(g).backward();
  CHECK(values(g1.grad()) == std::vector<double>{1, 1});
}

TEST_CASE("a graph whose node saved a view of a base written later is freed (no view -> base cycle)", "[autograd][inplace]") {
  // buf[1] = prev * w with prev = buf[0]: the multiply saves the view prev, and the write gives
  // buf a history that leads back to that multiply. The backward is refused (prev was modified),
  // as in PyTorch; the graph must still be freed when dropped.
  std::weak_ptr<autograd::Node> watch;
  {
    Tensor h = leaf({1, 2}, {2}), w = leaf({3, 4}, {2});
    Tensor buf = zeros({2, 2}, {.dtype = DType::F64});
    buf.select(0, 0).copy_(h);
    const Tensor prev = buf.select(0, 0);
    buf.select(0, 1).copy_(prev * w);
    watch = buf.grad_fn();
    REQUIRE(!watch.expired());
    CHECK_THROWS_WITH(sum(buf).backward(), Catch::Contains("modified by an in-place operation"));
  }
  CHECK(watch.expired());
}

TEST_CASE("a view made with grad mode off refuses a recorded in-place write, as PyTorch's", "[autograd][inplace]") {
  // PyTorch 2.15: "A view was created in no_grad mode and is being modified inplace with grad mode
  // enabled" for each of these. The write went through, rebasing the base's history onto the
  // operand, though the view was taken as untracked.
  const Tensor w = randn({2}).requires_grad_();
  Tensor b2 = randn({4}).requires_grad_() * 1.0;
  Tensor plain = zeros({4});  // needs no gradient itself
  Tensor v, vp, vv;
  {
    NoGradGuard no_grad;
    v = b2.narrow(0, 0, 2);
    vp = plain.narrow(0, 0, 2);
  }
  vv = v.narrow(0, 0, 1);  // a view of such a view, taken with grad mode on, inherits it
  MG_REQUIRE_ERROR(v.add_(w), "add_: [2] f32 cpu is a view made while grad mode was off");
  MG_REQUIRE_ERROR(vp.mul_(w), "is a view made while grad mode was off");
  MG_REQUIRE_ERROR(vv.add_(w.narrow(0, 0, 1)), "is a view made while grad mode was off");
  CHECK_FALSE(plain.requires_grad());  // nothing changed
  // Both under the guard (untracked) or both outside (tracked) work.
  {
    NoGradGuard no_grad;
    vp.add_(1.0);
  }
  CHECK(values(plain) == std::vector<double>{1, 1, 0, 0});
  Tensor tracked = plain.narrow(0, 0, 2);
  tracked.mul_(w);
  sum(plain).backward();
  CHECK(values(w.grad()) == std::vector<double>{1, 1});
}
