#include "mixgrad/ops/grid_sample.h"

#include <array>
#include <vector>

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

// input [N, C, prod(sizes)] read at the integer pixel coords[j] [N, P] (float-valued; one per
// spatial dim, outermost first), weighted by weight [N, P] where the pixel is inside, 0 elsewhere
// -> [N, C, P].
Tensor tap(const Tensor& flat, const std::vector<int64_t>& sizes, const std::vector<Tensor>& coords,
           const Tensor& weight) {
  Tensor index, inside;
  {
    NoGradGuard no_grad;
    for (std::size_t j = 0; j < sizes.size(); ++j) {
      const Tensor& cj = coords[j];
      const double last = double(sizes[j] - 1);
      const Tensor in_j = logical_and(ge(cj, scalar_like(0, cj)), le(cj, scalar_like(last, cj)));
      inside = inside.defined() ? logical_and(inside, in_j) : in_j;
      const Tensor clamped = clamp(cj, 0, last);
      index = index.defined() ? index * double(sizes[j]) + clamped : clamped;
    }
    index = index.to(DType::I64);
  }
  const int64_t n = flat.size(0), c = flat.size(1), p = index.size(1);
  const Tensor values = gather(flat, 2, index.unsqueeze(1).expand({n, c, p}));
  // where, not a product: the weights of a tap far outside (an infinite coordinate) may be NaN
  return values * where(inside, weight, zeros_like(weight)).unsqueeze(1);
}

}  // namespace

Tensor grid_sample(const Tensor& input, const Tensor& grid, const GridSampleOptions& o) {
  MG_CHECK(input.defined() && grid.defined(), Error, "grid_sample: got an undefined tensor");
  MG_CHECK((input.dim() == 4 || input.dim() == 5) && input.is_floating_point(), ShapeError,
           "grid_sample: expected a floating input [N, C, H, W] or [N, C, D, H, W], got ", describe(input));
  const int64_t nd = input.dim() - 2;  // spatial dims
  MG_CHECK(grid.dim() == nd + 2 && grid.size(-1) == nd && grid.size(0) == input.size(0), ShapeError,
           "grid_sample: expected a grid [", input.size(0), nd == 2 ? ", Ho, Wo, 2]" : ", Do, Ho, Wo, 3]",
           " for input ", describe(input), ", got ", describe(grid));
  MG_CHECK(grid.is_floating_point(), DTypeError, "grid_sample: expected a floating grid, got ", describe(grid));
  MG_CHECK(grid.device() == input.device(), DeviceError, "grid_sample: input ", describe(input), " and grid ",
           describe(grid), " are on different devices");
  MG_CHECK(nd == 2 || o.mode != GridSampleMode::Bicubic, Error,
           "grid_sample: bicubic takes 4-D input only (as PyTorch's), got ", describe(input));
  const int64_t n = input.size(0), c = input.size(1);
  std::vector<int64_t> sizes;  // spatial, outermost first
  Shape out_shape{n, c};
  int64_t volume = 1, p = 1;
  for (int64_t j = 0; j < nd; ++j) {
    sizes.push_back(input.size(2 + j));
    volume *= sizes.back();
    out_shape.push_back(grid.size(1 + j));
    p *= grid.size(1 + j);
  }
  MG_CHECK(volume > 0, ShapeError, "grid_sample: the input has no pixels, got ", describe(input));
  const detail::CompositeInputs in = detail::composite_inputs("grid_sample", {input, grid});  // fp32 policy, opmath
  const Tensor flat = in.math[0].reshape({n, c, volume});
  const Tensor g = in.math[1].reshape({n, p, nd});
  // Spatial dim j (outermost first) is the grid's component nd - 1 - j: x is the width.
  std::vector<Tensor> u;  // unnormalised pixel coordinates [N, P]
  for (int64_t j = 0; j < nd; ++j) u.push_back(unnormalize(g.select(2, nd - 1 - j), sizes[std::size_t(j)], o.align_corners));
  Tensor out;
  auto add = [&](const Tensor& t) { out = out.defined() ? out + t : t; };
  if (o.mode == GridSampleMode::Bicubic) {
    // 4 x 4 taps around (floor(y), floor(x)), each tap's coordinate padded on its own
    Tensor y0, x0;
    {
      NoGradGuard no_grad;
      y0 = floor(u[0]), x0 = floor(u[1]);
    }
    const std::array<Tensor, 4> wy = cubic_weights(u[0] - y0), wx = cubic_weights(u[1] - x0);
    for (int l = 0; l < 4; ++l) {
      for (int k = 0; k < 4; ++k) {
        Tensor yy, xx;
        {
          NoGradGuard no_grad;
          yy = pad_coordinate(y0 + double(l - 1), sizes[0], o), xx = pad_coordinate(x0 + double(k - 1), sizes[1], o);
        }
        add(tap(flat, sizes, {yy, xx}, wy[std::size_t(l)] * wx[std::size_t(k)]));
      }
    }
    return detail::round_result(out.reshape(out_shape), in);
  }
  std::vector<Tensor> at;  // padded pixel coordinates [N, P]
  for (int64_t j = 0; j < nd; ++j) at.push_back(pad_coordinate(u[std::size_t(j)], sizes[std::size_t(j)], o));
  if (o.mode == GridSampleMode::Nearest) {
    // weight 1 as a function of the grid with round's zero gradient, so the grid's gradient is 0
    // (PyTorch's) rather than missing
    std::vector<Tensor> r;
    Tensor one;
    for (const Tensor& a : at) {
      r.push_back(round(a));
      one = one.defined() ? one + r.back() * 0.0 : r.back() * 0.0 + 1.0;
    }
    add(tap(flat, sizes, r, one));
  } else {
    // (tri)linear: the 2^nd corners, each weighted by the product of its per-dim fractions
    std::vector<Tensor> lo, hi, w_lo, w_hi;
    for (const Tensor& a : at) {
      Tensor f;
      {
        NoGradGuard no_grad;
        f = floor(a);
      }
      lo.push_back(f);
      hi.push_back(f + 1.0);
      w_hi.push_back(a - f);  // the grid's gradient flows here
      w_lo.push_back(hi.back() - a);
    }
    for (int corner = 0; corner < (1 << nd); ++corner) {
      std::vector<Tensor> coords;
      Tensor weight;
      for (int64_t j = 0; j < nd; ++j) {
        const bool upper = (corner >> (nd - 1 - j)) & 1;
        coords.push_back(upper ? hi[std::size_t(j)] : lo[std::size_t(j)]);
        const Tensor& wj = upper ? w_hi[std::size_t(j)] : w_lo[std::size_t(j)];
        weight = weight.defined() ? weight * wj : wj;
      }
      add(tap(flat, sizes, coords, weight));
    }
  }
  return detail::round_result(out.reshape(out_shape), in);
}

