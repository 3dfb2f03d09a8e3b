#include "mixgrad/nn/lp_pool.h"

#include <cmath>

#include "mixgrad/ops/lp_pool.h"

namespace mg::nn {
namespace {

void check_options(const char* layer, double p, int64_t kh, int64_t kw, int64_t sh, int64_t sw) {
  MG_CHECK(std::isfinite(p) && p != 0.0, Error, layer, ": norm_type must be finite and nonzero, got ", p);
  MG_CHECK(kh > 0 && kw > 0, Error, layer, ": kernel must be positive, got ", kh == kw ? str_cat(kh) : str_cat(kh, "x", kw));
  MG_CHECK(sh >= 0 && sw >= 0, Error, layer, ": stride must be >= 0 (0: the kernel), got ",
           sh == sw ? str_cat(sh) : str_cat(sh, "x", sw));
}

}  // namespace

LPPool1d::LPPool1d(Options o) : UnaryModule("LPPool1d"), options_(o) {
  check_options("LPPool1d", o.norm_type, o.kernel, o.kernel, o.stride, o.stride);
}

Tensor LPPool1d::forward(const Tensor& x) {
  const Options& o = options_;
  return detail::with_layer_name(*this, [&] { return lp_pool1d(x, o.norm_type, o.kernel, o.stride, o.ceil_mode); });
}

std::string LPPool1d::extra_repr() const {
  std::string s = str_cat("norm_type=", options_.norm_type, ", kernel=", options_.kernel,
                          ", stride=", options_.stride == 0 ? options_.kernel : options_.stride);
  if (options_.ceil_mode) s += ", ceil_mode=true";
  return s;
}

LPPool2d::LPPool2d(Options o) : UnaryModule("LPPool2d"), options_(o) {
  check_options("LPPool2d", o.norm_type, o.kernel.h, o.kernel.w, o.stride.h, o.stride.w);
}

Tensor LPPool2d::forward(const Tensor& x) {
  const Options& o = options_;
  return detail::with_layer_name(
      *this, [&] { return lp_pool2d(x, o.norm_type, o.kernel.array(), o.stride.array(), o.ceil_mode); });
}

std::string LPPool2d::extra_repr() const {
  const Size2 stride = options_.stride == Size2(0) ? options_.kernel : options_.stride;
  std::string s = str_cat("norm_type=", options_.norm_type, ", kernel=", options_.kernel.str(), ", stride=", stride.str());
  if (options_.ceil_mode) s += ", ceil_mode=true";
  return s;
}

LPPool3d::LPPool3d(Options o) : UnaryModule("LPPool3d"), options_(o) {
  check_options("LPPool3d", o.norm_type, o.kernel.h, o.kernel.w, o.stride.h, o.stride.w);
  MG_CHECK(o.kernel.d > 0 && o.stride.d >= 0, Error, "LPPool3d: kernel must be positive and stride >= 0, got kernel ",
           o.kernel.str(), ", stride ", o.stride.str());
}

Tensor LPPool3d::forward(const Tensor& x) {
  const Options& o = options_;
  return detail::with_layer_name(
      *this, [&] { return lp_pool3d(x, o.norm_type, o.kernel.array(), o.stride.array(), o.ceil_mode); });
}

std::string LPPool3d::extra_repr() const {
  const Size3 stride = options_.stride == Size3(0) ? options_.kernel : options_.stride;
  std::string s = str_cat("norm_type=", options_.norm_type, ", kernel=", options_.kernel.str(), ", stride=", stride.str());
  if (options_.ceil_mode) s += ", ceil_mode=true";
  return s;
}

}  // namespace mg::nn
