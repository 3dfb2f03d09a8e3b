// LPPool1d / LPPool2d / LPPool3d: PyTorch's power-average pooling layers, (sum over each window of x^p)^(1/p)
// (ops/lp_pool.h for the formula and its edge cases). No parameters.
//
//   auto pool = nn::make<nn::LPPool2d>({.norm_type = 2, .kernel = 3, .stride = 2});
#pragma once
#include <cstdint>

#include "mixgrad/nn/module.h"
#include "mixgrad/nn/size2.h"
#include "mixgrad/nn/size3.h"

namespace mg::nn {

struct LPPool1dOptions {
  double norm_type = 2.0;  // p: finite, nonzero
  int64_t kernel = 0;      // required
  int64_t stride = 0;      // 0: the kernel size (PyTorch's default)
  bool ceil_mode = false;
};

// x [N, C, L] or [C, L] -> [N, C, Lo].
class LPPool1d : public UnaryModule {
 public:
  using Options = LPPool1dOptions;
  explicit LPPool1d(Options options);
  Tensor forward(const Tensor& x) override;

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

struct LPPool2dOptions {
  double norm_type = 2.0;  // p: finite, nonzero
  Size2 kernel;            // required
  Size2 stride = 0;        // 0: the kernel size
  bool ceil_mode = false;
};

// x [N, C, H, W] or [C, H, W] -> [N, C, Ho, Wo].
class LPPool2d : public UnaryModule {
 public:
  using Options = LPPool2dOptions;
  explicit LPPool2d(Options options);
  Tensor forward(const Tensor& x) override;

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

struct LPPool3dOptions {
  double norm_type = 2.0;  // p: finite, nonzero
  Size3 kernel;            // required
  Size3 stride = 0;        // 0: the kernel size
  bool ceil_mode = false;
};

// x [N, C, D, H, W] or [C, D, H, W] -> [N, C, Do, Ho, Wo].
class LPPool3d : public UnaryModule {
 public:
  using Options = LPPool3dOptions;
  explicit LPPool3d(Options options);
  Tensor forward(const Tensor& x) override;

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

}  // namespace mg::nn
