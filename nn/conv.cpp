#include "mixgrad/ops/unbatched.h"
#include "mixgrad/nn/conv.h"

#include <cmath>

#include "mixgrad/core/factory.h"
#include "mixgrad/nn/init.h"
#include "mixgrad/ops/conv.h"

namespace mg::nn {
namespace {

// Shared checks of both convolution layers' options.
void check_geometry(const char* layer, int64_t in, int64_t out, const Size2& kernel, const Size2& stride,
                    const Size2& padding, const Size2& dilation, int64_t groups) {
  MG_CHECK(in > 0 && out > 0, Error, layer, ": in and out channels must be positive, got in=", in, ", out=", out);
  MG_CHECK(kernel.h > 0 && kernel.w > 0, Error, layer, ": kernel must be positive, got ", kernel.str(),
           "\n  hint: set .kernel, e.g. .kernel = 3");
  MG_CHECK(stride.h > 0 && stride.w > 0 && dilation.h > 0 && dilation.w > 0, Error, layer,
           ": stride and dilation must be positive, got stride=", stride.str(), ", dilation=", dilation.str());
  MG_CHECK(padding.h >= 0 && padding.w >= 0, Error, layer, ": padding must be non-negative, got ", padding.str());
  MG_CHECK(groups > 0 && in % groups == 0 && out % groups == 0, Error, layer, ": groups (", groups,
           ") must divide in (", in, ") and out (", out, ")");
}

mg::Conv2dOptions op_options(const Size2& stride, const Size2& padding, const Size2& dilation, int64_t groups) {
  return {.stride = stride.array(), .padding = padding.array(), .dilation = dilation.array(), .groups = groups};
}

// The input must be [N, in, H, W] and the padded input at least as large as the dilated kernel.
void check_input(const std::string& layer, const Tensor& x, int64_t in, const Tensor& weight, const Size2& kernel,
                 const Size2& padding, const Size2& dilation, bool transposed) {
  MG_CHECK(x.defined(), ShapeError, layer, ": input is undefined");
  MG_CHECK(x.dim() == 4 && x.size(1) == in, ShapeError, layer, ": expected input [N, ", in,
           ", H, W] (4-D with ", in, " channels, or an unbatched [", in, ", H, W]), got input ", x.shape(),
           ", weight ", weight.shape());
  if (transposed) return;
  const int64_t eff_h = dilation.h * (kernel.h - 1) + 1, eff_w = dilation.w * (kernel.w - 1) + 1;
  MG_CHECK(x.size(2) + 2 * padding.h >= eff_h && x.size(3) + 2 * padding.w >= eff_w, ShapeError, layer,
           ": kernel ", kernel.str(), " (dilated ", eff_h, "x", eff_w, ") is larger than the padded input ",
           x.size(2) + 2 * padding.h, "x", x.size(3) + 2 * padding.w, "; got input ", x.shape(), ", weight ",
           weight.shape());
}

std::string geometry_repr(int64_t in, int64_t out, const Size2& kernel, const Size2& stride, const Size2& padding,
                          const Size2& dilation, int64_t groups, bool bias) {
  std::string s = str_cat(in, ", ", out, ", kernel=", kernel.str(), ", stride=", stride.str());
  if (padding != Size2(0)) s += ", padding=" + padding.str();
  if (dilation != Size2(1)) s += ", dilation=" + dilation.str();
  if (groups != 1) s += str_cat(", groups=", groups);
  if (!bias) s += ", bias=false";
  return s;
}

}  // namespace

namespace detail {

// Default init of a conv weight and bias (PyTorch's reset_parameters): kaiming_uniform(a = sqrt 5)
// for the weight, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the bias.
void reset_conv(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, {.a = std::sqrt(5.0)});
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::fan_in_and_fan_out(weight).first));
    init::uniform_(bias, -bound, bound);
  }
}

std::vector<int64_t> conv_pad_amounts(const std::vector<int64_t>& kernel, const std::vector<int64_t>& dilation,
                                      const std::vector<int64_t>& padding, bool same) {
  std::vector<int64_t> amounts;
  for (std::size_t i = kernel.size(); i-- > 0;) {
    const int64_t total = same ? dilation[i] * (kernel[i] - 1) : 2 * padding[i];
    amounts.push_back(total / 2);
    amounts.push_back(total - total / 2);
  }
  return amounts;
}

std::vector<int64_t> transposed_output_padding(const std::string& layer, const Tensor& x,
                                               const std::vector<int64_t>& want, const std::vector<int64_t>& kernel,
                                               const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                                               const std::vector<int64_t>& dilation) {
  const int64_t n = int64_t(want.size());
  MG_CHECK(x.defined() && x.dim() > n, ShapeError, layer, ": expected an input with ", n,
           " spatial dims after its channels, got ", x.defined() ? describe(x) : "undefined");
  std::vector<int64_t> out(want.size());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t in = x.size(x.dim() - n + i);
    const int64_t smallest = (in - 1) * stride[i] - 2 * padding[i] + dilation[i] * (kernel[i] - 1) + 1;
    const int64_t largest = smallest + stride[i] - 1;
    MG_CHECK(want[i] >= smallest && want[i] <= largest, ShapeError, layer, ": output_size ", str_cat(want),
             " cannot come from input ", describe(x), ": spatial dim ", i, " must be in [", smallest, ", ", largest,
             "] (stride ", stride[i], ")");
    out[i] = want[i] - smallest;
  }
  return out;
}

}  // namespace detail

