// Convolution ops (conv2d, its two gradient ops and conv_transpose2d): public functions, shape/dtype inference
// and backward rules. Decision: the three ops are each other's gradients — the input gradient of
// conv2d is conv2d_backward_input (a transposed conv), the weight gradient conv2d_backward_weight,
// and the gradients of those two are again conv2d / conv2d_backward_* — so every rule is written
// with these public ops and double backward works to any order.
#include "mixgrad/ops/conv.h"
#include "mixgrad/ops/unbatched.h"

#include <string>

#include "mixgrad/ops/backward_ctx.h"
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/infer.h"
#include "mixgrad/ops/layout.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/register.h"

namespace mg {
namespace {

// attrs.ints = {sh, sw, ph, pw, dh, dw, groups} followed by `extra`.
OpAttrs conv_attrs(const Conv2dOptions& o, std::array<int64_t, 2> extra) {
  OpAttrs a;
  a.ints = {o.stride[0], o.stride[1], o.padding[0], o.padding[1], o.dilation[0], o.dilation[1],
            o.groups, extra[0], extra[1]};
  return a;
}
OpAttrs conv_attrs(const Conv2dOptions& o) {
  OpAttrs a = conv_attrs(o, {0, 0});
  a.ints.resize(7);
  return a;
}
Conv2dOptions conv_options(const OpAttrs& a) {
  const std::vector<int64_t>& i = a.ints;
  return {.stride = {i[0], i[1]}, .padding = {i[2], i[3]}, .dilation = {i[4], i[5]}, .groups = i[6]};
}

void check_geometry(const char* op, const OpAttrs& a, std::size_t n_ints) {
  MG_CHECK(a.ints.size() == n_ints, Error, op, ": expected ", n_ints, " geometry ints, got ",
           a.ints.size());
  const std::vector<int64_t>& i = a.ints;
  MG_CHECK(i[0] >= 1 && i[1] >= 1, Error, op, ": stride must be >= 1, got [", i[0], ", ", i[1], "]");
  MG_CHECK(i[2] >= 0 && i[3] >= 0, Error, op, ": padding must be >= 0, got [", i[2], ", ", i[3], "]");
  MG_CHECK(i[4] >= 1 && i[5] >= 1, Error, op, ": dilation must be >= 1, got [", i[4], ", ", i[5], "]");
  MG_CHECK(i[6] >= 1, Error, op, ": groups must be >= 1, got ", i[6]);
  // Bounded so that the size arithmetic below (d (k - 1), in + 2 p, (in - 1) s) cannot overflow.
  constexpr int64_t kMax = int64_t(1) << 40;
  for (std::size_t k = 0; k < 6; ++k) {
    MG_CHECK(i[k] <= kMax, Error, op, ": stride, padding and dilation must be at most 2^40, got ", i[k]);
  }
}

void check_4d(const char* op, const char* what, const char* layout, const Tensor& t) {
  MG_CHECK(t.dim() == 4, ShapeError, op, ": expected a 4-D ", what, " ", layout, ", got ", what, " ",
           describe(t));
}

// Output size along one spatial dim; throws when the dilated kernel exceeds the padded input.
// xd, wd: the operands as describe() prints them.
int64_t out_size(const char* op, int64_t in, int64_t k, int64_t s, int64_t p, int64_t d,
                 const std::string& xd, const std::string& wd) {
  // PyTorch's refusals: a zero-size kernel made K = 0 (a bias-only output of an invented size), and
  // an empty spatial input with padding a non-empty output.
  MG_CHECK(k >= 1, ShapeError, op, ": the kernel size must be greater than zero; got input ", xd, ", weight ", wd);
  MG_CHECK(in >= 1, ShapeError, op, ": only an empty batch or channels are supported, not an empty spatial dim; got input ",
           xd, ", weight ", wd);
  const int64_t keff = d * (k - 1) + 1;
  MG_CHECK(keff <= in + 2 * p, ShapeError, op, ": the kernel (size ", k, ", dilation ", d,
           ", effective ", keff, ") is larger than the padded input (", in, " + 2 * ", p,
           "); got input ", xd, ", weight ", wd,
           "\n  hint: use a smaller kernel or dilation, or more padding");
  return (in + 2 * p - keff) / s + 1;
}

// The activations' layout of a conv (PyTorch's rule): channels-last when the input or the weight
// suggests it, else contiguous. The weight keeps its own layout, and its gradient is written in it
// (conv2d_backward_weight's optional layout int, set by the backward rules from the weight's format).
// Both devices' kernels write either layout: oneDNN on nhwc descriptors, cuDNN in NHWC
// (cuda/conv_kernels.cpp; its im2col fallback computes NCHW into a temporary and copies out).
MemoryFormat conv_layout(const Tensor& x, const Tensor& w) {
  return layout_of(x) == MemoryFormat::ChannelsLast || layout_of(w) == MemoryFormat::ChannelsLast
             ? MemoryFormat::ChannelsLast
             : MemoryFormat::Contiguous;
}

void check_operands(const char* op, const Tensors& in) {
  for (const Tensor& t : in) check_floating(op, t);
  for (std::size_t i = 1; i < in.size(); ++i) check_same_dtype(op, in[0], in[i]);
}

// Checks x [N, C, H, W] against w [O, C/groups, kH, kW] (4-D shapes; xd, wd: the operands as
// describe() prints them); returns {Ho, Wo}.
std::array<int64_t, 2> check_conv(const char* op, const Shape& x, const Shape& w, const std::string& xd,
                                  const std::string& wd, const OpAttrs& a) {
  const int64_t groups = a.ints[6];
  MG_CHECK(x[1] == w[1] * groups, ShapeError, op, ": input has ", x[1], " channels but weight expects ",
           w[1] * groups, " (groups=", groups, "); got input ", xd, ", weight ", wd);
  MG_CHECK(w[0] % groups == 0, ShapeError, op, ": groups=", groups, " does not divide the weight's ",
           w[0], " output channels; got weight ", wd);
  return {out_size(op, x[2], w[2], a.ints[0], a.ints[2], a.ints[4], xd, wd),
          out_size(op, x[3], w[3], a.ints[1], a.ints[3], a.ints[5], xd, wd)};
}

InferResult infer_conv2d(const Tensors& in, const OpAttrs& a) {
  MG_CHECK(in.size() == 2 || in.size() == 3, Error,
           "conv2d: expected (input, weight) or (input, weight, bias), got ", in.size(), " tensors");
  check_operands("conv2d", in);
  check_geometry("conv2d", a, 7);
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  check_4d("conv2d", "input", "[N, C, H, W] (or an unbatched [C, H, W])", x);
  check_4d("conv2d", "weight", "[O, C/groups, kH, kW]", w);
  const auto [ho, wo] = check_conv("conv2d", x.shape(), w.shape(), describe(x), describe(w), a);
  if (in.size() == 3) {
    MG_CHECK(in[2].dim() == 1 && in[2].size(0) == w.size(0), ShapeError,
             "conv2d: expected a bias of shape ", Shape{w.size(0)}, ", got bias ", describe(in[2]));
  }
  return {{{{x.size(0), w.size(0), ho, wo}, x.dtype(), conv_layout(x, w)}}, x.dtype()};
}

// Checks that g [N, O, Ho, Wo] is the output gradient of a conv of x_shape with w.
void check_grad_out(const char* op, const Tensor& g, const Shape& y_shape) {
  MG_CHECK(g.shape() == y_shape, ShapeError, op, ": expected an output gradient of shape ", y_shape,
           ", got grad ", describe(g));
}

InferResult infer_conv2d_backward_input(const Tensors& in, const OpAttrs& a) {
  const char* op = "conv2d_backward_input";
  check_operands(op, in);
  check_geometry(op, a, 9);
  const Tensor& g = in[0];
  const Tensor& w = in[1];
  check_4d(op, "grad", "[N, O, Ho, Wo]", g);
  check_4d(op, "weight", "[O, C/groups, kH, kW]", w);
  MG_CHECK(a.ints[7] >= 1 && a.ints[8] >= 1, ShapeError, op, ": input size must be positive, got [",
           a.ints[7], ", ", a.ints[8], "]");
  const Shape x_shape{g.size(0), w.size(1) * a.ints[6], a.ints[7], a.ints[8]};
  const auto [ho, wo] = check_conv(op, x_shape, w.shape(), "(the conv's) " + shape_str(x_shape),
                                   describe(w), a);
  check_grad_out(op, g, {g.size(0), w.size(0), ho, wo});
  return {{{x_shape, g.dtype(), conv_layout(g, w)}}, g.dtype()};
}

InferResult infer_conv2d_backward_weight(const Tensors& in, const OpAttrs& a) {
  const char* op = "conv2d_backward_weight";
  check_operands(op, in);
  // geometry + {kH, kW}, and optionally dw's layout (0 contiguous, 1 channels-last)
  const bool has_layout = a.ints.size() == 10;
  check_geometry(op, a, has_layout ? 10 : 9);
  MG_CHECK(!has_layout || a.ints[9] == 0 || a.ints[9] == 1, Error, op,
           ": the output layout int must be 0 (contiguous) or 1 (channels-last), got ", a.ints[9]);
  const Tensor& x = in[0];
  const Tensor& g = in[1];
  check_4d(op, "input", "[N, C, H, W]", x);
  check_4d(op, "grad", "[N, O, Ho, Wo]", g);
  const int64_t groups = a.ints[6];
  MG_CHECK(a.ints[7] >= 1 && a.ints[8] >= 1, ShapeError, op, ": kernel size must be positive, got [",
           a.ints[7], ", ", a.ints[8], "]");
  MG_CHECK(x.size(1) % groups == 0, ShapeError, op, ": groups=", groups, " does not divide the input's ",
           x.size(1), " channels; got input ", describe(x));
  const Shape w_shape{g.size(1), x.size(1) / groups, a.ints[7], a.ints[8]};
  const auto [ho, wo] = check_conv(op, x.shape(), w_shape, describe(x),
                                   "(the conv's) " + shape_str(w_shape), a);
  check_grad_out(op, g, {x.size(0), g.size(1), ho, wo});
  const MemoryFormat fmt = has_layout && a.ints[9] == 1 ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  return {{{w_shape, x.dtype(), fmt}}, x.dtype()};
}

InferResult infer_conv_transpose2d(const Tensors& in, const OpAttrs& a) {
  const char* op = "conv_transpose2d";
  MG_CHECK(in.size() == 2 || in.size() == 3, Error, op,
           ": expected (input, weight) or (input, weight, bias), got ", in.size(), " tensors");
  check_operands(op, in);
  check_geometry(op, a, 9);
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  check_4d(op, "input", "[N, Cin, H, W] (or an unbatched [Cin, H, W])", x);
  check_4d(op, "weight", "[Cin, Cout/groups, kH, kW]", w);
  const int64_t groups = a.ints[6];
  MG_CHECK(x.size(1) == w.size(0), ShapeError, op, ": input has ", x.size(1), " channels but weight expects ",
           w.size(0), "; got input ", describe(x), ", weight ", describe(w));
  MG_CHECK(w.size(0) % groups == 0, ShapeError, op, ": groups=", groups, " does not divide the weight's ",
           w.size(0), " input channels; got weight ", describe(w));
  int64_t hw_out[2];
  for (int d = 0; d < 2; ++d) {
    const int64_t s = a.ints[d], p = a.ints[2 + d], dil = a.ints[4 + d], opad = a.ints[7 + d];
    MG_CHECK(opad >= 0 && (opad < s || opad < dil), Error, op, ": output_padding must be smaller than the stride ",
             "or the dilation, got output_padding ", opad, ", stride ", s, ", dilation ", dil);
    MG_CHECK(w.size(2 + d) >= 1, ShapeError, op, ": the kernel size must be greater than zero; got weight ", describe(w));
    MG_CHECK(x.size(2 + d) >= 1, ShapeError, op,
             ": only an empty batch or channels are supported, not an empty spatial dim; got input ", describe(x));
    hw_out[d] = (x.size(2 + d) - 1) * s - 2 * p + dil * (w.size(2 + d) - 1) + opad + 1;
    MG_CHECK(hw_out[d] >= 1, ShapeError, op, ": the output would be empty (size ", hw_out[d],
             ") along ", d == 0 ? "H" : "W", "; got input ", describe(x), ", weight ", describe(w),
             "\n  hint: use less padding");
  }
  const int64_t cout = w.size(1) * groups;
  if (in.size() == 3) {
    MG_CHECK(in[2].dim() == 1 && in[2].size(0) == cout, ShapeError, op, ": expected a bias of shape ",
             Shape{cout}, ", got bias ", describe(in[2]));
  }
  return {{{{x.size(0), cout, hw_out[0], hw_out[1]}, x.dtype(), conv_layout(x, w)}}, x.dtype()};
}

// ---- backward rules ----

// Inputs (0, 1) of all three ops: the gradient for one needs the other.
uint32_t pair_saves(uint32_t needs) {
  return ((needs & 1u) ? kSaveInput(1) : 0u) | ((needs & 2u) ? kSaveInput(0) : 0u);
}

std::array<int64_t, 2> hw(const Shape& s) { return {s[2], s[3]}; }

// y = conv(x, w) + b: dx = conv^T(g, w) = conv2d_backward_input(g, w),
// dw = sum_n g[n] (x) im2col(x[n]) = conv2d_backward_weight(x, g), db = sum of g over N, Ho, Wo.
Tensors conv2d_bw(const BackwardCtx& c, const Tensors& grads) {
  const Tensor& g = grads[0];
  const Conv2dOptions o = conv_options(c.attrs());
  Tensor gx, gw, gb;
  if (c.needs_grad(0)) gx = conv2d_backward_input(g, c.input(1), hw(c.input_shape(0)), o);
  if (c.needs_grad(1)) gw = conv2d_backward_weight(c.input(0), g, hw(c.input_shape(1)), o, c.input_format(1));
  if (c.num_inputs() > 2 && c.needs_grad(2)) gb = sum(g, {0, 2, 3});
  return {gx, gw, gb};
}

// dx = B(g, w) is bilinear with <u, B(g, w)> = <conv(u, w), g> = <W(u, g), w>, so for the
// cotangent u [N, C, H, W]: d g = conv2d(u, w), d w = conv2d_backward_weight(u, g).
Tensors conv2d_backward_input_bw(const BackwardCtx& c, const Tensors& grads) {
  const Tensor& u = grads[0];
  const Conv2dOptions o = conv_options(c.attrs());
  Tensor gg, gw;
  if (c.needs_grad(0)) gg = conv2d(u, c.input(1), {}, o);
  if (c.needs_grad(1)) gw = conv2d_backward_weight(u, c.input(0), hw(c.input_shape(1)), o, c.input_format(1));
  return {gg, gw};
}

// dw = W(x, g) is bilinear with <v, W(x, g)> = <conv(x, v), g> = <x, B(g, v)>, so for the
// cotangent v [O, C/groups, kH, kW]: d x = conv2d_backward_input(g, v), d g = conv2d(x, v).
Tensors conv2d_backward_weight_bw(const BackwardCtx& c, const Tensors& grads) {
  const Tensor& v = grads[0];
  const Conv2dOptions o = conv_options(c.attrs());
  Tensor gx, gg;
  if (c.needs_grad(0)) gx = conv2d_backward_input(c.input(1), v, hw(c.input_shape(0)), o);
  if (c.needs_grad(1)) gg = conv2d(c.input(0), v, {}, o);
  return {gx, gg};
}

// y = B(x, w) + b with B = conv2d_backward_input (x in the role of the conv's output gradient):
// dx = conv2d(g, w), dw = conv2d_backward_weight(g, x), db = sum of g over N, H, W.
// With output_padding >= stride, conv2d over y's size has floor(output_padding / stride) more
// rows (columns) than x: those positions took no part in y, so dx drops them and dw sees x padded
// with zeros there.
Tensors conv_transpose2d_bw(const BackwardCtx& c, const Tensors& grads) {
  const Tensor& g = grads[0];
  const OpAttrs& a = c.attrs();
  const Conv2dOptions o = conv_options(a);
  const int64_t extra_h = a.ints[7] / a.ints[0], extra_w = a.ints[8] / a.ints[1];
  const Shape& xs = c.input_shape(0);
  Tensor gx, gw, gb;
  if (c.needs_grad(0)) {
    gx = conv2d(g, c.input(1), {}, o);
    if (extra_h != 0 || extra_w != 0) gx = narrow(narrow(gx, 2, 0, xs[2]), 3, 0, xs[3]);
  }
  if (c.needs_grad(1)) {
    Tensor x = c.input(0);
    if (extra_h != 0) x = cat({x, zeros({xs[0], xs[1], extra_h, xs[3]}, {.dtype = x.dtype(), .device = x.device()})}, 2);
    if (extra_w != 0) {
      x = cat({x, zeros({xs[0], xs[1], xs[2] + extra_h, extra_w}, {.dtype = x.dtype(), .device = x.device()})}, 3);
    }
    gw = conv2d_backward_weight(g, x, hw(c.input_shape(1)), o, c.input_format(1));
  }
  if (c.num_inputs() > 2 && c.needs_grad(2)) gb = sum(g, {0, 2, 3});
  return {gx, gw, gb};
}

}  // namespace

void register_pool_rules();  // ops/pool.cpp

void register_conv_rules() {
  register_pool_rules();
  set_op_rule(OpId::conv_transpose2d,
              {.infer = infer_conv_transpose2d, .backward = conv_transpose2d_bw, .saves = pair_saves});
  set_op_rule(OpId::conv2d, {.infer = infer_conv2d, .backward = conv2d_bw, .saves = pair_saves});
  set_op_rule(OpId::conv2d_backward_input,
              {.infer = infer_conv2d_backward_input, .backward = conv2d_backward_input_bw, .saves = pair_saves});
  set_op_rule(OpId::conv2d_backward_weight,
              {.infer = infer_conv2d_backward_weight, .backward = conv2d_backward_weight_bw, .saves = pair_saves});
}

// ---- public API ----
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& opt) {
  return detail::as_batch_of_one(x, 4, [&](const Tensor& xb) {
    if (bias.defined()) return dispatch1(OpId::conv2d, {xb, w, bias}, conv_attrs(opt));
    return dispatch1(OpId::conv2d, {xb, w}, conv_attrs(opt));
  });
}
Tensor conv2d_same(const Tensor& x, const Tensor& w, const Tensor& bias, std::array<int64_t, 2> dilation,
                   int64_t groups) {
  MG_CHECK(w.defined() && w.dim() == 4, ShapeError, "conv2d_same: expected a weight [O, C/groups, kH, kW], got ",
           w.defined() ? describe(w) : std::string("undefined"));
  MG_CHECK(dilation[0] >= 1 && dilation[1] >= 1, Error, "conv2d_same: dilation must be >= 1, got ", dilation[0], "x",
           dilation[1]);
  std::array<int64_t, 2> pad{}, crop{};
  for (int i = 0; i < 2; ++i) {
    const int64_t total = dilation[i] * (w.size(2 + i) - 1);
    pad[i] = total - total / 2;  // the larger (bottom/right) side
    crop[i] = pad[i] - total / 2;
  }
  return detail::as_batch_of_one(x, 4, [&](const Tensor& xb) {
    Tensor y = conv2d(xb, w, bias, {.stride = {1, 1}, .padding = pad, .dilation = dilation, .groups = groups});
    if (crop[0]) y = slice(y, 2, 1, y.size(2));
    if (crop[1]) y = slice(y, 3, 1, y.size(3));
    return y;
  });
}
Tensor conv2d_backward_input(const Tensor& g, const Tensor& w, std::array<int64_t, 2> input_hw,
                             const Conv2dOptions& opt) {
  return dispatch1(OpId::conv2d_backward_input, {g, w}, conv_attrs(opt, input_hw));
}
Tensor conv2d_backward_weight(const Tensor& x, const Tensor& g, std::array<int64_t, 2> kernel_hw,
                              const Conv2dOptions& opt, MemoryFormat weight_format) {
  OpAttrs a = conv_attrs(opt, kernel_hw);
  if (weight_format == MemoryFormat::ChannelsLast) a.ints.push_back(1);  // the optional output-layout int
  return dispatch1(OpId::conv2d_backward_weight, {x, g}, a);
}

}  // namespace mg

namespace mg {
Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& opt,
                        std::array<int64_t, 2> output_padding) {
  const OpAttrs a = conv_attrs(opt, output_padding);
  return detail::as_batch_of_one(x, 4, [&](const Tensor& xb) {
    if (bias.defined()) return dispatch1(OpId::conv_transpose2d, {xb, w, bias}, a);
    return dispatch1(OpId::conv_transpose2d, {xb, w}, a);
  });
}
}  // namespace mg
