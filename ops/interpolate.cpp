#include "mixgrad/ops/interpolate.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "mixgrad/core/factory.h"
#include "mixgrad/ops/composite.h"
#include "mixgrad/ops/conv.h"
#include "mixgrad/ops/conv1d.h"
#include "mixgrad/ops/conv3d.h"
#include "mixgrad/ops/ops.h"

namespace mg {

namespace {

// ATen's compute_scales_value: the scale from output to input positions, 1 / scale_factor when one
// is passed to the kernel, else input / output.
template <typename T>
T scales_value(std::optional<double> scale_factor, int64_t in, int64_t out) {
  return scale_factor && *scale_factor > 0.0 ? static_cast<T>(1.0 / *scale_factor) : static_cast<T>(in) / T(out);
}

// The source index of output i for the nearest modes (ATen's nearest_idx / nearest_exact_idx,
// float arithmetic whatever the dtype).
int64_t nearest_source(bool exact, int64_t i, int64_t in, int64_t out, std::optional<double> scale_factor) {
  if (!exact && out == in) return i;
  if (!exact && out == 2 * in) return i >> 1;
  const float scale = scales_value<float>(scale_factor, in, out);
  const float pos = exact ? static_cast<float>((double(i) + 0.5) * double(scale)) : float(i) * scale;
  return std::min<int64_t>(static_cast<int64_t>(std::floor(pos)), in - 1);
}

// ATen's area_pixel_compute_scale: the step between output positions in input units.
template <typename T>
T pixel_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale_factor) {
  return align_corners ? (out > 1 ? static_cast<T>(in - 1) / T(out - 1) : T(0)) : scales_value<T>(scale_factor, in, out);
}

// Keys' cubic convolution kernel with parameter A, for |x| <= 1 and for 1 < |x| < 2 (ATen's
// cubic_convolution1 / cubic_convolution2): bicubic uses A = -0.75, its antialiased form PIL's -0.5.
template <typename T>
T cubic_near(T x, T a) {
  return ((a + T(2)) * x - (a + T(3))) * x * x + T(1);
}
template <typename T>
T cubic_far(T x, T a) {
  return ((a * x - T(5) * a) * x + T(8) * a) * x - T(4) * a;
}

// The weighted source elements of every output of one dim: output i is the sum over k of
// weight[k][i] * in[index[k][i]], added in k's order.
struct Taps {
  int64_t taps = 0;
  std::vector<std::vector<int64_t>> index;  // [taps][out]
  std::vector<std::vector<double>> weight;  // [taps][out]
  Taps(int64_t n_taps, int64_t out)
      : taps(n_taps),
        index(static_cast<std::size_t>(n_taps), std::vector<int64_t>(static_cast<std::size_t>(out))),
        weight(static_cast<std::size_t>(n_taps), std::vector<double>(static_cast<std::size_t>(out), 0.0)) {}
};

// The linear modes' two taps (ATen's compute_source_index_and_lambda in opmath T: float for
// f32/f16/bf16, double for f64).
template <typename T>
Taps linear_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale_factor) {
  Taps r(2, out);
  const T ratio = pixel_scale<T>(in, out, align_corners, scale_factor);
  for (int64_t i = 0; i < out; ++i) {
    if (out == in) {  // the identity, whatever the scale factor
      r.index[0][i] = r.index[1][i] = i;
      r.weight[0][i] = 1.0;
      continue;
    }
    T src = align_corners ? ratio * T(i) : ratio * (T(i) + T(0.5)) - T(0.5);
    if (!align_corners && src < T(0)) src = T(0);
    const int64_t i0 = std::min<int64_t>(static_cast<int64_t>(std::floor(static_cast<float>(src))), in - 1);
    const T lambda1 = std::min(std::max(src - T(i0), T(0)), T(1));
    r.index[0][i] = i0;
    r.index[1][i] = i0 + (i0 < in - 1 ? 1 : 0);
    r.weight[0][i] = double(T(1) - lambda1);
    r.weight[1][i] = double(lambda1);
  }
  return r;
}

