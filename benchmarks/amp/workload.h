// The models bench_amp trains, each with its optimizer, a fixed synthetic batch of the right
// shape and its loss — the same definitions the PyTorch peer (benchmarks/torch_amp_peer.py)
// rebuilds layer for layer:
//   mlp        784-1024-1024-10 (ReLU), batch 256, SGD (lr 0.01, momentum 0.9)
//   resnet20   CIFAR-style ResNet-20 on 1x28x28, 10 classes, batch 128, SGD (lr 0.05, momentum
//              0.9, weight decay 5e-4)
//   bert-mini  BERT-mini MLM (4 layers, hidden 256, 4 heads, FFN 1024, vocab 8192, dropout 0.1),
//              sequence 128, batch 32, logits and cross-entropy at all positions, AdamW (lr 1e-4,
//              weight decay 0.01)
//   resnet50   ImageNet ResNet-50, 3x224x224, 1000 classes, batch 256, SGD as resnet20 (GPU only)
//   bert-base  BERT-base MLM (vocab 30522), sequence 128, batch 64, AdamW as bert-mini (GPU only)
// (issue 15's sizes for the two GPU models). WorkloadOptions::batch overrides the batch.
// With `smoke` every model shrinks to seconds-per-run sizes (ResNet-8, one BERT layer of width
// 64, ...) for the CTest smoke run; the names stay, the description says the size.
//
// Decision: the batch is generated once (seeded) and reused every step, so the step time holds
// no data loading and the loss after a fixed number of steps is comparable between levels: it
// measures how each level fits the same batch from the same initial weights.
//
//   mg::bench::Workload w = mg::bench::make_workload("resnet20", {.device = mg::Device::cpu()});
//   mg::amp::initialize_models({w.net}, {w.optimizer.get()}, {.opt_level = "O1", .dtype = "bf16"});
//   w.optimizer->zero_grad();  mg::Tensor loss = w.loss();  mg::amp::scale_loss(loss, *w.optimizer).backward();
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace mg::bench {

struct WorkloadOptions {
  Device device = Device::cpu();
  bool smoke = false;  // tiny sizes for the CTest smoke run
  uint64_t seed = 0;   // initial weights, batch and dropout
  int64_t batch = 0;   // samples per step; 0: the model's own (above)
};

struct Workload {
  std::string name;         // "resnet20"
  std::string description;  // "ResNet-20 1x28x28, batch 128, SGD"
  std::string unit;         // what a sample is: "img", "seq"
  int64_t batch = 0;        // samples per step
  bool convnet = false;     // 4-D image input through convolutions (the memory format matters)
  std::shared_ptr<nn::Module> net;
  std::unique_ptr<optim::Optimizer> optimizer;
  // Forward through amp::forward (the level's input/output casts) and the mean cross-entropy of
  // the fixed batch: the loss of one step, f32 scalar.
  std::function<Tensor()> loss;
};

// The models the device runs by default: mlp, resnet20, bert-mini; on CUDA also resnet50 and
// bert-base.
std::vector<std::string> default_workloads(Device device);
// Every name make_workload knows.
std::vector<std::string> known_workloads();

// Seeds the default generator with options.seed, builds the model on options.device, its
// optimizer and the batch. An unknown name is an mg::Error listing the known ones; resnet50 and
// bert-base on the CPU are refused (hours per run on this class of machine). A CUDA device
// without a usable GPU gives the framework's DeviceError.
Workload make_workload(const std::string& name, const WorkloadOptions& options = {});

}  // namespace mg::bench