Tensor affine_grid(const Tensor& theta, const Shape& size, bool align_corners) {
  const bool volume = size.size() == 5;
  const int64_t nd = volume ? 3 : 2;
  MG_CHECK(theta.defined() && theta.is_floating_point() && theta.dim() == 3 && theta.size(1) == nd &&
               theta.size(2) == nd + 1,
           ShapeError, "affine_grid: expected a floating theta ", volume ? "[N, 3, 4] for a 5-D size" : "[N, 2, 3]",
           ", got ", theta.defined() ? describe(theta) : "undefined");
  MG_CHECK((size.size() == 4 || volume) && size[0] == theta.size(0), ShapeError, "affine_grid: expected size {",
           theta.size(0), ", C, H, W} or {", theta.size(0), ", C, D, H, W} for theta ", describe(theta), ", got ", size);
  for (std::size_t j = 2; j < size.size(); ++j)
    MG_CHECK(size[j] > 0, ShapeError, "affine_grid: expected spatial sizes >= 1, got ", size);
  const int64_t n = size[0];
  const TensorOptions opts{.dtype = theta.dtype(), .device = theta.device()};
  // PyTorch's base grid: linspace(-1, 1, n), scaled by (n - 1) / n without align_corners (one
  // pixel: 0); its last component 1 takes theta's translation.
  auto axis = [&](int64_t count) {
    if (count == 1) return zeros({1}, opts);
    const Tensor l = linspace(-1, 1, count, opts);
    return align_corners ? l : l * (double(count - 1) / double(count));
  };
  Shape spatial(size.begin() + 2, size.end());  // outermost first
  Shape grid_of_one = spatial;
  grid_of_one.push_back(1);
  Tensors components;  // x (the last spatial dim) first
  for (int64_t k = nd - 1; k >= 0; --k) {
    Shape along(std::size_t(nd + 1), 1);
    along[std::size_t(k)] = spatial[std::size_t(k)];
    components.push_back(axis(spatial[std::size_t(k)]).reshape(along).expand(grid_of_one));
  }
  components.push_back(ones(grid_of_one, opts));
  int64_t points = 1;
  for (const int64_t d : spatial) points *= d;
  const Tensor base = cat(components, nd).reshape({1, points, nd + 1});  // [1, points, nd + 1]
  Shape out{n};
  out.insert(out.end(), spatial.begin(), spatial.end());
  out.push_back(nd);
  return matmul(base.expand({n, points, nd + 1}), theta.transpose(1, 2)).reshape(out);
}

}  // namespace mg
