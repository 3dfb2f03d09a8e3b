// Class-weighted cross_entropy / nll_loss, element-weighted binary cross entropy and huber_loss
// against PyTorch 2.15 in f64 (tests/data/reference/torch_weighted_losses.json, written by
// tools/reference/gen_torch_weighted_losses.py): the loss and the gradient of its sum with respect
// to the input, to 1e-12; then the mixed-precision contract (f16/bf16 input: computed in f32,
// returned in the dtype the unweighted op returns, autocast's f32 included), the modules' weight
// buffers, and bad weights.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
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

Tensor tensor_of(const nlohmann::json& c, const std::string& key) {
  Shape shape;
  for (const auto& d : c[key + "_shape"]) shape.push_back(d.get<int64_t>());
  std::vector<double> v;
  std::vector<int64_t> iv;
  for (const auto& e : c[key]) {
    if (e.is_number_integer()) iv.push_back(e.get<int64_t>());
    else v.push_back(e.get<double>());
  }
  if (!iv.empty() && v.empty()) return reshape(from_vector<int64_t>(iv), shape);
  return reshape(from_vector<double>(v), shape);
}

std::vector<double> flat(const Tensor& t) {
  const Tensor c = contiguous(to(t.detach(), DType::F64));
  return std::vector<double>(c.data<double>(), c.data<double>() + c.numel());
}

Reduction reduction_named(const std::string& name) {
  if (name.find("/none") != std::string::npos) return Reduction::None;
  if (name.find("/sum") != std::string::npos) return Reduction::Sum;
  return Reduction::Mean;
}

}  // namespace

TEST_CASE("weighted cross_entropy, nll_loss, binary cross entropy and huber_loss equal PyTorch's (f64)",
          "[ops][loss]") {
  std::ifstream f(test::source_dir() + "/tests/data/reference/torch_weighted_losses.json");
  REQUIRE(f.good());
  const nlohmann::json ref = nlohmann::json::parse(f);
  int checked = 0;
  for (const auto& [name, c] : ref["cases"].items()) {
    INFO(name);
    const Tensor input = tensor_of(c, "input").requires_grad_();
    const Tensor target = tensor_of(c, "target");
    const Reduction r = reduction_named(name);
    Tensor loss;
    if (name.rfind("ce/", 0) == 0) {
      const double eps = name.find("eps0.1") != std::string::npos ? 0.1 : (name.find("eps0.2") != std::string::npos ? 0.2 : 0.0);
      const int64_t ignore = name.find("ignore1") != std::string::npos ? 1 : -100;
      loss = cross_entropy(input, target, r, ignore, eps, tensor_of(c, "weight"));
    } else if (name.rfind("nll/", 0) == 0) {
      loss = nll_loss(input, target, r, -100, tensor_of(c, "weight"));
    } else if (name.rfind("bcel/", 0) == 0) {
      const Tensor pw = c.contains("pos_weight") ? tensor_of(c, "pos_weight") : Tensor();
      loss = binary_cross_entropy_with_logits(input, target, pw, r, tensor_of(c, "weight"));
    } else if (name.rfind("bce/", 0) == 0) {
      loss = binary_cross_entropy(input, target, r, tensor_of(c, "weight"));
    } else {
      REQUIRE(name.rfind("huber/", 0) == 0);
      loss = huber_loss(input, target, r, c["delta"][0].get<double>());
    }
    const Tensor grad = autograd::grad({sum(loss)}, {input})[0];
    const std::vector<double> got = flat(loss), got_grad = flat(grad);
    const std::vector<double> want = c["loss"].get<std::vector<double>>(), want_grad = c["grad"].get<std::vector<double>>();
    Shape want_shape;
    for (const auto& d : c["loss_shape"]) want_shape.push_back(d.get<int64_t>());
    CHECK(loss.shape() == want_shape);
    REQUIRE(got.size() == want.size());
    REQUIRE(got_grad.size() == want_grad.size());
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-12).margin(1e-14));
    for (std::size_t i = 0; i < got_grad.size(); ++i) {
      CHECK(got_grad[i] == Approx(want_grad[i]).epsilon(1e-11).margin(1e-14));
    }
    ++checked;
  }
  CHECK(checked == 18);
}

