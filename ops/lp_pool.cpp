#include "mixgrad/ops/lp_pool.h"

#include <cmath>

#include "mixgrad/core/error.h"
#include "mixgrad/ops/conv.h"
#include "mixgrad/ops/conv1d.h"
#include "mixgrad/ops/conv3d.h"
#include "mixgrad/ops/ops.h"

namespace mg {
namespace {

void check_norm_type(const char* op, double p) {
  MG_CHECK(std::isfinite(p) && p != 0.0, Error, op, ": norm_type must be finite and nonzero, got ", p,
           " (for p = inf use max pooling)");
}

// The pooling's errors (kernel, stride, shape) under this op's name.
template <typename Fn>
Tensor named(const char* op, Fn&& fn) {
  try {
    return fn();
  } catch (const ShapeError& e) {
    throw ShapeError(str_cat(op, ": ", e.what()));
  }
}

// PyTorch's tail: (sign(m) relu(|m|) * window)^(1/p) of the mean m of x^p over each window.
Tensor finish(const Tensor& mean_pow, double p, int64_t window) {
  return pow(mul(sign(mean_pow), relu(abs(mean_pow))) * double(window), 1.0 / p);
}

}  // namespace

Tensor lp_pool1d(const Tensor& x, double norm_type, int64_t kernel, int64_t stride, bool ceil_mode) {
  check_norm_type("lp_pool1d", norm_type);
  MG_CHECK(x.defined(), Error, "lp_pool1d: got an undefined tensor");
  const Tensor m = named("lp_pool1d", [&] { return avg_pool1d(pow(x, norm_type), kernel, stride, 0, true, ceil_mode); });
  return finish(m, norm_type, kernel);
}

Tensor lp_pool2d(const Tensor& x, double norm_type, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                 bool ceil_mode) {
  check_norm_type("lp_pool2d", norm_type);
  MG_CHECK(x.defined(), Error, "lp_pool2d: got an undefined tensor");
  const Tensor m =
      named("lp_pool2d", [&] { return avg_pool2d(pow(x, norm_type), kernel, stride, {0, 0}, true, ceil_mode); });
  return finish(m, norm_type, kernel[0] * kernel[1]);
}

Tensor lp_pool3d(const Tensor& x, double norm_type, std::array<int64_t, 3> kernel, std::array<int64_t, 3> stride,
                 bool ceil_mode) {
  check_norm_type("lp_pool3d", norm_type);
  MG_CHECK(x.defined(), Error, "lp_pool3d: got an undefined tensor");
  const Tensor m =
      named("lp_pool3d", [&] { return avg_pool3d(pow(x, norm_type), kernel, stride, {0, 0, 0}, true, ceil_mode); });
  return finish(m, norm_type, kernel[0] * kernel[1] * kernel[2]);
}

}  // namespace mg
