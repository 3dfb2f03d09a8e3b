// Channels-last parameters (PyTorch's model.to(memory_format=torch.channels_last)):
// Module::to(MemoryFormat) lays the 4-D weights out NHWC; gradients keep their parameter's layout
// (the gradient layout contract); optimizers, their state, f32 master weights, unscaling,
// clipping, state dicts and checkpoints work on them; a ResNet trained with channels-last
// weights matches the same ResNet trained NCHW.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "amp/initialize.h"
#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "io/checkpoint.h"
#include "nn/models/resnet.h"
#include "ops/conv.h"
#include "ops/dispatcher.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/rmsprop.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

std::shared_ptr<nn::models::ResNet> make_resnet() {
  manual_seed(31);
  return std::make_shared<nn::models::ResNet>(nn::models::ResNetConfig::cifar(8, /*in_channels=*/3, /*classes=*/4));
}

struct Batch {
  Tensor x, y;
};
Batch make_batch() {
  manual_seed(5);
  return {randn({8, 3, 10, 10}), randint(0, 4, {8})};
}

bool is_channels_last_4d(const Tensor& t) { return t.dim() == 4 && t.is_contiguous(MemoryFormat::ChannelsLast); }

// max |a - b| / max(1, |b|) over the parameters of two models with the same structure.
double max_param_diff(nn::Module& a, nn::Module& b) {
  const Tensors pa = a.parameters(), pb = b.parameters();
  REQUIRE(pa.size() == pb.size());
  double worst = 0;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    const std::vector<double> va = values(pa[i]), vb = values(pb[i]);
    for (std::size_t k = 0; k < va.size(); ++k) worst = std::max(worst, std::abs(va[k] - vb[k]) / std::max(1.0, std::abs(vb[k])));
  }
  return worst;
}

}  // namespace

TEST_CASE("Module::to(ChannelsLast) lays 4-D parameters out NHWC and keeps their identity", "[optim][channels_last]") {
  auto model = make_resnet();
  const Tensors before = model->parameters();
  const Tensor w0 = before.front();  // the stem convolution's weight
  REQUIRE(w0.dim() == 4);
  const std::vector<double> w0_values = values(w0);
  w0.set_grad(ones_like(w0));
  model->to(MemoryFormat::ChannelsLast);
  const Tensors after = model->parameters();
  REQUIRE(after.size() == before.size());
  int64_t four_d = 0;
  for (std::size_t i = 0; i < after.size(); ++i) {
    CHECK(after[i].is_same(before[i]));  // the same tensors: optimizers built before still hold them
    if (after[i].dim() == 4) {
      ++four_d;
      CHECK(is_channels_last_4d(after[i]));
    } else {
      CHECK(after[i].is_contiguous());
    }
  }
  CHECK(four_d > 5);
  CHECK(values(w0) == w0_values);
  CHECK(is_channels_last_4d(w0.grad()));  // an accumulated gradient follows
  model->to(MemoryFormat::Contiguous);
  CHECK(w0.is_contiguous());
  CHECK(values(w0) == w0_values);
  MG_REQUIRE_ERROR(model->to(MemoryFormat::Preserve), "Contiguous or ChannelsLast");
}

TEST_CASE("a channels-last leaf's gradient is channels-last (the gradient layout contract)", "[autograd][channels_last]") {
  const Tensor w = randn({4, 3, 3, 3}).contiguous(MemoryFormat::ChannelsLast).requires_grad_();
  const Tensor x = randn({2, 3, 6, 6});
  sum(conv2d(x, w)).backward();  // conv2d_backward_weight writes the weight's own layout
  CHECK(is_channels_last_4d(w.grad()));
  const std::vector<double> first = values(w.grad());
  sum(conv2d(x, w)).backward();  // accumulated in place, layout kept
  CHECK(is_channels_last_4d(w.grad()));
  const std::vector<double> second = values(w.grad());
  for (std::size_t k = 0; k < first.size(); ++k) CHECK(second[k] == 2 * first[k]);
  const Tensor v = randn({4, 3, 3, 3}).requires_grad_();  // an NCHW leaf stays NCHW
  sum(conv2d(x.contiguous(MemoryFormat::ChannelsLast), v)).backward();
  CHECK(v.grad().is_contiguous());
}

