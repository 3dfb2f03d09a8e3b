// Saved-tensor hooks (autograd/saved_tensor_hooks.h): pack sees every saved tensor but a leaf that
// requires grad, without history; the gradients (also of a double backward) equal the plain
// run's; guards nest per thread; unpack must give back the saved shape, dtype and device; the
// in-place check still holds while the packed tensor lives; what pack returned is freed with the
// graph; SaveOnCpu keeps CPU tensors as they are and brings CUDA ones back.
#include <catch2/catch.hpp>

#include <memory>
#include <thread>
#include <vector>

#include "autograd/engine.h"
#include "autograd/saved_tensor_hooks.h"
#include "core/factory.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using namespace mg::autograd;
using mg::test::values;

namespace {

// loss = sum(tanh(x * w) * x); x has history (it is h = x0 * 2), w is a leaf parameter.
struct Grads {
  std::vector<double> loss, x0, w;
};
Grads run(const Tensor& x0_data, const Tensor& w_data, bool create_graph = false) {
  const Tensor x0 = x0_data.clone().requires_grad_();
  const Tensor w = w_data.clone().requires_grad_();
  const Tensor h = x0 * 2.0;
  const Tensor loss = sum(tanh(h * w) * h);
  if (create_graph) {
    const Tensor g = autograd::grad({loss}, {x0}, {}, std::nullopt, true)[0];
    sum(g * g).backward();
  } else {
    loss.backward();
  }
  return {values(loss), values(x0.grad()), values(w.grad())};
}

}  // namespace

TEST_CASE("saved-tensor hooks: pack and unpack every saved non-parameter, same gradients", "[autograd][hooks]") {
  const Tensor x0 = randn({3, 4}), w = randn({3, 4});
  const Grads plain = run(x0, w);
  const Grads plain2 = run(x0, w, true);
  int packs = 0, unpacks = 0;
  bool saw_history = false;
  {
    SavedTensorHooks hooks(
        [&](const Tensor& t) -> std::any {
          ++packs;
          saw_history = saw_history || t.requires_grad() || t.grad_fn() != nullptr;
          return t.clone();  // a copy: the graph no longer needs the original
        },
        [&](const std::any& p) {
          ++unpacks;
          return std::any_cast<Tensor>(p);
        });
    REQUIRE(current_saved_tensor_hooks() != nullptr);
    const Grads hooked = run(x0, w);
    CHECK(hooked.x0 == plain.x0);
    CHECK(hooked.w == plain.w);
    // x0 * 2 saves nothing (mul_scalar: the scalar is an attribute); mul(h, w) saves h (packed)
    // and w (kept itself); tanh saves its output; the second mul saves tanh's output and h: 4 packs.
    CHECK(packs == 4);
    CHECK(unpacks == 4);
    CHECK_FALSE(saw_history);
    const Grads hooked2 = run(x0, w, true);
    CHECK(hooked2.x0 == plain2.x0);
    CHECK(hooked2.w == plain2.w);
  }
  CHECK(current_saved_tensor_hooks() == nullptr);
}

TEST_CASE("saved-tensor hooks: guards nest, per thread", "[autograd][hooks]") {
  auto identity_pack = [](const Tensor& t) -> std::any { return t; };
  auto identity_unpack = [](const std::any& p) { return std::any_cast<Tensor>(p); };
  SavedTensorHooks outer(identity_pack, identity_unpack);
  const auto outer_pair = current_saved_tensor_hooks();
  {
    SavedTensorHooks inner(identity_pack, identity_unpack);
    CHECK(current_saved_tensor_hooks() != outer_pair);
    {
      NoSavedTensorHooks none;
      CHECK(current_saved_tensor_hooks() == nullptr);
    }
    CHECK(current_saved_tensor_hooks() != outer_pair);
  }
  CHECK(current_saved_tensor_hooks() == outer_pair);
  bool other_thread_has_none = false;
  std::thread([&] { other_thread_has_none = current_saved_tensor_hooks() == nullptr; }).join();
  CHECK(other_thread_has_none);
  MG_REQUIRE_ERROR(SavedTensorHooks(nullptr, identity_unpack), "SavedTensorHooks: both a pack and an unpack function are needed");
}

