// The ResNet model zoo: parameter counts equal the reference architectures, torchvision's names,
// forward/backward on random images in f32 and bf16, option A/B shortcuts, bad input.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/factory.h"
#include "ops/loss.h"
#include "nn/models/resnet.h"
#include "test_util.h"

using namespace mg;
using namespace mg::nn::models;
using mg::test::values;

namespace {

bool all_finite(const Tensor& t) {
  for (double v : values(t)) {
    if (!std::isfinite(v)) return false;
  }
  return true;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto va = values(a), vb = values(b);
  double m = 0;
  for (std::size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(va[i] - vb[i]));
  return m;
}

}  // namespace

TEST_CASE("ResNet parameter counts equal the reference architectures", "[nn][models]") {
  // He et al. 2016, Table 6: ResNet-20 0.27M, ResNet-32 0.46M, ResNet-56 0.85M (option A).
  CHECK(ResNet(ResNetConfig::cifar(20, 3, 10)).num_parameters() == 269722);
  CHECK(ResNet(ResNetConfig::cifar(32, 3, 10)).num_parameters() == 464154);
  CHECK(ResNet(ResNetConfig::cifar(56, 3, 10)).num_parameters() == 853018);
  // One input channel (Fashion-MNIST) removes 16 * 2 * 9 stem weights.
  CHECK(ResNet(ResNetConfig::cifar(20, 1, 10)).num_parameters() == 269722 - 288);
  // Option B adds the two 1x1 projections and their batch norms.
  auto b = ResNetConfig::cifar(20, 3, 10);
  b.shortcut = Shortcut::Projection;
  CHECK(ResNet(b).num_parameters() == 269722 + (16 * 32 + 64) + (32 * 64 + 128));
  // torchvision: resnet18 11,689,512; resnet34 21,797,672; resnet50 25,557,032.
  CHECK(ResNet(ResNetConfig::imagenet(18)).num_parameters() == 11689512);
  CHECK(ResNet(ResNetConfig::imagenet(34)).num_parameters() == 21797672);
  CHECK(ResNet(ResNetConfig::imagenet(50)).num_parameters() == 25557032);
}

TEST_CASE("ResNet uses torchvision's parameter and buffer names", "[nn][models]") {
  ResNet net(ResNetConfig::imagenet(18, 3, 10));
  std::vector<std::string> names;
  for (auto& [n, t] : net.state_dict()) names.push_back(n);
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  CHECK(has("conv1.weight"));
  CHECK(has("bn1.running_var"));
  CHECK(has("layer1.0.conv1.weight"));
  CHECK(has("layer2.0.downsample.0.weight"));
  CHECK(has("layer2.0.downsample.1.num_batches_tracked"));
  CHECK(has("layer4.1.bn2.bias"));
  CHECK(has("fc.weight"));
  CHECK(!has("layer1.0.downsample.0.weight"));  // no projection where shapes match
  ResNet r50(ResNetConfig::imagenet(50, 3, 10));
  CHECK(r50.state_dict()[0].first == "conv1.weight");
  bool bottleneck = false;
  for (auto& [n, t] : r50.named_parameters()) bottleneck |= n == "layer3.5.conv3.weight";
  CHECK(bottleneck);
}

TEST_CASE("ResNet-20 forward and backward on random images in f32 and bf16", "[nn][models]") {
  manual_seed(3);
  ResNet net(ResNetConfig::cifar(20, 1, 10));
  Tensor x = randn({4, 1, 28, 28});
  Tensor target = from_vector<int64_t>({1, 7, 3, 9}, {4});

  Tensor logits = net(x);
  REQUIRE(logits.shape() == Shape{4, 10});
  REQUIRE(logits.dtype() == DType::F32);
  REQUIRE(all_finite(logits));
  Tensor loss = cross_entropy(logits, target);
  loss.backward();
  for (auto& [name, p] : net.named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    REQUIRE(p.grad().shape() == p.shape());
    REQUIRE(all_finite(p.grad()));
  }
  // The stem conv's gradient is not all zero (the graph reaches the first layer).
  double g = 0;
  for (double v : values(net.conv1->weight.grad())) g += std::abs(v);
  REQUIRE(g > 0);

  // The same weights in bf16 (batch norm kept f32): close to the f32 logits, f32 grads for the
  // f32 batch-norm parameters, bf16 for the rest.
  net.zero_grad();
  const Tensor ref = logits.detach();
  net.to(DType::BF16, nn::is_batch_norm);
  REQUIRE(net.conv1->weight.dtype() == DType::BF16);
  REQUIRE(net.bn1->weight.dtype() == DType::F32);
  Tensor lowp = net(x.to(DType::BF16));
  REQUIRE(lowp.dtype() == DType::BF16);
  REQUIRE(all_finite(lowp));
  // 20 layers of bf16 rounding (8 bits of mantissa): a few percent of the logit scale.
  double scale = 0;
  for (double v : values(ref)) scale = std::max(scale, std::abs(v));
  CHECK(max_abs_diff(lowp, ref) < 0.1 * scale + 0.05);
  cross_entropy(lowp, target).backward();
  REQUIRE(net.conv1->weight.grad().dtype() == DType::BF16);
  REQUIRE(net.bn1->weight.grad().dtype() == DType::F32);
  REQUIRE(all_finite(net.conv1->weight.grad()));
}

