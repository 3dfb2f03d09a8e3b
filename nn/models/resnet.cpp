#include "mixgrad/nn/models/resnet.h"

#include "mixgrad/core/factory.h"
#include "mixgrad/nn/init.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn::models {
namespace {

std::shared_ptr<Conv2d> conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return make<Conv2d>({.in = in, .out = out, .kernel = kernel, .stride = stride, .padding = kernel / 2, .bias = false});
}
std::shared_ptr<BatchNorm2d> bn(int64_t c) { return make<BatchNorm2d>({.features = c}); }

// Option A shortcut: keep every other pixel and add zero channels on both sides,
// x [N, in, H, W] -> [N, out, H/stride, W/stride].
Tensor pad_shortcut(const Tensor& x, int64_t out, int64_t stride) {
  Tensor s = stride == 1 ? x : slice(slice(x, 2, 0, x.size(2), stride), 3, 0, x.size(3), stride);
  const int64_t extra = out - x.size(1);
  if (extra == 0) return s;
  const int64_t before = extra / 2;
  Tensor zb = zeros({s.size(0), before, s.size(2), s.size(3)}, {.dtype = s.dtype(), .device = s.device()});
  Tensor za = zeros({s.size(0), extra - before, s.size(2), s.size(3)}, {.dtype = s.dtype(), .device = s.device()});
  return cat({zb, s, za}, 1);
}

}  // namespace

BasicBlock::BasicBlock(int64_t in, int64_t out, int64_t stride, bool projection)
    : UnaryModule("BasicBlock"), in_(in), out_(out), stride_(stride) {
  conv1 = register_module("conv1", conv(in, out, 3, stride));
  bn1 = register_module("bn1", bn(out));
  conv2 = register_module("conv2", conv(out, out, 3, 1));
  bn2 = register_module("bn2", bn(out));
  if (projection && (stride != 1 || in != out)) {
    downsample = register_module("downsample", std::make_shared<Sequential>(
                                                   std::vector<std::shared_ptr<UnaryModule>>{conv(in, out, 1, stride), bn(out)}));
  }
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor h = relu((*bn1)((*conv1)(x)));   // [N, out, H/s, W/s]
  h = (*bn2)((*conv2)(h));
  const Tensor shortcut = downsample ? (*downsample)(x) : pad_shortcut(x, out_, stride_);
  return relu(add(h, shortcut));
}

Bottleneck::Bottleneck(int64_t in, int64_t width, int64_t stride) : UnaryModule("Bottleneck") {
  const int64_t out = width * kExpansion;
  conv1 = register_module("conv1", conv(in, width, 1, 1));
  bn1 = register_module("bn1", bn(width));
  conv2 = register_module("conv2", conv(width, width, 3, stride));
  bn2 = register_module("bn2", bn(width));
  conv3 = register_module("conv3", conv(width, out, 1, 1));
  bn3 = register_module("bn3", bn(out));
  if (stride != 1 || in != out) {
    downsample = register_module("downsample", std::make_shared<Sequential>(
                                                   std::vector<std::shared_ptr<UnaryModule>>{conv(in, out, 1, stride), bn(out)}));
  }
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor h = relu((*bn1)((*conv1)(x)));
  h = relu((*bn2)((*conv2)(h)));
  h = (*bn3)((*conv3)(h));
  return relu(add(h, downsample ? (*downsample)(x) : x));
}

