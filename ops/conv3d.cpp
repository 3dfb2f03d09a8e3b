#include "mixgrad/ops/conv3d.h"

#include <algorithm>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"

#include "mixgrad/ops/conv.h"
#include "mixgrad/ops/conv1d.h"
#include "mixgrad/ops/max_unpool.h"
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
// named by the 3-D op and the dim, so a bad window never surfaces as a 2-D or 1-D op's error:
// sizes that would overflow, an empty dim, a window larger than the padded input and (pooling) a
// padding over half the window, an output window with no input element (dilation).
// ceil_overhang (max_pool3d in ceil mode, as PyTorch's): the one window may reach up to stride - 1
// past the padded input (avg_pool3d refuses that, as PyTorch's does).
void check_window(const char* op, const Tensor& x5, Int3 k, Int3 s, Int3 p, Int3 d, bool pooling,
                  bool ceil_mode = false, bool ceil_overhang = false) {
  MG_CHECK(!pooling || x5.size(1) > 0, ShapeError, op, ": expected at least one channel, got x ", describe(x5));
  for (int i = 0; i < 3; ++i) {
    MG_CHECK(k[i] >= 1 && s[i] >= 1 && d[i] >= 1 && p[i] >= 0, Error, op,
             ": kernel, stride and dilation must be >= 1 and padding >= 0, got kernel ", k[i], ", stride ", s[i],
             ", padding ", p[i], ", dilation ", d[i], " along ", kDims[i]);
    const int64_t n = x5.size(2 + i);
    MG_CHECK(n >= 1, ShapeError, op, ": the input has no elements along ", kDims[i], "; got x ", describe(x5));
    int64_t keff = 0, room = 0;
    const bool overflow = __builtin_mul_overflow(d[i], k[i] - 1, &keff) || __builtin_add_overflow(keff, 1, &keff) ||
                          __builtin_mul_overflow(p[i], int64_t(2), &room) || __builtin_add_overflow(room, n, &room);
    MG_CHECK(!overflow, Error, op, ": kernel ", k[i], ", dilation ", d[i], " and padding ", p[i], " along ", kDims[i],
             " overflow 64-bit sizes");
    MG_CHECK(!pooling || 2 * p[i] <= k[i], Error, op, ": padding (", p[i], ") must be at most half the kernel (",
             k[i], ") along ", kDims[i]);
    MG_CHECK(keff <= room || (ceil_overhang && room - keff + s[i] - 1 >= 0), ShapeError, op, ": the window (", keff, ") is larger than the padded input (", n,
             " + 2 * ", p[i], ") along ", kDims[i], "; got x ", describe(x5));
    if (!pooling || d[i] == 1) continue;
    // PyTorch's output size (ceil_mode: the last window must start inside the input or the left padding).
    int64_t out = (room - keff + (ceil_mode ? s[i] - 1 : 0)) / s[i] + 1;
    if (ceil_mode && (out - 1) * s[i] >= n + p[i]) --out;
    for (int64_t o = 0; o < out; ++o) {
      const int64_t first = o * s[i] - p[i];
      bool hit = false;
      for (int64_t j = 0; j < k[i] && !hit; ++j) hit = first + j * d[i] >= 0 && first + j * d[i] < n;
      MG_CHECK(hit, ShapeError, op, ": output ", o, " along ", kDims[i], " has a window with no input element (taps at ",
               first, ", ", first + d[i], ", ... of an input of ", n, " with padding ", p[i], ", dilation ", d[i],
               "); got x ", describe(x5), "\n  hint: lower the padding or the dilation");
    }
  }
}

