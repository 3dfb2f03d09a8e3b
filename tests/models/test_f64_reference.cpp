// Whole-model numerics: ResNet-20 and BERT-mini in f32 against the same weights and batch in f64
// (issue 12). The f64 run is the reference (mixgrad's f64 agrees with PyTorch's f64 to ~4e-14), so
// what is measured is the f32 kernels' accumulated rounding error, forward and backward.
//
// The metric, per parameter p (every parameter of the model, gradient after one forward +
// cross-entropy + backward):
//     err(p) = ||g32(p) - g64(p)||_2 / ||g64(p)||_2
// i.e. the normwise relative error of the f32 gradient tensor against the f64 gradient tensor (the
// f32 gradient is converted to f64 exactly before subtracting). Every err(p) must be <= 1e-5; the
// loss must agree to 1e-5 relative too. PyTorch's f32 ResNet-20 gradients are within ~1e-6 of f64
// on such a batch; before the norm kernels followed the summation rule, mixgrad's f32 batch-norm
// sums (one running float over N·H·W terms) made ResNet-20's gradients 3e-3 off.
//
// ReLU makes the comparison discontinuous: a pre-activation within the f32 forward's error (a few
// 1e-6) of 0 can be cut by one run and passed by the other, and that one element then changes the
// gradients below it by ~1e-3. So the ResNet test watches every relu input of both forwards (an op
// observer) and uses the first batch of a fixed seed sequence on which no relu decides
// differently; it says how many batches it skipped. BERT-mini (GELU) needs no such care.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "core/factory.h"
#include "core/op_observer.h"
#include "nn/models/bert.h"
#include "nn/models/resnet.h"
#include "ops/loss.h"
#include "test_util.h"

using namespace mg;
using namespace mg::nn::models;
using mg::test::values;

