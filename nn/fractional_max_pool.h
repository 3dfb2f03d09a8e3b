// FractionalMaxPool2d / FractionalMaxPool3d: PyTorch's fractional max pooling layers
// (ops/fractional_max_pool.h for the windows): a kernel-sized window per output element, starting
// at pseudo-random positions drawn per call, so the output can be any size up to input - kernel + 1
// (Graham's ratio 1/sqrt(2) between ResNet stages). No parameters.
//
//   auto pool = nn::make<nn::FractionalMaxPool2d>({.kernel = 2, .output_ratio = {0.7, 0.7}});
//   auto [y, i] = pool->forward_with_indices(x);   // positions h * W + w, for MaxUnpool2d
#pragma once
#include <array>
#include <utility>

#include "mixgrad/nn/module.h"
#include "mixgrad/nn/size2.h"
#include "mixgrad/nn/size3.h"

namespace mg::nn {

struct FractionalMaxPool2dOptions {
  Size2 kernel;                                // required
  Size2 output_size = 0;                       // either this (each >= 1) ...
  std::array<double, 2> output_ratio{0, 0};    // ... or this (each in (0, 1)): int(input size * ratio)
  Tensor random_samples;  // PyTorch's _random_samples: fixed [N, C, 2] in [0, 1); undefined: drawn each call
};

// x [N, C, H, W] or [C, H, W] -> [N, C, Ho, Wo].
class FractionalMaxPool2d : public UnaryModule {
 public:
  using Options = FractionalMaxPool2dOptions;
  explicit FractionalMaxPool2d(Options options);
  Tensor forward(const Tensor& x) override;
  // PyTorch's return_indices = true: the maxima and their i64 positions h * W + w in the input's
  // plane. The two come from the same windows (one draw of the samples); forward hooks do not
  // run here (they see forward's single output).
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& x);

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

struct FractionalMaxPool3dOptions {
  Size3 kernel;                                // required
  Size3 output_size = 0;                       // either this (each >= 1) ...
  std::array<double, 3> output_ratio{0, 0, 0}; // ... or this (each in (0, 1))
  Tensor random_samples;  // fixed [N, C, 3] in [0, 1); undefined: drawn each call
};

// x [N, C, D, H, W] or [C, D, H, W] -> [N, C, Do, Ho, Wo]; positions d * H * W + h * W + w.
class FractionalMaxPool3d : public UnaryModule {
 public:
  using Options = FractionalMaxPool3dOptions;
  explicit FractionalMaxPool3d(Options options);
  Tensor forward(const Tensor& x) override;
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& x);

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

}  // namespace mg::nn