// t along dim 2 with `before` elements added in front and `after` at the end, zeros (a negative
// amount crops): the kept range is sliced first, so any combination works, also one that crops
// every element before padding again (then zeros that stay on the graph).
Tensor pad_depth(const Tensor& t, int64_t before, int64_t after) {
  const int64_t n = t.size(2), first = std::max<int64_t>(0, -before), last = std::min(n, n + after);
  if (first >= last) {
    Shape shape = t.shape();
    shape[2] = n + before + after;
    const Tensor none = sum(t, {2}, /*keepdim=*/true);
    return masked_fill(none.expand(shape), ones({1}, {.dtype = DType::Bool, .device = t.device()}), 0.0);
  }
  const Tensor kept = first > 0 || last < n ? t.slice(2, first, last) : t;
  const int64_t lead = std::max<int64_t>(0, before), tail = std::max<int64_t>(0, after);
  return lead || tail ? pad(kept, {0, 0, 0, 0, lead, tail}) : kept;
}

// The kd depth taps of a stride-`s` sweep over x [N, C, D', H, W] (tap t starts at t * dil) as
// channels: [N·Do, C·kd, H, W], channel c·kd + t. One copy (the stack).
Tensor depth_taps_as_channels(const Tensor& x, int64_t kd, int64_t dil, int64_t s, int64_t dout) {
  Tensors taps;
  taps.reserve(std::size_t(kd));
  for (int64_t t = 0; t < kd; ++t) taps.push_back(x.slice(2, t * dil, t * dil + (dout - 1) * s + 1, s).transpose(1, 2));
  // each tap [N, Do, C, H, W]; stacked at dim 3: [N, Do, C, kd, H, W], a view away from the result
  return stack(taps, 3).reshape({x.size(0) * dout, x.size(1) * kd, x.size(3), x.size(4)});
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
  const int64_t n = x5.size(0), kd = w.size(2);
  const int64_t sd = o.stride[0], pd = o.padding[0], dd = o.dilation[0];
  const int64_t dout = (x5.size(2) + 2 * pd - dd * (kd - 1) - 1) / sd + 1;
  // The depth taps of every output depth as channels: [N, C, kd, Do, H, W] -> [N·Do, C·kd, H, W],
  // channel c·kd + t, matching w viewed as [O, C/g·kd, kh, kw] (and the groups' channel blocks).
  const Tensor xp = pd > 0 ? pad(x5, {0, 0, 0, 0, pd, pd}) : x5;
  const Tensor gathered = depth_taps_as_channels(xp, kd, dd, sd, dout);
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
    MG_CHECK(w.size(2 + i) >= 1, ShapeError, "conv_transpose3d: the kernel has no taps along ", kDims[i],
             "; got weight ", describe(w));
    MG_CHECK(x5.size(2 + i) >= 1, ShapeError, "conv_transpose3d: the input has no elements along ", kDims[i],
             " (only an empty batch or channels are allowed); got x ", describe(x));
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
  const Tensor xp = pad_depth(spread, edge, edge + opd);
  const Tensor gathered = depth_taps_as_channels(xp, kd, dd, 1, dout);
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
  check_window("max_pool3d", x5, kernel, stride, padding, dilation, true, ceil_mode, /*ceil_overhang=*/ceil_mode);
  // The maxima are exact in any dtype, but the separable backward adds the 1-D pass's gradients
  // in the 2-D pass: for f16/bf16 that is a second rounding unless the passes run in f32, so a
  // gradient that will be taken is computed in f32 and rounded once (the forward's bits are the same).
  const DType dt = x5.dtype();
  const bool wide = is_16bit(dt) && x5.requires_grad() && GradMode::is_enabled();
  const Tensor y = separable(
      wide ? x5.to(DType::F32) : x5,
      [&](const Tensor& t) {
        return max_pool2d(t, {kernel[1], kernel[2]}, {stride[1], stride[2]}, {padding[1], padding[2]},
                          {dilation[1], dilation[2]}, ceil_mode);
      },
      [&](const Tensor& t) { return max_pool1d(t, kernel[0], stride[0], padding[0], dilation[0], ceil_mode); });
  return unbatch(wide ? y.to(dt) : y, unbatched);
}

