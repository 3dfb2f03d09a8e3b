#include "mixgrad/nn/fractional_max_pool.h"

#include <algorithm>

#include "mixgrad/ops/fractional_max_pool.h"

namespace mg::nn {
namespace {

// kernel >= 1 everywhere, and exactly one of output_size (each >= 1) and output_ratio (each in (0, 1)).
template <std::size_t N>
void check_options(const char* layer, const std::array<int64_t, N>& kernel, const std::array<int64_t, N>& size,
                   const std::array<double, N>& ratio) {
  MG_CHECK(std::all_of(kernel.begin(), kernel.end(), [](int64_t k) { return k >= 1; }), Error, layer,
           ": kernel must be >= 1 along every dim");
  const bool has_size = std::any_of(size.begin(), size.end(), [](int64_t s) { return s != 0; });
  const bool has_ratio = std::any_of(ratio.begin(), ratio.end(), [](double r) { return r != 0; });
  MG_CHECK(has_size != has_ratio, Error, layer, ": give either output_size or output_ratio, got ",
           has_size ? "both" : "neither");
  if (has_size) {
    MG_CHECK(std::all_of(size.begin(), size.end(), [](int64_t s) { return s >= 1; }), Error, layer,
             ": output_size must be >= 1 along every dim");
  } else {
    for (const double r : ratio) MG_CHECK(r > 0 && r < 1, Error, layer, ": output_ratio must be in (0, 1), got ", r);
  }
}

// The output size for x: output_size, or int(input size * ratio) of x's last N dims.
template <std::size_t N>
std::array<int64_t, N> output_for(const char* layer, const Tensor& x, const std::array<int64_t, N>& size,
                                  const std::array<double, N>& ratio) {
  if (size[0] != 0) return size;
  MG_CHECK(x.defined() && x.dim() >= int64_t(N), ShapeError, layer, ": expected at least ", N, " dims, got x ",
           x.defined() ? describe(x) : "undefined");
  std::array<int64_t, N> out{};
  for (std::size_t j = 0; j < N; ++j) out[j] = fractional_output_size(layer, x.size(x.dim() - int64_t(N) + int64_t(j)), ratio[j]);
  return out;
}

template <std::size_t N>
std::string repr(const std::string& kernel, const std::string& size, const std::array<double, N>& ratio) {
  if (!size.empty() && size != "0") return str_cat("kernel_size=", kernel, ", output_size=", size);
  std::string r;
  for (std::size_t j = 0; j < N; ++j) r += str_cat(j ? ", " : "", ratio[j]);
  return str_cat("kernel_size=", kernel, ", output_ratio=(", r, ")");
}

}  // namespace

FractionalMaxPool2d::FractionalMaxPool2d(Options o) : UnaryModule("FractionalMaxPool2d"), options_(std::move(o)) {
  check_options("FractionalMaxPool2d", options_.kernel.array(), options_.output_size.array(), options_.output_ratio);
}

Tensor FractionalMaxPool2d::forward(const Tensor& x) {
  return detail::with_layer_name(*this, [&] {
    const Options& o = options_;
    return fractional_max_pool2d(x, o.kernel.array(),
                                 output_for("fractional_max_pool2d", x, o.output_size.array(), o.output_ratio),
                                 o.random_samples);
  });
}

std::pair<Tensor, Tensor> FractionalMaxPool2d::forward_with_indices(const Tensor& x) {
  auto scope = module_scope(*this);
  std::pair<Tensor, Tensor> r;
  detail::with_layer_name(*this, [&] {
    const Options& o = options_;
    r = fractional_max_pool2d_with_indices(
        x, o.kernel.array(), output_for("fractional_max_pool2d", x, o.output_size.array(), o.output_ratio),
        o.random_samples);
    return r.first;
  });
  return r;
}

std::string FractionalMaxPool2d::extra_repr() const {
  return repr(options_.kernel.str(), options_.output_size.str(), options_.output_ratio);
}

FractionalMaxPool3d::FractionalMaxPool3d(Options o) : UnaryModule("FractionalMaxPool3d"), options_(std::move(o)) {
  check_options("FractionalMaxPool3d", options_.kernel.array(), options_.output_size.array(), options_.output_ratio);
}

Tensor FractionalMaxPool3d::forward(const Tensor& x) {
  return detail::with_layer_name(*this, [&] {
    const Options& o = options_;
    return fractional_max_pool3d(x, o.kernel.array(),
                                 output_for("fractional_max_pool3d", x, o.output_size.array(), o.output_ratio),
                                 o.random_samples);
  });
}

std::pair<Tensor, Tensor> FractionalMaxPool3d::forward_with_indices(const Tensor& x) {
  auto scope = module_scope(*this);
  std::pair<Tensor, Tensor> r;
  detail::with_layer_name(*this, [&] {
    const Options& o = options_;
    r = fractional_max_pool3d_with_indices(
        x, o.kernel.array(), output_for("fractional_max_pool3d", x, o.output_size.array(), o.output_ratio),
        o.random_samples);
    return r.first;
  });
  return r;
}

std::string FractionalMaxPool3d::extra_repr() const {
  return repr(options_.kernel.str(), options_.output_size.str(), options_.output_ratio);
}

}  // namespace mg::nn
