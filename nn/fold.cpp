#include "mixgrad/nn/fold.h"

#include <algorithm>

#include "mixgrad/core/factory.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/pad.h"

namespace mg::nn {

namespace {

// The block grid of one image: taps, their spacing and the block positions per dim.
struct Blocks {
  int64_t kh, kw, dh, dw, ph, pw, sh, sw;
  int64_t oh, ow;  // block positions per dim
  int64_t count;   // oh·ow
};

std::string options_repr(Size2 kernel, Size2 dilation, Size2 padding, Size2 stride) {
  return str_cat("kernel_size=", kernel.str(), ", dilation=", dilation.str(), ", padding=", padding.str(),
                 ", stride=", stride.str());
}

void check_geometry(const char* op, Size2 kernel, Size2 dilation, Size2 padding, Size2 stride) {
  MG_CHECK(kernel.h > 0 && kernel.w > 0, Error, op, ": kernel must be positive, got ", kernel.str());
  MG_CHECK(dilation.h > 0 && dilation.w > 0, Error, op, ": dilation must be positive, got ", dilation.str());
  MG_CHECK(padding.h >= 0 && padding.w >= 0, Error, op, ": padding must be >= 0, got ", padding.str());
  MG_CHECK(stride.h > 0 && stride.w > 0, Error, op, ": stride must be positive, got ", stride.str());
}

Blocks blocks_of(const char* op, int64_t h, int64_t w, Size2 kernel, Size2 dilation, Size2 padding, Size2 stride) {
  Blocks b{kernel.h, kernel.w, dilation.h, dilation.w, padding.h, padding.w, stride.h, stride.w, 0, 0, 0};
  int64_t span_h = 0, span_w = 0, room_h = 0, room_w = 0, taps = 0;
  const bool overflow = __builtin_mul_overflow(b.dh, b.kh - 1, &span_h) || __builtin_mul_overflow(b.dw, b.kw - 1, &span_w) ||
                        __builtin_mul_overflow(b.ph, int64_t(2), &room_h) || __builtin_mul_overflow(b.pw, int64_t(2), &room_w) ||
                        __builtin_add_overflow(room_h, h, &room_h) || __builtin_add_overflow(room_w, w, &room_w) ||
                        __builtin_mul_overflow(b.kh, b.kw, &taps);
  MG_CHECK(!overflow, Error, op, ": ", options_repr(kernel, dilation, padding, stride), " on an image of ", h, "x", w,
           " overflows 64-bit sizes");
  ++span_h, ++span_w;
  MG_CHECK(room_h >= span_h && room_w >= span_w, ShapeError, op, ": an image of ", h, "x", w, " padded by ",
           padding.str(), " is smaller than the dilated kernel (", span_h, "x", span_w,
           "), so there are no sliding blocks");
  b.oh = (room_h - span_h) / b.sh + 1;
  b.ow = (room_w - span_w) / b.sw + 1;
  MG_CHECK(!__builtin_mul_overflow(b.oh, b.ow, &b.count), Error, op, ": ", b.oh, "x", b.ow,
           " blocks overflow 64-bit sizes");
  return b;
}

// t [N, C, th, tw] placed with its top-left corner at (top, left) of an h x w image of zeros: the
// parts outside the image are cut first, so every pad amount is >= 0. Undefined when no part of t
// is inside.
Tensor place(const Tensor& t, int64_t top, int64_t left, int64_t h, int64_t w) {
  const int64_t th = t.size(2), tw = t.size(3);
  const int64_t r0 = std::max<int64_t>(0, -top), r1 = std::min(th, h - top);
  const int64_t c0 = std::max<int64_t>(0, -left), c1 = std::min(tw, w - left);
  if (r0 >= r1 || c0 >= c1) return Tensor();
  Tensor v = t;
  if (r0 > 0 || r1 < th) v = v.slice(2, r0, r1);
  if (c0 > 0 || c1 < tw) v = v.slice(3, c0, c1);
  return pad(v, {left + c0, w - left - c1, top + r0, h - top - r1});
}

}  // namespace

Tensor unfold(const Tensor& x, const UnfoldOptions& o) {
  check_geometry("unfold", o.kernel, o.dilation, o.padding, o.stride);
  MG_CHECK(x.defined() && (x.dim() == 3 || x.dim() == 4), ShapeError,
           "unfold: expected x [N, C, H, W] or [C, H, W], got ", x.defined() ? describe(x) : "undefined");
  const bool unbatched = x.dim() == 3;
  const Tensor x4 = unbatched ? x.unsqueeze(0) : x;
  const int64_t n = x4.size(0), c = x4.size(1);
  const Blocks b = blocks_of("unfold", x4.size(2), x4.size(3), o.kernel, o.dilation, o.padding, o.stride);
  const Tensor xp = b.ph || b.pw ? pad(x4, {b.pw, b.pw, b.ph, b.ph}) : x4;
  Tensors taps;
  taps.reserve(std::size_t(b.kh * b.kw));
  for (int64_t i = 0; i < b.kh; ++i) {
    const Tensor rows = slice(xp, 2, i * b.dh, i * b.dh + (b.oh - 1) * b.sh + 1, b.sh);
    for (int64_t j = 0; j < b.kw; ++j) taps.push_back(slice(rows, 3, j * b.dw, j * b.dw + (b.ow - 1) * b.sw + 1, b.sw));
  }
  // [N, C, kh·kw, oh, ow]: row c·kh·kw + i·kw + j of the result.
  const Tensor y = stack(taps, 2).reshape({n, c * b.kh * b.kw, b.count});
  return unbatched ? y.squeeze(0) : y;
}

Tensor fold(const Tensor& x, const FoldOptions& o) {
  check_geometry("fold", o.kernel, o.dilation, o.padding, o.stride);
  MG_CHECK(o.output_size.h > 0 && o.output_size.w > 0, Error, "fold: output_size must be positive, got ",
           o.output_size.str());
  MG_CHECK(x.defined() && (x.dim() == 2 || x.dim() == 3), ShapeError,
           "fold: expected x [N, C·kh·kw, L] or [C·kh·kw, L], got ", x.defined() ? describe(x) : "undefined");
  MG_CHECK(is_floating(x.dtype()), DTypeError, "fold: expected a floating tensor (the blocks are summed), got ",
           describe(x));
  const bool unbatched = x.dim() == 2;
  const Tensor x3 = unbatched ? x.unsqueeze(0) : x;
  const int64_t h = o.output_size.h, w = o.output_size.w;
  const Blocks b = blocks_of("fold", h, w, o.kernel, o.dilation, o.padding, o.stride);
  const int64_t n = x3.size(0), taps = b.kh * b.kw;
  MG_CHECK(x3.size(1) % taps == 0, ShapeError, "fold: the size of dim ", x.dim() - 2, " of ", describe(x),
           " must be divisible by the kernel's ", taps, " taps (", o.kernel.str(), ")");
  MG_CHECK(x3.size(2) == b.count, ShapeError, "fold: ", describe(x), " has ", x3.size(2),
           " blocks in its last dim, but output_size ", o.output_size.str(), " with ",
           options_repr(o.kernel, o.dilation, o.padding, o.stride), " gives ", b.oh, "x", b.ow, " = ", b.count);
  const int64_t c = x3.size(1) / taps;
  const DType out = x.dtype();
  const Tensor cols = x3.reshape({n, c, taps, b.oh, b.ow});
  Tensor y;
  if (b.sh == b.kh && b.sw == b.kw && b.dh == 1 && b.dw == 1) {
    // Blocks that tile the padded image without overlap or gaps (patch embeddings): one permute
    // puts every tap in place, and nothing is summed.
    const Tensor tiles = cols.reshape({n, c, b.kh, b.kw, b.oh, b.ow})
                             .permute({0, 1, 4, 2, 5, 3})
                             .reshape({n, c, b.oh * b.kh, b.ow * b.kw});
    y = place(tiles, -b.ph, -b.pw, h, w);
  } else {
    // Tap (i, j) of block (p, q) lands on padded pixel (p·sh + i·dh, q·sw + j·dw): spread the
    // blocks by the stride (zeros between), place them at the tap's offset less the padding, and
    // add the taps in order, in f32 for f16/bf16.
    const DType acc = out == DType::F16 || out == DType::BF16 ? DType::F32 : out;
    const Tensor wide = cols.to(acc);
    const int64_t span_h = (b.oh - 1) * b.sh + 1, span_w = (b.ow - 1) * b.sw + 1;
    for (int64_t k = 0; k < taps; ++k) {
      const int64_t top = (k / b.kw) * b.dh - b.ph, left = (k % b.kw) * b.dw - b.pw;
      if (top >= h || left >= w || top + span_h <= 0 || left + span_w <= 0) continue;  // wholly in the padding
      Tensor t = wide.select(2, k);  // [N, C, oh, ow]
      if (b.sh > 1 || b.sw > 1) {
        t = pad(t.reshape({n, c, b.oh, 1, b.ow, 1}), {0, b.sw - 1, 0, 0, 0, b.sh - 1})
                .reshape({n, c, b.oh * b.sh, b.ow * b.sw})
                .slice(2, 0, span_h)
                .slice(3, 0, span_w);
      }
      const Tensor placed = place(t, top, left, h, w);
      if (placed.defined()) y = y.defined() ? add(y, placed) : placed;
    }
  }
  if (!y.defined()) {
    // Every block lies in the padding: zeros, still on the graph (a zero gradient, as PyTorch's).
    const Tensor any = sum(cols, {2, 3, 4}, /*keepdim=*/true).reshape({n, c, 1, 1});
    y = masked_fill(any.expand({n, c, h, w}), ones({1}, {.dtype = DType::Bool, .device = x.device()}), 0.0);
  }
  y = y.to(out);
  // PyTorch's fold always returns new memory; a 1x1 kernel would otherwise give x back as a view.
  if (&y.storage() == &x.storage()) y = y.clone();
  return unbatched ? y.squeeze(0) : y;
}

Unfold::Unfold(Options o) : UnaryModule("Unfold"), options_(o) {
  check_geometry("Unfold", o.kernel, o.dilation, o.padding, o.stride);
}

std::string Unfold::extra_repr() const {
  return options_repr(options_.kernel, options_.dilation, options_.padding, options_.stride);
}

Fold::Fold(Options o) : UnaryModule("Fold"), options_(o) {
  check_geometry("Fold", o.kernel, o.dilation, o.padding, o.stride);
  MG_CHECK(o.output_size.h > 0 && o.output_size.w > 0, Error, "Fold: output_size must be positive, got ",
           o.output_size.str());
}

std::string Fold::extra_repr() const {
  return str_cat("output_size=", options_.output_size.str(), ", ",
                 options_repr(options_.kernel, options_.dilation, options_.padding, options_.stride));
}

}  // namespace mg::nn
