// Pooling ops (max_pool2d, avg_pool2d, adaptive_avg_pool2d, NCHW or NHWC): public functions,
// inference and backward rules. Decision: max pooling's gradient is its own op, max_pool2d_backward,
// which adds g at the first maximum of each window (max_pool2d_indices recomputes them from the
// saved input) and whose own backward is a gather, so double backward works; average pooling is
// linear, so its backward op and its forward are each other's adjoints.
#include <string>

#include "mixgrad/ops/backward_ctx.h"
#include "mixgrad/ops/conv.h"
#include "mixgrad/ops/cpu/pool_window.h"
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/infer.h"
#include "mixgrad/ops/layout.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/unbatched.h"
#include "mixgrad/core/factory.h"

namespace mg {
namespace {

using A2 = std::array<int64_t, 2>;

void check_input(const char* op, const Tensor& x) {
  check_floating(op, x);
  MG_CHECK(x.dim() == 4, ShapeError, op, ": expected a 4-D input [N, C, H, W] (or an unbatched [C, H, W]), got input ",
           describe(x));
}

// Validates one dim of a window and returns its output size.
int64_t window_out(const char* op, const char* dim, const cpu::Window1d& w, const Tensor& x) {
  MG_CHECK(w.n >= 1, ShapeError, op, ": the input has no elements along ", dim, "; got input ", describe(x));
  MG_CHECK(w.k >= 1 && w.s >= 1 && w.d >= 1 && w.p >= 0, Error, op, ": kernel, stride and dilation must be >= 1 ",
           "and padding >= 0, got kernel ", w.k, ", stride ", w.s, ", padding ", w.p, ", dilation ", w.d,
           " along ", dim);
  // Bounded so that the window arithmetic (d (k - 1), n + 2 p, o s) cannot overflow.
  constexpr int64_t kMax = int64_t(1) << 40;
  MG_CHECK(w.k <= kMax && w.s <= kMax && w.d <= kMax && w.p <= kMax, Error, op,
           ": kernel, stride, padding and dilation must be at most 2^40, got kernel ", w.k, ", stride ", w.s,
           ", padding ", w.p, ", dilation ", w.d, " along ", dim);
  const int64_t keff = w.d * (w.k - 1) + 1;
  // PyTorch's rule: the padding is at most half the kernel itself (not the dilated window).
  MG_CHECK(2 * w.p <= w.k, Error, op, ": padding (", w.p, ") must be at most half the kernel (", w.k,
           ") along ", dim, "; got input ", describe(x));
  // ceil_mode lets the one window reach up to stride - 1 past the padded input (PyTorch's output
  // size: MaxPool2d(3, 2, ceil_mode=true) of a 2 x 2 map is 1 x 1); out() is then 1, else 0.
  MG_CHECK(keff <= w.n + 2 * w.p || (w.ceil && w.out() >= 1), ShapeError, op, ": the window (", keff,
           ") is larger than the padded input (", w.n, " + 2 * ", w.p, ") along ", dim, "; got input ", describe(x));
  const int64_t out = w.out();
  // With dilation > 1 the rules above still let a window's taps (d apart) all miss the input: all
  // on padding, or on both sides of a short input. Such a window has no maximum (the kernels would
  // read outside the input), so it is refused, naming the first one.
  for (int64_t o = 0; w.d > 1 && o < out; ++o) {
    const int64_t first = o * w.s - w.p;
    bool hit = false;
    for (int64_t j = 0; j < w.k && !hit; ++j) hit = first + j * w.d >= 0 && first + j * w.d < w.n;
    MG_CHECK(hit, ShapeError, op, ": output ", o, " along ", dim, " has a window with no input element (taps at ",
             first, ", ", first + w.d, ", ... ", first + (w.k - 1) * w.d, " of an input of ", w.n, " with padding ", w.p,
             ", dilation ", w.d, "); got input ", describe(x), "\n  hint: lower the padding or the dilation");
  }
  return out;
}

// attrs.mode: bit 0 count_include_pad (avg), bit 1 ceil_mode (both)
cpu::Window1d max_dim(const OpAttrs& a, int axis, int64_t n) {
  return {a.ints[0 + axis], a.ints[2 + axis], a.ints[4 + axis], a.ints[6 + axis], n, (a.mode & 2) != 0};
}
cpu::Window1d avg_dim(const OpAttrs& a, int axis, int64_t n) {
  return {a.ints[0 + axis], a.ints[2 + axis], a.ints[4 + axis], 1, n, (a.mode & 2) != 0};
}

Shape pooled_shape(const char* op, const Tensor& x, const cpu::Window1d& h, const cpu::Window1d& w) {
  // PyTorch's rule: only the batch may be empty.
  MG_CHECK(x.size(1) >= 1, ShapeError, op, ": expected at least one channel, got input ", describe(x));
  return {x.size(0), x.size(1), window_out(op, "H", h, x), window_out(op, "W", w, x)};
}

InferResult infer_max_pool2d(const Tensors& in, const OpAttrs& a) {
  check_input("max_pool2d", in[0]);
  const Shape s = pooled_shape("max_pool2d", in[0], max_dim(a, 0, in[0].size(2)), max_dim(a, 1, in[0].size(3)));
  return {{{s, in[0].dtype(), layout_of(in[0])}}, in[0].dtype()};
}

InferResult infer_max_pool2d_indices(const Tensors& in, const OpAttrs& a) {
  check_input("max_pool2d_indices", in[0]);
  const Shape s =
      pooled_shape("max_pool2d_indices", in[0], max_dim(a, 0, in[0].size(2)), max_dim(a, 1, in[0].size(3)));
  return {{{s, DType::I64, layout_of(in[0])}}, in[0].dtype()};
}

InferResult infer_avg_pool2d(const Tensors& in, const OpAttrs& a) {
  check_input("avg_pool2d", in[0]);
  const Shape s = pooled_shape("avg_pool2d", in[0], avg_dim(a, 0, in[0].size(2)), avg_dim(a, 1, in[0].size(3)));
  return {{{s, in[0].dtype(), layout_of(in[0])}}, in[0].dtype()};
}

// dx's layout in the avg-pool backward ops: the forward input's, which the backward rule passes as
// attrs.dims = {format} (a [N, C, 1, 1] grad of global pooling cannot tell), else g's.
MemoryFormat grad_layout(const OpAttrs& a, const Tensor& g) {
  if (a.dims.size() == 1 && a.dims[0] >= 0 && a.dims[0] <= int64_t(MemoryFormat::ChannelsLast)) {
    return MemoryFormat(a.dims[0]);
  }
  return layout_of(g);
}

// g must have the pooled shape `want`.
void check_grad(const char* op, const Tensor& g, const Shape& want) {
  MG_CHECK(g.shape() == want, ShapeError, op, ": expected an output gradient of shape ", want, ", got grad ",
           describe(g));
}

// A pooling backward's result: the gradient of an input of shape xs, whose windows (h, w) must
// give the grad's output sizes.
InferResult pool_grad_result(const char* op, const OpAttrs& a, const Tensor& g, const Shape& xs,
                             const cpu::Window1d& h, const cpu::Window1d& w) {
  window_out(op, "H", h, g);  // (the error names the grad as the input)
  window_out(op, "W", w, g);
  check_grad(op, g, {xs[0], xs[1], h.out(), w.out()});
  return {{{xs, g.dtype(), grad_layout(a, g)}}, g.dtype()};
}

InferResult infer_avg_pool2d_backward(const Tensors& in, const OpAttrs& a) {
  const char* op = "avg_pool2d_backward";
  const Tensor& g = in[0];
  check_floating(op, g);
  MG_CHECK(g.dim() == 4, ShapeError, op, ": expected a 4-D grad [N, C, Ho, Wo], got grad ", describe(g));
  MG_CHECK(a.ints[6] >= 1 && a.ints[7] >= 1, ShapeError, op, ": input size must be positive, got [", a.ints[6],
           ", ", a.ints[7], "]");
  const Shape xs{g.size(0), g.size(1), a.ints[6], a.ints[7]};
  return pool_grad_result(op, a, g, xs, avg_dim(a, 0, xs[2]), avg_dim(a, 1, xs[3]));
}

InferResult infer_max_pool2d_backward(const Tensors& in, const OpAttrs& a) {
  const char* op = "max_pool2d_backward";
  const Tensor &g = in[0], &idx = in[1];
  check_floating(op, g);
  MG_CHECK(g.dim() == 4, ShapeError, op, ": expected a 4-D grad [N, C, Ho, Wo], got grad ", describe(g));
  MG_CHECK(idx.dtype() == DType::I64 && idx.shape() == g.shape(), ShapeError, op,
           ": expected i64 indices of the grad's shape (max_pool2d_indices), got indices ", describe(idx),
           " for grad ", describe(g));
  MG_CHECK(idx.device() == g.device(), DeviceError, op, ": indices on ", idx.device().str(), ", grad on ",
           g.device().str());
  MG_CHECK(a.ints.size() == 10 && a.ints[8] >= 1 && a.ints[9] >= 1, ShapeError, op,
           ": input size must be positive, got [", a.ints.size() == 10 ? a.ints[8] : 0, ", ",
           a.ints.size() == 10 ? a.ints[9] : 0, "]");
  const Shape xs{g.size(0), g.size(1), a.ints[8], a.ints[9]};
  return pool_grad_result(op, a, g, xs, max_dim(a, 0, xs[2]), max_dim(a, 1, xs[3]));
}

InferResult infer_adaptive(const Tensors& in, const OpAttrs& a) {
  check_input("adaptive_avg_pool2d", in[0]);
  MG_CHECK(a.ints[0] >= 0 && a.ints[1] >= 0, ShapeError, "adaptive_avg_pool2d: output size must not be negative, got [",
           a.ints[0], ", ", a.ints[1], "]");
  // Every window averages at least one element: an empty H or W has nothing to average (the
  // kernels gave NaN), refused even for an empty output, as PyTorch (whose backward, like this
  // op's, has no rule for it).
  MG_CHECK(in[0].size(2) >= 1 && in[0].size(3) >= 1, ShapeError,
           "adaptive_avg_pool2d: the input's H and W must be positive, got input ", describe(in[0]));
  return {{{{in[0].size(0), in[0].size(1), a.ints[0], a.ints[1]}, in[0].dtype(), layout_of(in[0])}}, in[0].dtype()};
}

InferResult infer_adaptive_backward(const Tensors& in, const OpAttrs& a) {
  const char* op = "adaptive_avg_pool2d_backward";
  const Tensor& g = in[0];
  check_floating(op, g);
  MG_CHECK(g.dim() == 4, ShapeError, op, ": expected a 4-D grad [N, C, Ho, Wo], got grad ", describe(g));
  MG_CHECK(a.ints[0] >= 1 && a.ints[1] >= 1, ShapeError, op, ": input size must be positive, got [", a.ints[0],
           ", ", a.ints[1], "]");
  return {{{{g.size(0), g.size(1), a.ints[0], a.ints[1]}, g.dtype(), grad_layout(a, g)}}, g.dtype()};
}

// ---- backward rules ----

OpAttrs with_hw(const OpAttrs& a, std::size_t keep, const Shape& s) {
  OpAttrs b = a;
  b.ints.resize(keep);
  b.ints.push_back(s[2]);
  b.ints.push_back(s[3]);
  return b;
}

// y = max over each window: dy/dx is 1 at the window's first maximum (max_pool2d_indices), so dx
// is each g added at its window's maximum: max_pool2d_backward, in x's layout.
Tensors max_pool2d_bw(const BackwardCtx& c, const Tensors& grads) {
  const Tensor idx = dispatch1(OpId::max_pool2d_indices, {c.input(0)}, c.attrs());
  OpAttrs a = with_hw(c.attrs(), 8, c.input_shape(0));
  a.dims = {int64_t(c.input_format(0))};  // dx in x's layout
  return {dispatch1(OpId::max_pool2d_backward, {grads[0], idx}, a)};
}
// dx is linear in g, dx[idx[o]] += g[o]: its adjoint reads u at each window's maximum,
// d g[o] = u[idx[o]] (a gather over the flattened H * W plane); the indices get no gradient.
Tensors max_pool2d_backward_bw(const BackwardCtx& c, const Tensors& grads) {
  const Tensor& u = grads[0];
  const Tensor idx = c.input(1);
  const int64_t n = u.size(0), ch = u.size(1);
  const Tensor dg = gather(reshape(u, {n, ch, u.size(2) * u.size(3)}), 2, reshape(idx, {n, ch, idx.size(2) * idx.size(3)}));
  return {reshape(dg, idx.shape()), Tensor()};
}

// y = A x (A averages each window): dx = A^T g = avg_pool2d_backward(g).
Tensors avg_pool2d_bw(const BackwardCtx& c, const Tensors& grads) {
  OpAttrs a = with_hw(c.attrs(), 6, c.input_shape(0));
  a.dims = {int64_t(c.input_format(0))};  // dx in x's layout
  return {dispatch1(OpId::avg_pool2d_backward, {grads[0]}, a)};
}
// dx = A^T g is linear in g: d g = A u = avg_pool2d(u).
Tensors avg_pool2d_backward_bw(const BackwardCtx& c, const Tensors& grads) {
  OpAttrs a = c.attrs();
  a.ints.resize(6);
  a.dims.clear();
  return {dispatch1(OpId::avg_pool2d, {grads[0]}, a)};
}
Tensors adaptive_bw(const BackwardCtx& c, const Tensors& grads) {
  OpAttrs a = with_hw(c.attrs(), 0, c.input_shape(0));
  a.dims = {int64_t(c.input_format(0))};  // dx in x's layout
  return {dispatch1(OpId::adaptive_avg_pool2d_backward, {grads[0]}, a)};
}
Tensors adaptive_backward_bw(const BackwardCtx& c, const Tensors& grads) {
  const Shape& gs = c.input_shape(0);
  OpAttrs a;
  a.ints = {gs[2], gs[3]};
  return {dispatch1(OpId::adaptive_avg_pool2d, {grads[0]}, a)};
}

OpAttrs max_attrs(A2 k, A2 s, A2 p, A2 d, bool ceil_mode) {
  if (s[0] == 0 && s[1] == 0) s = k;
  OpAttrs a;
  a.ints = {k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1]};
  a.mode = ceil_mode ? 2 : 0;
  return a;
}
OpAttrs avg_attrs(A2 k, A2 s, A2 p, bool include_pad, bool ceil_mode, std::optional<int64_t> divisor_override) {
  if (s[0] == 0 && s[1] == 0) s = k;
  MG_CHECK(!divisor_override || *divisor_override > 0, Error, "avg_pool2d: divisor_override must be > 0, got ",
           divisor_override.value_or(0));
  OpAttrs a;
  a.ints = {k[0], k[1], s[0], s[1], p[0], p[1]};
  a.mode = (include_pad ? 1 : 0) | (ceil_mode ? 2 : 0);
  a.alpha = divisor_override ? double(*divisor_override) : 0.0;  // 0: the window's own divisor
  return a;
}

}  // namespace

