#include "mixgrad/ops/unbatched.h"
#include "mixgrad/nn/conv1d.h"

#include <vector>

#include "mixgrad/nn/conv.h"
#include "mixgrad/ops/conv1d.h"
#include "mixgrad/ops/max_unpool.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn {
namespace {

void check_geometry_1d(const char* layer, int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                       int64_t dilation, int64_t groups) {
  MG_CHECK(in > 0 && out > 0, Error, layer, ": in and out channels must be positive, got in=", in, ", out=", out);
  MG_CHECK(kernel > 0, Error, layer, ": kernel must be positive, got ", kernel, "\n  hint: set .kernel, e.g. .kernel = 3");
  MG_CHECK(stride > 0 && dilation > 0, Error, layer, ": stride and dilation must be positive, got stride=", stride,
           ", dilation=", dilation);
  MG_CHECK(padding >= 0, Error, layer, ": padding must be non-negative, got ", padding);
  MG_CHECK(groups > 0 && in % groups == 0 && out % groups == 0, Error, layer, ": groups (", groups, ") must divide in (",
           in, ") and out (", out, ")");
}

std::string geometry_1d(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation,
                        int64_t groups, bool bias) {
  std::string s = str_cat(in, ", ", out, ", kernel=", kernel, ", stride=", stride);
  if (padding != 0) s += str_cat(", padding=", padding);
  if (dilation != 1) s += str_cat(", dilation=", dilation);
  if (groups != 1) s += str_cat(", groups=", groups);
  if (!bias) s += ", bias=false";
  return s;
}

}  // namespace

Conv1d::Conv1d(Options o) : UnaryModule("Conv1d"), options_(o) {
  check_geometry_1d("Conv1d", o.in, o.out, o.kernel, o.stride, o.padding, o.dilation, o.groups);
  MG_CHECK(!o.padding_same || (o.stride == 1 && o.padding == 0), Error,
           "Conv1d: padding_same needs stride 1 and padding 0, got stride=", o.stride, ", padding=", o.padding,
           "\n  hint: PyTorch refuses padding=\"same\" for strided convolutions too");
  weight = register_parameter("weight", empty({o.out, o.in / o.groups, o.kernel}));
  if (o.bias) bias = register_parameter("bias", empty({o.out}));
  reset_parameters();
}

void Conv1d::reset_parameters() { detail::reset_conv(weight, bias); }

Tensor Conv1d::forward(const Tensor& input) {
  return mg::detail::as_batch_of_one(input, 3, [&](const Tensor& x) {  // an unbatched input too, as PyTorch's
    const Options& o = options_;
    MG_CHECK(x.defined() && x.dim() == 3 && x.size(1) == o.in, ShapeError, layer_name(), ": expected input [N, ", o.in,
             ", L] (or an unbatched [", o.in, ", L]), got ", x.defined() ? describe(x) : "undefined", ", weight ", describe(weight));
    return detail::with_layer_name(*this, [&] {
      if (o.padding_mode != PadMode::Constant) {
        // Padded by the mode, then convolved without padding (PyTorch's padding_mode).
        const std::vector<int64_t> amounts =
            detail::conv_pad_amounts({o.kernel}, {o.dilation}, {o.padding}, o.padding_same);
        return conv1d(pad(x, amounts, o.padding_mode), weight, bias,
                      {.stride = o.stride, .padding = 0, .dilation = o.dilation, .groups = o.groups});
      }
      if (o.padding_same) return conv1d_same(x, weight, bias, o.dilation, o.groups);
      return conv1d(x, weight, bias, {.stride = o.stride, .padding = o.padding, .dilation = o.dilation, .groups = o.groups});
    });
  });
}

std::string Conv1d::extra_repr() const {
  const Options& o = options_;
  return geometry_1d(o.in, o.out, o.kernel, o.stride, o.padding, o.dilation, o.groups, o.bias) +
         (o.padding_same ? ", padding=same" : "") +
         (o.padding_mode != PadMode::Constant ? str_cat(", padding_mode=", pad_mode_name(o.padding_mode)) : "");
}

ConvTranspose1d::ConvTranspose1d(Options o) : UnaryModule("ConvTranspose1d"), options_(o) {
  check_geometry_1d("ConvTranspose1d", o.in, o.out, o.kernel, o.stride, o.padding, o.dilation, o.groups);
  MG_CHECK(o.output_padding >= 0 && (o.output_padding < o.stride || o.output_padding < o.dilation), Error,
           "ConvTranspose1d: output_padding must be smaller than stride or dilation, got output_padding=",
           o.output_padding, ", stride=", o.stride, ", dilation=", o.dilation);
  weight = register_parameter("weight", empty({o.in, o.out / o.groups, o.kernel}));
  if (o.bias) bias = register_parameter("bias", empty({o.out}));
  reset_parameters();
}

