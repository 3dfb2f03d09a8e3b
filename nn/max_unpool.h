// MaxUnpool1d / 2d / 3d: PyTorch's layers inverting max pooling (ops/max_unpool.h), fed by
// MaxPool1d/2d/3d's forward_with_indices. No parameters.
//
//   auto pool = nn::make<nn::MaxPool2d>({.kernel = 2});
//   auto unpool = nn::make<nn::MaxUnpool2d>({.kernel = 2});
//   auto [y, i] = pool->forward_with_indices(x);
//   mg::Tensor up = unpool->forward(y, i, Size2(x.size(2), x.size(3)));   // or the default size
#pragma once
#include <cstdint>
#include <optional>

#include "mixgrad/nn/module.h"
#include "mixgrad/nn/size2.h"
#include "mixgrad/nn/size3.h"

namespace mg::nn {

struct MaxUnpool1dOptions {
  int64_t kernel = 0;   // required: the pooling's
  int64_t stride = 0;   // 0: the kernel size
  int64_t padding = 0;
};

// x and indices [N, C, L] or [C, L] -> [N, C, Lout]; Lout = (L - 1) stride - 2 padding + kernel
// unless output_size is given, which must differ from it by less than the stride (PyTorch's rule).
class MaxUnpool1d : public Module {
 public:
  using Options = MaxUnpool1dOptions;
  explicit MaxUnpool1d(Options options);
  Tensor forward(const Tensor& x, const Tensor& indices, std::optional<int64_t> output_size = std::nullopt);

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

struct MaxUnpool2dOptions {
  Size2 kernel;       // required: the pooling's
  Size2 stride = 0;   // 0: the kernel size
  Size2 padding = 0;
};

// x and indices [N, C, H, W] or [C, H, W] -> [N, C, Hout, Wout], each as MaxUnpool1d's Lout.
class MaxUnpool2d : public Module {
 public:
  using Options = MaxUnpool2dOptions;
  explicit MaxUnpool2d(Options options);
  Tensor forward(const Tensor& x, const Tensor& indices, std::optional<Size2> output_size = std::nullopt);

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

struct MaxUnpool3dOptions {
  Size3 kernel;       // required: the pooling's
  Size3 stride = 0;   // 0: the kernel size
  Size3 padding = 0;
};

// x and indices [N, C, D, H, W] or [C, D, H, W] -> [N, C, Dout, Hout, Wout], each as MaxUnpool1d's Lout.
class MaxUnpool3d : public Module {
 public:
  using Options = MaxUnpool3dOptions;
  explicit MaxUnpool3d(Options options);
  Tensor forward(const Tensor& x, const Tensor& indices, std::optional<Size3> output_size = std::nullopt);

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

}  // namespace mg::nn
