// ctc_loss (ops/ctc_loss.h) against PyTorch 2.15's F.ctc_loss in f64 on log_softmax(logits)
// (tests/data/reference/torch_ctc.json, written by tools/reference/gen_torch_ctc.py): every
// reduction, padded and concatenated targets, repeated labels, an empty target, an input of length
// 0, another blank, an impossible alignment with zero_infinity, unbatched input; the loss and its
// gradient with respect to the logits (1e-10). Then a brute-force sum over every alignment, inf
// without zero_infinity, f32 under bf16 autocast, the tensor-lengths form, and the refusals.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "core/factory.h"
#include "nn/ctc_loss.h"
#include "ops/ctc_loss.h"
#include "ops/ops.h"
#include "reference/json_reference.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

Reduction reduction_of(const std::string& r) {
  return r == "none" ? Reduction::None : r == "sum" ? Reduction::Sum : Reduction::Mean;
}

}  // namespace

TEST_CASE("ctc_loss equals PyTorch's in f64: loss and the gradient of the logits", "[ops][loss][ctc]") {
  const nlohmann::json ref = load_json_reference("torch_ctc.json");
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    INFO(c["name"].get<std::string>());
    std::vector<double> lv;  // JSON has no infinities: null stands for a masked (-inf) logit
    for (const auto& v : c["logits"]) lv.push_back(v.is_null() ? -std::numeric_limits<double>::infinity() : v.get<double>());
    const Tensor logits = from_vector<double>(lv, c["logits_shape"].get<std::vector<int64_t>>()).requires_grad_();
    const Tensor targets = json_tensor(c["targets"], c["targets_shape"]).to(DType::I64);
    const int64_t classes_dim = logits.dim() - 1;
    const Tensor loss = ctc_loss(log_softmax(logits, classes_dim), targets,
                                 c["input_lengths"].get<std::vector<int64_t>>(),
                                 c["target_lengths"].get<std::vector<int64_t>>(), c["blank"].get<int64_t>(),
                                 reduction_of(c["reduction"]), c["zero_infinity"].get<bool>());
    REQUIRE(loss.shape() == Shape(c["loss_shape"].get<std::vector<int64_t>>()));
    check_json_close(loss, c["loss"], 1e-10, 1e-12);
    const Tensor g = autograd::grad({sum(loss * json_tensor(c["r"], c["loss_shape"]))}, {logits})[0];
    // PyTorch's gradient is NaN on every class of a step with a masked (-inf) logit (null in the
    // file: its backward computes -inf - -inf there, and the log_softmax spreads it over the row);
    // this one is finite there, and 0 at the masked logit itself.
    const std::vector<double> got = values(g);
    REQUIRE(got.size() == c["grad_logits"].size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      const nlohmann::json& want = c["grad_logits"][i];
      if (std::isinf(lv[i])) CHECK(got[i] == 0.0);
      if (want.is_null()) CHECK(std::isfinite(got[i]));
      else CHECK(got[i] == Approx(want.get<double>()).epsilon(1e-10).margin(1e-12));
    }
    ++checked;
  }
  CHECK(checked == 8);
}

TEST_CASE("ctc_loss is minus the log of the sum over every alignment (brute force)", "[ops][loss][ctc]") {
  // T = 4, C = 3 (blank 0), target [1, 2]: every path of 4 labels that collapses to [1, 2].
  manual_seed(7);
  const Tensor lp = log_softmax(randn({4, 1, 3}, {.dtype = DType::F64}), 2);
  const std::vector<double> v = values(lp);
  double total = 0;
  for (int path = 0; path < 81; ++path) {
    int code = path, labels[4];
    for (int t = 0; t < 4; ++t) labels[t] = code % 3, code /= 3;
    std::vector<int> collapsed;
    for (int t = 0; t < 4; ++t)
      if (labels[t] != 0 && (t == 0 || labels[t] != labels[t - 1])) collapsed.push_back(labels[t]);
    if (collapsed != std::vector<int>{1, 2}) continue;
    double lpath = 0;
    for (int t = 0; t < 4; ++t) lpath += v[std::size_t(t * 3 + labels[t])];
    total += std::exp(lpath);
  }
  const Tensor loss = ctc_loss(lp, from_vector<int64_t>({1, 2}, {1, 2}), {4}, {2}, 0, Reduction::Sum);
  CHECK(loss.item<double>() == Approx(-std::log(total)).epsilon(1e-13));
}

