#include "mixgrad/nn/max_unpool.h"

#include "mixgrad/ops/max_unpool.h"

namespace mg::nn {
namespace {

void check_options(const char* layer, int64_t k, int64_t s, int64_t p) {
  MG_CHECK(k > 0 && s >= 0 && p >= 0, Error, layer,
           ": kernel must be positive and stride, padding non-negative, got kernel=", k, ", stride=", s, ", padding=", p);
}

// PyTorch's _unpool_output_size for one dim: the default, or a wanted size within the stride of it.
int64_t out_size(const std::string& layer, const Tensor& x, int64_t dim_from_end, int64_t k, int64_t s, int64_t p,
                 std::optional<int64_t> want) {
  MG_CHECK(x.defined() && x.dim() > dim_from_end, ShapeError, layer, ": got x ",
           x.defined() ? describe(x) : "undefined");
  const int64_t stride = s == 0 ? k : s;
  const int64_t def = (x.size(x.dim() - dim_from_end) - 1) * stride - 2 * p + k;
  if (!want) return def;
  MG_CHECK(*want > def - stride && *want < def + stride, ShapeError, layer, ": output_size ", *want,
           " must be in [", def - stride + 1, ", ", def + stride - 1, "] for x ", describe(x),
           " (within the stride of the default ", def, ")");
  return *want;
}

}  // namespace

MaxUnpool1d::MaxUnpool1d(Options o) : Module("MaxUnpool1d"), options_(o) {
  check_options("MaxUnpool1d", o.kernel, o.stride, o.padding);
}

Tensor MaxUnpool1d::forward(const Tensor& x, const Tensor& indices, std::optional<int64_t> output_size) {
  auto scope = module_scope(*this);
  const Options& o = options_;
  const int64_t l = out_size(layer_name(), x, 1, o.kernel, o.stride, o.padding, output_size);
  return detail::with_layer_name(*this, [&] { return max_unpool1d(x, indices, l); });
}

std::string MaxUnpool1d::extra_repr() const {
  const Options& o = options_;
  return str_cat("kernel=", o.kernel, ", stride=", o.stride == 0 ? o.kernel : o.stride, ", padding=", o.padding);
}

MaxUnpool2d::MaxUnpool2d(Options o) : Module("MaxUnpool2d"), options_(o) {
  check_options("MaxUnpool2d", o.kernel.h, o.stride.h, o.padding.h);
  check_options("MaxUnpool2d", o.kernel.w, o.stride.w, o.padding.w);
}

Tensor MaxUnpool2d::forward(const Tensor& x, const Tensor& indices, std::optional<Size2> output_size) {
  auto scope = module_scope(*this);
  const Options& o = options_;
  const std::string name = layer_name();
  const int64_t h = out_size(name, x, 2, o.kernel.h, o.stride.h, o.padding.h,
                             output_size ? std::optional<int64_t>(output_size->h) : std::nullopt);
  const int64_t w = out_size(name, x, 1, o.kernel.w, o.stride.w, o.padding.w,
                             output_size ? std::optional<int64_t>(output_size->w) : std::nullopt);
  return detail::with_layer_name(*this, [&] { return max_unpool2d(x, indices, {h, w}); });
}

std::string MaxUnpool2d::extra_repr() const {
  const Options& o = options_;
  const Size2 stride = o.stride == Size2(0) ? o.kernel : o.stride;
  return str_cat("kernel=", o.kernel.str(), ", stride=", stride.str(), ", padding=", o.padding.str());
}

MaxUnpool3d::MaxUnpool3d(Options o) : Module("MaxUnpool3d"), options_(o) {
  check_options("MaxUnpool3d", o.kernel.d, o.stride.d, o.padding.d);
  check_options("MaxUnpool3d", o.kernel.h, o.stride.h, o.padding.h);
  check_options("MaxUnpool3d", o.kernel.w, o.stride.w, o.padding.w);
}

Tensor MaxUnpool3d::forward(const Tensor& x, const Tensor& indices, std::optional<Size3> output_size) {
  auto scope = module_scope(*this);
  const Options& o = options_;
  const std::string name = layer_name();
  auto want = [&](int64_t Size3::*dim) { return output_size ? std::optional<int64_t>((*output_size).*dim) : std::nullopt; };
  const int64_t d = out_size(name, x, 3, o.kernel.d, o.stride.d, o.padding.d, want(&Size3::d));
  const int64_t h = out_size(name, x, 2, o.kernel.h, o.stride.h, o.padding.h, want(&Size3::h));
  const int64_t w = out_size(name, x, 1, o.kernel.w, o.stride.w, o.padding.w, want(&Size3::w));
  return detail::with_layer_name(*this, [&] { return max_unpool3d(x, indices, {d, h, w}); });
}

std::string MaxUnpool3d::extra_repr() const {
  const Options& o = options_;
  const Size3 stride = o.stride == Size3(0) ? o.kernel : o.stride;
  return str_cat("kernel=", o.kernel.str(), ", stride=", stride.str(), ", padding=", o.padding.str());
}

}  // namespace mg::nn
