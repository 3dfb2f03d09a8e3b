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
  explicit Upsample(Options options) : Upsample("Upsample", std::move(options)) {}
  Tensor forward(const Tensor& x) override { return interpolate(x, options_); }

 protected:
  Upsample(std::string type_name, Options options);
  std::string extra_repr() const override;

 private:
  Options options_;
};

// PyTorch's older fixed-mode layers (deprecated there in favour of Upsample, still in use):
// nearest, and bilinear with align_corners = true, over [N, C, H, W].
struct Upsampling2dOptions {
  std::vector<int64_t> size;         // {H, W} or one value for both
  std::vector<double> scale_factor;  // used when size is empty
};
class UpsamplingNearest2d : public Upsample {
 public:
  using Options = Upsampling2dOptions;
  explicit UpsamplingNearest2d(Options o)
      : Upsample("UpsamplingNearest2d", {.size = std::move(o.size), .scale_factor = std::move(o.scale_factor),
                                         .mode = InterpolateMode::Nearest}) {}
};
class UpsamplingBilinear2d : public Upsample {
 public:
  using Options = Upsampling2dOptions;
  explicit UpsamplingBilinear2d(Options o)
      : Upsample("UpsamplingBilinear2d", {.size = std::move(o.size), .scale_factor = std::move(o.scale_factor),
                                          .mode = InterpolateMode::Bilinear, .align_corners = true}) {}
};

}  // namespace mg::nn
