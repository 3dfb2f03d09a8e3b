// 3-D layers over [N, C, D, H, W] (or unbatched [C, D, H, W]) volumes: Conv3d, ConvTranspose3d, MaxPool3d,
// AvgPool3d and AdaptiveAvgPool3d, PyTorch's options and parameter names, on the ops of
// ops/conv3d.h (built on the 2-D kernels; see there for how and what it costs).
//
//   auto conv = nn::make<nn::Conv3d>({.in = 1, .out = 8, .kernel = 3, .padding = 1});
//   mg::Tensor y = (*conv)(x);                       // x [N, 1, D, H, W] -> [N, 8, D, H, W]
#pragma once
#include <optional>

#include "mixgrad/nn/module.h"
#include "mixgrad/nn/size3.h"
#include "mixgrad/ops/pad.h"

namespace mg::nn {

struct Conv3dOptions {
  int64_t in = 0;       // input channels
  int64_t out = 0;      // output channels
  Size3 kernel;         // required
  Size3 stride = 1;
  Size3 padding = 0;    // zeros on every side
  Size3 dilation = 1;
  int64_t groups = 1;   // must divide in and out
  bool bias = true;
  bool padding_same = false;  // PyTorch's padding="same" (stride 1; `padding` must stay 0): D, H, W kept
  // What the padding holds: Constant = zeros (PyTorch's "zeros"), or Reflect, Replicate, Circular.
  // Other than zeros, and for "same", the input is padded by ops/pad.h first (one copy of the
  // input), then convolved without padding, as PyTorch does.
  PadMode padding_mode = PadMode::Constant;
};

// weight [out, in/groups, kd, kh, kw] and bias [out], initialised as PyTorch's
// (kaiming_uniform(a = sqrt 5), bias U(±1/sqrt(fan_in))).
class Conv3d : public UnaryModule {
 public:
  using Options = Conv3dOptions;
  explicit Conv3d(Options options);
  Tensor forward(const Tensor& x) override;
  void reset_parameters();

  Tensor weight;  // [out, in/groups, kd, kh, kw]
  Tensor bias;    // [out] or undefined

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

struct ConvTranspose3dOptions {
  int64_t in = 0;
  int64_t out = 0;
  Size3 kernel;
  Size3 stride = 1;
  Size3 padding = 0;
  Size3 output_padding = 0;  // extra planes/rows/cols on one side; smaller than stride or dilation
  Size3 dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

// The transposed convolution (mg::conv_transpose3d): weight [in, out/groups, kd, kh, kw],
// initialised as PyTorch's (fan_in = out/groups·kd·kh·kw).
class ConvTranspose3d : public UnaryModule {
 public:
  using Options = ConvTranspose3dOptions;
  explicit ConvTranspose3d(Options options);
  Tensor forward(const Tensor& x) override;
  // PyTorch's forward(input, output_size): the output's {D, H, W} chosen instead of
  // output_padding (each within stride - 1 above the smallest size).
  Tensor forward(const Tensor& x, Size3 output_size);
  void reset_parameters();

  Tensor weight;  // [in, out/groups, kd, kh, kw]
  Tensor bias;    // [out] or undefined

 protected:
  std::string extra_repr() const override;

 private:
  Tensor run(const Tensor& x, Size3 output_padding);
  Options options_;
};

struct MaxPool3dOptions {
  Size3 kernel;
  Size3 stride = 0;     // 0: the kernel
  Size3 padding = 0;
  Size3 dilation = 1;
  bool ceil_mode = false;
};

class MaxPool3d : public UnaryModule {
 public:
  using Options = MaxPool3dOptions;
  explicit MaxPool3d(Options options);
  Tensor forward(const Tensor& x) override;
  // PyTorch's return_indices = true: the maxima and their i64 positions d * H * W + h * W + w in
  // the input's volume (for MaxUnpool3d, nn/max_unpool.h).
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& x);

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

struct AvgPool3dOptions {
  Size3 kernel;
  Size3 stride = 0;     // 0: the kernel
  Size3 padding = 0;
  bool count_include_pad = true;  // the field order of AvgPool1d/2d's options and of avg_pool3d's arguments
  bool ceil_mode = false;
  std::optional<int64_t> divisor_override;  // > 0: divide every window's sum by it
};

class AvgPool3d : public UnaryModule {
 public:
  using Options = AvgPool3dOptions;
  explicit AvgPool3d(Options options);
  Tensor forward(const Tensor& x) override;

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

struct AdaptiveAvgPool3dOptions {
  Size3 output;  // output D, H, W, each >= 1
};

class AdaptiveAvgPool3d : public UnaryModule {
 public:
  using Options = AdaptiveAvgPool3dOptions;
  explicit AdaptiveAvgPool3d(Options options);
  Tensor forward(const Tensor& x) override;

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

}  // namespace mg::nn