TEST_CASE("SGD and AdamW train channels-last weights as they train NCHW ones", "[optim][channels_last]") {
  const Batch b = make_batch();
  for (const char* which : {"sgd", "adamw"}) {
    INFO(which);
    auto nchw = make_resnet();
    auto nhwc = make_resnet();
    nhwc->to(MemoryFormat::ChannelsLast);
    auto make_opt = [&](nn::Module& m) -> std::unique_ptr<optim::Optimizer> {
      if (std::string(which) == "sgd") {
        return std::make_unique<optim::SGD>(m.parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true, .weight_decay = 1e-3});
      }
      return std::make_unique<optim::AdamW>(m.parameters(), optim::AdamWOptions{.lr = 1e-3});
    };
    auto o1 = make_opt(*nchw);
    auto o2 = make_opt(*nhwc);
    for (int step = 0; step < 3; ++step) {
      for (auto [m, o] : {std::pair{nchw.get(), o1.get()}, std::pair{nhwc.get(), o2.get()}}) {
        o->zero_grad();
        cross_entropy((*m)(b.x), b.y).backward();
        optim::clip_grad_norm_(m->parameters(), 1.0);
        o->step();
      }
    }
    // The convolutions may take other kernels for NHWC weights (another summation order): close,
    // not equal.
    CHECK(max_param_diff(*nhwc, *nchw) < 1e-4);
    for (const Tensor& p : nhwc->parameters()) {
      if (p.dim() != 4) continue;
      CHECK(is_channels_last_4d(p));
      CHECK(is_channels_last_4d(p.grad()));
      for (const auto& [name, buf] : o2->state(p)->buffers) {
        INFO(name);
        CHECK(is_channels_last_4d(buf));
      }
    }
    // Optimizer state moves between the two layouts both ways (values, not memory order).
    auto o3 = make_opt(*nchw);
    o3->load_state_dict(o2->state_dict());
    auto o4 = make_opt(*nhwc);
    o4->load_state_dict(o1->state_dict());
    for (const Tensor& p : nhwc->parameters()) {
      for (const auto& [name, buf] : o4->state(p)->buffers) CHECK(buf.strides() == p.strides());
    }
    const Tensors pn = nchw->parameters(), pc = nhwc->parameters();
    for (std::size_t i = 0; i < pn.size(); ++i) {
      for (const auto& [name, buf] : o3->state(pn[i])->buffers) {
        CHECK(buf.is_contiguous());
        const std::vector<double> a = values(buf), c = values(o2->state(pc[i])->buffers.at(name));
        CHECK(a == c);
      }
    }
  }
}

TEST_CASE("O2 with memory_format ChannelsLast: NHWC weights and f32 masters, tracking NCHW O2", "[amp][channels_last]") {
  const Batch b = make_batch();
  std::vector<float> losses[2];
  std::shared_ptr<nn::models::ResNet> models[2];
  for (int cl = 0; cl < 2; ++cl) {
    models[cl] = make_resnet();
    optim::SGD sgd(models[cl]->parameters(), {.lr = 0.05, .momentum = 0.9});
    amp::initialize(models[cl], sgd,
                    {.opt_level = "O2", .dtype = "bf16", .verbosity = 0,
                     .memory_format = cl ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous});
    for (int step = 0; step < 4; ++step) {
      sgd.zero_grad();
      const Tensor loss = cross_entropy(amp::forward(*models[cl], b.x), b.y);
      amp::scale_loss(loss, sgd).backward();
      sgd.step();
      losses[cl].push_back(loss.item<float>());
    }
    if (cl) {
      for (const Tensor& p : models[cl]->parameters()) {
        if (p.dim() == 4) CHECK(is_channels_last_4d(p));
      }
      for (const Tensor& m : sgd.parameters()) {  // the f32 masters
        if (m.dim() == 4) CHECK(is_channels_last_4d(m));
      }
    }
    amp::reset();
  }
  for (int s = 0; s < 4; ++s) {
    INFO("step " << s << ": NCHW " << losses[0][std::size_t(s)] << ", NHWC " << losses[1][std::size_t(s)]);
    CHECK(std::isfinite(losses[1][std::size_t(s)]));
    CHECK(std::abs(losses[1][std::size_t(s)] - losses[0][std::size_t(s)]) < 0.02);
  }
  CHECK(max_param_diff(*models[1], *models[0]) < 0.02);
}