Conv2d::Conv2d(Options o) : UnaryModule("Conv2d"), options_(o) {
  check_geometry("Conv2d", o.in, o.out, o.kernel, o.stride, o.padding, o.dilation, o.groups);
  MG_CHECK(!o.padding_same || (o.stride == Size2(1) && o.padding == Size2(0)), Error,
           "Conv2d: padding_same needs stride 1 and padding 0, got stride=", o.stride.str(), ", padding=",
           o.padding.str(), "\n  hint: PyTorch refuses padding=\"same\" for strided convolutions too");
  weight = register_parameter("weight", empty({o.out, o.in / o.groups, o.kernel.h, o.kernel.w}));
  if (o.bias) bias = register_parameter("bias", empty({o.out}));
  reset_parameters();
}

void Conv2d::reset_parameters() { detail::reset_conv(weight, bias); }

Tensor Conv2d::forward(const Tensor& input) {
  return mg::detail::as_batch_of_one(input, 4, [&](const Tensor& x) {  // an unbatched input too, as PyTorch's
    const Options& o = options_;
    if (o.padding_mode != PadMode::Constant) {
      // Padded by the mode first, then convolved with no padding (detail::conv_pad_amounts).
      const Size2 p = o.padding;
      check_input(layer_name(), x, o.in, weight, o.padding_same ? Size2(1) : o.kernel, p, o.padding_same ? Size2(1) : o.dilation,
                  false);
      const Tensor padded = pad(x,
                                detail::conv_pad_amounts({o.kernel.h, o.kernel.w}, {o.dilation.h, o.dilation.w},
                                                         {p.h, p.w}, o.padding_same),
                                o.padding_mode);
      return conv2d(padded, weight, bias, op_options(o.stride, Size2(0), o.dilation, o.groups));
    }
    if (o.padding_same) {
      check_input(layer_name(), x, o.in, weight, Size2(1), o.padding, Size2(1), false);
      return conv2d_same(x, weight, bias, o.dilation.array(), o.groups);
    }
    check_input(layer_name(), x, o.in, weight, o.kernel, o.padding, o.dilation, false);
    return conv2d(x, weight, bias, op_options(o.stride, o.padding, o.dilation, o.groups));
  });
}

std::string Conv2d::extra_repr() const {
  const Options& o = options_;
  return geometry_repr(o.in, o.out, o.kernel, o.stride, o.padding, o.dilation, o.groups, o.bias) +
         (o.padding_same ? ", padding=same" : "") +
         (o.padding_mode != PadMode::Constant ? str_cat(", padding_mode=", pad_mode_name(o.padding_mode)) : "");
}

ConvTranspose2d::ConvTranspose2d(Options o) : UnaryModule("ConvTranspose2d"), options_(o) {
  check_geometry("ConvTranspose2d", o.in, o.out, o.kernel, o.stride, o.padding, o.dilation, o.groups);
  MG_CHECK(o.output_padding.h >= 0 && o.output_padding.w >= 0 &&
               (o.output_padding.h < o.stride.h || o.output_padding.h < o.dilation.h) &&
               (o.output_padding.w < o.stride.w || o.output_padding.w < o.dilation.w),
           Error, "ConvTranspose2d: output_padding ", o.output_padding.str(),
           " must be smaller than the stride or the dilation");
  weight = register_parameter("weight", empty({o.in, o.out / o.groups, o.kernel.h, o.kernel.w}));
  if (o.bias) bias = register_parameter("bias", empty({o.out}));
  reset_parameters();
}

void ConvTranspose2d::reset_parameters() { detail::reset_conv(weight, bias); }

Tensor ConvTranspose2d::forward(const Tensor& input) { return run(input, options_.output_padding); }

Tensor ConvTranspose2d::forward(const Tensor& input, Size2 output_size) {
  const Options& o = options_;
  const std::vector<int64_t> pad = detail::transposed_output_padding(
      layer_name(), input, {output_size.h, output_size.w}, {o.kernel.h, o.kernel.w}, {o.stride.h, o.stride.w},
      {o.padding.h, o.padding.w}, {o.dilation.h, o.dilation.w});
  return run(input, Size2(pad[0], pad[1]));
}

Tensor ConvTranspose2d::run(const Tensor& input, Size2 output_padding) {
  return mg::detail::as_batch_of_one(input, 4, [&](const Tensor& x) {  // an unbatched input too, as PyTorch's
    const Options& o = options_;
    check_input(layer_name(), x, o.in, weight, o.kernel, o.padding, o.dilation, true);
    return conv_transpose2d(x, weight, bias, op_options(o.stride, o.padding, o.dilation, o.groups),
                            output_padding.array());
  });
}

std::string ConvTranspose2d::extra_repr() const {
  const Options& o = options_;
  std::string s = geometry_repr(o.in, o.out, o.kernel, o.stride, o.padding, o.dilation, o.groups, o.bias);
  if (o.output_padding != Size2(0)) s += ", output_padding=" + o.output_padding.str();
  return s;
}

}  // namespace mg::nn