TEST_CASE("weighted class losses: uniform weights give the unweighted loss, and f16/bf16 and autocast keep the contract",
          "[ops][loss]") {
  manual_seed(5);
  const Tensor logits = randn({8, 6}) * 3.0;
  const Tensor target = from_vector<int64_t>({0, 5, 2, -100, 3, 3, 1, 4});
  const Tensor ones_w = full({6}, 1.0);
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    for (double eps : {0.0, 0.1}) {
      INFO(reduction_name(r) << " eps " << eps);
      const std::vector<double> a = flat(cross_entropy(logits, target, r, -100, eps, ones_w));
      const std::vector<double> b = flat(cross_entropy(logits, target, r, -100, eps));
      REQUIRE(a.size() == b.size());
      // PyTorch's unweighted smoothed mean divides the smoothing term by every position, ignored
      // ones included; the weighted form by the counted ones (as PyTorch's weighted form)
      if (eps > 0 && r == Reduction::Mean) continue;
      for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).epsilon(1e-6));
    }
  }
  // a scaled weight leaves the mean unchanged and scales the sum
  const double m1 = cross_entropy(logits, target, Reduction::Mean, -100, 0.0, full({6}, 1.0)).item<double>();
  const double m3 = cross_entropy(logits, target, Reduction::Mean, -100, 0.0, full({6}, 3.0)).item<double>();
  CHECK(m3 == Approx(m1).epsilon(1e-6));
  // f16 / bf16 logits: computed in f32, returned in the input's dtype (as the unweighted op);
  // under autocast (fp32 policy) the loss is f32 — and the gradient reaches the f16 logits
  const Tensor w = from_vector<float>({0.5f, 2.0f, 1.0f, 3.0f, 0.25f, 1.5f});
  const double exact = cross_entropy(logits, target, Reduction::Mean, -100, 0.1, w).item<double>();
  for (DType dt : {DType::F16, DType::BF16}) {
    INFO(dtype_name(dt));
    const Tensor lo = to(logits, dt).requires_grad_();
    const Tensor l = cross_entropy(lo, target, Reduction::Mean, -100, 0.1, w);
    CHECK(l.dtype() == dt);
    CHECK(l.item<double>() == Approx(cross_entropy(to(lo.detach(), DType::F32), target, Reduction::Mean, -100, 0.1, w)
                                         .item<double>())
                                  .epsilon(dt == DType::F16 ? 1e-3 : 8e-3));
    CHECK(std::fabs(l.item<double>() - exact) < 0.05);
    l.backward();
    CHECK(lo.grad().dtype() == dt);
    amp::Autocast ac({.dtype = dt});
    CHECK(cross_entropy(lo, target, Reduction::Mean, -100, 0.1, w).dtype() == DType::F32);
    CHECK(nll_loss(log_softmax(lo, 1), target, Reduction::Mean, -100, w).dtype() == DType::F32);
  }
  // every target ignored: mean is NaN (0 / 0), as PyTorch; sum is 0
  const Tensor none = full({8}, -100.0, {.dtype = DType::I64});
  CHECK(std::isnan(cross_entropy(logits, none, Reduction::Mean, -100, 0.0, w).item<double>()));
  CHECK(cross_entropy(logits, none, Reduction::Sum, -100, 0.0, w).item<double>() == 0.0);
  // ... and the gradient is 0, not NaN (PyTorch 2.15: nan loss, zero grad), with and without
  // smoothing: a GradScaler must not skip every all-padding batch.
  for (const double eps : {0.0, 0.1}) {
    Tensor x = logits.detach().requires_grad_();
    const Tensor l = cross_entropy(x, none, Reduction::Mean, -100, eps, w);
    CHECK(std::isnan(l.item<double>()));
    l.backward();
    CHECK(test::values(x.grad()) == std::vector<double>(std::size_t(x.numel()), 0.0));
  }
  Tensor x = logits.detach().requires_grad_();
  nll_loss(log_softmax(x, 1), none, Reduction::Mean, -100, w).backward();
  CHECK(test::values(x.grad()) == std::vector<double>(std::size_t(x.numel()), 0.0));
}

TEST_CASE("nll_loss's f16 mean gradient counts its targets in f32", "[ops][loss]") {
  // 65,536 targets: an f16 count is inf and the gradient 0 (PyTorch 2.15 gives 0 too); the count
  // in f32 gives -1/65536 at each target, which f16 holds exactly.
  const Tensor lp = full({65536, 2}, -0.5, {.dtype = DType::F16}).requires_grad_();
  const Tensor t = zeros({65536}, {.dtype = DType::I64});
  nll_loss(lp, t).backward();
  CHECK(lp.grad().dtype() == DType::F16);
  CHECK(lp.grad().select(0, 0).select(0, 0).item<double>() == -1.0 / 65536);
  CHECK(lp.grad().select(0, 7).select(0, 1).item<double>() == 0.0);
  // The fused cross_entropy's double backward divides the same way.
  const Tensor x = zeros({4096, 2}, {.dtype = DType::F16}).requires_grad_();
  const Tensor t2 = zeros({4096}, {.dtype = DType::I64});
  const Tensor g = autograd::grad({cross_entropy(x, t2)}, {x}, {}, true, /*create_graph=*/true)[0];
  CHECK(g.select(0, 0).select(0, 0).item<double>() == Approx(-0.5 / 4096).epsilon(1e-3));
}