TEST_CASE("ResNet option A shortcut pads channels with zeros and subsamples", "[nn][models]") {
  // With every conv weight zero, each block outputs relu(shortcut): the input subsampled by 2
  // per stage change and padded with zero channels on both sides.
  ResNet net(ResNetConfig::cifar(8, 16, 2));  // n = 1: stem, one block per stage
  NoGradGuard no_grad;
  for (auto& [name, p] : net.named_parameters()) {
    if (name.find("conv") != std::string::npos && name != "conv1.weight") p.zero_();
  }
  auto* block = static_cast<BasicBlock*>((*net.stages[1])[0].get());
  Tensor x = rand({1, 16, 4, 4});
  Tensor y = block->forward(x);  // 16 -> 32 channels, stride 2
  REQUIRE(y.shape() == Shape{1, 32, 2, 2});
  const auto vx = values(x), vy = values(y);
  for (int64_t c = 0; c < 32; ++c) {
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const double expect = (c < 8 || c >= 24) ? 0.0 : vx[((c - 8) * 4 + 2 * i) * 4 + 2 * j];
        REQUIRE(vy[(c * 2 + i) * 2 + j] == expect);
      }
    }
  }
}

TEST_CASE("ResNet zero_init_residual starts every residual block as the identity", "[nn][models]") {
  // torchvision's zero_init_residual (Goyal et al. 2017): the last batch norm of each block starts
  // with weight 0, so a block computes relu(shortcut(x)) until training moves that weight. Without
  // it a deep ImageNet-style ResNet evaluated after a few steps can give huge losses (docs/examples.md).
  for (const ResNetConfig& base : {ResNetConfig::cifar(8, 3, 4), ResNetConfig::imagenet(18, 3, 4),
                                   ResNetConfig::imagenet(50, 3, 4)}) {
    for (const bool zero_init : {false, true}) {
      ResNetConfig c = base;
      c.zero_init_residual = zero_init;
      ResNet net(c);
      int64_t last_bns = 0;
      for (auto& [name, p] : net.named_parameters()) {
        if (name.find(".bn") == std::string::npos || name.find(".weight") == std::string::npos) continue;
        const bool last = name.find(c.depth >= 50 ? ".bn3." : ".bn2.") != std::string::npos;
        last_bns += last;
        const double expect = (last && zero_init) ? 0.0 : 1.0;
        for (double v : values(p)) REQUIRE(v == expect);
      }
      REQUIRE(last_bns == (c.depth == 8 ? 3 : c.depth == 18 ? 8 : 16));
      if (!zero_init) continue;
      // Every block of every stage: relu(shortcut(x)) exactly, in training mode (batch statistics).
      Tensor h = rand({2, 3, 32, 32});
      h = relu((*net.bn1)((*net.conv1)(h)));
      if (net.maxpool) h = (*net.maxpool)(h);
      for (auto& stage : net.stages) {
        for (std::size_t i = 0; i < stage->size(); ++i) {
          nn::UnaryModule* block = (*stage)[i].get();
          Tensor shortcut = h;
          if (auto* bb = dynamic_cast<BasicBlock*>(block); bb && bb->downsample) shortcut = (*bb->downsample)(h);
          if (auto* bt = dynamic_cast<Bottleneck*>(block); bt && bt->downsample) shortcut = (*bt->downsample)(h);
          const Tensor y = block->forward(h);
          if (c.style == ResNetStyle::Cifar && shortcut.is_same(h) && y.shape() != h.shape()) {
            h = y;  // option A's padded shortcut: tested above
            continue;
          }
          REQUIRE(max_abs_diff(y, relu(shortcut)) == 0.0);
          h = y;
        }
      }
    }
  }
}

TEST_CASE("ResNet rejects bad configs and inputs with the layer and shapes named", "[nn][models][errors]") {
  MG_REQUIRE_ERROR(ResNet(ResNetConfig::cifar(21)), "CIFAR-style depth must be 6n + 2");
  MG_REQUIRE_ERROR(ResNet(ResNetConfig::imagenet(19)), "ImageNet-style depth must be 18, 34, 50, 101 or 152");
  ResNet net(ResNetConfig::cifar(20, 1, 10));
  MG_REQUIRE_ERROR(net(zeros({2, 3, 28, 28})), "expected images [N, 1, H, W], got input [2, 3, 28, 28]");
  MG_REQUIRE_ERROR(net(zeros({3, 28, 28})), "got input [3, 28, 28]");
}
