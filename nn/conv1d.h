// 1-D convolution and pooling layers over [N, C, L] sequences (ops/conv1d.h: the 2-D ops on a
// [N, C, 1, L] view), with PyTorch's options, defaults, initialisation and parameter names.
//
//   auto conv = nn::make<nn::Conv1d>({.in = 64, .out = 128, .kernel = 5, .padding = 2});
//   mg::Tensor y = (*conv)(x);                                   // x [N, 64, L] -> [N, 128, L]
#pragma once
#include <utility>
#include "mixgrad/nn/module.h"
#include "mixgrad/ops/pad.h"

namespace mg::nn {

struct Conv1dOptions {
  int64_t in = 0;       // input channels
  int64_t out = 0;      // output channels
  int64_t kernel = 0;   // required
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;   // must divide in and out
  bool bias = true;
  bool padding_same = false;               // PyTorch's padding="same" (stride 1; padding stays 0)
  PadMode padding_mode = PadMode::Constant;  // zeros, or Reflect / Replicate / Circular as Conv2d's
};

// y [N, out, Lo] = conv1d(x [N, in, L], weight [out, in/groups, k]) + bias [out]; weight and bias
// from U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in/groups * k (PyTorch).
class Conv1d : public UnaryModule {
 public:
  using Options = Conv1dOptions;
  explicit Conv1d(Options options);
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  const Options& options() const { return options_; }

  Tensor weight;  // [out, in/groups, k]
  Tensor bias;    // [out] or undefined

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

struct ConvTranspose1dOptions {
  int64_t in = 0;
  int64_t out = 0;
  int64_t kernel = 0;
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t output_padding = 0;  // smaller than stride or dilation
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

// x [N, in, L] -> [N, out, (L-1) stride - 2 pad + dil (k-1) + output_padding + 1];
// weight [in, out/groups, k] (fan_in = out/groups * k, as PyTorch).
class ConvTranspose1d : public UnaryModule {
 public:
  using Options = ConvTranspose1dOptions;
  explicit ConvTranspose1d(Options options);
  Tensor forward(const Tensor& x) override;
  // PyTorch's forward(input, output_size): the output's length chosen instead of output_padding
  // (within stride - 1 above the smallest length).
  Tensor forward(const Tensor& x, int64_t output_size);
  void reset_parameters();
  const Options& options() const { return options_; }

  Tensor weight;  // [in, out/groups, k]
  Tensor bias;    // [out] or undefined

 protected:
  std::string extra_repr() const override;

 private:
  Tensor run(const Tensor& x, int64_t output_padding);
  Options options_;
};

struct MaxPool1dOptions {
  int64_t kernel = 0;   // required
  int64_t stride = 0;   // 0: the kernel size
  int64_t padding = 0;  // -inf padding, at most half the kernel
  int64_t dilation = 1;
  bool ceil_mode = false;
};
class MaxPool1d : public UnaryModule {
 public:
  using Options = MaxPool1dOptions;
  explicit MaxPool1d(Options options);
  Tensor forward(const Tensor& x) override;
  // PyTorch's return_indices = true: the maxima and their i64 positions in the input's length
  // (for MaxUnpool1d, nn/max_unpool.h).
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& x);

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

struct AvgPool1dOptions {
  int64_t kernel = 0;
  int64_t stride = 0;   // 0: the kernel size
  int64_t padding = 0;  // zero padding, at most half the kernel
  bool count_include_pad = true;
  bool ceil_mode = false;
};
class AvgPool1d : public UnaryModule {
 public:
  using Options = AvgPool1dOptions;
  explicit AvgPool1d(Options options);
  Tensor forward(const Tensor& x) override;

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

struct AdaptiveAvgPool1dOptions {
  int64_t output = 0;  // output length, >= 1
};
class AdaptiveAvgPool1d : public UnaryModule {
 public:
  using Options = AdaptiveAvgPool1dOptions;
  explicit AdaptiveAvgPool1d(Options options);
  Tensor forward(const Tensor& x) override;

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

}  // namespace mg::nn