TEST_CASE("weighted losses: bad weights and targets are named errors", "[ops][loss]") {
  const Tensor logits = randn({4, 3});
  const Tensor target = from_vector<int64_t>({0, 2, 1, 1});
  MG_REQUIRE_ERROR(cross_entropy(logits, target, Reduction::Mean, -100, 0.0, ones({4})),
                   "cross_entropy: expected a class weight of shape [3] (one per class of input [4, 3] f32 cpu), got weight [4] f32 cpu");
  MG_REQUIRE_ERROR(cross_entropy(logits, target, Reduction::Mean, -100, 0.0, ones({3}, {.dtype = DType::I64})),
                   "cross_entropy: expected a floating class weight");
  MG_REQUIRE_ERROR(nll_loss(logits, from_vector<int64_t>({0, 3, 1, 1}), Reduction::Mean, -100, ones({3})),
                   "nll_loss: target 3 is out of range for 3 classes");
  MG_REQUIRE_ERROR(nll_loss(logits, from_vector<int64_t>({0, 1}), Reduction::Mean, -100, ones({3})),
                   "nll_loss: expected target of shape [4]");
  // the weighted cross_entropy names itself, not the nll_loss it runs inside
  MG_REQUIRE_ERROR(cross_entropy(logits, from_vector<int64_t>({0, 3, 1, 1}), Reduction::Mean, -100, 0.0, ones({3})),
                   "cross_entropy: target 3 is out of range for 3 classes");
  REQUIRE_THROWS_AS(cross_entropy(logits, from_vector<int64_t>({0, 3, 1, 1}), Reduction::Mean, -100, 0.0, ones({3})),
                    IndexError);
  // smooth_l1 with a beta whose 0.5 / beta is inf in f32: 0 at d = 0, as PyTorch's (was NaN)
  CHECK(test::values(smooth_l1_loss(from_vector<double>({0, 1e-41, 1}, {3}), zeros({3}, {.dtype = DType::F64}),
                              Reduction::None, 1e-39))[0] == 0.0);
  MG_REQUIRE_ERROR(binary_cross_entropy_with_logits(logits, zeros({4, 3}), Tensor(), Reduction::Mean, ones({4})),
                   "binary_cross_entropy_with_logits: weight [4] f32 cpu must broadcast to the input's shape");
  MG_REQUIRE_ERROR(binary_cross_entropy_with_logits(logits, zeros({4, 3}), Tensor(), Reduction::Mean, ones({2, 4, 3})),
                   "must broadcast to the input's shape");
  MG_REQUIRE_ERROR(huber_loss(logits, logits, Reduction::Mean, 0.0), "huber_loss: delta must be finite and > 0, got 0");
  MG_REQUIRE_ERROR(nn::HuberLoss({.delta = -1.0}), "HuberLoss: delta must be finite and > 0, got -1");
  MG_REQUIRE_ERROR(nn::CrossEntropyLoss({.weight = ones({3}).requires_grad_()}),
                   "CrossEntropyLoss: weight [3] f32 cpu requires grad");
}

TEST_CASE("loss modules keep their weights as buffers (state dict, dtype moves) and apply them", "[ops][loss][nn]") {
  const Tensor w = from_vector<float>({1.0f, 4.0f, 0.5f});
  nn::CrossEntropyLoss ce({.weight = w});
  nn::NLLLoss nll({.weight = w});
  nn::BCEWithLogitsLoss bcel({.pos_weight = full({3}, 2.0), .weight = w});
  nn::BCELoss bce({.weight = w});
  const auto entry = [](const nn::Module& m, const std::string& key) {
    for (const auto& [k, t] : m.state_dict()) {
      if (k == key) return t;
    }
    return Tensor();
  };
  for (nn::Module* m : std::vector<nn::Module*>{&ce, &nll, &bcel, &bce}) CHECK(entry(*m, "weight").defined());
  CHECK(entry(bcel, "pos_weight").defined());
  const Tensor logits = randn({4, 3});
  const Tensor target = from_vector<int64_t>({0, 2, 1, 1});
  CHECK(ce(logits, target).item<double>() ==
        cross_entropy(logits, target, Reduction::Mean, -100, 0.0, w).item<double>());
  CHECK(nll(log_softmax(logits, 1), target).item<double>() ==
        nll_loss(log_softmax(logits, 1), target, Reduction::Mean, -100, w).item<double>());
  const Tensor t01 = rand({4, 3});
  CHECK(bcel(logits, t01).item<double>() ==
        binary_cross_entropy_with_logits(logits, t01, full({3}, 2.0), Reduction::Mean, w).item<double>());
  CHECK(bce(sigmoid(logits), t01).item<double>() ==
        binary_cross_entropy(sigmoid(logits), t01, Reduction::Mean, w).item<double>());
  nn::HuberLoss hub({.reduction = Reduction::Sum, .delta = 0.5});
  CHECK(hub(logits, t01).item<double>() == huber_loss(logits, t01, Reduction::Sum, 0.5).item<double>());
  ce.to(DType::F64);
  CHECK(entry(ce, "weight").dtype() == DType::F64);
}
