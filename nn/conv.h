// Convolution layers over NCHW images.
//
//   auto conv = nn::make<nn::Conv2d>({.in = 3, .out = 16, .kernel = 3, .padding = 1, .bias = false});
//   mg::Tensor y = (*conv)(x);                                  // x [N, 3, H, W] -> [N, 16, H, W]
#pragma once
#include <string>
#include <vector>
#include "mixgrad/nn/module.h"
#include "mixgrad/nn/size2.h"
#include "mixgrad/ops/pad.h"

namespace mg::nn {

struct Conv2dOptions {
  int64_t in = 0;       // input channels
  int64_t out = 0;      // output channels
  Size2 kernel;         // required
  Size2 stride = 1;
  Size2 padding = 0;    // zeros on both sides
  Size2 dilation = 1;
  int64_t groups = 1;   // must divide in and out
  bool bias = true;
  bool padding_same = false;  // PyTorch's padding="same" (stride 1; `padding` must stay 0): H, W kept
  // What the padding holds: Constant = zeros (PyTorch's "zeros"), or Reflect, Replicate, Circular
  // (the input is padded by ops/pad.h first, then convolved without padding, as PyTorch does).
  PadMode padding_mode = PadMode::Constant;
};

// y [N, out, Ho, Wo] = conv2d(x [N, in, H, W], weight [out, in/groups, kH, kW]) + bias [out];
// weight and bias from U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in/groups * kH * kW (PyTorch).
class Conv2d : public UnaryModule {
 public:
  using Options = Conv2dOptions;
  explicit Conv2d(Options options);
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  const Options& options() const { return options_; }

  Tensor weight;  // [out, in/groups, kH, kW]
  Tensor bias;    // [out] or undefined

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

struct ConvTranspose2dOptions {
  int64_t in = 0;
  int64_t out = 0;
  Size2 kernel;
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 output_padding = 0;  // extra rows/cols on one side; smaller than stride or dilation
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

// The transposed convolution (gradient of Conv2d w.r.t. its input, plus bias):
// x [N, in, H, W] -> [N, out, (H-1) stride - 2 pad + dil (k-1) + output_padding + 1, ...];
// weight [in, out/groups, kH, kW] initialised as PyTorch does (fan_in = out/groups * kH * kW).
class ConvTranspose2d : public UnaryModule {
 public:
  using Options = ConvTranspose2dOptions;
  explicit ConvTranspose2d(Options options);
  Tensor forward(const Tensor& x) override;
  // PyTorch's forward(input, output_size): the output's {H, W} chosen instead of output_padding
  // (each within stride - 1 above the smallest size).
  Tensor forward(const Tensor& x, Size2 output_size);
  void reset_parameters();
  const Options& options() const { return options_; }

  Tensor weight;  // [in, out/groups, kH, kW]
  Tensor bias;    // [out] or undefined

 protected:
  std::string extra_repr() const override;

 private:
  Tensor run(const Tensor& x, Size2 output_padding);
  Options options_;
};

namespace detail {
// PyTorch's default init of a conv weight (kaiming_uniform, a = sqrt 5) and bias
// (U(-1/sqrt(fan_in), 1/sqrt(fan_in))), for weights of any rank (Conv1d/2d and the transposed ones).
void reset_conv(Tensor& weight, Tensor& bias);
// The amounts for ops/pad.h (last spatial dim first, before then after) that pad an input for a
// convolution with padding_mode or padding_same: `padding` on both sides, or with `same` each dim's
// total dilation (kernel - 1) split as PyTorch splits it, the smaller half before. Per-dim vectors
// in the input's order (D, H, W).
std::vector<int64_t> conv_pad_amounts(const std::vector<int64_t>& kernel, const std::vector<int64_t>& dilation,
                                      const std::vector<int64_t>& padding, bool same);
// PyTorch's output_size of a transposed convolution: the output_padding per spatial dim that
// gives `want` from x's last want.size() dims. Each wanted size must lie in [m, m + stride - 1],
// m = (in - 1) stride - 2 pad + dil (k - 1) + 1; a ShapeError names the layer and the range.
std::vector<int64_t> transposed_output_padding(const std::string& layer, const Tensor& x,
                                               const std::vector<int64_t>& want, const std::vector<int64_t>& kernel,
                                               const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                                               const std::vector<int64_t>& dilation);
}  // namespace detail

}  // namespace mg::nn
