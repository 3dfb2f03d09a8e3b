#include "mixgrad/ops/conv3d.h"

#include <algorithm>

#include "mixgrad/ops/conv.h"
#include "mixgrad/ops/conv1d.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/pad.h"

namespace mg {

namespace {

const char* const kDims[3] = {"D", "H", "W"};

// x [N, C, D, H, W] or [C, D, H, W] (then unbatched is set and a batch of one is returned).
Tensor batched_input(const char* op, const Tensor& x, bool& unbatched) {
  MG_CHECK(x.defined() && (x.dim() == 5 || x.dim() == 4), ShapeError, op,
           ": expected x [N, C, D, H, W] or [C, D, H, W], got ", x.defined() ? describe(x) : "undefined");
  MG_CHECK(x.is_floating_point(), DTypeError, op, ": expected a floating input, got ", describe(x));
  unbatched = x.dim() == 4;
  return unbatched ? x.unsqueeze(0) : x;
}

Tensor unbatch(const Tensor& y, bool unbatched) { return unbatched ? y.squeeze(0) : y; }

// Each dim's window (kernel, stride, padding, dilation) as the 2-D and 1-D ops will check it, but
// named by the 3-D op and the dim, so a bad window never surfaces as a 2-D or 1-D op's error.
void check_window(const char* op, const Tensor& x5, Int3 k, Int3 s, Int3 p, Int3 d, bool pooling) {
  for (int i = 0; i < 3; ++i) {
    MG_CHECK(k[i] >= 1 && s[i] >= 1 && d[i] >= 1 && p[i] >= 0, Error, op,
             ": kernel, stride and dilation must be >= 1 and padding >= 0, got kernel ", k[i], ", stride ", s[i],
             ", padding ", p[i], ", dilation ", d[i], " along ", kDims[i]);
    const int64_t keff = d[i] * (k[i] - 1) + 1, n = x5.size(2 + i);
    MG_CHECK(!pooling || 2 * p[i] <= keff, Error, op, ": padding (", p[i], ") must be at most half the kernel (", keff,
             ") along ", kDims[i]);
    MG_CHECK(keff <= n + 2 * p[i], ShapeError, op, ": the window (", keff, ") is larger than the padded input (", n,
             " + 2 * ", p[i], ") along ", kDims[i], "; got x ", describe(x5));
  }
}

Int3 or_kernel(Int3 stride, Int3 kernel) {
  return stride == Int3{0, 0, 0} ? kernel : stride;
}

// f [N, C, D, H, W] -> the 2-D op over (H, W) on [N, C·D, H, W], then the 1-D op over D on
// [N·C, Ho·Wo, D]; returns [N, C, Do, Ho, Wo].
template <typename Plane, typename Line>
Tensor separable(const Tensor& x5, Plane&& plane, Line&& line) {
  const int64_t n = x5.size(0), c = x5.size(1), d = x5.size(2);
  const Tensor hw = plane(x5.reshape({n, c * d, x5.size(3), x5.size(4)}));  // [N, C·D, Ho, Wo]
  const int64_t ho = hw.size(2), wo = hw.size(3);
  const Tensor lines = hw.reshape({n * c, d, ho * wo}).transpose(1, 2);  // [N·C, Ho·Wo, D]
  const Tensor pooled = line(contiguous(lines));                          // [N·C, Ho·Wo, Do]
  const int64_t dout = pooled.size(2);
  return contiguous(pooled.transpose(1, 2)).reshape({n, c, dout, ho, wo});
}

bool is_16bit(DType t) { return t == DType::F16 || t == DType::BF16; }

}  // namespace

Tensor conv3d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv3dOptions& o) {
  bool unbatched = false;
  const Tensor x5 = batched_input("conv3d", x, unbatched);
  MG_CHECK(w.defined() && w.dim() == 5, ShapeError, "conv3d: expected weight [O, C/groups, kd, kh, kw], got ",
           w.defined() ? describe(w) : "undefined");
  MG_CHECK(o.groups >= 1 && x5.size(1) % o.groups == 0 && w.size(0) % o.groups == 0 &&
               w.size(1) * o.groups == x5.size(1),
           ShapeError, "conv3d: expected weight [O, C/groups, kd, kh, kw] with C/groups = ",
           o.groups >= 1 ? x5.size(1) / o.groups : 0, " and O divisible by groups ", o.groups, " for x ", describe(x),
           ", got weight ", describe(w));
  check_window("conv3d", x5, {w.size(2), w.size(3), w.size(4)}, o.stride, o.padding, o.dilation, false);
  const int64_t n = x5.size(0), c = x5.size(1), kd = w.size(2);
  const int64_t sd = o.stride[0], pd = o.padding[0], dd = o.dilation[0];
  const int64_t dout = (x5.size(2) + 2 * pd - dd * (kd - 1) - 1) / sd + 1;
  // The depth taps of every output depth as channels: [N, C, kd, Do, H, W] -> [N·Do, C·kd, H, W],
  // channel c·kd + t, matching w viewed as [O, C/g·kd, kh, kw] (and the groups' channel blocks).
  const Tensor xp = pd > 0 ? pad(x5, {0, 0, 0, 0, pd, pd}) : x5;
  Tensors taps;
  taps.reserve(std::size_t(kd));
  for (int64_t t = 0; t < kd; ++t) taps.push_back(xp.slice(2, t * dd, t * dd + (dout - 1) * sd + 1, sd));
  const Tensor gathered = stack(taps, 2).permute({0, 3, 1, 2, 4, 5}).reshape({n * dout, c * kd, x5.size(3), x5.size(4)});
  const Tensor y2 = conv2d(gathered, w.reshape({w.size(0), w.size(1) * kd, w.size(3), w.size(4)}), bias,
                           {.stride = {o.stride[1], o.stride[2]},
                            .padding = {o.padding[1], o.padding[2]},
                            .dilation = {o.dilation[1], o.dilation[2]},
                            .groups = o.groups});  // [N·Do, O, Ho, Wo]
  const Tensor y = contiguous(y2.reshape({n, dout, y2.size(1), y2.size(2), y2.size(3)}).permute({0, 2, 1, 3, 4}));
  return unbatch(y, unbatched);
}