TEST_CASE("saved-tensor hooks: unpack must give back the saved tensor, and in-place writes are caught", "[autograd][hooks][errors]") {
  const Tensor a = randn({3}).requires_grad_();
  Tensor y;
  {
    SavedTensorHooks hooks([](const Tensor& t) -> std::any { return t; },
                           [](const std::any& p) { return std::any_cast<Tensor>(p).to(DType::F64); });
    y = tanh(a * 2.0);
  }
  MG_REQUIRE_ERROR(sum(y).backward(), "tanh_backward: the saved-tensor unpack hook returned [3] f64 cpu for a saved [3] f32 cpu");
  Tensor h = a * 2.0;
  Tensor z;
  {
    SavedTensorHooks hooks([](const Tensor& t) -> std::any { return t.clone(); },
                           [](const std::any& p) { return std::any_cast<Tensor>(p); });
    z = h * h;
  }
  h.add_(1.0);  // h lives: its write is seen although the graph holds a copy
  MG_REQUIRE_ERROR(sum(z).backward(), "mul_backward: a tensor saved for backward ([3] f32 cpu) was modified by an in-place "
                                      "operation (version 0 -> 1)");
}

TEST_CASE("saved-tensor hooks: what pack returned is freed with the graph", "[autograd][hooks]") {
  std::vector<std::weak_ptr<int>> tokens;
  const Tensor a = randn({3}).requires_grad_();
  {
    SavedTensorHooks hooks(
        [&](const Tensor& t) -> std::any {
          auto token = std::make_shared<int>(0);
          tokens.push_back(token);
          return std::make_pair(token, t);
        },
        [](const std::any& p) { return std::any_cast<const std::pair<std::shared_ptr<int>, Tensor>&>(p).second; });
    const Tensor b = randn({3});
    const Tensor y = sum(tanh(a * b));
    REQUIRE(tokens.size() == 2);  // b and tanh's output (the parameter a is kept itself)
    CHECK_FALSE(tokens[0].expired());
    CHECK_FALSE(tokens[1].expired());
    y.backward();
    CHECK(tokens[0].expired());  // released after the backward without retain_graph
    CHECK(tokens[1].expired());
  }
}

TEST_CASE("saved-tensor hooks: docs/autograd.md's bf16 compression of saved activations", "[autograd][hooks]") {
  const Tensor x0 = randn({3, 4}), w = randn({3, 4});
  const Grads plain = run(x0, w);
  using Packed = std::pair<Tensor, DType>;
  SavedTensorHooks hooks(
      [](const Tensor& t) -> std::any { return Packed{t.to(DType::BF16), t.dtype()}; },
      [](const std::any& p) {
        const auto& [c, dtype] = std::any_cast<const Packed&>(p);
        return c.to(dtype);
      });
  const Grads lossy = run(x0, w);
  CHECK(lossy.x0 != plain.x0);  // the saved values were rounded to bf16
  for (std::size_t i = 0; i < plain.x0.size(); ++i) CHECK(lossy.x0[i] == Approx(plain.x0[i]).epsilon(0.02).margin(0.02));
  for (std::size_t i = 0; i < plain.w.size(); ++i) CHECK(lossy.w[i] == Approx(plain.w[i]).epsilon(0.02).margin(0.02));
}

TEST_CASE("SaveOnCpu: CPU tensors are kept as they are", "[autograd][hooks]") {
  const Tensor x0 = randn({3, 4}), w = randn({3, 4});
  const Grads plain = run(x0, w);
  SaveOnCpu offload;
  const Grads hooked = run(x0, w);
  CHECK(hooked.x0 == plain.x0);
  CHECK(hooked.w == plain.w);
}

TEST_CASE("SaveOnCpu on CUDA: activations wait in host memory, gradients unchanged", "[autograd][hooks][cuda][gpu]") {
  const Device gpu = Device::cuda(0);
  const Tensor x0 = randn({64, 32}).to(gpu), w = randn({64, 32}).to(gpu);
  const Grads plain = run(x0, w);
  for (const bool pin : {false, true}) {
    SaveOnCpu offload(pin);
    const Grads hooked = run(x0, w);
    CHECK(hooked.x0 == plain.x0);
    CHECK(hooked.w == plain.w);
  }
}
