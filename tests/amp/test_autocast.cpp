// amp::Autocast: regions nest and restore (also on exceptions), disabled sub-regions, backward in
// the forward's dtypes with f32 gradients for f32 weights, the weight cast cache (bounded over
// 1,000 iterations, never stale after an in-place update, emptied at the region's end), banned
// ops, custom-function policies, and conflicting policy overrides.
#include <catch2/catch.hpp>

#include <cmath>
#include <stdexcept>

#include "amp/autocast.h"
#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "nn/linear.h"
#include "ops/custom_function.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

TEST_CASE("Autocast regions nest, disable and restore, also when an exception unwinds", "[amp]") {
  REQUIRE(!amp::is_autocast_enabled());
  const Tensor a = ones({2, 2}), b = ones({2, 2});
  {
    amp::Autocast outer({.dtype = DType::BF16});
    CHECK(amp::is_autocast_enabled());
    CHECK(matmul(a, b).dtype() == DType::BF16);
    {
      amp::Autocast off({.enabled = false});
      CHECK(!amp::is_autocast_enabled());
      CHECK(matmul(a, b).dtype() == DType::F32);
      {
        amp::Autocast inner({.dtype = DType::F16});
        CHECK(matmul(a, b).dtype() == DType::F16);
      }
      CHECK(matmul(a, b).dtype() == DType::F32);
    }
    CHECK(amp::autocast_dtype() == DType::BF16);
    CHECK(matmul(a, b).dtype() == DType::BF16);
    try {
      amp::Autocast inner({.dtype = DType::F16});
      CHECK(matmul(a, b).dtype() == DType::F16);
      throw std::runtime_error("boom");
    } catch (const std::runtime_error&) {
    }
    CHECK(amp::autocast_dtype() == DType::BF16);
    CHECK(autocast_state().depth == 1);
  }
  CHECK(!amp::is_autocast_enabled());
  CHECK(autocast_state().depth == 0);
  CHECK(matmul(a, b).dtype() == DType::F32);
  MG_REQUIRE_ERROR(amp::Autocast({.dtype = DType::F32}), "Autocast: dtype must be f16 or bf16, got f32");
}

TEST_CASE("backward runs in the forward's dtypes - an f32 weight used in an f16 op gets an f32 gradient", "[amp]") {
  manual_seed(1);
  nn::Linear fc({.in = 8, .out = 4});
  const Tensor x = randn({16, 8});
  const Tensor target = randint(0, 4, {16});
  Tensor loss;
  Tensor h;
  {
    amp::Autocast autocast({.dtype = DType::F16});
    h = fc(x);                                              // lower: f16
    loss = cross_entropy(h, target);                        // fp32
    CHECK(h.dtype() == DType::F16);
    CHECK(loss.dtype() == DType::F32);
  }
  loss.backward();
  CHECK(fc.weight.grad().dtype() == DType::F32);
  CHECK(fc.bias.grad().dtype() == DType::F32);
  // The gradient equals the f32 computation to f16 accuracy.
  nn::Linear ref({.in = 8, .out = 4});
  {
    NoGradGuard g;
    ref.weight.copy_(fc.weight);
    ref.bias.copy_(fc.bias);
  }
  const Tensor loss32 = cross_entropy(ref(x), target);
  loss32.backward();
  const auto g16 = values(fc.weight.grad()), g32 = values(ref.weight.grad());
  for (std::size_t i = 0; i < g16.size(); ++i) CHECK(std::abs(g16[i] - g32[i]) < 2e-3);
  // Backward inside a region is not re-cast: the engine turns autocast off while it runs.
  fc.zero_grad();
  {
    amp::Autocast autocast({.dtype = DType::BF16});
    Tensor l2 = sum(fc(x).to(DType::F32));
    l2.backward();
  }
  CHECK(fc.weight.grad().dtype() == DType::F32);
}