TEST_CASE("a checkpoint of channels-last weights loads into NCHW and back", "[io][channels_last]") {
  auto nhwc = make_resnet();
  nhwc->to(MemoryFormat::ChannelsLast);
  optim::SGD sgd(nhwc->parameters(), {.lr = 0.1, .momentum = 0.9});
  const Batch b = make_batch();
  cross_entropy((*nhwc)(b.x), b.y).backward();
  sgd.step();
  const std::string path = (std::filesystem::temp_directory_path() / "mg_channels_last_ckpt.safetensors").string();
  io::save_checkpoint(path, *nhwc, {{"optimizer", sgd.state_dict()}});
  const io::Checkpoint ck = io::load_checkpoint(path);
  auto nchw = make_resnet();
  optim::SGD sgd2(nchw->parameters(), {.lr = 0.1, .momentum = 0.9});
  ck.restore_model(*nchw);
  sgd2.load_state_dict(ck.state("optimizer"));
  CHECK(max_param_diff(*nchw, *nhwc) == 0);
  const Tensors pn = nchw->parameters(), pc = nhwc->parameters();
  for (std::size_t i = 0; i < pn.size(); ++i) {
    CHECK(pn[i].is_contiguous());
    CHECK(values(sgd2.state(pn[i])->buffers.at("momentum_buffer")) == values(sgd.state(pc[i])->buffers.at("momentum_buffer")));
  }
  auto back = make_resnet();
  back->to(MemoryFormat::ChannelsLast);
  ck.restore_model(*back);
  CHECK(max_param_diff(*back, *nhwc) == 0);
  for (const Tensor& p : back->parameters()) {
    if (p.dim() == 4) CHECK(is_channels_last_4d(p));
  }
  std::filesystem::remove(path);
}

TEST_CASE("optimizers still refuse a parameter that is neither contiguous nor channels-last", "[optim][channels_last]") {
  const Tensor base = randn({4, 6});
  Tensor p;
  {
    NoGradGuard no_grad;
    p = base.transpose(0, 1);  // a strided view: [6, 4] with strides {1, 6}
  }
  p.requires_grad_();
  optim::SGD sgd({p}, {.lr = 0.1});
  p.set_grad(ones({6, 4}));
  MG_REQUIRE_ERROR(sgd.step(), "is neither contiguous nor channels-last");
}

