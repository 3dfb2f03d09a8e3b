#include "mixgrad/nn/adaptive_max_pool.h"

#include "mixgrad/ops/adaptive_max_pool.h"

namespace mg::nn {

AdaptiveMaxPool1d::AdaptiveMaxPool1d(Options o) : UnaryModule("AdaptiveMaxPool1d"), options_(o) {
  MG_CHECK(o.output >= 1, Error, "AdaptiveMaxPool1d: output must be >= 1, got ", o.output);
}

Tensor AdaptiveMaxPool1d::forward(const Tensor& x) {
  return detail::with_layer_name(*this, [&] { return adaptive_max_pool1d(x, options_.output); });
}

AdaptiveMaxPool2d::AdaptiveMaxPool2d(Options o) : UnaryModule("AdaptiveMaxPool2d"), options_(o) {
  MG_CHECK(o.output.h >= 1 && o.output.w >= 1, Error, "AdaptiveMaxPool2d: output sizes must be >= 1, got ",
           o.output.str());
}

Tensor AdaptiveMaxPool2d::forward(const Tensor& x) {
  return detail::with_layer_name(*this, [&] { return adaptive_max_pool2d(x, options_.output.array()); });
}

AdaptiveMaxPool3d::AdaptiveMaxPool3d(Options o) : UnaryModule("AdaptiveMaxPool3d"), options_(o) {
  MG_CHECK(o.output.d >= 1 && o.output.h >= 1 && o.output.w >= 1, Error,
           "AdaptiveMaxPool3d: output sizes must be >= 1, got ", o.output.str());
}

Tensor AdaptiveMaxPool3d::forward(const Tensor& x) {
  return detail::with_layer_name(*this, [&] { return adaptive_max_pool3d(x, options_.output.array()); });
}

}  // namespace mg::nn
