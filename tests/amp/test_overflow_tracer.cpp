// amp::OverflowTracer: the first op that produced inf/NaN (forward op, backward node, in-place op)
// with its module path and exact input/output ranges; propagating ops are not blamed; the
// near-limit summary; stop_at_first; one tracer at a time; bit-identical results with the tracer
// gone; module paths through Sequential, ResNet and BERT. A hidden [tracer-cost] case measures the
// tracer's cost on a ResNet-20 step (docs/amp_diagnostics.md).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "amp/overflow_tracer.h"
#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "core/op_observer.h"
#include "nn/activation.h"
#include "nn/container.h"
#include "nn/linear.h"
#include "nn/models/bert.h"
#include "nn/models/resnet.h"
#include "nn/loss.h"
#include "ops/loss.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

void fill(Tensor t, double v) {
  NoGradGuard no_grad;
  t.fill_(v);
}

// Sequential{"0": Linear(4 -> 8), "1": ReLU, "2": Linear(8 -> 2)} in f16 with constant weights
// and zero biases.
std::shared_ptr<nn::Sequential> mlp_f16(double w0, double w2) {
  auto l0 = nn::make<nn::Linear>({.in = 4, .out = 8});
  auto l2 = nn::make<nn::Linear>({.in = 8, .out = 2});
  auto m = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::UnaryModule>>{l0, nn::make<nn::ReLU>(), l2});
  m->to(DType::F16);
  fill(l0->weight, w0);
  fill(l0->bias, 0);
  fill(l2->weight, w2);
  fill(l2->bias, 0);
  return m;
}

void check_range(const amp::TensorRange& r, const Shape& shape, DType dtype, double lo, double hi) {
  INFO(r.str());
  CHECK(r.defined);
  CHECK(r.shape == shape);
  CHECK(r.dtype == dtype);
  CHECK(r.num_inf == 0);
  CHECK(r.num_nan == 0);
  CHECK(r.min == lo);
  CHECK(r.max == hi);
}

// A CIFAR ResNet-20 in f16 whose layer1.0.conv2 weights are all 1e4, so that conv overflows.
std::shared_ptr<nn::models::ResNet> resnet20_f16_with_huge_conv() {
  manual_seed(7);
  auto model = std::make_shared<nn::models::ResNet>(nn::models::ResNetConfig::cifar(20, 3, 10));
  model->to(DType::F16);
  auto block = model->stages[0]->at<nn::models::BasicBlock>(0);
  fill(block->conv2->weight, 1e4);
  return model;
}

// All bits of the loss and of every parameter's gradient.
std::vector<std::vector<double>> step_results(nn::Module& model, const std::function<Tensor()>& loss_fn) {
  model.zero_grad();
  Tensor loss = loss_fn();
  loss.backward();
  std::vector<std::vector<double>> out{values(loss)};
  for (const Tensor& p : model.parameters()) out.push_back(values(p.grad()));
  return out;
}

// Every (op, direction, path) an observer saw.
std::vector<std::string>& seen_events() {
  static std::vector<std::string> events;
  return events;
}
void record_event(const OpEvent& e) {
  seen_events().push_back(std::string(e.op) + (e.backward ? " bwd " : " fwd ") + e.path());
}

}  // namespace

