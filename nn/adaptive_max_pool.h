// AdaptiveMaxPool1d / 2d / 3d: PyTorch's layers (without return_indices) on
// ops/adaptive_max_pool.h.
//
//   auto pool = nn::make<nn::AdaptiveMaxPool2d>({.output = {7, 7}});   // [N, C, H, W] -> [N, C, 7, 7]
#pragma once
#include "mixgrad/nn/module.h"
#include "mixgrad/nn/size2.h"
#include "mixgrad/nn/size3.h"

namespace mg::nn {

struct AdaptiveMaxPool1dOptions {
  int64_t output = 0;  // output length, >= 1
};
struct AdaptiveMaxPool2dOptions {
  Size2 output;        // output H, W, each >= 1
};
struct AdaptiveMaxPool3dOptions {
  Size3 output;        // output D, H, W, each >= 1
};

class AdaptiveMaxPool1d : public UnaryModule {
 public:
  using Options = AdaptiveMaxPool1dOptions;
  explicit AdaptiveMaxPool1d(Options options);
  Tensor forward(const Tensor& x) override;

 protected:
  std::string extra_repr() const override { return str_cat("output_size=", options_.output); }

 private:
  Options options_;
};

class AdaptiveMaxPool2d : public UnaryModule {
 public:
  using Options = AdaptiveMaxPool2dOptions;
  explicit AdaptiveMaxPool2d(Options options);
  Tensor forward(const Tensor& x) override;

 protected:
  std::string extra_repr() const override { return str_cat("output_size=", options_.output.str()); }

 private:
  Options options_;
};

class AdaptiveMaxPool3d : public UnaryModule {
 public:
  using Options = AdaptiveMaxPool3dOptions;
  explicit AdaptiveMaxPool3d(Options options);
  Tensor forward(const Tensor& x) override;

 protected:
  std::string extra_repr() const override { return str_cat("output_size=", options_.output.str()); }

 private:
  Options options_;
};

}  // namespace mg::nn
