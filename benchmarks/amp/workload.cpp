// The benchmark models, their optimizers and synthetic batches (see workload.h).
#include "benchmarks/amp/workload.h"

#include <algorithm>

#include "amp/initialize.h"
#include "core/error.h"
#include "core/factory.h"
#include "core/generator.h"
#include "cuda/cuda.h"
#include "nn/activation.h"
#include "nn/container.h"
#include "nn/linear.h"
#include "nn/models/bert.h"
#include "nn/models/resnet.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "optim/adam.h"
#include "optim/sgd.h"

namespace mg::bench {

namespace {

const std::vector<std::string> kAll = {"mlp", "resnet20", "bert-mini", "resnet50", "bert-base"};

std::string str_i(int64_t v) { return std::to_string(v); }

// x [N, ...] f32 images and y [N] i64 classes, on the device.
Workload image_workload(std::string name, std::string description, std::shared_ptr<nn::UnaryModule> net,
                        const Shape& input, int64_t classes, const WorkloadOptions& o) {
  Workload w;
  w.name = std::move(name);
  w.description = std::move(description);
  w.unit = "img";
  w.batch = input[0];
  w.convnet = input.size() == 4;
  net->to(o.device);
  const Tensor x = randn(input).to(o.device);                     // [N, C, H, W] or [N, 784]
  const Tensor y = randint(0, classes, {input[0]}).to(o.device);  // [N]
  w.net = net;
  nn::UnaryModule* m = net.get();
  w.loss = [m, x, y] { return cross_entropy(amp::forward(*m, x), y); };
  return w;
}

Workload bert_workload(std::string name, nn::models::BertConfig cfg, int64_t batch, int64_t seq, const WorkloadOptions& o) {
  Workload w;
  w.name = std::move(name);
  w.description = "BERT " + str_i(cfg.layers) + "x" + str_i(cfg.hidden) + " MLM, vocab " + str_i(cfg.vocab_size) +
                  ", seq " + str_i(seq) + ", batch " + str_i(batch) + ", AdamW";
  w.unit = "seq";
  w.batch = batch;
  auto net = std::make_shared<nn::models::BertForMaskedLM>(cfg);
  net->to(o.device);
  const Tensor ids = randint(0, cfg.vocab_size, {batch, seq}).to(o.device);     // [B, L]
  const Tensor target = randint(0, cfg.vocab_size, {batch * seq}).to(o.device);  // [B * L]
  nn::models::BertForMaskedLM* m = net.get();
  const int64_t v = cfg.vocab_size;
  w.loss = [m, ids, target, batch, seq, v] {
    const Tensor logits = amp::forward(*m, ids);  // [B, L, V], every position
    return cross_entropy(logits.reshape({batch * seq, v}), target);
  };
  w.net = net;
  w.optimizer = std::make_unique<optim::AdamW>(net->parameters(), optim::AdamWOptions{.lr = 1e-4, .weight_decay = 0.01});
  return w;
}

std::unique_ptr<optim::Optimizer> resnet_sgd(nn::Module& net) {
  return std::make_unique<optim::SGD>(net.parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4});
}

}  // namespace

std::vector<std::string> known_workloads() { return kAll; }

std::vector<std::string> default_workloads(Device device) {
  if (device.type == DeviceType::CUDA) return kAll;
  return {"mlp", "resnet20", "bert-mini"};
}

Workload make_workload(const std::string& name, const WorkloadOptions& o) {
  if (std::find(kAll.begin(), kAll.end(), name) == kAll.end()) {
    throw Error("make_workload: unknown model '" + name + "'; known: mlp, resnet20, bert-mini, resnet50, bert-base");
  }
  if (o.device.type == DeviceType::CUDA) cuda::check_device(o.device);
  if ((name == "resnet50" || name == "bert-base") && o.device.type != DeviceType::CUDA && !o.smoke) {
    throw Error("make_workload: " + name + " runs on a GPU only (--device cuda); on the CPU a run takes hours\n"
                "  hint: --models mlp,resnet20,bert-mini");
  }
  MG_CHECK(o.batch >= 0, Error, "make_workload: batch must be positive (0: the model's own), got ", o.batch);
  manual_seed(o.seed);
  const bool s = o.smoke;
  auto batch_or = [&](int64_t own) { return o.batch > 0 ? o.batch : own; };
  if (name == "mlp") {
    const int64_t hidden = s ? 128 : 1024, batch = batch_or(s ? 32 : 256);
    auto net = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::UnaryModule>>{
        nn::make<nn::Linear>({.in = 784, .out = hidden}), nn::make<nn::ReLU>(),
        nn::make<nn::Linear>({.in = hidden, .out = hidden}), nn::make<nn::ReLU>(),
        nn::make<nn::Linear>({.in = hidden, .out = 10})});
    Workload w = image_workload(name, "MLP 784-" + str_i(hidden) + "-" + str_i(hidden) + "-10, batch " + str_i(batch) + ", SGD",
                                net, {batch, 784}, 10, o);
    w.optimizer = std::make_unique<optim::SGD>(net->parameters(), optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
    return w;
  }
  if (name == "resnet20" || name == "resnet50") {
    const bool cifar = name == "resnet20";
    const int64_t depth = cifar ? (s ? 8 : 20) : (s ? 18 : 50);
    const int64_t batch = batch_or(cifar ? (s ? 8 : 128) : (s ? 2 : 256)), hw = cifar ? 28 : (s ? 64 : 224);
    const int64_t channels = cifar ? 1 : 3, classes = cifar ? 10 : 1000;
    auto net = std::make_shared<nn::models::ResNet>(cifar ? nn::models::ResNetConfig::cifar(depth, channels, classes)
                                                          : nn::models::ResNetConfig::imagenet(depth, channels, classes));
    Workload w = image_workload(name,
                                "ResNet-" + str_i(depth) + " " + str_i(channels) + "x" + str_i(hw) + "x" + str_i(hw) +
                                    ", batch " + str_i(batch) + ", SGD",
                                net, {batch, channels, hw, hw}, classes, o);
    w.optimizer = resnet_sgd(*net);
    return w;
  }
  if (name == "bert-mini") {
    nn::models::BertConfig cfg = nn::models::BertConfig::mini(8192);
    if (s) {
      cfg = nn::models::BertConfig::tiny(1024);
      cfg.hidden = 64, cfg.layers = 1, cfg.heads = 2, cfg.intermediate = 256;
    }
    return bert_workload(name, cfg, batch_or(s ? 4 : 32), s ? 16 : 128, o);
  }
  nn::models::BertConfig cfg = nn::models::BertConfig::base(30522);  // bert-base
  if (s) {
    cfg = nn::models::BertConfig::tiny(1024);
    cfg.layers = 1;
  }
  return bert_workload(name, cfg, batch_or(s ? 2 : 64), s ? 16 : 128, o);
}

}  // namespace mg::bench