TEST_CASE("OverflowTracer names the forward op, its module path and exact ranges", "[amp][tracer]") {
  auto model = mlp_f16(/*w0=*/1.0, /*w2=*/1e4);
  const Tensor x = ones({2, 4}, {.dtype = DType::F16});
  amp::OverflowTracer tracer;
  CHECK(op_observer() != nullptr);
  const Tensor y = (*model)(x);  // h = relu(4) = 4; y = 8 * 4 * 1e4 = 320000 -> inf in f16
  CHECK(tracer.ops_observed() == 3);
  CHECK(tracer.nonfinite_ops() == 1);
  REQUIRE(std::isinf(values(y)[0]));
  REQUIRE(tracer.found());
  const auto r = tracer.first();
  REQUIRE(r.has_value());
  INFO(tracer.report());
  CHECK(r->op == "linear");
  CHECK_FALSE(r->backward);
  CHECK(r->module_path == "2");
  CHECK(r->inputs_finite);
  CHECK(r->op_index == 2);  // linear "0", relu "1", linear "2"
  REQUIRE(r->inputs.size() == 3);
  check_range(r->inputs[0], {2, 8}, DType::F16, 4, 4);       // relu output
  check_range(r->inputs[1], {2, 8}, DType::F16, 1e4, 1e4);   // weight
  check_range(r->inputs[2], {2}, DType::F16, 0, 0);          // bias
  REQUIRE(r->outputs.size() == 1);
  CHECK(r->outputs[0].shape == Shape{2, 2});
  CHECK(r->outputs[0].num_inf == 4);
  CHECK(r->outputs[0].num_finite() == 0);
  const std::string text = tracer.report();
  CHECK_THAT(text, Catch::Matchers::Contains("first inf/NaN produced by linear (forward) in module 2, op #2"));
  CHECK_THAT(text, Catch::Matchers::Contains("[1] [2, 8] f16 min 10000 max 10000"));
  CHECK_THAT(text, Catch::Matchers::Contains("[0] [2, 2] f16 no finite values, 4 inf (of 4)"));
}

TEST_CASE("OverflowTracer names the conv of a ResNet-20 block by its module path", "[amp][tracer]") {
  auto model = resnet20_f16_with_huge_conv();
  manual_seed(1);
  const Tensor x = randn({2, 3, 8, 8}).to(DType::F16);
  amp::OverflowTracer tracer;
  const Tensor logits = (*model)(x);
  INFO(tracer.report());
  REQUIRE(tracer.found());
  const auto r = tracer.first();
  CHECK(r->op == "conv2d");
  CHECK_FALSE(r->backward);
  CHECK(r->module_path == "layer1.0.conv2");
  CHECK(r->inputs_finite);
  REQUIRE(r->inputs.size() == 2);  // no bias
  CHECK(r->inputs[0].shape == Shape{2, 16, 8, 8});
  CHECK(r->inputs[0].min == 0);    // a ReLU output
  CHECK(r->inputs[0].max > 0);
  check_range(r->inputs[1], {16, 16, 3, 3}, DType::F16, 1e4, 1e4);
  CHECK(r->outputs[0].num_inf > 0);
  // Every op before it ran inside a named module or at the top level, and was finite.
  CHECK(r->op_index > 0);
}

TEST_CASE("OverflowTracer names a backward node that overflowed in f16", "[amp][tracer]") {
  // Forward: h = relu(4 * 1e-3) = 0.004; y = 8 * 0.004 * 1000 = 32 (finite).
  // Backward of sum(y) * 100: dy = 100 (f16); dh = dy @ W2 = 2 * 100 * 1000 = 2e5 -> inf in f16.
  auto model = mlp_f16(/*w0=*/1e-3, /*w2=*/1000);
  const Tensor x = ones({2, 4}, {.dtype = DType::F16});
  amp::OverflowTracer tracer;
  const Tensor y = (*model)(x);
  const Tensor loss = sum(y.to(DType::F32)) * 100.0;
  CHECK_FALSE(tracer.found());
  const int64_t forward_ops = tracer.ops_observed();
  loss.backward();
  INFO(tracer.report());
  REQUIRE(tracer.found());
  const auto r = tracer.first();
  CHECK(r->op == "linear_backward");
  CHECK(r->backward);
  CHECK(r->module_path == "2");
  CHECK(r->inputs_finite);
  CHECK(r->op_index >= forward_ops);
  REQUIRE(r->inputs.size() == 1);
  check_range(r->inputs[0], {2, 2}, DType::F16, 100, 100);  // incoming dy
  REQUIRE(r->outputs.size() == 3);                          // dx, dW2, db2
  CHECK(r->outputs[0].shape == Shape{2, 8});
  CHECK(r->outputs[0].num_inf == 16);
  // dW2 = dy^T @ h = 2 * 100 * 0.004 = 0.8 (f16 rounding of h: 0.004 -> 0.0039978...)
  CHECK(r->outputs[1].num_inf == 0);
  CHECK(r->outputs[1].max == Approx(0.8).epsilon(2e-3));
  check_range(r->outputs[2], {2}, DType::F16, 200, 200);  // db2 = sum over the batch of dy
  CHECK_THAT(tracer.report(), Catch::Matchers::Contains("linear_backward (backward) in module 2"));
}