TEST_CASE("a model moved to channels-last after the optimizer's first step (state and O2 masters follow)",
          "[optim][channels_last]") {
  const Batch b = make_batch();
  // f32 with SGD momentum, AdamW, RMSprop and Adagrad state: one step NCHW, then channels-last,
  // against a model that stays NCHW all along.
  for (const std::string which : {"sgd", "adamw", "rmsprop", "adagrad"}) {
    INFO(which);
    std::shared_ptr<nn::models::ResNet> models[2] = {make_resnet(), make_resnet()};
    std::unique_ptr<optim::Optimizer> opts[2];
    for (int k = 0; k < 2; ++k) {
      const Tensors ps = models[k]->parameters();
      if (which == "sgd") opts[k] = std::make_unique<optim::SGD>(ps, optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
      else if (which == "adamw") opts[k] = std::make_unique<optim::AdamW>(ps, optim::AdamWOptions{.lr = 1e-3});
      else if (which == "rmsprop") opts[k] = std::make_unique<optim::RMSprop>(ps, optim::RMSpropOptions{.lr = 1e-3, .momentum = 0.5, .centered = true});
      else opts[k] = std::make_unique<optim::Adagrad>(ps, optim::AdagradOptions{.lr = 1e-2, .initial_accumulator_value = 0.1});
    }
    for (int step = 0; step < 3; ++step) {
      if (step == 1) models[1]->to(MemoryFormat::ChannelsLast);
      for (int k = 0; k < 2; ++k) {
        opts[k]->zero_grad();
        cross_entropy((*models[k])(b.x), b.y).backward();
        opts[k]->step();
      }
    }
    CHECK(max_param_diff(*models[1], *models[0]) < 1e-4);
    for (const Tensor& p : models[1]->parameters()) {
      if (p.dim() != 4) continue;
      for (const auto& [name, buf] : opts[1]->state(p)->buffers) CHECK(buf.strides() == p.strides());
    }
  }
  // O2: the f32 masters follow the model's new layout.
  auto model = make_resnet();
  optim::SGD sgd(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  amp::initialize(model, sgd, {.opt_level = "O2", .dtype = "bf16", .verbosity = 0});
  for (int step = 0; step < 3; ++step) {
    if (step == 1) model->to(MemoryFormat::ChannelsLast);
    sgd.zero_grad();
    amp::scale_loss(cross_entropy(amp::forward(*model, b.x), b.y), sgd).backward();
    sgd.step();
  }
  for (const Tensor& m : sgd.parameters()) {
    if (m.dim() == 4) CHECK(is_channels_last_4d(m));
  }
  for (const Tensor& p : model->parameters()) CHECK(std::isfinite(values(p)[0]));
  amp::reset();
}

TEST_CASE("conv2d_backward_weight writes dw in the weight's layout: no copy on the way to .grad", "[autograd][channels_last]") {
  for (DType dt : {DType::F32, DType::BF16, DType::F64}) {
    const Tensor x = to(randn({3, 4, 7, 7}), dt), g = to(randn({3, 6, 5, 5}), dt);
    const Tensor nchw = conv2d_backward_weight(x, g, {3, 3});
    const Tensor nhwc = conv2d_backward_weight(x, g, {3, 3}, {}, MemoryFormat::ChannelsLast);
    CHECK(nchw.is_contiguous());
    CHECK(is_channels_last_4d(nhwc));
    CHECK(!nhwc.is_contiguous());
    CHECK(values(nhwc) == values(nchw));  // the same bits, laid out NHWC
    // Through autograd: the gradient the hook sees (what AccumulateGrad receives) is already NHWC,
    // for conv2d, conv_transpose2d and the double backward's conv2d_backward_input.
    const Tensor w = to(randn({6, 4, 3, 3}), dt).contiguous(MemoryFormat::ChannelsLast).requires_grad_();
    bool arrived_nhwc = false;
    w.register_hook([&](const Tensor& grad) {
      arrived_nhwc = is_channels_last_4d(grad) && grad.strides() == w.strides();
      return Tensor();
    });
    sum(conv2d(x, w)).backward();
    CHECK(arrived_nhwc);
    CHECK(values(w.grad()) == values(conv2d_backward_weight(x, ones({3, 6, 5, 5}, {.dtype = dt}), {3, 3})));
    const Tensor wt = to(randn({4, 6, 3, 3}), dt).contiguous(MemoryFormat::ChannelsLast).requires_grad_();
    sum(conv_transpose2d(x, wt)).backward();
    CHECK(is_channels_last_4d(wt.grad()));
  }
  // A 1x1 weight is dense in both layouts; its gradient stays contiguous and is stolen as is.
  const Tensor w1 = randn({6, 4, 1, 1}).contiguous(MemoryFormat::ChannelsLast).requires_grad_();
  sum(conv2d(randn({2, 4, 5, 5}), w1)).backward();
  CHECK(w1.grad().is_contiguous());
  const auto bad = [] {
    OpAttrs a;
    a.ints = {1, 1, 0, 0, 1, 1, 1, 3, 3, 2};
    return dispatch(OpId::conv2d_backward_weight, {randn({1, 2, 5, 5}), randn({1, 2, 3, 3})}, a);
  };
  CHECK_THROWS_WITH(bad(), Catch::Contains("output layout int must be 0 (contiguous) or 1 (channels-last), got 2"));
}