Tensor conv_transpose3d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv3dOptions& o,
                        Int3 output_padding) {
  bool unbatched = false;
  const Tensor x5 = batched_input("conv_transpose3d", x, unbatched);
  MG_CHECK(w.defined() && w.dim() == 5, ShapeError,
           "conv_transpose3d: expected weight [Cin, Cout/groups, kd, kh, kw], got ", w.defined() ? describe(w) : "undefined");
  MG_CHECK(o.groups >= 1 && w.size(0) == x5.size(1) && x5.size(1) % o.groups == 0, ShapeError,
           "conv_transpose3d: expected weight [Cin, Cout/groups, kd, kh, kw] with Cin = ", x5.size(1),
           " divisible by groups ", o.groups, " for x ", describe(x), ", got weight ", describe(w));
  for (int i = 0; i < 3; ++i) {
    MG_CHECK(o.stride[i] >= 1 && o.dilation[i] >= 1 && o.padding[i] >= 0, Error, "conv_transpose3d: stride and ",
             "dilation must be >= 1 and padding >= 0, got stride ", o.stride[i], ", dilation ", o.dilation[i],
             ", padding ", o.padding[i], " along ", kDims[i]);
    MG_CHECK(output_padding[i] >= 0 && (output_padding[i] < o.stride[i] || output_padding[i] < o.dilation[i]), Error,
             "conv_transpose3d: output_padding must be smaller than the stride ", o.stride[i], " or the dilation ",
             o.dilation[i], ", got ", output_padding[i], " along ", kDims[i]);
  }
  const int64_t n = x5.size(0), cin = x5.size(1), d = x5.size(2), kd = w.size(2);
  const int64_t sd = o.stride[0], pd = o.padding[0], dd = o.dilation[0], opd = output_padding[0];
  const int64_t dout = (d - 1) * sd - 2 * pd + dd * (kd - 1) + opd + 1;
  MG_CHECK(dout >= 1, ShapeError, "conv_transpose3d: the output depth (", dout, ") would be empty for x ", describe(x),
           " with padding ", pd);
  // Depth: the input spread by the stride, padded by dil (kd - 1) - pad on both sides (negative:
  // cropped) and output_padding at the end, then a stride-1 convolution with the flipped kernel.
  Tensor spread = x5;
  if (sd > 1) {
    spread = pad(x5.unsqueeze(3), {0, 0, 0, 0, 0, sd - 1})  // [N, C, D, sd, H, W]
                 .reshape({n, cin, d * sd, x5.size(3), x5.size(4)})
                 .slice(2, 0, (d - 1) * sd + 1);
  }
  const int64_t edge = dd * (kd - 1) - pd;
  const Tensor xp = pad(spread, {0, 0, 0, 0, edge, edge + opd});
  Tensors taps;
  taps.reserve(std::size_t(kd));
  for (int64_t t = 0; t < kd; ++t) taps.push_back(xp.slice(2, t * dd, t * dd + dout));
  const Tensor gathered =
      stack(taps, 2).permute({0, 3, 1, 2, 4, 5}).reshape({n * dout, cin * kd, x5.size(3), x5.size(4)});
  // w [Cin, Cout/g, kd, kh, kw], flipped in depth -> [Cin·kd, Cout/g, kh, kw], row c·kd + t.
  Tensors depth = unbind(w, 2);
  std::reverse(depth.begin(), depth.end());
  const Tensor wf = stack(depth, 1).reshape({cin * kd, w.size(1), w.size(3), w.size(4)});  // [Cin, kd, Cout/g, kh, kw]
  const Tensor y2 = conv_transpose2d(gathered, wf, bias,
                                     {.stride = {o.stride[1], o.stride[2]},
                                      .padding = {o.padding[1], o.padding[2]},
                                      .dilation = {o.dilation[1], o.dilation[2]},
                                      .groups = o.groups},
                                     {output_padding[1], output_padding[2]});  // [N·Do, Cout, Ho, Wo]
  const Tensor y = contiguous(y2.reshape({n, dout, y2.size(1), y2.size(2), y2.size(3)}).permute({0, 2, 1, 3, 4}));
  return unbatch(y, unbatched);
}

