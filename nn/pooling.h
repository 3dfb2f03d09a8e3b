// Pooling layers over NCHW images.
//
//   auto pool = nn::make<nn::MaxPool2d>({.kernel = 3, .stride = 2, .padding = 1});
//   auto gap  = nn::make<nn::AdaptiveAvgPool2d>({.output = 1});   // [N, C, H, W] -> [N, C, 1, 1]
#pragma once
#include <optional>
#include <utility>

#include "mixgrad/nn/module.h"
#include "mixgrad/nn/size2.h"

namespace mg::nn {

struct MaxPool2dOptions {
  Size2 kernel;       // required
  Size2 stride = 0;   // 0: the kernel size (PyTorch's default)
  Size2 padding = 0;  // -inf padding, at most half the kernel
  Size2 dilation = 1;
  bool ceil_mode = false;  // round the output size up (PyTorch's ceil_mode)
};

class MaxPool2d : public UnaryModule {
 public:
  using Options = MaxPool2dOptions;
  explicit MaxPool2d(Options options);
  Tensor forward(const Tensor& x) override;
  // PyTorch's return_indices = true: the maxima and their i64 positions h * W + w in the input's
  // plane (for MaxUnpool2d, nn/max_unpool.h).
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& x);

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

struct AvgPool2dOptions {
  Size2 kernel;
  Size2 stride = 0;   // 0: the kernel size
  Size2 padding = 0;  // zero padding, at most half the kernel
  bool count_include_pad = true;
  bool ceil_mode = false;  // round the output size up (PyTorch's ceil_mode)
  std::optional<int64_t> divisor_override;  // > 0: divide every window's sum by it
};

class AvgPool2d : public UnaryModule {
 public:
  using Options = AvgPool2dOptions;
  explicit AvgPool2d(Options options);
  Tensor forward(const Tensor& x) override;

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

struct AdaptiveAvgPool2dOptions {
  Size2 output;  // output {H, W}
};

class AdaptiveAvgPool2d : public UnaryModule {
 public:
  using Options = AdaptiveAvgPool2dOptions;
  explicit AdaptiveAvgPool2d(Options options);
  Tensor forward(const Tensor& x) override;

 protected:
  std::string extra_repr() const override { return "output=" + options_.output.str(); }

 private:
  Options options_;
};

}  // namespace mg::nn
