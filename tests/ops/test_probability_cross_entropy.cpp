// cross_entropy with class-probability targets (a floating target of the input's shape: soft
// labels for mixup and distillation) against PyTorch 2.15 in f64
// (tests/data/reference/torch_probability_ce.json, written by
// tools/reference/gen_torch_probability_ce.py): the loss and the gradients of its sum with respect
// to the input and to the target, to 1e-12; then the mixed-precision contract (f16/bf16 computed
// in f32, returned in the input's dtype, f32 under autocast), nn::CrossEntropyLoss, the bad
// inputs, and CUDA against the CPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "core/factory.h"
#include "nn/loss.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "test_paths.h"
#include "test_util.h"

using namespace mg;

namespace {

Tensor tensor_of(const nlohmann::json& c, const std::string& key, const Shape& shape) {
  return reshape(from_vector<double>(c[key].get<std::vector<double>>()), shape);
}

std::vector<double> flat(const Tensor& t) {
  const Tensor c = contiguous(to(t.detach().to(Device::cpu()), DType::F64));
  return std::vector<double>(c.data<double>(), c.data<double>() + c.numel());
}

Reduction reduction_of(const std::string& name) {
  if (name == "none") return Reduction::None;
  if (name == "sum") return Reduction::Sum;
  return Reduction::Mean;
}

void require_close(const std::vector<double>& got, const std::vector<double>& want, double rel) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(rel).margin(1e-14));
}

}  // namespace

TEST_CASE("cross_entropy with class probabilities equals PyTorch's, gradients of input and target (f64)",
          "[ops][loss]") {
  std::ifstream f(test::source_dir() + "/tests/data/reference/torch_probability_ce.json");
  REQUIRE(f.good());
  const nlohmann::json ref = nlohmann::json::parse(f);
  int checked = 0;
  for (const auto& [name, c] : ref["cases"].items()) {
    INFO(name);
    const Shape shape = c["input_shape"].get<Shape>();
    const Tensor input = tensor_of(c, "input", shape).requires_grad_();
    const Tensor target = tensor_of(c, "target", shape).requires_grad_();
    const Tensor weight = c.contains("weight") ? from_vector<double>(c["weight"].get<std::vector<double>>()) : Tensor();
    const Tensor loss = cross_entropy(input, target, reduction_of(c["reduction"]), -100,
                                      c["label_smoothing"].get<double>(), weight);
    CHECK(loss.shape() == c["loss_shape"].get<Shape>());
    CHECK(loss.dtype() == DType::F64);
    const Tensors grads = autograd::grad({sum(loss)}, {input, target});
    require_close(flat(loss), c["loss"].get<std::vector<double>>(), 1e-12);
    require_close(flat(grads[0]), c["grad_input"].get<std::vector<double>>(), 1e-11);
    require_close(flat(grads[1]), c["grad_target"].get<std::vector<double>>(), 1e-11);
    ++checked;
  }
  CHECK(checked == 13);
}

TEST_CASE("cross_entropy with class probabilities: one-hot targets give the index loss, f16/bf16 and autocast keep "
          "the contract",
          "[ops][loss]") {
  manual_seed(3);
  const Tensor logits = randn({7, 4}) * 3.0;
  const Tensor labels = from_vector<int64_t>({0, 3, 2, 1, 1, 0, 3});
  const Tensor onehot = to(one_hot(labels, 4), DType::F32);
  for (const double eps : {0.0, 0.15}) {
    INFO("label_smoothing " << eps);
    const double a = cross_entropy(logits, onehot, Reduction::Mean, -100, eps).item<double>();
    const double b = cross_entropy(logits, labels, Reduction::Mean, -100, eps).item<double>();
    CHECK(a == Approx(b).epsilon(1e-6));
  }
  // f16/bf16 input: log_softmax, products and sums in f32, the loss rounded once into the input's
  // dtype; under autocast the fp32 policy returns f32. The value is the f32 computation's.
  const Tensor probs = softmax(randn({7, 4}), 1);
  for (const DType dt : {DType::F16, DType::BF16}) {
    INFO(dtype_name(dt));
    const Tensor x = to(logits, dt);
    const Tensor want = cross_entropy(to(x, DType::F32), probs);
    const Tensor got = cross_entropy(x, probs);
    CHECK(got.dtype() == dt);
    CHECK(got.item<double>() == to(want, dt).item<double>());
    amp::Autocast region({.dtype = dt});
    const Tensor in_region = cross_entropy(x, to(probs, dt));
    CHECK(in_region.dtype() == DType::F32);
    CHECK(in_region.item<double>() == Approx(cross_entropy(to(x, DType::F32), to(to(probs, dt), DType::F32)).item<double>())
                                          .epsilon(1e-7));
  }
  // A target in another floating dtype is converted to the input's opmath: f64 probabilities for
  // f32 logits give an f32 loss, as PyTorch's.
  CHECK(cross_entropy(logits, to(probs, DType::F64)).dtype() == DType::F32);
}

