#include "mixgrad/ops/conv1d.h"

#include "mixgrad/ops/conv.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/unbatched.h"

namespace mg {

namespace {

// x must be [N, C, L].
void check_sequence(const char* op, const Tensor& x) {
  MG_CHECK(x.defined(), Error, op, ": got an undefined input");
  MG_CHECK(x.dim() == 3, ShapeError, op, ": expected x [N, C, L] (3-D, or an unbatched [C, L]), got ", describe(x));
}

// The [N, C, 1, L] view of x and the [O, C/g, 1, k] view of a weight.
Tensor as_2d(const Tensor& t) { return unsqueeze(t, 2); }
Tensor as_1d(const Tensor& y) { return squeeze(y, 2); }

Conv2dOptions as_2d(const Conv1dOptions& o) {
  return {.stride = {1, o.stride}, .padding = {0, o.padding}, .dilation = {1, o.dilation}, .groups = o.groups};
}

// x [N, C, L] and w [O, C/groups, k] (transposed: [C, O/groups, k]) agree, and the dilated kernel
// fits the padded input (a forward convolution).
void check_conv(const char* op, const Tensor& x, const Tensor& w, int64_t padding, int64_t dilation, int64_t groups,
                bool transposed) {
  check_sequence(op, x);
  MG_CHECK(w.defined() && w.dim() == 3, ShapeError, op, ": expected weight ",
           transposed ? "[C, O/groups, k]" : "[O, C/groups, k]", " (3-D), got ", w.defined() ? describe(w) : "undefined");
  MG_CHECK(groups >= 1, Error, op, ": groups must be >= 1, got ", groups);
  const int64_t c = x.size(1);
  const bool fits = transposed ? w.size(0) == c : w.size(1) * groups == c;
  MG_CHECK(fits, ShapeError, op, ": expected weight ", transposed ? "[C, O/groups, k] with C = " : "[O, C/groups, k] with C/groups = ",
           transposed ? c : c / groups, " for x ", describe(x), " and groups ", groups, ", got weight ", describe(w));
  MG_CHECK(w.size(2) >= 1, ShapeError, op, ": the kernel size must be greater than zero; got weight ", describe(w));
  MG_CHECK(x.size(2) >= 1, ShapeError, op, ": only an empty batch or channels are supported, not an empty length; got x ",
           describe(x));
  if (transposed) return;
  const int64_t span = dilation * (w.size(2) - 1) + 1;
  MG_CHECK(x.size(2) + 2 * padding >= span, ShapeError, op, ": kernel ", w.size(2), " (dilated ", span,
           ") is longer than the padded input ", x.size(2) + 2 * padding, "; got x ", describe(x), ", weight ",
           describe(w));
}

}  // namespace

Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv1dOptions& opt) {
  return detail::as_batch_of_one(x, 3, [&](const Tensor& xb) {
    check_conv("conv1d", xb, w, opt.padding, opt.dilation, opt.groups, false);
    return as_1d(conv2d(as_2d(xb), as_2d(w), bias, as_2d(opt)));
  });
}

Tensor conv1d_same(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t dilation, int64_t groups) {
  // "same" pads dilation (k - 1) in all, so the padding checked is its larger half.
  const int64_t k = w.defined() && w.dim() == 3 ? w.size(2) : 1;
  return detail::as_batch_of_one(x, 3, [&](const Tensor& xb) {
    check_conv("conv1d_same", xb, w, (dilation * (k - 1) + 1) / 2, dilation, groups, false);
    return as_1d(conv2d_same(as_2d(xb), as_2d(w), bias, {1, dilation}, groups));
  });
}

Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv1dOptions& opt,
                        int64_t output_padding) {
  return detail::as_batch_of_one(x, 3, [&](const Tensor& xb) {
    check_conv("conv_transpose1d", xb, w, opt.padding, opt.dilation, opt.groups, true);
    return as_1d(conv_transpose2d(as_2d(xb), as_2d(w), bias, as_2d(opt), {0, output_padding}));
  });
}

Tensor max_pool1d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation, bool ceil_mode) {
  return detail::as_batch_of_one(x, 3, [&](const Tensor& xb) {
    check_sequence("max_pool1d", xb);
    return as_1d(max_pool2d(as_2d(xb), {1, kernel}, {1, stride == 0 ? kernel : stride}, {0, padding}, {1, dilation},
                            ceil_mode));
  });
}

Tensor avg_pool1d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding, bool count_include_pad,
                  bool ceil_mode) {
  return detail::as_batch_of_one(x, 3, [&](const Tensor& xb) {
    check_sequence("avg_pool1d", xb);
    return as_1d(avg_pool2d(as_2d(xb), {1, kernel}, {1, stride == 0 ? kernel : stride}, {0, padding},
                            count_include_pad, ceil_mode));
  });
}

Tensor adaptive_avg_pool1d(const Tensor& x, int64_t output_size) {
  return detail::as_batch_of_one(x, 3, [&](const Tensor& xb) {
    check_sequence("adaptive_avg_pool1d", xb);
    MG_CHECK(output_size >= 1, Error, "adaptive_avg_pool1d: output_size must be >= 1, got ", output_size);
    return as_1d(adaptive_avg_pool2d(as_2d(xb), {1, output_size}));
  });
}

}  // namespace mg