TEST_CASE("OverflowTracer does not blame ops that only propagate inf/NaN", "[amp][tracer]") {
  auto model = mlp_f16(1.0, 1e4);
  auto l3 = nn::make<nn::Linear>({.in = 2, .out = 2});
  l3->to(DType::F16);
  {
    NoGradGuard no_grad;
    l3->weight.copy_(from_vector<float>({1, -1, 1, -1}, {2, 2}));  // inf - inf = NaN
    l3->bias.fill_(0);
  }
  model->push_back(l3);
  const Tensor x = ones({2, 4}, {.dtype = DType::F16}).requires_grad_();
  amp::OverflowTracer tracer;
  const Tensor y = (*model)(x);
  REQUIRE(std::isnan(values(y)[0]));
  const Tensor loss = sum(y.to(DType::F32));
  loss.backward();
  INFO(tracer.report());
  const auto r = tracer.first();
  REQUIRE(r.has_value());
  CHECK(r->op == "linear");
  CHECK(r->module_path == "2");
  CHECK(r->op_index == 2);
  // linear "3", to_dtype, sum and the backward nodes all saw inf/NaN but are not blamed.
  CHECK(tracer.nonfinite_ops() >= 5);
}

TEST_CASE("OverflowTracer flags inf/NaN that entered from outside the observed ops", "[amp][tracer]") {
  auto model = mlp_f16(1.0, 1.0);
  const Tensor bad = from_vector<float>({1, 2, std::nanf(""), 4, 1, 1, 1, 1}, {2, 4}).to(DType::F16);
  amp::OverflowTracer tracer;
  (void)(*model)(bad);
  const auto f = tracer.first();
  INFO(tracer.report());
  REQUIRE(f.has_value());
  CHECK_FALSE(f->inputs_finite);  // the first op that saw it
  CHECK(f->op == "linear");
  CHECK(f->module_path == "0");
  CHECK(f->op_index == 0);
  CHECK(f->inputs[0].num_nan == 1);
  CHECK(f->inputs[0].min == 1);
  CHECK(f->inputs[0].max == 4);
  CHECK(tracer.nonfinite_ops() == 3);  // linear "0", relu "1", linear "2"
  CHECK_THAT(tracer.report(), Catch::Matchers::Contains("first inf/NaN seen in linear (forward) in module 0, op #0"));
  CHECK_THAT(tracer.report(), Catch::Matchers::Contains("no observed op produced it"));
}

TEST_CASE("OverflowTracer reports an in-place op with the tensor's value before the write", "[amp][tracer]") {
  Tensor w = full({3}, 1000.0, {.dtype = DType::F16});
  amp::OverflowTracer tracer;
  w.mul_(100.0);  // 1e5 -> inf in f16
  const auto r = tracer.first();
  REQUIRE(r.has_value());
  CHECK(r->op == "mul_scalar");  // the scalar is an attribute (kept in f32), not an input
  CHECK(r->inplace);
  CHECK(r->inputs_finite);
  REQUIRE(r->inputs.size() == 1);
  check_range(r->inputs[0], {3}, DType::F16, 1000, 1000);  // the old value, not the inf written
  CHECK(r->outputs[0].num_inf == 3);
}