void register_pool_rules() {
  set_op_rule(OpId::max_pool2d, {.infer = infer_max_pool2d, .backward = max_pool2d_bw, .save = kSaveInput(0)});
  set_op_rule(OpId::max_pool2d_indices, {.infer = infer_max_pool2d_indices});
  set_op_rule(OpId::max_pool2d_backward,
              {.infer = infer_max_pool2d_backward, .backward = max_pool2d_backward_bw, .save = kSaveInput(1)});
  set_op_rule(OpId::avg_pool2d, {.infer = infer_avg_pool2d, .backward = avg_pool2d_bw});
  set_op_rule(OpId::avg_pool2d_backward, {.infer = infer_avg_pool2d_backward, .backward = avg_pool2d_backward_bw});
  set_op_rule(OpId::adaptive_avg_pool2d, {.infer = infer_adaptive, .backward = adaptive_bw});
  set_op_rule(OpId::adaptive_avg_pool2d_backward, {.infer = infer_adaptive_backward, .backward = adaptive_backward_bw});
}

// ---- public API ----
Tensor max_pool2d(const Tensor& x, A2 kernel, A2 stride, A2 padding, A2 dilation, bool ceil_mode) {
  return detail::as_batch_of_one(x, 4, [&](const Tensor& xb) {
    return dispatch1(OpId::max_pool2d, {xb}, max_attrs(kernel, stride, padding, dilation, ceil_mode));
  });
}
Tensor max_pool2d_indices(const Tensor& x, A2 kernel, A2 stride, A2 padding, A2 dilation, bool ceil_mode) {
  return detail::as_batch_of_one(x, 4, [&](const Tensor& xb) {
    return dispatch1(OpId::max_pool2d_indices, {xb}, max_attrs(kernel, stride, padding, dilation, ceil_mode));
  });
}
Tensor max_pool2d_backward(const Tensor& g, const Tensor& indices, A2 input_hw, A2 kernel, A2 stride, A2 padding,
                           A2 dilation, bool ceil_mode) {
  OpAttrs a = max_attrs(kernel, stride, padding, dilation, ceil_mode);
  a.ints.push_back(input_hw[0]);
  a.ints.push_back(input_hw[1]);
  return dispatch1(OpId::max_pool2d_backward, {g, indices}, a);
}
Tensor avg_pool2d(const Tensor& x, A2 kernel, A2 stride, A2 padding, bool count_include_pad, bool ceil_mode,
                  std::optional<int64_t> divisor_override) {
  return detail::as_batch_of_one(x, 4, [&](const Tensor& xb) {
    return dispatch1(OpId::avg_pool2d, {xb},
                     avg_attrs(kernel, stride, padding, count_include_pad, ceil_mode, divisor_override));
  });
}
Tensor avg_pool2d_backward(const Tensor& g, A2 input_hw, A2 kernel, A2 stride, A2 padding, bool count_include_pad,
                           bool ceil_mode, std::optional<int64_t> divisor_override) {
  OpAttrs a = avg_attrs(kernel, stride, padding, count_include_pad, ceil_mode, divisor_override);
  a.ints.push_back(input_hw[0]);
  a.ints.push_back(input_hw[1]);
  return dispatch1(OpId::avg_pool2d_backward, {g}, a);
}
Tensor adaptive_avg_pool2d(const Tensor& x, A2 output_hw) {
  OpAttrs a;
  a.ints = {output_hw[0], output_hw[1]};
  return detail::as_batch_of_one(x, 4, [&](const Tensor& xb) { return dispatch1(OpId::adaptive_avg_pool2d, {xb}, a); });
}
Tensor adaptive_avg_pool2d_backward(const Tensor& g, A2 input_hw) {
  OpAttrs a;
  a.ints = {input_hw[0], input_hw[1]};
  return dispatch1(OpId::adaptive_avg_pool2d_backward, {g}, a);
}

}  // namespace mg