Tensor max_pool3d(const Tensor& x, Int3 kernel, Int3 stride, Int3 padding, Int3 dilation, bool ceil_mode) {
  bool unbatched = false;
  const Tensor x5 = batched_input("max_pool3d", x, unbatched);
  stride = or_kernel(stride, kernel);
  check_window("max_pool3d", x5, kernel, stride, padding, dilation, true);
  const Tensor y = separable(
      x5,
      [&](const Tensor& t) {
        return max_pool2d(t, {kernel[1], kernel[2]}, {stride[1], stride[2]}, {padding[1], padding[2]},
                          {dilation[1], dilation[2]}, ceil_mode);
      },
      [&](const Tensor& t) { return max_pool1d(t, kernel[0], stride[0], padding[0], dilation[0], ceil_mode); });
  return unbatch(y, unbatched);
}

Tensor avg_pool3d(const Tensor& x, Int3 kernel, Int3 stride, Int3 padding, bool count_include_pad, bool ceil_mode) {
  bool unbatched = false;
  const Tensor x5 = batched_input("avg_pool3d", x, unbatched);
  stride = or_kernel(stride, kernel);
  check_window("avg_pool3d", x5, kernel, stride, padding, {1, 1, 1}, true);
  // The mean over a box is the mean over D of the means over (H, W), each with its own divisor
  // rule; in f32 for f16/bf16 so the result is rounded once.
  const DType dt = x5.dtype();
  const Tensor y = separable(
      is_16bit(dt) ? x5.to(DType::F32) : x5,
      [&](const Tensor& t) {
        return avg_pool2d(t, {kernel[1], kernel[2]}, {stride[1], stride[2]}, {padding[1], padding[2]},
                          count_include_pad, ceil_mode);
      },
      [&](const Tensor& t) { return avg_pool1d(t, kernel[0], stride[0], padding[0], count_include_pad, ceil_mode); });
  return unbatch(y.to(dt), unbatched);
}

Tensor adaptive_avg_pool3d(const Tensor& x, Int3 output_size) {
  bool unbatched = false;
  const Tensor x5 = batched_input("adaptive_avg_pool3d", x, unbatched);
  for (int i = 0; i < 3; ++i) {
    MG_CHECK(output_size[i] >= 1, Error, "adaptive_avg_pool3d: output sizes must be >= 1, got ", output_size[i],
             " along ", kDims[i]);
    MG_CHECK(x5.size(2 + i) >= 1, ShapeError, "adaptive_avg_pool3d: the input has no elements along ", kDims[i],
             "; got x ", describe(x));
  }
  const DType dt = x5.dtype();
  const Tensor y = separable(
      is_16bit(dt) ? x5.to(DType::F32) : x5,
      [&](const Tensor& t) { return adaptive_avg_pool2d(t, {output_size[1], output_size[2]}); },
      [&](const Tensor& t) { return adaptive_avg_pool1d(t, output_size[0]); });
  return unbatch(y.to(dt), unbatched);
}

}  // namespace mg
