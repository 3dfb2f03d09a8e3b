#include "mixgrad/nn/conv3d.h"

#include <vector>

#include "mixgrad/core/factory.h"
#include "mixgrad/nn/conv.h"
#include "mixgrad/ops/conv3d.h"

namespace mg::nn {

namespace {

void check_window(const char* layer, const Size3& kernel, const Size3& stride, const Size3& padding,
                  const Size3& dilation, bool stride_may_be_zero) {
  const auto positive = [](const Size3& s) { return s.d > 0 && s.h > 0 && s.w > 0; };
  MG_CHECK(positive(kernel), Error, layer, ": kernel must be positive, got ", kernel.str(),
           "\n  hint: set .kernel, e.g. .kernel = 3");
  MG_CHECK(positive(stride) || (stride_may_be_zero && stride == Size3(0)), Error, layer,
           ": stride must be positive", stride_may_be_zero ? " (or 0: the kernel)" : "", ", got ", stride.str());
  MG_CHECK(positive(dilation), Error, layer, ": dilation must be positive, got ", dilation.str());
  MG_CHECK(padding.d >= 0 && padding.h >= 0 && padding.w >= 0, Error, layer, ": padding must be non-negative, got ",
           padding.str());
}

// {D, H, W} as the per-dim vectors of detail::conv_pad_amounts and transposed_output_padding.
std::vector<int64_t> vec(const Size3& s) { return {s.d, s.h, s.w}; }

}  // namespace

Conv3d::Conv3d(Options o) : UnaryModule("Conv3d"), options_(o) {
  MG_CHECK(o.in > 0 && o.out > 0, Error, "Conv3d: in and out channels must be positive, got in=", o.in, ", out=",
           o.out);
  check_window("Conv3d", o.kernel, o.stride, o.padding, o.dilation, false);
  MG_CHECK(o.groups > 0 && o.in % o.groups == 0 && o.out % o.groups == 0, Error, "Conv3d: groups (", o.groups,
           ") must divide in (", o.in, ") and out (", o.out, ")");
  MG_CHECK(!o.padding_same || (o.stride == Size3(1) && o.padding == Size3(0)), Error,
           "Conv3d: padding_same needs stride 1 and padding 0, got stride=", o.stride.str(), ", padding=",
           o.padding.str(), "\n  hint: PyTorch refuses padding=\"same\" for strided convolutions too");
  weight = register_parameter("weight", empty({o.out, o.in / o.groups, o.kernel.d, o.kernel.h, o.kernel.w}));
  if (o.bias) bias = register_parameter("bias", empty({o.out}));
  reset_parameters();
}

void Conv3d::reset_parameters() { detail::reset_conv(weight, bias); }

Tensor Conv3d::forward(const Tensor& x) {
  const Options& o = options_;
  return detail::with_layer_name(*this, [&] {
    if (!o.padding_same && o.padding_mode == PadMode::Constant)
      return conv3d(x, weight, bias,
                    {.stride = o.stride.array(), .padding = o.padding.array(), .dilation = o.dilation.array(),
                     .groups = o.groups});
    // Padded first (detail::conv_pad_amounts), then convolved without padding.
    const std::vector<int64_t> amounts =
        detail::conv_pad_amounts(vec(o.kernel), vec(o.dilation), vec(o.padding), o.padding_same);
    MG_CHECK(x.defined() && (x.dim() == 4 || x.dim() == 5), ShapeError,
             "conv3d: expected x [N, C, D, H, W] or [C, D, H, W], got ", x.defined() ? describe(x) : "undefined");
    return conv3d(pad(x, amounts, o.padding_mode), weight, bias,
                  {.stride = o.stride.array(), .padding = {0, 0, 0}, .dilation = o.dilation.array(),
                   .groups = o.groups});
  });
}

std::string Conv3d::extra_repr() const {
  const Options& o = options_;
  std::string s = str_cat(o.in, ", ", o.out, ", kernel_size=", o.kernel.str(), ", stride=", o.stride.str());
  if (!(o.padding == Size3(0))) s += str_cat(", padding=", o.padding.str());
  if (!(o.dilation == Size3(1))) s += str_cat(", dilation=", o.dilation.str());
  if (o.groups != 1) s += str_cat(", groups=", o.groups);
  if (!o.bias) s += ", bias=false";
  if (o.padding_same) s += ", padding=same";
  if (o.padding_mode != PadMode::Constant) s += str_cat(", padding_mode=", pad_mode_name(o.padding_mode));
  return s;
}

ConvTranspose3d::ConvTranspose3d(Options o) : UnaryModule("ConvTranspose3d"), options_(o) {
  MG_CHECK(o.in > 0 && o.out > 0, Error, "ConvTranspose3d: in and out channels must be positive, got in=", o.in,
           ", out=", o.out);
  check_window("ConvTranspose3d", o.kernel, o.stride, o.padding, o.dilation, false);
  MG_CHECK(o.groups > 0 && o.in % o.groups == 0 && o.out % o.groups == 0, Error, "ConvTranspose3d: groups (",
           o.groups, ") must divide in (", o.in, ") and out (", o.out, ")");
  weight = register_parameter("weight", empty({o.in, o.out / o.groups, o.kernel.d, o.kernel.h, o.kernel.w}));
  if (o.bias) bias = register_parameter("bias", empty({o.out}));
  reset_parameters();
}

void ConvTranspose3d::reset_parameters() { detail::reset_conv(weight, bias); }

Tensor ConvTranspose3d::forward(const Tensor& x) { return run(x, options_.output_padding); }

Tensor ConvTranspose3d::forward(const Tensor& x, Size3 output_size) {
  const Options& o = options_;
  const std::vector<int64_t> pad = detail::transposed_output_padding(
      layer_name(), x, vec(output_size), vec(o.kernel), vec(o.stride), vec(o.padding), vec(o.dilation));
  return run(x, Size3(pad[0], pad[1], pad[2]));
}

Tensor ConvTranspose3d::run(const Tensor& x, Size3 output_padding) {
  return detail::with_layer_name(*this, [&] {
    return conv_transpose3d(x, weight, bias,
                            {.stride = options_.stride.array(),
                             .padding = options_.padding.array(),
                             .dilation = options_.dilation.array(),
                             .groups = options_.groups},
                            output_padding.array());
  });
}

std::string ConvTranspose3d::extra_repr() const {
  const Options& o = options_;
  std::string s = str_cat(o.in, ", ", o.out, ", kernel_size=", o.kernel.str(), ", stride=", o.stride.str());
  if (!(o.padding == Size3(0))) s += str_cat(", padding=", o.padding.str());
  if (!(o.output_padding == Size3(0))) s += str_cat(", output_padding=", o.output_padding.str());
  if (!(o.dilation == Size3(1))) s += str_cat(", dilation=", o.dilation.str());
  if (o.groups != 1) s += str_cat(", groups=", o.groups);
  if (!o.bias) s += ", bias=false";
  return s;
}

MaxPool3d::MaxPool3d(Options o) : UnaryModule("MaxPool3d"), options_(o) {
  check_window("MaxPool3d", o.kernel, o.stride, o.padding, o.dilation, true);
}

Tensor MaxPool3d::forward(const Tensor& x) {
  const Options& o = options_;
  return detail::with_layer_name(*this, [&] {
    return max_pool3d(x, o.kernel.array(), o.stride.array(), o.padding.array(), o.dilation.array(), o.ceil_mode);
  });
}

std::pair<Tensor, Tensor> MaxPool3d::forward_with_indices(const Tensor& x) {
  Tensor values = (*this)(x);  // checks and names errors; the hooks run once
  const Options& o = options_;
  Tensor indices = max_pool3d_indices(x, o.kernel.array(), o.stride.array(), o.padding.array(), o.dilation.array(),
                                      o.ceil_mode);
  return {values, indices};
}

std::string MaxPool3d::extra_repr() const {
  const Options& o = options_;
  return str_cat("kernel_size=", o.kernel.str(), ", stride=", (o.stride == Size3(0) ? o.kernel : o.stride).str(),
                 ", padding=", o.padding.str(), ", dilation=", o.dilation.str(), ", ceil_mode=",
                 o.ceil_mode ? "true" : "false");
}

AvgPool3d::AvgPool3d(Options o) : UnaryModule("AvgPool3d"), options_(o) {
  check_window("AvgPool3d", o.kernel, o.stride, o.padding, Size3(1), true);
  MG_CHECK(!o.divisor_override || *o.divisor_override > 0, Error, "AvgPool3d: divisor_override must be > 0, got ",
           o.divisor_override.value_or(0));
}

Tensor AvgPool3d::forward(const Tensor& x) {
  const Options& o = options_;
  return detail::with_layer_name(*this, [&] {
    return avg_pool3d(x, o.kernel.array(), o.stride.array(), o.padding.array(), o.count_include_pad, o.ceil_mode,
                      o.divisor_override);
  });
}

std::string AvgPool3d::extra_repr() const {
  const Options& o = options_;
  return str_cat("kernel_size=", o.kernel.str(), ", stride=", (o.stride == Size3(0) ? o.kernel : o.stride).str(),
                 ", padding=", o.padding.str(), ", ceil_mode=", o.ceil_mode ? "true" : "false",
                 ", count_include_pad=", o.count_include_pad ? "true" : "false",
                 o.divisor_override ? str_cat(", divisor_override=", *o.divisor_override) : std::string());
}

AdaptiveAvgPool3d::AdaptiveAvgPool3d(Options o) : UnaryModule("AdaptiveAvgPool3d"), options_(o) {
  MG_CHECK(o.output.d >= 1 && o.output.h >= 1 && o.output.w >= 1, Error,
           "AdaptiveAvgPool3d: output sizes must be >= 1, got ", o.output.str());
}

Tensor AdaptiveAvgPool3d::forward(const Tensor& x) {
  return detail::with_layer_name(*this, [&] { return adaptive_avg_pool3d(x, options_.output.array()); });
}

std::string AdaptiveAvgPool3d::extra_repr() const { return str_cat("output_size=", options_.output.str()); }

}  // namespace mg::nn
