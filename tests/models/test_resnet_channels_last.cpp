// ResNet-20 channels-last: training steps with NHWC activations (through amp::initialize's
// memory_format) equal the NCHW steps within tolerance — losses, every parameter after the steps —
// and the activations really are NHWC inside the network (checked on the stem's output and the
// input gradient).
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <string>

#include "amp/initialize.h"
#include "core/factory.h"
#include "core/op_observer.h"
#include "nn/models/resnet.h"
#include "ops/loss.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

struct Run {
  std::vector<double> losses;
  std::vector<std::vector<double>> params;
  std::vector<std::vector<double>> first_grads;  // every parameter's gradient in the first step
  bool input_grad_nhwc = false;
};

// Three SGD steps of ResNet-20 (one input channel, batch 8) at O0 with the given input layout.
Run train(MemoryFormat format) {
  manual_seed(21);
  auto net = std::make_shared<nn::models::ResNet>(nn::models::ResNetConfig::cifar(20, 1, 10));
  optim::SGD opt(net->parameters(), {.lr = 0.05, .momentum = 0.9});
  amp::initialize(net, opt, {.opt_level = "O0", .verbosity = 0, .memory_format = format});
  Run r;
  for (int step = 0; step < 3; ++step) {
    Tensor x = randn({8, 1, 12, 12});
    const Tensor target = from_vector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7}, {8});
    x.requires_grad_();
    const Tensor loss = cross_entropy(amp::forward(*net, x), target);
    opt.zero_grad();
    loss.backward();
    opt.step();
    r.losses.push_back(loss.item<double>());
    if (step == 0) {
      for (const Tensor& p : net->parameters()) r.first_grads.push_back(values(p.grad()));
    }
    if (step == 0) r.input_grad_nhwc = x.grad().suggest_memory_format() == MemoryFormat::ChannelsLast;
  }
  for (const Tensor& p : net->parameters()) r.params.push_back(values(p));
  amp::reset();
  return r;
}

}  // namespace

TEST_CASE("ResNet-20 steps in channels-last equal the NCHW steps", "[nn][models][memory_format]") {
  const Run nchw = train(MemoryFormat::Contiguous);
  const Run nhwc = train(MemoryFormat::ChannelsLast);
  CHECK_FALSE(nchw.input_grad_nhwc);
  CHECK(nhwc.input_grad_nhwc);  // the gradient came back through NHWC convs
  REQUIRE(nhwc.losses.size() == nchw.losses.size());
  // The first step starts from the same parameters: its gradients differ only by the rounding of
  // oneDNN's nhwc convs (another summation order), a layout bug would show here at full size.
  REQUIRE(nhwc.first_grads.size() == nchw.first_grads.size());
  double worst = 0, scale = 0;
  for (std::size_t k = 0; k < nchw.first_grads.size(); ++k) {
    for (std::size_t i = 0; i < nchw.first_grads[k].size(); ++i) {
      worst = std::max(worst, std::abs(nhwc.first_grads[k][i] - nchw.first_grads[k][i]));
      scale = std::max(scale, std::abs(nchw.first_grads[k][i]));
    }
  }
  INFO("first-step gradients: worst difference " << worst << ", largest gradient " << scale);
  CHECK(worst < 1e-5 * scale);
  // Later steps compound those differences, and where one moves a pre-activation across 0 a ReLU's
  // gradient flips between g and 0 at that element, which batch norm spreads over its channel: on
  // an AVX-512 machine one such flip in the second step left the parameters 7e-4 apart (relative
  // L2) after three steps, single weights 4e-3, while each layout stayed within rounding of its
  // own f64 run (traced op by op). So the steps are compared as a whole: losses and the relative
  // L2 distance of all parameters.
  for (std::size_t i = 0; i < nchw.losses.size(); ++i) {
    INFO("step " << i);
    CHECK(std::abs(nhwc.losses[i] - nchw.losses[i]) < 1e-3 * (1 + std::abs(nchw.losses[i])));
  }
  double diff2 = 0, norm2 = 0;
  REQUIRE(nhwc.params.size() == nchw.params.size());
  for (std::size_t k = 0; k < nchw.params.size(); ++k) {
    for (std::size_t i = 0; i < nchw.params[k].size(); ++i) {
      const double d = nhwc.params[k][i] - nchw.params[k][i];
      diff2 += d * d;
      norm2 += nchw.params[k][i] * nchw.params[k][i];
    }
  }
  INFO("parameters after the steps: relative L2 distance " << std::sqrt(diff2 / norm2));
  CHECK(std::sqrt(diff2 / norm2) < 5e-3);
  CHECK(nchw.losses.back() != nchw.losses.front());  // the steps changed the model
}

// Counts the 4-D outputs of conv2d / batch_norm / relu / add (forward) and their backward nodes
// that are not channels-last.
std::atomic<int> g_seen{0}, g_nchw{0};
void count_layouts(const OpEvent& e) {
  const std::string op = e.op;
  const bool kept = op == "conv2d" || op == "batch_norm" || op == "relu" || op == "add" || op == "conv2d_backward" ||
                    op == "batch_norm_backward";
  if (!kept) return;
  for (const Tensor& t : *e.outputs) {
    if (!t.defined() || t.dim() != 4 || t.size(1) == 1) continue;  // weights' grads are [O, C, k, k]
    if (e.backward && t.size(2) == 3 && t.size(3) == 3) continue;  // a 3x3 weight gradient (contiguous)
    ++g_seen;
    if (t.suggest_memory_format() != MemoryFormat::ChannelsLast) ++g_nchw;
  }
}

TEST_CASE("ResNet-20 activations and their gradients stay channels-last inside the network",
          "[nn][models][memory_format]") {
  manual_seed(22);
  nn::models::ResNet net(nn::models::ResNetConfig::cifar(20, 1, 10));
  Tensor x = randn({2, 1, 8, 8}).to(MemoryFormat::ChannelsLast);
  g_seen = 0;
  g_nchw = 0;
  set_op_observer(count_layouts);
  const Tensor loss = cross_entropy(net(x), from_vector<int64_t>({1, 2}, {2}));
  loss.backward();
  set_op_observer(nullptr);
  CHECK(g_seen > 100);  // 19 convs, 19 batch norms, relus, adds and their backward nodes
  CHECK(g_nchw == 0);
}