TEST_CASE("nn::CrossEntropyLoss takes class probabilities, and bad probability targets are named errors",
          "[ops][loss][nn]") {
  manual_seed(4);
  const Tensor logits = randn({5, 3}), probs = softmax(randn({5, 3}), 1);
  const Tensor w = from_vector<float>({1.0f, 2.0f, 0.5f});
  nn::CrossEntropyLoss loss_fn({.reduction = Reduction::Sum, .label_smoothing = 0.1, .weight = w});
  CHECK(loss_fn(logits, probs).item<double>() ==
        cross_entropy(logits, probs, Reduction::Sum, -100, 0.1, w).item<double>());
  MG_REQUIRE_ERROR(cross_entropy(logits, randn({5, 4})),
                   "cross_entropy: a floating target holds class probabilities and must have the input's shape [5, 3], "
                   "got target [5, 4] f32 cpu");
  MG_REQUIRE_ERROR(cross_entropy(logits, probs, Reduction::Mean, 2),
                   "cross_entropy: ignore_index (2) is not supported with class-probability targets");
  MG_REQUIRE_ERROR(cross_entropy(from_vector<int64_t>({1, 2, 3}, {1, 3}), from_vector<float>({0.2f, 0.3f, 0.5f}, {1, 3})),
                   "cross_entropy: class-probability targets need a floating input and target");
  MG_REQUIRE_ERROR(cross_entropy(logits, probs, Reduction::Mean, -100, 0.0, from_vector<float>({1.0f, 2.0f})),
                   "cross_entropy: expected a class weight of shape [3]");
  // The index form's hint now names the probability form.
  MG_REQUIRE_ERROR(cross_entropy(logits, to(from_vector<int64_t>({0, 1, 2, 0, 1}), DType::U8)),
                   "cross_entropy also takes class probabilities");
}

TEST_CASE("cross_entropy with class probabilities: CUDA equals the CPU, gradients of input and target",
          "[ops][loss][cuda][gpu]") {
  manual_seed(6);
  const Tensor logits = randn({9, 6, 3}) * 2.0, probs = softmax(randn({9, 6, 3}), 1);
  const Tensor w = rand({6}) + 0.5;
  for (const DType dt : {DType::F32, DType::BF16}) {
    INFO(dtype_name(dt));
    const Tensor x = to(logits, dt).detach();  // leaves on both devices
    Tensor xc = clone(x).requires_grad_(), tc = clone(probs).requires_grad_();
    Tensor xg = x.to(Device::cuda(0)).requires_grad_(), tg = probs.to(Device::cuda(0)).requires_grad_();
    const Tensor want = cross_entropy(xc, tc, Reduction::Mean, -100, 0.1, w);
    const Tensor got = cross_entropy(xg, tg, Reduction::Mean, -100, 0.1, w.to(Device::cuda(0)));
    REQUIRE(got.device().is_cuda());
    CHECK(got.dtype() == want.dtype());
    want.backward();
    got.backward();
    // The same f32 ops on both devices; the sums may add in another order.
    const double rel = dt == DType::BF16 ? 0x1p-7 : 1e-5;
    require_close(flat(got), flat(want), rel);
    require_close(flat(xg.grad()), flat(xc.grad()), rel);
    require_close(flat(tg.grad()), flat(tc.grad()), 1e-5);
  }
}
