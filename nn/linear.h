// Linear, Bilinear, Identity and Flatten layers.
//
//   auto fc = nn::make<nn::Linear>({.in = 784, .out = 10});   // y = x W^T + b
//   mg::Tensor y = (*fc)(x);                                     // x [B, 784] -> [B, 10]
#pragma once
#include "mixgrad/nn/module.h"

namespace mg::nn {

struct LinearOptions {
  int64_t in = 0;    // input features
  int64_t out = 0;   // output features
  bool bias = true;
};

// y [..., out] = x [..., in] W^T + b with weight [out, in] and bias [out]; both initialised from
// U(-1/sqrt(in), 1/sqrt(in)) as in PyTorch. Lower-precision op under autocast.
class Linear : public UnaryModule {
 public:
  using Options = LinearOptions;
  explicit Linear(Options options);
  Tensor forward(const Tensor& x) override;
  // Re-draws the parameters with PyTorch's default initialisation.
  void reset_parameters();
  const Options& options() const { return options_; }

  Tensor weight;  // [out, in]
  Tensor bias;    // [out] or undefined

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

struct BilinearOptions {
  int64_t in1 = 0;   // features of the first input
  int64_t in2 = 0;   // features of the second input
  int64_t out = 0;   // output features
  bool bias = true;
};

// y [..., out] = x1^T A_o x2 + b_o (mg::bilinear) with weight [out, in1, in2] and bias [out], both
// initialised from U(-1/sqrt(in1), 1/sqrt(in1)) as in PyTorch. forward(x1, x2); the one-input
// forward is refused (Bilinear takes two).
class Bilinear : public Module {
 public:
  using Options = BilinearOptions;
  explicit Bilinear(Options options);
  Tensor forward(const Tensor& x1, const Tensor& x2);
  void reset_parameters();

  Tensor weight;  // [out, in1, in2]
  Tensor bias;    // [out] or undefined

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

// Returns its input.
class Identity : public UnaryModule {
 public:
  Identity() : UnaryModule("Identity") {}
  Tensor forward(const Tensor& x) override { return x; }
};

struct FlattenOptions {
  int64_t start_dim = 1;  // keeps the batch dim by default
  int64_t end_dim = -1;
};

// Merges dims start_dim..end_dim into one: [N, C, H, W] -> [N, C*H*W] by default.
class Flatten : public UnaryModule {
 public:
  using Options = FlattenOptions;
  explicit Flatten(Options options = {}) : UnaryModule("Flatten"), options_(options) {}
  Tensor forward(const Tensor& x) override;

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

}  // namespace mg::nn