ResNet::ResNet(ResNetConfig c) : UnaryModule("ResNet"), config_(c) {
  MG_CHECK(c.in_channels > 0 && c.num_classes > 0, Error, "ResNet: in_channels and num_classes must be positive, got ",
           c.in_channels, " and ", c.num_classes);
  std::vector<int64_t> blocks, widths;
  bool bottleneck = false;
  if (c.style == ResNetStyle::Cifar) {
    MG_CHECK(c.depth >= 8 && (c.depth - 2) % 6 == 0, Error, "ResNet: a CIFAR-style depth must be 6n + 2 (20, 32, 44, 56, 110), got ",
             c.depth);
    const int64_t n = (c.depth - 2) / 6;
    blocks = {n, n, n};
    widths = {16, 32, 64};
    conv1 = register_module("conv1", conv(c.in_channels, 16, 3, 1));
  } else {
    switch (c.depth) {
      case 18: blocks = {2, 2, 2, 2}; break;
      case 34: blocks = {3, 4, 6, 3}; break;
      case 50: blocks = {3, 4, 6, 3}; bottleneck = true; break;
      case 101: blocks = {3, 4, 23, 3}; bottleneck = true; break;
      case 152: blocks = {3, 8, 36, 3}; bottleneck = true; break;
      default: MG_THROW(Error, "ResNet: an ImageNet-style depth must be 18, 34, 50, 101 or 152, got ", c.depth);
    }
    widths = {64, 128, 256, 512};
    conv1 = register_module("conv1", conv(c.in_channels, 64, 7, 2));
  }
  bn1 = register_module("bn1", bn(widths[0]));
  if (c.style == ResNetStyle::ImageNet) maxpool = register_module<MaxPool2d>("maxpool", {.kernel = 3, .stride = 2, .padding = 1});

  int64_t channels = widths[0];
  for (std::size_t s = 0; s < blocks.size(); ++s) {
    auto stage = std::make_shared<Sequential>();
    for (int64_t b = 0; b < blocks[s]; ++b) {
      const int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      if (bottleneck) {
        stage->push_back(std::make_shared<Bottleneck>(channels, widths[s], stride));
        channels = widths[s] * Bottleneck::kExpansion;
      } else {
        const bool projection = c.style == ResNetStyle::ImageNet || c.shortcut == Shortcut::Projection;
        stage->push_back(std::make_shared<BasicBlock>(channels, widths[s], stride, projection));
        channels = widths[s];
      }
    }
    stages.push_back(register_module("layer" + std::to_string(s + 1), stage));
  }
  avgpool = register_module<AdaptiveAvgPool2d>("avgpool", {.output = 1});
  fc = register_module<Linear>("fc", {.in = channels, .out = c.num_classes});

  // Initialisation as torchvision: He-normal (fan_out, ReLU) convs, BN weight 1 and bias 0, the
  // classifier with Linear's default; optionally the last BN of each block at 0.
  for (const auto& [name, m] : named_modules()) {
    if (auto* cv = dynamic_cast<const Conv2d*>(m)) {
      init::kaiming_normal_(cv->weight, {.mode = init::FanMode::FanOut, .nonlinearity = init::Nonlinearity::ReLU});
    }
  }
  if (c.zero_init_residual) {
    for (const auto& stage : stages) {
      for (std::size_t i = 0; i < stage->size(); ++i) {
        if (auto bb = std::dynamic_pointer_cast<BasicBlock>((*stage)[i])) init::zeros_(bb->bn2->weight);
        if (auto bt = std::dynamic_pointer_cast<Bottleneck>((*stage)[i])) init::zeros_(bt->bn3->weight);
      }
    }
  }
}

Tensor ResNet::forward(const Tensor& x) {
  MG_CHECK(x.defined() && x.dim() == 4 && x.size(1) == config_.in_channels, ShapeError, layer_name(),
           ": expected images [N, ", config_.in_channels, ", H, W], got input ",
           x.defined() ? str_cat(x.shape()) : "undefined");
  Tensor h = relu((*bn1)((*conv1)(x)));
  if (maxpool) h = (*maxpool)(h);
  for (auto& stage : stages) h = (*stage)(h);
  h = (*avgpool)(h).flatten(1);  // [N, C]
  return (*fc)(h);
}

std::string ResNet::extra_repr() const {
  return str_cat("depth=", config_.depth, ", style=", config_.style == ResNetStyle::Cifar ? "cifar" : "imagenet",
                 ", in_channels=", config_.in_channels, ", num_classes=", config_.num_classes);
}

}  // namespace mg::nn::models