// Bicubic's four taps (clamped to [0, in)) (ATen's HelperInterpCubic: the source position in
// opmath T without the clamp at 0, its floor capped at in - 1, lambda in [0, 1], A = -0.75).
template <typename T>
Taps cubic_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale_factor) {
  Taps r(4, out);
  const T ratio = pixel_scale<T>(in, out, align_corners, scale_factor);
  constexpr T A = T(-0.75);
  for (int64_t i = 0; i < out; ++i) {
    const T src = align_corners ? ratio * T(i) : ratio * (T(i) + T(0.5)) - T(0.5);
    const int64_t i0 = std::min<int64_t>(static_cast<int64_t>(std::floor(static_cast<float>(src))), in - 1);
    const T t = std::min(std::max(src - T(i0), T(0)), T(1));
    const T c[4] = {cubic_far(t + T(1), A), cubic_near(t, A), cubic_near(T(1) - t, A),
                    cubic_far((T(1) - t) + T(1), A)};  // ATen's roundings
    for (int k = 0; k < 4; ++k) {
      r.index[k][i] = std::min<int64_t>(std::max<int64_t>(i0 - 1 + k, 0), in - 1);
      r.weight[k][i] = double(c[k]);
    }
  }
  return r;
}

// The antialiased filters (ATen's aa_filter of each mode): bilinear's triangle, bicubic's Keys
// cubic with PIL's A = -0.5, Lanczos-3.
template <typename T>
T aa_filter(InterpolateMode mode, T x) {
  x = std::abs(x);
  if (mode == InterpolateMode::Bilinear) return x < T(1) ? T(1) - x : T(0);
  if (mode == InterpolateMode::Bicubic) {
    constexpr T A = T(-0.5);
    return x < T(1) ? cubic_near(x, A) : x < T(2) ? cubic_far(x, A) : T(0);
  }
  const auto sinc = [](T t) { return t == T(0) ? T(1) : T(std::sin(std::numbers::pi * double(t)) / (std::numbers::pi * double(t))); };
  return x < T(3) ? sinc(x) * sinc(x / T(3)) : T(0);
}

// The taps of one antialiased dim (ATen's _compute_indices_min_size_weights_aa, with its mix of
// double and opmath T): output i reads in[xmin .. xmin + xsize) around the centre scale (i + 0.5),
// weighted by the filter at (j - centre + 0.5) / scale when shrinking (scale >= 1) and normalised
// to sum 1. Every output gets ceil(support) * 2 + 1 slots; the unused ones read xmin with weight 0.
template <typename T>
Taps aa_taps(InterpolateMode mode, int64_t in, int64_t out, bool align_corners, std::optional<double> scale_factor) {
  const T scale = pixel_scale<T>(in, out, align_corners, scale_factor);
  const double interp = mode == InterpolateMode::Bilinear ? 2.0 : mode == InterpolateMode::Bicubic ? 4.0 : 6.0;
  const T support = static_cast<T>(scale >= T(1) ? interp * 0.5 * double(scale) : interp * 0.5);
  Taps r(static_cast<int64_t>(std::ceil(double(support))) * 2 + 1, out);
  const T invscale = scale >= T(1) ? static_cast<T>(1.0 / double(scale)) : T(1);
  std::vector<T> w(static_cast<std::size_t>(r.taps));
  for (int64_t i = 0; i < out; ++i) {
    const T center = static_cast<T>(double(scale) * (double(i) + 0.5));
    const int64_t xmin = std::max<int64_t>(static_cast<int64_t>(double(center - support) + 0.5), 0);
    const int64_t xsize = std::clamp<int64_t>(
        std::min<int64_t>(static_cast<int64_t>(double(center + support) + 0.5), in) - xmin, 0, r.taps);
    T total = T(0);
    for (int64_t j = 0; j < xsize; ++j) {
      w[j] = aa_filter<T>(mode, static_cast<T>((double(static_cast<T>(j + xmin) - center) + 0.5) * double(invscale)));
      total += w[j];
    }
    for (int64_t k = 0; k < r.taps; ++k) {
      r.index[k][i] = k < xsize ? xmin + k : std::min(xmin, in - 1);
      r.weight[k][i] = k < xsize && total != T(0) ? double(w[k] / total) : 0.0;
    }
  }
  return r;
}

// A [1, ..., n, ..., 1] CPU tensor of `values` along `dim` of a rank-`rank` tensor.
Tensor along(const std::vector<double>& values, int64_t dim, int64_t rank, DType dtype) {
  Shape s(std::size_t(rank), 1);
  s[std::size_t(dim)] = int64_t(values.size());
  return to(from_vector(values, s), dtype);
}

