// User-defined functions: forward/backward by the user, saved-tensor checks, double backward,
// and the declared cast policy reaching the autocast hook.
#include <catch2/catch.hpp>

#include "autograd/engine.h"
#include "core/autocast_state.h"
#include "ops/custom_function.h"
#include "ops/dispatcher.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

struct Cube : Function<Cube> {
  static constexpr const char* name = "cube";
  static constexpr CastPolicy policy = CastPolicy::Fp32;
  static Tensors forward(FunctionCtx& ctx, const Tensors& in) {  // in[0]: any shape
    ctx.save_for_backward({in[0]});
    return {in[0] * in[0] * in[0]};
  }
  // d x^3 = 3 x^2, written with ops so it can be differentiated again
  static Tensors backward(FunctionCtx& ctx, const Tensors& g) {
    const Tensor x = ctx.saved()[0];
    return {g[0] * 3.0 * x * x};
  }
};

// Two inputs, two outputs: (a + b, a * b); only the first output gets used in some tests.
struct SumProd : Function<SumProd> {
  static constexpr CastPolicy policy = CastPolicy::Lower;
  static Tensors forward(FunctionCtx& ctx, const Tensors& in) {
    ctx.save_for_backward({in[0], in[1]});
    return {in[0] + in[1], in[0] * in[1]};
  }
  // d(a+b) = (1, 1); d(ab) = (b, a)
  static Tensors backward(FunctionCtx& ctx, const Tensors& g) {
    const Tensors s = ctx.saved();
    return {g[0] + g[1] * s[1], g[0] + g[1] * s[0]};
  }
};

// A backward that returns a gradient of the wrong shape ([2] for a [3] input).
struct WrongShape : Function<WrongShape> {
  static constexpr const char* name = "wrong_shape";
  static constexpr CastPolicy policy = CastPolicy::Keep;
  static Tensors forward(FunctionCtx&, const Tensors& in) { return {in[0] * 2.0}; }
  static Tensors backward(FunctionCtx&, const Tensors& g) { return {g[0].slice(0, 0, 2)}; }
};

// Records the policy it was called with and casts lower -> f16 (a stand-in for amp's hook).
CastPolicy g_seen_policy = CastPolicy::Keep;
std::string g_seen_op;
bool g_in_hook = false;
void recording_hook(CastPolicy policy, const char* op, Tensors& inputs, DeviceType) {
  if (g_in_hook) return;  // the casts below dispatch to_dtype, which calls the hook again
  g_seen_policy = policy;
  g_seen_op = op;
  g_in_hook = true;
  struct Reset {
    ~Reset() { g_in_hook = false; }
  } reset;
  if (policy != CastPolicy::Lower) return;
  for (Tensor& t : inputs) {
    if (is_floating(t.dtype())) t = to(t, DType::F16);
  }
}

}  // namespace

TEST_CASE("custom function forward and backward", "[autograd][custom]") {
  Tensor x = from_vector<double>({1, -2, 3}).requires_grad_();
  Tensor y = Cube::apply({x})[0];
  REQUIRE(values(y) == std::vector<double>{1, -8, 27});
  REQUIRE(y.grad_fn()->name() == "cube_backward");
  y.sum().backward();
  REQUIRE(values(x.grad()) == std::vector<double>{3, 12, 27});
}

TEST_CASE("custom function double backward", "[autograd][custom]") {
  // d2/dx2 x^3 = 6x
  Tensor x = from_vector<double>({2.0}).requires_grad_();
  Tensor g = autograd::grad({Cube::apply({x})[0].sum()}, {x}, {}, std::nullopt, true)[0];
  Tensor gg = autograd::grad({g.sum()}, {x})[0];
  REQUIRE(values(gg)[0] == 12.0);
}

TEST_CASE("custom function with two outputs, one unused", "[autograd][custom]") {
  Tensor a = from_vector<double>({2.0}).requires_grad_();
  Tensor b = from_vector<double>({5.0}).requires_grad_();
  Tensors out = SumProd::apply({a, b});
  out[1].sum().backward();  // only the product: d(ab)/da = b, d(ab)/db = a
  REQUIRE(values(a.grad())[0] == 5.0);
  REQUIRE(values(b.grad())[0] == 2.0);
}

TEST_CASE("custom function saved tensors are version checked", "[autograd][custom]") {
  Tensor x = from_vector<double>({1.0}).requires_grad_();
  Tensor h = x * 1.0;
  Tensor y = Cube::apply({h})[0];
  {
    NoGradGuard no_grad;
    h.add_(1.0);
  }
  MG_REQUIRE_ERROR(y.sum().backward(), "cube_backward: a tensor saved for backward ([1] f64 cpu) was modified");
}

TEST_CASE("custom function declares its cast policy to the autocast hook", "[autograd][custom][amp]") {
  set_autocast_hook(recording_hook);
  AutocastState& state = autocast_state();
  state.enabled = true;
  Tensor a = from_vector<float>({1.5f}).requires_grad_();
  Tensor b = from_vector<float>({2.0f});
  Tensors out = SumProd::apply({a, b});
  state.enabled = false;
  set_autocast_hook(nullptr);
  REQUIRE(g_seen_policy == CastPolicy::Lower);
  REQUIRE(g_seen_op == "custom_function");
  REQUIRE(out[0].dtype() == DType::F16);
  // the gradient flows back through the cast: an f32 leaf gets an f32 gradient
  out[0].sum().backward();
  REQUIRE(a.grad().dtype() == DType::F32);
  REQUIRE(values(a.grad())[0] == 1.0);
}

TEST_CASE("the dispatcher passes each op's policy to the autocast hook", "[autograd][amp]") {
  set_autocast_hook(recording_hook);
  autocast_state().enabled = true;
  const Tensor x = ones({2});
  (void)exp(x);
  const CastPolicy exp_policy = g_seen_policy;
  const std::string exp_name = g_seen_op;
  autocast_state().enabled = false;
  g_seen_op.clear();
  (void)exp(x);  // disabled: the hook is not called
  set_autocast_hook(nullptr);
  REQUIRE(exp_policy == CastPolicy::Fp32);
  REQUIRE(exp_name == "exp");
  REQUIRE(g_seen_op.empty());
}

// PyTorch: "Function XBackward returned an invalid gradient at index 0 - got [2] but expected
// shape compatible with [3]"; the error names the function, the input and both shapes.
TEST_CASE("custom function: a backward gradient of the wrong shape is a named error", "[autograd][custom]") {
  Tensor x = from_vector<double>({1, 2, 3}).requires_grad_();
  Tensor y = WrongShape::apply({x})[0];
  MG_REQUIRE_ERROR(y.sum().backward(),
                   "wrong_shape: backward returned an invalid gradient for input 0: got [2] f64 cpu but expected the "
                   "input's shape [3] (or one that sums to it)");
}