TEST_CASE("OverflowTracer summary ranks the ops closest to the f16 limit", "[amp][tracer]") {
  // x = 1: linear "0" row 0 = 4 * 15000 = 60000, row 1 = 4; relu "1" the same;
  // linear "2" = 0.5 * 60000 + 0.5 * 4 = 30002 -> 30000 in f16 (spacing 16 above 16384).
  auto l0 = nn::make<nn::Linear>({.in = 4, .out = 2});
  auto l2 = nn::make<nn::Linear>({.in = 2, .out = 1});
  nn::Sequential model({l0, nn::make<nn::ReLU>(), l2});
  model.to(DType::F16);
  {
    NoGradGuard no_grad;
    l0->weight.copy_(from_vector<float>({15000, 15000, 15000, 15000, 1, 1, 1, 1}, {2, 4}));
    l0->bias.fill_(0);
    l2->weight.fill_(0.5);
    l2->bias.fill_(0);
  }
  const Tensor x = ones({1, 4}, {.dtype = DType::F16});
  amp::OverflowTracer tracer({.top_k = 2});
  const Tensor y = model(x);
  CHECK(values(y)[0] == 30000);
  CHECK_FALSE(tracer.found());
  const auto top = tracer.near_limits();
  INFO(tracer.report());
  REQUIRE(top.size() == 2);  // top_k of 3
  CHECK(top[0].op == "linear");
  CHECK(top[0].module_path == "0");
  CHECK(top[0].max_abs == 60000);
  CHECK(top[0].fraction == Approx(60000.0 / 65504.0));
  CHECK(top[0].dtype == DType::F16);
  CHECK(top[1].op == "relu");
  CHECK(top[1].module_path == "1");
  CHECK(top[1].max_abs == 60000);

  SECTION("every op, descending, forward and backward") {
    tracer.reset();
    const Tensor x2 = ones({1, 4}, {.dtype = DType::F16}).requires_grad_();
    Tensor loss = model(x2).to(DType::F32).sum();
    loss.backward();
    const std::string text = tracer.report();
    INFO(text);
    CHECK_THAT(text, Catch::Matchers::Contains("1. linear (forward) in 0: max |x| 60000 (91.5975% of the f16 max 65504)"));
    CHECK_THAT(text, Catch::Matchers::Contains("top 2 of"));
    const auto all = tracer.near_limits();
    for (std::size_t i = 1; i < all.size(); ++i) CHECK(all[i - 1].max_abs >= all[i].max_abs);
  }
}

TEST_CASE("OverflowTracer stop_at_first throws at the op with its module path", "[amp][tracer]") {
  auto model = resnet20_f16_with_huge_conv();
  manual_seed(1);
  const Tensor x = randn({2, 3, 8, 8}).to(DType::F16);
  amp::OverflowTracer tracer({.stop_at_first = true});
  MG_REQUIRE_ERROR((*model)(x), "first inf/NaN produced by conv2d (forward) in module layer1.0.conv2");
  CHECK(tracer.found());
  CHECK(current_module_path() == nullptr);  // the scopes unwound
  const int64_t ops = tracer.ops_observed();
  CHECK(ops == tracer.first()->op_index + 1);  // nothing ran after the throw
}

TEST_CASE("OverflowTracer: only one at a time - none installed after it is destroyed", "[amp][tracer]") {
  {
    amp::OverflowTracer a;
    MG_REQUIRE_ERROR(amp::OverflowTracer(), "OverflowTracer: another OverflowTracer is active");
    CHECK(op_observer() != nullptr);
  }
  CHECK(op_observer() == nullptr);
  { amp::OverflowTracer b; }  // a new one after the first is gone is fine
  CHECK(op_observer() == nullptr);
  set_op_observer(record_event);
  MG_REQUIRE_ERROR(amp::OverflowTracer(), "another op observer is installed");
  set_op_observer(nullptr);
}

TEST_CASE("results are bit-identical with the tracer on, and after it is gone", "[amp][tracer]") {
  manual_seed(3);
  nn::models::ResNet model(nn::models::ResNetConfig::cifar(20, 3, 10));
  model.to(DType::F16);
  manual_seed(4);
  const Tensor x = randn({4, 3, 8, 8}).to(DType::F16);
  const Tensor target = from_vector<int64_t>({1, 2, 3, 4}, {4});
  auto loss_fn = [&] { return cross_entropy(model(x).to(DType::F32), target); };
  REQUIRE(op_observer() == nullptr);
  const auto never = step_results(model, loss_fn);
  std::vector<std::vector<double>> on;
  {
    amp::OverflowTracer tracer;
    on = step_results(model, loss_fn);
    CHECK(tracer.ops_observed() > 100);
    CHECK_FALSE(tracer.found());
  }
  REQUIRE(op_observer() == nullptr);
  const auto after = step_results(model, loss_fn);
  REQUIRE(never.size() == model.parameters().size() + 1);
  auto same_bits = [](const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(double)) != 0) {
        return false;
      }
    }
    return true;
  };
  CHECK(same_bits(never, on));
  CHECK(same_bits(never, after));
}