namespace {

// ||a - b||_2 / ||b||_2 over all elements (b the f64 reference).
double normwise_rel_error(const Tensor& a, const Tensor& b) {
  const auto va = values(a), vb = values(b);
  REQUIRE(va.size() == vb.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    num += (va[i] - vb[i]) * (va[i] - vb[i]);
    den += vb[i] * vb[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Compares the gradients of two models with the same parameter names; returns the worst err(p)
// and CHECKs each one against `tol`.
double check_gradients(const nn::Module& f32, const nn::Module& f64, double tol) {
  const nn::NamedTensors p32 = f32.named_parameters(), p64 = f64.named_parameters();
  REQUIRE(p32.size() == p64.size());
  double worst = 0;
  std::vector<double> errs;
  for (std::size_t i = 0; i < p32.size(); ++i) {
    INFO(p32[i].first);
    REQUIRE(p32[i].first == p64[i].first);
    REQUIRE(p32[i].second.grad().defined());
    REQUIRE(p64[i].second.grad().defined());
    REQUIRE(p32[i].second.grad().dtype() == DType::F32);
    REQUIRE(p64[i].second.grad().dtype() == DType::F64);
    const double e = normwise_rel_error(p32[i].second.grad(), p64[i].second.grad());
    INFO("err = " << e);
    CHECK(e <= tol);
    errs.push_back(e);
    worst = std::max(worst, e);
  }
  std::sort(errs.begin(), errs.end());
  WARN("gradient err(p) over " << errs.size() << " parameters: median " << errs[errs.size() / 2] << ", worst "
                               << worst);
  return worst;
}

// Inputs of every forward relu while installed, in call order.
std::vector<Tensor> g_relu_inputs;
void record_relu(const OpEvent& e) {
  if (!e.backward && std::string_view(e.op) == "relu") g_relu_inputs.push_back((*e.inputs)[0]);
}
// Runs forward(x) and returns its relu inputs.
template <typename F>
std::vector<Tensor> relu_inputs(const F& forward) {
  g_relu_inputs.clear();
  set_op_observer(record_relu);
  forward();
  set_op_observer(nullptr);
  return std::move(g_relu_inputs);
}
// Elements whose relu decision (> 0) differs between two runs' relu inputs.
int64_t relu_flips(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  REQUIRE(a.size() == b.size());
  int64_t flips = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    const auto va = values(a[k]), vb = values(b[k]);
    REQUIRE(va.size() == vb.size());
    for (std::size_t i = 0; i < va.size(); ++i) flips += (va[i] > 0) != (vb[i] > 0);
  }
  return flips;
}

}  // namespace

TEST_CASE("ResNet-20 f32 gradients match the f64 run of the same weights and batch", "[nn][models][numerics]") {
  // Batch 16 of 1x28x28 images: the first stage's batch norms reduce N·H·W = 12,544 values per
  // channel. Pixel-like inputs in [0, 1) (not zero-mean, like real images): post-ReLU activations
  // and their gradients have a nonzero mean per channel, which a one-float running sum loses.
  manual_seed(12);
  ResNet net32(ResNetConfig::cifar(20, 1, 10));
  ResNet net64(ResNetConfig::cifar(20, 1, 10));
  net64.to(DType::F64);
  net64.load_state_dict(net32.state_dict());  // the f32 weights, converted exactly
  REQUIRE(net64.conv1->weight.dtype() == DType::F64);
  const Tensor target = randint(0, 10, {16});
  Tensor x32, loss32, loss64;
  int64_t flips = 0;
  for (int attempt = 0; attempt < 10; ++attempt) {
    manual_seed(1200 + uint64_t(attempt));
    x32 = rand({16, 1, 28, 28});
    const Tensor x64 = x32.to(DType::F64);
    const std::vector<Tensor> r32 = relu_inputs([&] { loss32 = cross_entropy(net32(x32), target); });
    const std::vector<Tensor> r64 = relu_inputs([&] { loss64 = cross_entropy(net64(x64), target); });
    REQUIRE(r32.size() == 19);  // the stem and two per block
    flips = relu_flips(r32, r64);
    if (flips == 0) break;
    WARN("batch " << attempt << ": " << flips << " relu input(s) on opposite sides of 0 in f32 and f64; next batch");
  }
  // Measured: with the summation rule 1 of the first 3 batches had no flip (varies with the
  // build's roundings); with the old batch-norm sums all 10 flipped (2-9 elements each), and their
  // gradients were 3.8e-3 (median) to 1.2e-2 off. Compared anyway, so the errors show either way.
  CHECK(flips == 0);
  REQUIRE(loss64.dtype() == DType::F64);
  const double l32 = values(loss32)[0], l64 = values(loss64)[0];
  CHECK(std::abs(l32 - l64) <= 1e-5 * std::abs(l64));
  loss32.backward();
  loss64.backward();
  check_gradients(net32, net64, 1e-5);
}

TEST_CASE("BERT-mini f32 gradients match the f64 run of the same weights and batch", "[nn][models][numerics]") {
  // BERT-mini (4 layers, hidden 256, 4 heads, FFN 1024) with the MLM head, vocab 1000, batch 4 x 32
  // tokens, no dropout (the two runs must see the same function).
  BertConfig cfg = BertConfig::mini(1000);
  cfg.max_position = 64;
  cfg.dropout = 0.0;
  manual_seed(12);
  BertForMaskedLM mlm32(cfg);
  BertForMaskedLM mlm64(cfg);
  mlm64.to(DType::F64);
  mlm64.load_state_dict(mlm32.state_dict());
  const Tensor ids = randint(1, 1000, {4, 32});
  const Tensor target = randint(0, 1000, {4 * 32});

  const Tensor loss32 = cross_entropy(mlm32.forward(ids).reshape({4 * 32, 1000}), target);
  const Tensor loss64 = cross_entropy(mlm64.forward(ids).reshape({4 * 32, 1000}), target);
  REQUIRE(loss64.dtype() == DType::F64);
  const double l32 = values(loss32)[0], l64 = values(loss64)[0];
  CHECK(std::abs(l32 - l64) <= 1e-5 * std::abs(l64));
  loss32.backward();
  loss64.backward();
  check_gradients(mlm32, mlm64, 1e-5);
}