void ConvTranspose1d::reset_parameters() { detail::reset_conv(weight, bias); }

Tensor ConvTranspose1d::forward(const Tensor& input) { return run(input, options_.output_padding); }

Tensor ConvTranspose1d::forward(const Tensor& input, int64_t output_size) {
  const Options& o = options_;
  return run(input, detail::transposed_output_padding(layer_name(), input, {output_size}, {o.kernel}, {o.stride},
                                                      {o.padding}, {o.dilation})[0]);
}

Tensor ConvTranspose1d::run(const Tensor& input, int64_t output_padding) {
  return mg::detail::as_batch_of_one(input, 3, [&](const Tensor& x) {  // an unbatched input too, as PyTorch's
    const Options& o = options_;
    return detail::with_layer_name(*this, [&] {
      return conv_transpose1d(x, weight, bias,
                              {.stride = o.stride, .padding = o.padding, .dilation = o.dilation, .groups = o.groups},
                              output_padding);
    });
  });
}

std::string ConvTranspose1d::extra_repr() const {
  const Options& o = options_;
  return geometry_1d(o.in, o.out, o.kernel, o.stride, o.padding, o.dilation, o.groups, o.bias) +
         (o.output_padding != 0 ? str_cat(", output_padding=", o.output_padding) : "");
}

MaxPool1d::MaxPool1d(Options o) : UnaryModule("MaxPool1d"), options_(o) {
  MG_CHECK(o.kernel > 0 && o.stride >= 0 && o.dilation > 0 && o.padding >= 0, Error,
           "MaxPool1d: kernel and dilation must be positive and stride, padding non-negative, got kernel=", o.kernel,
           ", stride=", o.stride, ", padding=", o.padding, ", dilation=", o.dilation);
}

Tensor MaxPool1d::forward(const Tensor& input) {
  return mg::detail::as_batch_of_one(input, 3, [&](const Tensor& x) {  // an unbatched input too, as PyTorch's
    const Options& o = options_;
    return detail::with_layer_name(
        *this, [&] { return max_pool1d(x, o.kernel, o.stride, o.padding, o.dilation, o.ceil_mode); });
  });
}

std::pair<Tensor, Tensor> MaxPool1d::forward_with_indices(const Tensor& x) {
  const Options& o = options_;
  Tensor values = (*this)(x);  // checks and names errors; the hooks run once
  Tensor indices = detail::with_layer_name(
      *this, [&] { return max_pool1d_indices(x, o.kernel, o.stride, o.padding, o.dilation, o.ceil_mode); });
  return {values, indices};
}

std::string MaxPool1d::extra_repr() const {
  const Options& o = options_;
  return str_cat("kernel=", o.kernel, ", stride=", o.stride == 0 ? o.kernel : o.stride, ", padding=", o.padding,
                 o.dilation != 1 ? str_cat(", dilation=", o.dilation) : "", o.ceil_mode ? ", ceil_mode=true" : "");
}

AvgPool1d::AvgPool1d(Options o) : UnaryModule("AvgPool1d"), options_(o) {
  MG_CHECK(o.kernel > 0 && o.stride >= 0 && o.padding >= 0, Error,
           "AvgPool1d: kernel must be positive and stride, padding non-negative, got kernel=", o.kernel, ", stride=",
           o.stride, ", padding=", o.padding);
}

Tensor AvgPool1d::forward(const Tensor& input) {
  return mg::detail::as_batch_of_one(input, 3, [&](const Tensor& x) {  // an unbatched input too, as PyTorch's
    const Options& o = options_;
    return detail::with_layer_name(*this,
                    [&] { return avg_pool1d(x, o.kernel, o.stride, o.padding, o.count_include_pad, o.ceil_mode); });
  });
}

std::string AvgPool1d::extra_repr() const {
  const Options& o = options_;
  return str_cat("kernel=", o.kernel, ", stride=", o.stride == 0 ? o.kernel : o.stride, ", padding=", o.padding,
                 o.count_include_pad ? "" : ", count_include_pad=false", o.ceil_mode ? ", ceil_mode=true" : "");
}

AdaptiveAvgPool1d::AdaptiveAvgPool1d(Options o) : UnaryModule("AdaptiveAvgPool1d"), options_(o) {
  MG_CHECK(o.output >= 1, Error, "AdaptiveAvgPool1d: output must be >= 1, got ", o.output);
}

Tensor AdaptiveAvgPool1d::forward(const Tensor& input) {
  return mg::detail::as_batch_of_one(input, 3, [&](const Tensor& x) {  // an unbatched input too, as PyTorch's
    return detail::with_layer_name(*this, [&] { return adaptive_avg_pool1d(x, options_.output); });
  });
}

std::string AdaptiveAvgPool1d::extra_repr() const { return str_cat("output=", options_.output); }

}  // namespace mg::nn