TEST_CASE("module paths: Sequential, ResNet blocks, BERT encoder layers and losses", "[amp][tracer]") {
  seen_events().clear();
  auto has = [](const std::string& s) {
    return std::find(seen_events().begin(), seen_events().end(), s) != seen_events().end();
  };
  {
    set_op_observer(record_event);
    manual_seed(0);
    nn::models::BertForMaskedLM mlm(nn::models::BertConfig::tiny(64));
    const Tensor ids = from_vector<int64_t>({1, 5, 7, 9, 2, 0}, {1, 6});
    const Tensor mask = from_vector<int64_t>({1, 1, 1, 1, 1, 0}, {1, 6});
    const Tensor logits = mlm.forward(ids, Tensor(), mask);
    nn::CrossEntropyLoss criterion;
    const Tensor loss = criterion(logits.reshape({6, 64}), from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {6}));
    loss.backward();
    set_op_observer(nullptr);
  }
  INFO(seen_events().size() << " events");
  CHECK(has("embedding fwd bert.embeddings.word_embeddings"));
  CHECK(has("layer_norm fwd bert.embeddings.LayerNorm"));
  CHECK(has("linear fwd bert.encoder.0.self_attn"));          // the packed q/k/v projection
  CHECK(has("linear fwd bert.encoder.0.self_attn.out_proj"));
  CHECK(has("linear fwd bert.encoder.1.linear2"));
  CHECK(has("gelu fwd bert.encoder.1"));                       // the activation in the layer's own forward
  CHECK(has("linear fwd transform"));
  CHECK(has("linear fwd "));                                   // the tied decoder at the top level
  CHECK(has("cross_entropy fwd "));                            // a root loss has no name
  CHECK(has("linear_backward bwd bert.encoder.1.linear2"));
  CHECK(has("embedding_backward bwd bert.embeddings.word_embeddings"));
  CHECK(current_module_path() == nullptr);

  seen_events().clear();
  set_op_observer(record_event);
  manual_seed(0);
  nn::models::ResNet resnet(nn::models::ResNetConfig::cifar(20, 3, 10));
  const Tensor out = resnet(randn({2, 3, 8, 8}));
  out.sum().backward();
  set_op_observer(nullptr);
  CHECK(has("conv2d fwd conv1"));
  CHECK(has("conv2d fwd layer1.0.conv2"));
  CHECK(has("batch_norm fwd layer3.2.bn2"));
  CHECK(has("relu fwd layer2.1"));
  CHECK(has("linear fwd fc"));
  CHECK(has("conv2d_backward bwd layer1.0.conv2"));
  CHECK(has("batch_norm_backward bwd layer3.2.bn2"));
  // A block's input feeds both its conv1 and its shortcut: the engine sums the two gradients,
  // under the path of the op that produced it (the previous block's final relu).
  CHECK(has("grad_sum bwd layer1.0"));
  CHECK(resnet.stages[1]->name() == "layer2");
}

TEST_CASE("OverflowTracer: an attention mask's -inf is deliberate, not an overflow", "[amp][tracer]") {
  manual_seed(3);
  nn::models::BertForMaskedLM mlm(nn::models::BertConfig::tiny(64));
  mlm.to(DType::F16);
  const Tensor ids = from_vector<int64_t>({1, 5, 7, 9, 2, 0, 0, 0}, {1, 8});
  const Tensor mask = from_vector<int64_t>({1, 1, 1, 1, 1, 0, 0, 0}, {1, 8});  // three padded positions
  {
    amp::OverflowTracer tracer;
    const Tensor logits = mlm.forward(ids, Tensor(), mask);
    REQUIRE(std::isfinite(values(logits.to(DType::F32).sum())[0]));
    INFO(tracer.report());
    CHECK_FALSE(tracer.found());  // the mask's -inf (masked_fill, then scores + mask) is not blamed
    for (const amp::NearLimit& n : tracer.near_limits()) CHECK(std::isfinite(n.max_abs));
  }
  {
    // A real overflow in the same model is still found, at the op that produced it. (The fused
    // attention keeps its scores in f32, so it is the projection that must leave f16's range:
    // x 3000 made only the scores overflow, x 1e5 makes q, k and v themselves overflow.)
    NoGradGuard no_grad;
    Tensor((*mlm.bert->encoder)[0]->parameters()[0]).mul_(1e5);
    amp::OverflowTracer tracer;
    (void)mlm.forward(ids, Tensor(), mask);
    INFO(tracer.report());
    REQUIRE(tracer.found());
    CHECK(tracer.first()->inputs_finite);
    CHECK(tracer.first()->op != "masked_fill");
    CHECK(tracer.first()->module_path.rfind("bert.encoder.0", 0) == 0);
  }
}