// y resampled along `dim` by `taps`: one index_select and one weighted add per tap. Off the CPU the
// tables are copied once per `key` and reused (detail::host_constant).
Tensor weighted_taps(const Tensor& y, int64_t dim, const std::string& key, const Taps& taps) {
  Tensor sum;
  for (int64_t k = 0; k < taps.taps; ++k) {
    const std::string tap = str_cat(key, " tap ", k);
    const Tensor a = index_select(y, dim, detail::host_constant(tap, y.device(), [&] { return from_vector(taps.index[k]); }));
    const Tensor wk =
        detail::host_constant(tap + " w", y.device(), [&] { return along(taps.weight[k], dim, y.dim(), y.dtype()); });
    sum = k == 0 ? a * wk : sum + a * wk;
  }
  return sum;
}

}  // namespace

const char* interpolate_mode_name(InterpolateMode mode) {
  switch (mode) {
    case InterpolateMode::Nearest: return "nearest";
    case InterpolateMode::NearestExact: return "nearest-exact";
    case InterpolateMode::Linear: return "linear";
    case InterpolateMode::Bilinear: return "bilinear";
    case InterpolateMode::Bicubic: return "bicubic";
    case InterpolateMode::Area: return "area";
    case InterpolateMode::Trilinear: return "trilinear";
    case InterpolateMode::Lanczos: return "lanczos";
  }
  return "?";
}