TEST_CASE("the weight cast cache is bounded, never stale, and emptied at the region's end", "[amp]") {
  manual_seed(2);
  nn::Linear fc({.in = 4, .out = 4});
  const Tensor x = randn({2, 4});
  {
    amp::Autocast autocast({.dtype = DType::F16});
    for (int it = 0; it < 1000; ++it) {
      Tensor y = fc(x);                 // casts weight and bias (2 cache entries)
      sum(y.to(DType::F32)).backward();
      NoGradGuard g;
      fc.weight.sub_(fc.weight.grad(), 1e-3);  // in-place update: a new version
      fc.bias.sub_(fc.bias.grad(), 1e-3);
      fc.zero_grad();
      REQUIRE(amp::weight_cache_size() <= 2);
    }
    // After an update the next forward sees the new weight, not the cached cast of the old one.
    {
      NoGradGuard g;
      fc.weight.fill_(0.5);
      fc.bias.zero_();
    }
    const auto y = values(fc(ones({1, 4})));
    for (double v : y) CHECK(v == 2.0);
    // The cast is reused while the weight is unchanged (same tensor returned).
    CHECK(amp::weight_cache_size() == 2);
  }
  CHECK(amp::weight_cache_size() == 0);
  // cache_enabled = false caches nothing.
  {
    amp::Autocast autocast({.dtype = DType::F16, .cache_enabled = false});
    (void)fc(x);
    CHECK(amp::weight_cache_size() == 0);
    // A plain region inside inherits it, as PyTorch's cache_enabled=None (it turned caching on).
    amp::Autocast inner;
    (void)fc(x);
    CHECK(amp::weight_cache_size() == 0);
    amp::Autocast on({.cache_enabled = true});  // asked for explicitly
    (void)fc(x);
    CHECK(amp::weight_cache_size() == 2);
  }
  // A cast made under NoGradGuard is not served to a forward that records gradients.
  {
    amp::Autocast autocast({.dtype = DType::F16});
    {
      NoGradGuard g;
      (void)fc(x);
    }
    Tensor y = fc(x);
    sum(y.to(DType::F32)).backward();
    CHECK(fc.weight.grad().defined());
  }
}

TEST_CASE("banned ops raise an error with advice under f16 and run in f32 under bf16", "[amp]") {
  const Tensor p = full({4}, 0.5), t = ones({4});
  {
    amp::Autocast autocast({.dtype = DType::F16});
    MG_REQUIRE_ERROR(binary_cross_entropy(p, t), "binary_cross_entropy: banned under f16 autocast");
    MG_REQUIRE_ERROR(binary_cross_entropy(p, t), "hint: use binary_cross_entropy_with_logits");
    CHECK(binary_cross_entropy_with_logits(p, t).dtype() == DType::F32);
  }
  {
    amp::Autocast autocast({.dtype = DType::BF16});
    CHECK(binary_cross_entropy(p.to(DType::BF16), t).dtype() == DType::F32);
  }
}

namespace {
// A user-defined function declaring the lower policy (PyTorch's custom_fwd(cast_inputs=f16)).
struct Square : Function<Square> {
  static constexpr CastPolicy policy = CastPolicy::Lower;
  static Tensors forward(FunctionCtx& ctx, const Tensors& in) {  // in[0]: any shape
    ctx.save_for_backward({in[0]});
    // Autocast is off inside: this exp stays in the input dtype instead of going to f32.
    return {mul(in[0], in[0])};
  }
  static Tensors backward(FunctionCtx& ctx, const Tensors& g) {  // d x^2 = 2x
    return {mul(g[0], ctx.saved()[0]) * 2.0};
  }
};
}  // namespace

TEST_CASE("user-defined functions get their declared policy - overrides conflict loudly", "[amp]") {
  {
    amp::Autocast autocast({.dtype = DType::BF16});
    Tensor x = ones({3}, {.requires_grad = true});
    Tensor y = Square::apply({x})[0];
    CHECK(y.dtype() == DType::BF16);
    sum(y.to(DType::F32)).backward();
    CHECK(x.grad().dtype() == DType::F32);
    CHECK(values(x.grad()) == std::vector<double>{2, 2, 2});
  }
  reset_policies();
  set_policy("exp", CastPolicy::Lower);
  set_policy("exp", CastPolicy::Lower);  // the same registration again is fine
  {
    amp::Autocast autocast({.dtype = DType::F16});
    CHECK(exp(ones({2})).dtype() == DType::F16);
  }
  MG_REQUIRE_ERROR(set_policy("exp", CastPolicy::Fp32),
                   "set_policy: conflicting registration for exp: it is already overridden to lower, now asked for fp32");
  reset_policy("exp");
  set_policy("exp", CastPolicy::Fp32);
  reset_policies();
  {
    amp::Autocast autocast({.dtype = DType::F16});
    CHECK(exp(ones({2}, {.dtype = DType::F16})).dtype() == DType::F32);
  }
}