// Cost of the tracer on a ResNet-20 training step (f32, batch 32, 3x32x32): alternating
// off/on repetitions in one run, median of each. Run: test_amp "[tracer-cost]".
TEST_CASE("OverflowTracer cost on a ResNet-20 forward+backward", "[.][tracer-cost]") {
  manual_seed(0);
  nn::models::ResNet model(nn::models::ResNetConfig::cifar(20, 3, 10));
  const Tensor x = randn({32, 3, 32, 32});
  const Tensor target = randint(0, 10, {32});
  auto step = [&] {
    model.zero_grad();
    Tensor loss = cross_entropy(model(x), target);
    loss.backward();
  };
  using clock = std::chrono::steady_clock;
  auto time_ms = [&](bool traced) {
    std::optional<amp::OverflowTracer> tracer;
    if (traced) tracer.emplace();
    const auto t0 = clock::now();
    step();
    return std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  };
  step();  // warm-up (allocator, oneDNN primitives)
  time_ms(true);
  std::vector<double> off, on;
  const int reps = 15;
  for (int i = 0; i < reps; ++i) {
    off.push_back(time_ms(false));
    on.push_back(time_ms(true));
  }
  std::sort(off.begin(), off.end());
  std::sort(on.begin(), on.end());
  int64_t ops = 0;
  {
    amp::OverflowTracer tracer;
    step();
    ops = tracer.ops_observed();
  }
  // Napkin math: the bytes of floating outputs the tracer reads once per step.
  static double scanned_bytes;
  scanned_bytes = 0;
  set_op_observer([](const OpEvent& e) {
    if (e.view) return;
    for (const Tensor& t : *e.outputs) {
      if (t.defined() && is_floating(t.dtype())) scanned_bytes += double(t.numel() * t.element_size());
    }
  });
  step();
  set_op_observer(nullptr);
  std::cout << "ResNet-20 f32 batch 32 forward+backward, " << reps << " alternating reps: off median " << off[reps / 2]
            << " ms (min " << off[0] << "), on median " << on[reps / 2] << " ms (min " << on[0] << "), on/off "
            << on[reps / 2] / off[reps / 2] << "; " << ops << " ops observed per step, " << scanned_bytes / 1e6
            << " MB of outputs scanned per step\n";
  CHECK(ops > 0);
}

namespace {
int g_forward_events = 0, g_backward_events = 0;
void count_events(const OpEvent& e) { ++(e.backward ? g_backward_events : g_forward_events); }
}  // namespace

TEST_CASE("an op observer installed during backward sees the remaining nodes, not the ops inside them",
          "[amp][observer]") {
  // backward() mutes the ops inside nodes only when an observer is installed as it starts; one
  // installed by a hook (or another thread) meanwhile saw tanh_backward's ops as forward ops.
  manual_seed(2);
  const Tensor x = randn({3, 4}).requires_grad_();
  const Tensor h = tanh(x);
  const Tensor y = sum(matmul(h, transpose(h, 0, 1)));
  h.register_hook([](const Tensor&) {
    set_op_observer(count_events);
    return Tensor();
  });
  g_forward_events = g_backward_events = 0;
  y.backward();
  set_op_observer(nullptr);
  CHECK(g_backward_events >= 1);  // tanh's node, reported whole
  CHECK(g_forward_events == 0);
}
