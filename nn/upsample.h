// nn::Upsample: interpolate (ops/interpolate.h) as a layer, PyTorch's nn.Upsample (its options
// include antialias and the Lanczos mode, which PyTorch offers only in F.interpolate).
//
//   auto up = nn::make<nn::Upsample>({.scale_factor = {2.0}, .mode = mg::InterpolateMode::Bilinear});
#pragma once
#include "mixgrad/nn/module.h"
#include "mixgrad/ops/interpolate.h"

namespace mg::nn {

using UpsampleOptions = InterpolateOptions;

class Upsample : public UnaryModule {
 public:
  using Options = UpsampleOptions;
  explicit Upsample(Options options);
  Tensor forward(const Tensor& x) override { return interpolate(x, options_); }

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

}  // namespace mg::nn