Tensor max_pool3d_indices(const Tensor& x, Int3 kernel, Int3 stride, Int3 padding, Int3 dilation, bool ceil_mode) {
  bool unbatched = false;
  const Tensor x5 = batched_input("max_pool3d_indices", x, unbatched);
  stride = or_kernel(stride, kernel);
  check_window("max_pool3d_indices", x5, kernel, stride, padding, dilation, true, ceil_mode, ceil_mode);
  NoGradGuard no_grad;
  // max_pool3d's two passes, each with its positions: the first maximum over (h, w) of every depth
  // slice, then the first depth holding the largest of those, so ties go to the first in (d, h, w)
  // order. The position is the chosen depth's plane offset plus its slice's (h, w) position.
  const int64_t n = x5.size(0), c = x5.size(1), d = x5.size(2), h = x5.size(3), w = x5.size(4);
  const Tensor planes = x5.reshape({n, c * d, h, w});
  const Int3 k = kernel, s = stride, p = padding, dl = dilation;
  const Tensor hw_max = max_pool2d(planes, {k[1], k[2]}, {s[1], s[2]}, {p[1], p[2]}, {dl[1], dl[2]}, ceil_mode);
  const Tensor hw_pos = max_pool2d_indices(planes, {k[1], k[2]}, {s[1], s[2]}, {p[1], p[2]}, {dl[1], dl[2]}, ceil_mode);
  const int64_t ho = hw_max.size(2), wo = hw_max.size(3);
  auto lines = [&](const Tensor& t) { return contiguous(t.reshape({n * c, d, ho * wo}).transpose(1, 2)); };  // [N·C, Ho·Wo, D]
  const Tensor depth = max_pool1d_indices(lines(hw_max), k[0], s[0], p[0], dl[0], ceil_mode);  // [N·C, Ho·Wo, Do]
  const Tensor pos = depth * double(h * w) + gather(lines(hw_pos), 2, depth);
  const int64_t dout = depth.size(2);
  return unbatch(contiguous(pos.transpose(1, 2)).reshape({n, c, dout, ho, wo}), unbatched);
}

Tensor avg_pool3d(const Tensor& x, Int3 kernel, Int3 stride, Int3 padding, bool count_include_pad, bool ceil_mode,
                  std::optional<int64_t> divisor_override) {
  bool unbatched = false;
  const Tensor x5 = batched_input("avg_pool3d", x, unbatched);
  MG_CHECK(!divisor_override || *divisor_override > 0, Error, "avg_pool3d: divisor_override must be > 0, got ",
           divisor_override.value_or(0));
  stride = or_kernel(stride, kernel);
  check_window("avg_pool3d", x5, kernel, stride, padding, {1, 1, 1}, true, ceil_mode);
  // The mean over a box is the mean over D of the means over (H, W), each with its own divisor
  // rule; with divisor_override, the sum over D of the sums over (H, W) (a divisor of 1) divided
  // once. In f32 for f16/bf16 so the result is rounded once.
  const DType dt = x5.dtype();
  const Tensor y = separable(
      is_16bit(dt) ? x5.to(DType::F32) : x5,
      [&](const Tensor& t) {
        return avg_pool2d(t, {kernel[1], kernel[2]}, {stride[1], stride[2]}, {padding[1], padding[2]},
                          count_include_pad, ceil_mode, divisor_override ? std::optional<int64_t>(1) : std::nullopt);
      },
      [&](const Tensor& t) {
        if (!divisor_override) return avg_pool1d(t, kernel[0], stride[0], padding[0], count_include_pad, ceil_mode);
        // [N·C, Ho·Wo, D] as a one-row image: the 2-D pool's divisor_override along D alone.
        return avg_pool2d(t.unsqueeze(2), {1, kernel[0]}, {1, stride[0]}, {0, padding[0]}, count_include_pad,
                          ceil_mode, divisor_override)
            .squeeze(2);
      });
  return unbatch(y.to(dt), unbatched);
}

Tensor adaptive_avg_pool3d(const Tensor& x, Int3 output_size) {
  bool unbatched = false;
  const Tensor x5 = batched_input("adaptive_avg_pool3d", x, unbatched);
  MG_CHECK(x5.size(1) > 0, ShapeError, "adaptive_avg_pool3d: expected at least one channel, got x ", describe(x));
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