TEST_CASE("set_policy refuses casts, views, backward ops and batch_norm, and a user's ban names itself", "[amp]") {
  // to_dtype at fp32 recursed without end (the hook's cast dispatches to_dtype); a lowered view
  // would be a view of a cast copy, so writes through it would not reach its base.
  // batch_norm updates its running statistics in place: under a lowered policy a cast copy of them
  // was updated, and the module's statistics silently stayed 0 and 1.
  for (const char* op : {"to_dtype", "to_device", "copy", "view", "permute", "expand", "slice", "softmax_backward",
                         "batch_norm"}) {
    INFO(op);
    MG_REQUIRE_ERROR(set_policy(op, CastPolicy::Lower),
                     "is a cast, a view, a backward op or an op that updates its inputs in place, whose policy cannot change");
  }
  set_policy("view", CastPolicy::Keep);  // its own default is accepted
  reset_policies();
  set_policy("exp", CastPolicy::Banned);
  {
    amp::Autocast autocast({.dtype = DType::F16});
    MG_REQUIRE_ERROR(exp(ones({2})), "exp: banned under f16 autocast (set_policy made it so)");
    MG_REQUIRE_ERROR(binary_cross_entropy(full({2}, 0.5), full({2}, 1.0)),
                     "hint: use binary_cross_entropy_with_logits");
  }
  reset_policies();
}

TEST_CASE("a region without a dtype inherits the enclosing one, as PyTorch's autocast", "[amp]") {
  const Tensor a = ones({2, 2}), b = ones({2, 2});
  {
    amp::Autocast outer({.dtype = DType::F16});
    {
      amp::Autocast inner;  // library code opening a plain region inside an f16 one
      CHECK(matmul(a, b).dtype() == DType::F16);
    }
    {
      amp::Autocast off({.enabled = false});
      amp::Autocast on;  // the re-enable pattern
      CHECK(matmul(a, b).dtype() == DType::F16);
    }
  }
  // At top level the device's default: bf16 on the CPU.
  amp::Autocast top;
  CHECK(matmul(a, b).dtype() == DType::BF16);
}

TEST_CASE("casts of weights that were destroyed do not pile up in the cache", "[amp]") {
  manual_seed(3);
  amp::Autocast autocast({.dtype = DType::BF16});
  const Tensor w = randn({4, 4}).requires_grad_();
  for (int it = 0; it < 1000; ++it) {
    const Tensor x = randn({2, 4}).requires_grad_();  // a fresh leaf per step (saliency, adversarial inputs)
    sum(matmul(x, w).to(DType::F32)).backward();
  }
  // w's entry plus at most the entries made since the last sweep (it runs when the cache doubles).
  CHECK(amp::weight_cache_size() < 130);
  amp::clear_weight_cache();
  CHECK(amp::weight_cache_size() == 0);
}

TEST_CASE("scalar / tensor runs in f32 under autocast, as PyTorch's __rdiv__", "[amp]") {
  const Tensor x = full({2}, 1e-5, {.dtype = DType::F16});
  {
    amp::Autocast autocast({.dtype = DType::F16});
    const Tensor y = 1.0 / x;
    CHECK(y.dtype() == DType::F32);
    CHECK(std::isfinite(values(y)[0]));
    CHECK(values(y)[0] == values(reciprocal(x))[0]);  // the same as the fp32-policy reciprocal
  }
  // Outside autocast it stays in x's dtype (and overflows, as PyTorch's).
  CHECK((1.0 / x).dtype() == DType::F16);
  CHECK(std::isinf(values(1.0 / x)[0]));
}
