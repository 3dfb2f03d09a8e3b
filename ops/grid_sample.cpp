#include "mixgrad/ops/grid_sample.h"

#include <array>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/error.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/ops/composite.h"
#include "mixgrad/ops/logical.h"
#include "mixgrad/ops/ops.h"

namespace mg {
namespace {

// A coordinate reflected into [low, high] (given as twice each, PyTorch's reflect_coordinates):
// |c - low| folded by the span, every other span mirrored.
Tensor reflect(const Tensor& c, double twice_low, double twice_high) {
  if (twice_low == twice_high) return zeros_like(c);
  const double low = twice_low / 2, span = (twice_high - twice_low) / 2;
  const Tensor d = abs(c - low);
  const Tensor extra = fmod(d, span);
  Tensor flips;
  {
    NoGradGuard no_grad;
    flips = floor(d / span);
  }
  const Tensor even = eq(fmod(flips, 2.0), scalar_like(0, flips));
  return where(even, extra + low, (extra * -1.0 + span) + low);
}

// The pixel coordinate of normalised coordinates along a dim of `size` pixels.
Tensor unnormalize(const Tensor& g, int64_t size, bool align_corners) {
  const double n = double(size);
  return align_corners ? (g + 1.0) * ((n - 1) / 2) : ((g + 1.0) * n - 1.0) / 2;
}

// A pixel coordinate with the padding's clamping or reflection (PyTorch's compute_coordinates):
// applied to the coordinate itself by bilinear and nearest, to each tap's by bicubic.
Tensor pad_coordinate(const Tensor& c, int64_t size, const GridSampleOptions& o) {
  const double n = double(size);
  Tensor r = c;
  if (o.padding_mode == GridSamplePadding::Reflection)
    r = o.align_corners ? reflect(r, 0, 2 * (n - 1)) : reflect(r, -1, 2 * n - 1);
  if (o.padding_mode != GridSamplePadding::Zeros) r = clamp(r, 0, n - 1);
  return r;
}

// Keys' cubic convolution weights (A = -0.75, PyTorch's bicubic) of the taps at -1, 0, 1, 2 from
// floor(x), for the fraction t = x - floor(x): differentiable in t.
std::array<Tensor, 4> cubic_weights(const Tensor& t) {
  constexpr double a = -0.75;
  auto near = [&](const Tensor& x) { return ((x * (a + 2) - (a + 3)) * x) * x + 1.0; };   // |x| <= 1
  auto far = [&](const Tensor& x) { return ((x * a - 5 * a) * x + 8 * a) * x - 4 * a; };  // 1 < |x| < 2
  const Tensor u = t * -1.0 + 1.0;
  return {far(t + 1.0), near(t), near(u), far(u + 1.0)};
}

// input [N, C, H·W] read at integer pixel (iy, ix) [N, P] (float-valued), weighted by w [N, P]
// where the pixel is inside, 0 elsewhere -> [N, C, P].
Tensor tap(const Tensor& flat, int64_t h, int64_t w, const Tensor& iy, const Tensor& ix, const Tensor& weight) {
  Tensor index, inside;
  {
    NoGradGuard no_grad;
    inside = logical_and(logical_and(ge(ix, scalar_like(0, ix)), le(ix, scalar_like(double(w - 1), ix))),
                         logical_and(ge(iy, scalar_like(0, iy)), le(iy, scalar_like(double(h - 1), iy))));
    index = (clamp(iy, 0, double(h - 1)) * double(w) + clamp(ix, 0, double(w - 1))).to(DType::I64);
  }
  const int64_t n = flat.size(0), c = flat.size(1), p = index.size(1);
  const Tensor values = gather(flat, 2, index.unsqueeze(1).expand({n, c, p}));
  // where, not a product: the weights of a tap far outside (an infinite coordinate) may be NaN
  return values * where(inside, weight, zeros_like(weight)).unsqueeze(1);
}

}  // namespace

Tensor grid_sample(const Tensor& input, const Tensor& grid, const GridSampleOptions& o) {
  MG_CHECK(input.defined() && grid.defined(), Error, "grid_sample: got an undefined tensor");
  MG_CHECK(input.dim() == 4 && input.is_floating_point(), ShapeError,
           "grid_sample: expected a floating input [N, C, H, W] (5-D input is not offered), got ", describe(input));
  MG_CHECK(grid.dim() == 4 && grid.size(3) == 2 && grid.size(0) == input.size(0), ShapeError,
           "grid_sample: expected a grid [", input.size(0), ", Ho, Wo, 2] for input ", describe(input), ", got ",
           describe(grid));
  MG_CHECK(grid.is_floating_point(), DTypeError, "grid_sample: expected a floating grid, got ", describe(grid));
  MG_CHECK(grid.device() == input.device(), DeviceError, "grid_sample: input ", describe(input), " and grid ",
           describe(grid), " are on different devices");
  const int64_t n = input.size(0), c = input.size(1), h = input.size(2), w = input.size(3);
  const int64_t ho = grid.size(1), wo = grid.size(2), p = ho * wo;
  MG_CHECK(h > 0 && w > 0, ShapeError, "grid_sample: the input has no pixels, got ", describe(input));
  const detail::CompositeInputs in = detail::composite_inputs("grid_sample", {input, grid});  // fp32 policy, opmath
  const Tensor flat = in.math[0].reshape({n, c, h * w});
  const Tensor g = in.math[1].reshape({n, p, 2});
  const Tensor gx = unnormalize(g.select(2, 0), w, o.align_corners), gy = unnormalize(g.select(2, 1), h, o.align_corners);
  Tensor out;
  if (o.mode == GridSampleMode::Bicubic) {
    // 4 x 4 taps around (floor(y), floor(x)), each tap's coordinate padded on its own
    Tensor x0, y0;
    {
      NoGradGuard no_grad;
      x0 = floor(gx), y0 = floor(gy);
    }
    const std::array<Tensor, 4> wx = cubic_weights(gx - x0), wy = cubic_weights(gy - y0);
    for (int l = 0; l < 4; ++l) {
      for (int k = 0; k < 4; ++k) {
        Tensor xx, yy;
        {
          NoGradGuard no_grad;
          xx = pad_coordinate(x0 + double(k - 1), w, o), yy = pad_coordinate(y0 + double(l - 1), h, o);
        }
        const Tensor t = tap(flat, h, w, yy, xx, wy[std::size_t(l)] * wx[std::size_t(k)]);
        out = out.defined() ? out + t : t;
      }
    }
    return detail::round_result(out.reshape({n, c, ho, wo}), in);
  }
  const Tensor ix = pad_coordinate(gx, w, o), iy = pad_coordinate(gy, h, o);  // [N, P]
  if (o.mode == GridSampleMode::Nearest) {
    // weight 1 as a function of the grid with round's zero gradient, so the grid's gradient is 0
    // (PyTorch's) rather than missing
    const Tensor rx = round(ix), ry = round(iy);
    out = tap(flat, h, w, ry, rx, rx * 0.0 + ry * 0.0 + 1.0);
  } else {
    Tensor x0, y0;
    {
      NoGradGuard no_grad;
      x0 = floor(ix), y0 = floor(iy);
    }
    const Tensor x1 = x0 + 1.0, y1 = y0 + 1.0;
    const Tensor wx1 = ix - x0, wx0 = x1 - ix, wy1 = iy - y0, wy0 = y1 - iy;  // the grid's gradient flows here
    out = tap(flat, h, w, y0, x0, wy0 * wx0) + tap(flat, h, w, y0, x1, wy0 * wx1) +
          tap(flat, h, w, y1, x0, wy1 * wx0) + tap(flat, h, w, y1, x1, wy1 * wx1);
  }
  return detail::round_result(out.reshape({n, c, ho, wo}), in);
}

Tensor affine_grid(const Tensor& theta, const Shape& size, bool align_corners) {
  MG_CHECK(theta.defined() && theta.is_floating_point() && theta.dim() == 3 && theta.size(1) == 2 &&
               theta.size(2) == 3,
           ShapeError, "affine_grid: expected a floating theta [N, 2, 3], got ",
           theta.defined() ? describe(theta) : "undefined");
  MG_CHECK(size.size() == 4 && size[0] == theta.size(0) && size[2] > 0 && size[3] > 0, ShapeError,
           "affine_grid: expected size {", theta.size(0), ", C, H, W} with H, W >= 1 for theta ", describe(theta),
           ", got ", size, " (5-D sizes are not offered)");
  const int64_t n = size[0], h = size[2], w = size[3];
  const TensorOptions opts{.dtype = theta.dtype(), .device = theta.device()};
  // PyTorch's base grid: linspace(-1, 1, n), scaled by (n - 1) / n without align_corners (one
  // pixel: 0).
  auto axis = [&](int64_t count) {
    if (count == 1) return zeros({1}, opts);
    const Tensor l = linspace(-1, 1, count, opts);
    return align_corners ? l : l * (double(count - 1) / double(count));
  };
  const Tensor xs = axis(w).reshape({1, w, 1}).expand({h, w, 1}), ys = axis(h).reshape({h, 1, 1}).expand({h, w, 1});
  const Tensor base = cat({xs, ys, ones({h, w, 1}, opts)}, 2).reshape({1, h * w, 3});       // [1, H·W, 3]
  return matmul(base.expand({n, h * w, 3}), theta.transpose(1, 2)).reshape({n, h, w, 2});  // [N, H, W, 2]
}

}  // namespace mg
