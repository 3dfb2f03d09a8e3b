// ResNet (He et al. 2016) in two families, built from a config:
// - CIFAR style for small images: a 3x3 stem with 16 channels and three stages of 16/32/64
//   channels, n basic blocks each (depth = 6n + 2: ResNet-20/32/44/56/110). The shortcut across a
//   stage change is the paper's option A (stride-2 subsampling + zero channels, parameter-free) or
//   option B (1x1 conv + batch norm). ResNet-20 with option A has 269,722 parameters for 3 input
//   channels and 10 classes, as in the paper's Table 6 ("0.27M").
// - ImageNet style (torchvision's layout and names): 7x7 stem + max pool, four stages of 64..512
//   channels, basic blocks (ResNet-18/34) or bottlenecks (ResNet-50/101/152), 1x1 conv downsample.
// Both take any number of input channels (1 for Fashion-MNIST) and classes.
//
//   auto net = nn::models::ResNet(nn::models::ResNetConfig::cifar(20, /*in_channels=*/1, /*classes=*/10));
//   mg::Tensor logits = net(x);                   // x [N, 1, 28, 28] -> [N, 10]
#pragma once
#include <memory>

#include "mixgrad/nn/container.h"
#include "mixgrad/nn/conv.h"
#include "mixgrad/nn/linear.h"
#include "mixgrad/nn/normalization.h"
#include "mixgrad/nn/pooling.h"

namespace mg::nn::models {

enum class ResNetStyle { Cifar, ImageNet };
enum class Shortcut { Pad, Projection };  // option A (zero channels) or B (1x1 conv + BN); CIFAR only

struct ResNetConfig {
  ResNetStyle style = ResNetStyle::Cifar;
  int64_t depth = 20;         // CIFAR: 6n + 2; ImageNet: 18, 34, 50, 101, 152
  int64_t in_channels = 3;
  int64_t num_classes = 10;
  Shortcut shortcut = Shortcut::Pad;
  bool zero_init_residual = false;  // last BN of each block starts at 0 (each block begins as identity)

  static ResNetConfig cifar(int64_t depth, int64_t in_channels = 3, int64_t num_classes = 10) {
    return {.style = ResNetStyle::Cifar, .depth = depth, .in_channels = in_channels, .num_classes = num_classes};
  }
  static ResNetConfig imagenet(int64_t depth, int64_t in_channels = 3, int64_t num_classes = 1000) {
    return {.style = ResNetStyle::ImageNet, .depth = depth, .in_channels = in_channels, .num_classes = num_classes};
  }
};

// conv3x3-BN-ReLU-conv3x3-BN + shortcut, ReLU. Submodules conv1, bn1, conv2, bn2 and (ImageNet
// style or option B, when the shape changes) downsample = Sequential(conv1x1, BN).
class BasicBlock : public UnaryModule {
 public:
  BasicBlock(int64_t in, int64_t out, int64_t stride, bool projection);
  Tensor forward(const Tensor& x) override;
  static constexpr int64_t kExpansion = 1;

  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<BatchNorm2d> bn1, bn2;
  std::shared_ptr<Sequential> downsample;  // null: identity or option-A padding

 private:
  int64_t in_, out_, stride_;
};

// conv1x1-BN-ReLU-conv3x3(stride)-BN-ReLU-conv1x1(x4)-BN + shortcut, ReLU (torchvision v1.5).
class Bottleneck : public UnaryModule {
 public:
  Bottleneck(int64_t in, int64_t width, int64_t stride);
  Tensor forward(const Tensor& x) override;
  static constexpr int64_t kExpansion = 4;

  std::shared_ptr<Conv2d> conv1, conv2, conv3;
  std::shared_ptr<BatchNorm2d> bn1, bn2, bn3;
  std::shared_ptr<Sequential> downsample;
};

class ResNet : public UnaryModule {
 public:
  explicit ResNet(ResNetConfig config);
  // x [N, in_channels, H, W] -> logits [N, num_classes].
  Tensor forward(const Tensor& x) override;
  const ResNetConfig& config() const { return config_; }

  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<BatchNorm2d> bn1;
  std::shared_ptr<MaxPool2d> maxpool;               // ImageNet style only
  std::vector<std::shared_ptr<Sequential>> stages;  // "layer1", "layer2", ...
  std::shared_ptr<AdaptiveAvgPool2d> avgpool;
  std::shared_ptr<Linear> fc;

 protected:
  std::string extra_repr() const override;

 private:
  ResNetConfig config_;
};

}  // namespace mg::nn::models