Tensor interpolate(const Tensor& x, const InterpolateOptions& o) {
  MG_CHECK(x.defined(), Error, "interpolate: got an undefined tensor");
  const bool linear = o.mode == InterpolateMode::Linear || o.mode == InterpolateMode::Bilinear ||
                      o.mode == InterpolateMode::Trilinear;
  const bool cubic = o.mode == InterpolateMode::Bicubic;
  if (o.mode == InterpolateMode::Linear) {
    MG_CHECK(x.dim() == 3, ShapeError, "interpolate: linear expects x [N, C, L], got ", describe(x));
  } else if (o.mode == InterpolateMode::Bilinear || cubic || o.mode == InterpolateMode::Lanczos) {
    MG_CHECK(x.dim() == 4, ShapeError, "interpolate: ", interpolate_mode_name(o.mode), " expects x [N, C, H, W], got ",
             describe(x));
  } else if (o.mode == InterpolateMode::Trilinear) {
    MG_CHECK(x.dim() == 5, ShapeError, "interpolate: trilinear expects x [N, C, D, H, W], got ", describe(x));
  } else if (o.mode == InterpolateMode::Area) {
    MG_CHECK(x.dim() >= 3 && x.dim() <= 5, ShapeError,
             "interpolate: area expects x [N, C, L], [N, C, H, W] or [N, C, D, H, W], got ", describe(x));
  } else {
    MG_CHECK(x.dim() >= 3 && x.dim() <= 5, ShapeError, "interpolate: ", interpolate_mode_name(o.mode),
             " expects x [N, C, L], [N, C, H, W] or [N, C, D, H, W], got ", describe(x));
  }
  MG_CHECK(!o.antialias || o.mode == InterpolateMode::Bilinear || cubic || o.mode == InterpolateMode::Lanczos, Error,
           "interpolate: antialias is for bilinear, bicubic and lanczos over x [N, C, H, W], not ",
           interpolate_mode_name(o.mode), "\n  hint: area mode is the antialiased downsampling of the other ranks");
  MG_CHECK(o.mode != InterpolateMode::Lanczos || o.antialias, Error,
           "interpolate: lanczos needs antialias = true (PyTorch's rule: its filter is only defined antialiased)");
  MG_CHECK(o.mode != InterpolateMode::Lanczos || !o.align_corners.value_or(false), Error,
           "interpolate: lanczos does not take align_corners = true, as PyTorch's");
  MG_CHECK(linear || cubic || o.mode == InterpolateMode::Lanczos || !o.align_corners.has_value(), Error,
           "interpolate: align_corners is for linear, bilinear, bicubic and trilinear, not ",
           interpolate_mode_name(o.mode));  // (lanczos takes false, as PyTorch's)
  MG_CHECK(!o.size.empty() || !o.scale_factor.empty(), Error, "interpolate: give size or scale_factor");
  MG_CHECK(o.size.empty() || o.scale_factor.empty(), Error, "interpolate: give size or scale_factor, not both");
  MG_CHECK(o.size.empty() || !o.recompute_scale_factor, Error,
           "interpolate: recompute_scale_factor is meaningful only with scale_factor, not with an explicit size");
  const int64_t spatial = x.dim() - 2;
  MG_CHECK(o.size.empty() || o.size.size() == 1 || int64_t(o.size.size()) == spatial, Error,
           "interpolate: expected 1 or ", spatial, " sizes for ", describe(x), ", got ", o.size.size());
  MG_CHECK(o.scale_factor.empty() || o.scale_factor.size() == 1 || int64_t(o.scale_factor.size()) == spatial, Error,
           "interpolate: expected 1 or ", spatial, " scale factors for ", describe(x), ", got ", o.scale_factor.size());
  const bool align_corners = o.align_corners.value_or(false);

  // Per spatial dim: the output size and the scale factor the kernel sees (none with a size or
  // recompute_scale_factor, as PyTorch).
  std::vector<int64_t> out(static_cast<std::size_t>(spatial));
  std::vector<std::optional<double>> kernel_scale(static_cast<std::size_t>(spatial));
  for (int64_t d = 0; d < spatial; ++d) {
    const int64_t in = x.size(2 + d);
    if (!o.size.empty()) {
      out[d] = o.size.size() == 1 ? o.size[0] : o.size[d];
    } else {
      const double f = o.scale_factor.size() == 1 ? o.scale_factor[0] : o.scale_factor[d];
      MG_CHECK(f > 0.0 && std::isfinite(f), Error, "interpolate: scale factors must be finite and > 0, got ", f);
      out[d] = static_cast<int64_t>(std::floor(double(in) * f));
      if (!o.recompute_scale_factor) kernel_scale[d] = f;
    }
    MG_CHECK(out[d] > 0, Error, "interpolate: the output size must be positive, got ", out[d], " for dim ", 2 + d,
             " of ", describe(x));
    MG_CHECK(in > 0, ShapeError, "interpolate: expected a non-empty input, got ", describe(x));
  }

  const detail::CompositeInputs c = detail::composite_inputs("interpolate", {x});
  Tensor y = c.math[0];
  if (o.mode == InterpolateMode::Area) {
    // PyTorch's "area": adaptive average pooling to the output size.
    y = spatial == 3   ? adaptive_avg_pool3d(y, {out[0], out[1], out[2]})
        : spatial == 2 ? adaptive_avg_pool2d(y, {out[0], out[1]})
                       : adaptive_avg_pool1d(y, out[0]);
    return detail::round_result(y, c);
  }
  const bool f64 = y.dtype() == DType::F64;
  // The last spatial dim first (W, then H), as ATen's kernels weight W inside H.
  for (int64_t d = spatial - 1; d >= 0; --d) {
    const int64_t dim = 2 + d, in = x.size(dim), n = out[d];
    // The tables depend on the mode, the sizes, align_corners and the kernel's scale only; off
    // the CPU they are copied once and reused (detail::host_constant).
    const std::string key = str_cat("interpolate ", interpolate_mode_name(o.mode), " ", in, " ", n, " ",
                                    align_corners, " ", kernel_scale[d] ? str_cat(std::hexfloat, *kernel_scale[d]) : "-",
                                    " ", f64 ? "f64" : "f32", " dim ", dim, " of ", y.dim(),
                                    o.antialias ? " antialias" : "");
    if (o.antialias && in == n) continue;  // a dim whose size stays is not resampled, as PyTorch's
    if (!linear && !cubic && !o.antialias) {
      const Tensor idx = detail::host_constant(key, y.device(), [&] {
        std::vector<int64_t> v(static_cast<std::size_t>(n));
        for (int64_t i = 0; i < n; ++i) v[i] = nearest_source(o.mode == InterpolateMode::NearestExact, i, in, n, kernel_scale[d]);
        return from_vector(v);
      });
      y = index_select(y, dim, idx);
      continue;
    }
    const std::optional<double> sf = kernel_scale[d];
    const Taps taps = o.antialias ? (f64 ? aa_taps<double>(o.mode, in, n, align_corners, sf)
                                         : aa_taps<float>(o.mode, in, n, align_corners, sf))
                      : cubic     ? (f64 ? cubic_taps<double>(in, n, align_corners, sf)
                                         : cubic_taps<float>(in, n, align_corners, sf))
                                  : (f64 ? linear_taps<double>(in, n, align_corners, sf)
                                         : linear_taps<float>(in, n, align_corners, sf));
    y = weighted_taps(y, dim, key, taps);
  }
  return detail::round_result(y, c);
}

}  // namespace mg