TEST_CASE("ctc_loss: an impossible alignment is inf with a zero gradient, f32 under autocast, tensor lengths",
          "[ops][loss][ctc]") {
  manual_seed(8);
  const Tensor logits = randn({3, 2, 4}).requires_grad_();
  const Tensor targets = from_vector<int64_t>({1, 1, 2, 0, 2, 3, 0, 0}, {2, 4});
  const Tensor loss = ctc_loss(log_softmax(logits, 2), targets, std::vector<int64_t>{3, 3}, std::vector<int64_t>{3, 2},
                               0, Reduction::None);
  const std::vector<double> l = values(loss);
  CHECK(std::isinf(l[0]));  // 1 1 2 needs 4 steps (a blank between the ones)
  CHECK(std::isfinite(l[1]));
  const Tensor g = autograd::grad({loss.select(0, 0)}, {logits}, {}, /*retain_graph=*/true)[0];
  CHECK(values(g) == std::vector<double>(24, 0.0));  // the impossible sample's gradient
  const Tensor g1 = autograd::grad({loss.select(0, 1)}, {logits})[0];
  CHECK(max(abs(g1)).item<double>() > 0.0);
  // bf16 log_probs under autocast: fp32 policy, an f32 loss close to the f32 one.
  const Tensor lp32 = log_softmax(logits.detach(), 2);
  Tensor low;
  {
    amp::Autocast autocast({.dtype = DType::BF16});
    low = ctc_loss(lp32.to(DType::BF16), targets, from_vector<int64_t>({3, 3}, {2}), from_vector<int64_t>({1, 2}, {2}));
  }
  CHECK(low.dtype() == DType::F32);
  const Tensor want = ctc_loss(lp32, targets, std::vector<int64_t>{3, 3}, std::vector<int64_t>{1, 2});
  CHECK(low.item<double>() == Approx(want.item<double>()).epsilon(0.02));
  // Unbatched input takes 0-d length tensors (PyTorch's idiom) of any integer dtype.
  const Tensor one = ctc_loss(log_softmax(logits.detach().select(1, 1), 1), from_vector<int32_t>({2, 3}, {2}),
                              from_vector<int32_t>({3}, {}), from_vector<uint8_t>({2}, {}), 0, Reduction::Sum);
  CHECK(one.item<double>() == Approx(values(loss)[1]).epsilon(1e-6));
}

TEST_CASE("CTCLoss module takes host or tensor lengths", "[ops][loss][ctc]") {
  manual_seed(9);
  const Tensor lp = log_softmax(randn({6, 2, 5}), 2);
  const Tensor t = from_vector<int64_t>({1, 2, 3, 4, 4, 1}, {6});
  nn::CTCLoss ctc({.reduction = Reduction::Sum});
  const Tensor a = ctc(lp, t, std::vector<int64_t>{6, 5}, std::vector<int64_t>{2, 4});
  const Tensor b = ctc(lp, t, from_vector<int64_t>({6, 5}, {2}), from_vector<int64_t>({2, 4}, {2}));
  CHECK(a.item<double>() == b.item<double>());
  CHECK(ctc.str().find("CTCLoss(blank=0, reduction=sum)") != std::string::npos);
}

TEST_CASE("ctc_loss names its refusals", "[ops][loss][ctc]") {
  const Tensor lp = log_softmax(randn({5, 2, 4}), 2);
  const Tensor t = from_vector<int64_t>({1, 2, 3, 1}, {2, 2});
  MG_REQUIRE_ERROR(ctc_loss(lp, t, std::vector<int64_t>{5}, std::vector<int64_t>{2, 2}), "expected 2 input and target lengths");
  MG_REQUIRE_ERROR(ctc_loss(lp, t, std::vector<int64_t>{6, 5}, std::vector<int64_t>{2, 2}), "input length 6 of sample 0 is outside [0, 5]");
  MG_REQUIRE_ERROR(ctc_loss(lp, t, std::vector<int64_t>{5, 5}, std::vector<int64_t>{3, 2}), "target length 3 of sample 0 is outside [0, 2]");
  MG_REQUIRE_ERROR(ctc_loss(lp, from_vector<int64_t>({1, 0, 3, 1}, {2, 2}), std::vector<int64_t>{5, 5}, std::vector<int64_t>{2, 2}),
                   "target 0 of sample 0 (position 1) must be a class in [0, 4) other than the blank 0");
  MG_REQUIRE_ERROR(ctc_loss(lp, t, std::vector<int64_t>{5, 5}, std::vector<int64_t>{2, 2}, 4), "blank 4 is not a class of 4");
  MG_REQUIRE_ERROR(ctc_loss(lp, from_vector<int64_t>({1, 2, 3}, {3}), std::vector<int64_t>{5, 5}, std::vector<int64_t>{2, 2}),
                   "the target lengths add up to 4 but targets has 3 elements");
  MG_REQUIRE_ERROR(ctc_loss(lp, from_vector<int64_t>({1, 2, 3, 1, 2}, {5}), std::vector<int64_t>{5, 5}, std::vector<int64_t>{2, 2}),
                   "the target lengths add up to 4 but targets has 5 elements");  // PyTorch refuses extra elements too
  MG_REQUIRE_ERROR(ctc_loss(lp, t, zeros({2}), from_vector<int64_t>({2, 2}, {2})), "input_lengths must be integral");
  MG_REQUIRE_ERROR(ctc_loss(lp, t.to(DType::F32), std::vector<int64_t>{5, 5}, std::vector<int64_t>{2, 2}), "expected integer targets");
  MG_REQUIRE_ERROR(ctc_loss(lp.select(0, 0).select(0, 0), t, std::vector<int64_t>{5}, std::vector<int64_t>{2}),
                   "expected log_probs [T, N, C] or [T, C]");
  MG_REQUIRE_ERROR(ctc_loss(lp, t, std::vector<int64_t>{5, 5}, std::vector<int64_t>{2, 2}, 0, Reduction::BatchMean),
                   "ctc_loss: reduction");
}
