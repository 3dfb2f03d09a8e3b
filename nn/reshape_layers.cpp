#include "mixgrad/nn/reshape_layers.h"

#include <limits>

#include "mixgrad/core/shape.h"
#include "mixgrad/ops/ops.h"

namespace mg {

namespace {
constexpr int64_t kMaxFactor = 3037000499;  // floor(sqrt(2^63 - 1)): r * r fits in int64
}  // namespace

Tensor pixel_shuffle(const Tensor& x, int64_t r) {
  MG_CHECK(r >= 1, Error, "pixel_shuffle: upscale_factor must be >= 1, got ", r);
  MG_CHECK(x.defined() && x.dim() >= 3, ShapeError, "pixel_shuffle: expected x [*, C * r * r, H, W], got ",
           x.defined() ? describe(x) : "undefined");
  const int64_t d = x.dim(), c = x.size(d - 3), h = x.size(d - 2), w = x.size(d - 1);
  MG_CHECK(r <= kMaxFactor, Error, "pixel_shuffle: upscale_factor ", r, " is too large");
  MG_CHECK(c % (r * r) == 0, ShapeError, "pixel_shuffle: the channels of ", describe(x), " (", c,
           ") are not divisible by upscale_factor^2 = ", r * r);
  Shape lead(x.shape().begin(), x.shape().end() - 3);
  const int64_t k = int64_t(lead.size());
  Shape split = lead;
  split.insert(split.end(), {c / (r * r), r, r, h, w});  // [*, C, r, r, H, W]
  std::vector<int64_t> order;
  for (int64_t i = 0; i < k; ++i) order.push_back(i);
  order.insert(order.end(), {k, k + 3, k + 1, k + 4, k + 2});  // [*, C, H, r, W, r]
  Shape out = lead;
  out.insert(out.end(), {c / (r * r), h * r, w * r});
  return reshape(permute(reshape(x, split), order), out);
}

Tensor pixel_unshuffle(const Tensor& x, int64_t r) {
  MG_CHECK(r >= 1, Error, "pixel_unshuffle: downscale_factor must be >= 1, got ", r);
  MG_CHECK(x.defined() && x.dim() >= 3, ShapeError, "pixel_unshuffle: expected x [*, C, H * r, W * r], got ",
           x.defined() ? describe(x) : "undefined");
  const int64_t d = x.dim(), c = x.size(d - 3), h = x.size(d - 2), w = x.size(d - 1);
  MG_CHECK(h % r == 0 && w % r == 0, ShapeError, "pixel_unshuffle: the height and width of ", describe(x),
           " are not divisible by downscale_factor = ", r);
  MG_CHECK(r <= kMaxFactor && (c == 0 || r * r <= std::numeric_limits<int64_t>::max() / c), Error,
           "pixel_unshuffle: downscale_factor ", r, " is too large for ", describe(x));
  Shape lead(x.shape().begin(), x.shape().end() - 3);
  const int64_t k = int64_t(lead.size());
  Shape split = lead;
  split.insert(split.end(), {c, h / r, r, w / r, r});  // [*, C, H/r, r, W/r, r]
  std::vector<int64_t> order;
  for (int64_t i = 0; i < k; ++i) order.push_back(i);
  order.insert(order.end(), {k, k + 2, k + 4, k + 1, k + 3});  // [*, C, r, r, H/r, W/r]
  Shape out = lead;
  out.insert(out.end(), {c * r * r, h / r, w / r});
  return reshape(permute(reshape(x, split), order), out);
}

Tensor channel_shuffle(const Tensor& x, int64_t groups) {
  MG_CHECK(groups >= 1, Error, "channel_shuffle: groups must be >= 1, got ", groups);
  MG_CHECK(x.defined() && x.dim() >= 3, ShapeError, "channel_shuffle: expected x [N, C, *] with 3 or more dims, got ",
           x.defined() ? describe(x) : "undefined");
  const int64_t c = x.size(1);
  MG_CHECK(c % groups == 0, ShapeError, "channel_shuffle: the channels of ", describe(x), " (", c,
           ") are not divisible by groups = ", groups);
  Shape split = x.shape();
  split[1] = c / groups;
  split.insert(split.begin() + 1, groups);  // [N, g, C/g, *]
  return reshape(transpose(reshape(x, split), 1, 2), x.shape());
}

}  // namespace mg

namespace mg::nn {

Unflatten::Unflatten(Options o) : UnaryModule("Unflatten"), options_(std::move(o)) {
  MG_CHECK(!options_.sizes.empty(), Error, "Unflatten: sizes must not be empty");
  int inferred = 0;
  for (int64_t s : options_.sizes) {
    MG_CHECK(s >= 0 || s == -1, Error, "Unflatten: sizes must be >= 0 (or one -1), got ", shape_str(options_.sizes));
    inferred += s == -1 ? 1 : 0;
  }
  MG_CHECK(inferred <= 1, Error, "Unflatten: at most one size may be -1, got ", shape_str(options_.sizes));
}

Tensor Unflatten::forward(const Tensor& x) {
  MG_CHECK(x.defined() && x.dim() >= 1, ShapeError, layer_name(), ": expected a tensor of at least 1 dim, got ",
           x.defined() ? describe(x) : "undefined");
  const int64_t d = wrap_dim(options_.dim, x.dim(), "Unflatten");
  int64_t known = 1;
  bool infer = false;
  for (int64_t s : options_.sizes) {
    if (s == -1) infer = true;
    else known *= s;
  }
  MG_CHECK(infer ? (known > 0 && x.size(d) % known == 0) : known == x.size(d), ShapeError, layer_name(), ": sizes ",
           shape_str(options_.sizes), " do not fit dim ", d, " of ", describe(x), " (size ", x.size(d), ")");
  Shape out(x.shape().begin(), x.shape().begin() + d);
  for (int64_t s : options_.sizes) out.push_back(s == -1 ? x.size(d) / known : s);
  out.insert(out.end(), x.shape().begin() + d + 1, x.shape().end());
  return reshape(x, out);
}

std::string Unflatten::extra_repr() const { return str_cat("dim=", options_.dim, ", unflattened_size=", shape_str(options_.sizes)); }

PixelShuffle::PixelShuffle(Options o) : UnaryModule("PixelShuffle"), options_(o) {
  MG_CHECK(o.upscale_factor >= 1, Error, "PixelShuffle: upscale_factor must be >= 1, got ", o.upscale_factor);
}
std::string PixelShuffle::extra_repr() const { return str_cat("upscale_factor=", options_.upscale_factor); }

PixelUnshuffle::PixelUnshuffle(Options o) : UnaryModule("PixelUnshuffle"), options_(o) {
  MG_CHECK(o.downscale_factor >= 1, Error, "PixelUnshuffle: downscale_factor must be >= 1, got ", o.downscale_factor);
}
std::string PixelUnshuffle::extra_repr() const { return str_cat("downscale_factor=", options_.downscale_factor); }

ChannelShuffle::ChannelShuffle(Options o) : UnaryModule("ChannelShuffle"), options_(o) {
  MG_CHECK(o.groups >= 1, Error, "ChannelShuffle: groups must be >= 1, got ", o.groups);
}
std::string ChannelShuffle::extra_repr() const { return str_cat("groups=", options_.groups); }

}  // namespace mg::nn
