#include "mixgrad/ops/unbatched.h"
#include "mixgrad/nn/pooling.h"

#include "mixgrad/ops/conv.h"

namespace mg::nn {
namespace {

void check_window(const char* layer, const Size2& kernel, const Size2& stride, const Size2& padding) {
  MG_CHECK(kernel.h > 0 && kernel.w > 0, Error, layer, ": kernel must be positive, got ", kernel.str(),
           "\n  hint: set .kernel, e.g. .kernel = 2");
  MG_CHECK(stride.h >= 0 && stride.w >= 0, Error, layer, ": stride must be non-negative (0: the kernel size), got ",
           stride.str());
  MG_CHECK(padding.h >= 0 && padding.w >= 0 && 2 * padding.h <= kernel.h && 2 * padding.w <= kernel.w, Error, layer,
           ": padding ", padding.str(), " must be non-negative and at most half the kernel ", kernel.str());
}

// x must be [N, C, H, W] with the padded plane at least as large as the (dilated) window; in ceil
// mode the op itself decides (a window may reach up to stride - 1 past it, as PyTorch's).
void check_input(const std::string& layer, const Tensor& x, const Size2& window, const Size2& padding,
                 bool ceil_mode) {
  MG_CHECK(x.defined() && x.dim() == 4, ShapeError, layer, ": expected a 4-D input [N, C, H, W] (or an unbatched [C, H, W]), got input ",
           x.defined() ? str_cat(x.shape()) : "undefined");
  if (ceil_mode) return;
  MG_CHECK(x.size(2) + 2 * padding.h >= window.h && x.size(3) + 2 * padding.w >= window.w, ShapeError, layer,
           ": window ", window.str(), " is larger than the padded input ", x.size(2) + 2 * padding.h, "x",
           x.size(3) + 2 * padding.w, "; got input ", x.shape());
}

std::string window_repr(const Size2& kernel, const Size2& stride, const Size2& padding) {
  return "kernel=" + kernel.str() + ", stride=" + (stride == Size2(0) ? kernel : stride).str() +
         ", padding=" + padding.str();
}

}  // namespace

MaxPool2d::MaxPool2d(Options o) : UnaryModule("MaxPool2d"), options_(o) {
  check_window("MaxPool2d", o.kernel, o.stride, o.padding);
  MG_CHECK(o.dilation.h > 0 && o.dilation.w > 0, Error, "MaxPool2d: dilation must be positive, got ",
           o.dilation.str());
}

Tensor MaxPool2d::forward(const Tensor& input) {
  return mg::detail::as_batch_of_one(input, 4, [&](const Tensor& x) {  // an unbatched input too, as PyTorch's
    const Options& o = options_;
    const Size2 window(o.dilation.h * (o.kernel.h - 1) + 1, o.dilation.w * (o.kernel.w - 1) + 1);
    check_input(layer_name(), x, window, o.padding, o.ceil_mode);
    return max_pool2d(x, o.kernel.array(), o.stride.array(), o.padding.array(), o.dilation.array(), o.ceil_mode);
  });
}

std::pair<Tensor, Tensor> MaxPool2d::forward_with_indices(const Tensor& x) {
  Tensor values = (*this)(x);  // checks and names errors; the hooks run once
  const Options& o = options_;
  Tensor indices = mg::detail::as_batch_of_one(x, 4, [&](const Tensor& xb) {
    return max_pool2d_indices(xb, o.kernel.array(), o.stride.array(), o.padding.array(), o.dilation.array(),
                              o.ceil_mode);
  });
  return {values, indices};
}

std::string MaxPool2d::extra_repr() const {
  std::string s = window_repr(options_.kernel, options_.stride, options_.padding);
  if (options_.dilation != Size2(1)) s += ", dilation=" + options_.dilation.str();
  if (options_.ceil_mode) s += ", ceil_mode=true";
  return s;
}

AvgPool2d::AvgPool2d(Options o) : UnaryModule("AvgPool2d"), options_(o) {
  check_window("AvgPool2d", o.kernel, o.stride, o.padding);
  MG_CHECK(!o.divisor_override || *o.divisor_override > 0, Error, "AvgPool2d: divisor_override must be > 0, got ",
           o.divisor_override.value_or(0));
}

Tensor AvgPool2d::forward(const Tensor& input) {
  return mg::detail::as_batch_of_one(input, 4, [&](const Tensor& x) {  // an unbatched input too, as PyTorch's
    const Options& o = options_;
    check_input(layer_name(), x, o.kernel, o.padding, o.ceil_mode);
    return avg_pool2d(x, o.kernel.array(), o.stride.array(), o.padding.array(), o.count_include_pad, o.ceil_mode,
                      o.divisor_override);
  });
}

std::string AvgPool2d::extra_repr() const {
  return window_repr(options_.kernel, options_.stride, options_.padding) +
         (options_.count_include_pad ? "" : ", count_include_pad=false") + (options_.ceil_mode ? ", ceil_mode=true" : "") +
         (options_.divisor_override ? str_cat(", divisor_override=", *options_.divisor_override) : "");
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Options o) : UnaryModule("AdaptiveAvgPool2d"), options_(o) {
  MG_CHECK(o.output.h >= 0 && o.output.w >= 0, Error, "AdaptiveAvgPool2d: output size must not be negative, got ",
           o.output.str());
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& input) {
  return mg::detail::as_batch_of_one(input, 4, [&](const Tensor& x) {  // an unbatched input too, as PyTorch's
    MG_CHECK(x.defined() && x.dim() == 4, ShapeError, layer_name(), ": expected a 4-D input [N, C, H, W] (or an unbatched [C, H, W]), got input ",
             x.defined() ? str_cat(x.shape()) : "undefined");
    return adaptive_avg_pool2d(x, options_.output.array());
  });
}

}  // namespace mg::nn
