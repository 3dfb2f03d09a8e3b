#include "mixgrad/ops/fractional_max_pool.h"

#include <cmath>
#include <vector>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/error.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/ops/ops.h"

namespace mg {
namespace {

// The sample that sets dim j's windows (of nd spatial dims): PyTorch's 2-D kernel reads W's
// first, its 3-D kernel D's, H's, W's in order.
int64_t sample_of_dim(int64_t nd, int64_t j) { return nd == 2 ? 1 - j : j; }

const char* dim_name(int64_t nd, int64_t j) {
  static const char* const names[3] = {"D", "H", "W"};
  return names[3 - nd + j];
}

// Window starts along one dim, [N, C, out] i64: floor((i + u) a) - floor(u a) with
// a = (in - k) / (out - 1) in the samples' dtype, the last window at in - k.
Tensor window_starts(const Tensor& u, int64_t in, int64_t k, int64_t out) {
  const int64_t n = u.size(0), c = u.size(1);
  const TensorOptions i64{.dtype = DType::I64, .device = u.device()};
  const Tensor last = full({n, c, 1}, double(in - k), i64);
  if (out == 1) return last;
  const TensorOptions real{.dtype = u.dtype(), .device = u.device()};
  // a as PyTorch computes it: the two sizes in the dtype, divided in it
  const Tensor a = full({}, double(in - k), real) / full({}, double(out - 1), real);
  const Tensor uc = u.unsqueeze(2);                                          // [N, C, 1]
  const Tensor i = arange(0, out - 1, 1, real);                              // [out - 1]
  const Tensor first = floor((i + uc) * a) - floor(uc * a);                  // [N, C, out - 1]
  return cat({first.to(DType::I64), last}, 2);
}

std::pair<Tensor, Tensor> fractional_pool(const char* op, const Tensor& x, const std::vector<int64_t>& kernel,
                                          const std::vector<int64_t>& out, const Tensor& samples) {
  const int64_t nd = int64_t(kernel.size());
  MG_CHECK(x.defined(), Error, op, ": got an undefined tensor");
  const bool unbatched = x.dim() == nd + 1;
  MG_CHECK(x.dim() == nd + 2 || unbatched, ShapeError, op, ": expected x [N, C, ", nd == 3 ? "D, " : "",
           "H, W] or [C, ", nd == 3 ? "D, " : "", "H, W], got ", describe(x));
  MG_CHECK(x.is_floating_point(), DTypeError, op, ": expected a floating-point x, got ", describe(x));
  const Tensor xb = unbatched ? x.unsqueeze(0) : x;
  const int64_t n = xb.size(0), c = xb.size(1);
  int64_t plane = 1;
  for (int64_t j = 0; j < nd; ++j) {
    const int64_t in = xb.size(2 + j);
    MG_CHECK(kernel[j] >= 1 && out[j] >= 1, Error, op, ": kernel and output size must be >= 1, got kernel ",
             kernel[j], " and output size ", out[j], " along ", dim_name(nd, j));
    MG_CHECK(out[j] + kernel[j] - 1 <= in, ShapeError, op, ": an output size of ", out[j], " with kernel ", kernel[j],
             " needs at least ", out[j] + kernel[j] - 1, " input elements along ", dim_name(nd, j), ", got x ",
             describe(x));
    plane *= in;
  }
  const DType real = xb.dtype() == DType::F64 ? DType::F64 : DType::F32;  // the starts' arithmetic
  Tensor u = samples;
  if (!u.defined()) {
    u = rand({n, c, nd}, {.dtype = real, .device = xb.device()});
  } else {
    MG_CHECK(u.is_floating_point() && u.shape() == Shape({n, c, nd}), ShapeError, op,
             ": expected floating random_samples [", n, ", ", c, ", ", nd, "] for x ", describe(x), ", got ",
             describe(u));
    MG_CHECK(u.device() == xb.device(), DeviceError, op, ": random_samples ", describe(u), " and x ", describe(x),
             " are on different devices");
    if (u.numel() > 0) {  // one host read: out-of-range samples would put windows outside the input
      NoGradGuard no_grad;
      const Tensor b = stack({amin(u), amax(u)}).to(DType::F64).to(Device::cpu());
      const double lo = b.data<double>()[0], hi = b.data<double>()[1];
      MG_CHECK(lo >= 0 && hi < 1, Error, op, ": random_samples must lie in [0, 1), got values in [", lo, ", ", hi,
               "]");
    }
    u = u.detach().to(real);
  }
  // Every window element's position in the input's plane, [N, C, out..., kernel...]: the sum over
  // dims of (start + offset) * the dim's stride, broadcast.
  Tensor pos;
  {
    NoGradGuard no_grad;
    int64_t stride = 1;
    for (int64_t j = nd - 1; j >= 0; --j) {
      Shape start_shape(2 + 2 * nd, 1), offset_shape(2 + 2 * nd, 1);
      start_shape[0] = n, start_shape[1] = c, start_shape[2 + j] = out[j];
      offset_shape[2 + nd + j] = kernel[j];
      const Tensor starts =
          window_starts(u.select(2, sample_of_dim(nd, j)), xb.size(2 + j), kernel[j], out[j]).reshape(start_shape);
      const Tensor offsets =
          arange(0, kernel[j], 1, {.dtype = DType::I64, .device = xb.device()}).reshape(offset_shape);
      const Tensor term = (starts + offsets) * double(stride);
      pos = pos.defined() ? pos + term : term;
      stride *= xb.size(2 + j);
    }
  }
  int64_t cells = 1, window = 1;
  Shape out_shape{n, c};
  for (int64_t j = 0; j < nd; ++j) cells *= out[j], window *= kernel[j], out_shape.push_back(out[j]);
  pos = pos.reshape({n, c, cells, window});
  const Tensor windows = gather(xb.reshape({n, c, plane}), 2, pos.reshape({n, c, cells * window}))
                             .reshape({n, c, cells, window});
  const auto [values, which] = max(windows, 3);  // the first maximum in the window's row-major order
  Tensor indices;
  {
    NoGradGuard no_grad;
    indices = gather(pos, 3, which.unsqueeze(3)).reshape(out_shape);
  }
  const Tensor y = values.reshape(out_shape);
  return {unbatched ? y.squeeze(0) : y, unbatched ? indices.squeeze(0) : indices};
}

}  // namespace

std::pair<Tensor, Tensor> fractional_max_pool2d_with_indices(const Tensor& x, std::array<int64_t, 2> kernel,
                                                             std::array<int64_t, 2> output_size,
                                                             const Tensor& random_samples) {
  return fractional_pool("fractional_max_pool2d", x, {kernel[0], kernel[1]}, {output_size[0], output_size[1]},
                         random_samples);
}

Tensor fractional_max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> output_size,
                             const Tensor& random_samples) {
  return fractional_max_pool2d_with_indices(x, kernel, output_size, random_samples).first;
}

std::pair<Tensor, Tensor> fractional_max_pool3d_with_indices(const Tensor& x, std::array<int64_t, 3> kernel,
                                                             std::array<int64_t, 3> output_size,
                                                             const Tensor& random_samples) {
  return fractional_pool("fractional_max_pool3d", x, {kernel[0], kernel[1], kernel[2]},
                         {output_size[0], output_size[1], output_size[2]}, random_samples);
}

Tensor fractional_max_pool3d(const Tensor& x, std::array<int64_t, 3> kernel, std::array<int64_t, 3> output_size,
                             const Tensor& random_samples) {
  return fractional_max_pool3d_with_indices(x, kernel, output_size, random_samples).first;
}

int64_t fractional_output_size(const char* op, int64_t input_size, double ratio) {
  MG_CHECK(ratio > 0 && ratio < 1, Error, op, ": output_ratio must be in (0, 1), got ", ratio);
  return int64_t(double(input_size) * ratio);
}

}  // namespace mg
