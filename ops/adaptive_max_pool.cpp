#include "mixgrad/ops/adaptive_max_pool.h"

#include <vector>

#include "mixgrad/ops/ops.h"

namespace mg {

namespace {

// x pooled along `dim` (size L) to `out` windows [floor(i L / out), ceil((i + 1) L / out)).
Tensor pool_dim(const Tensor& x, int64_t dim, int64_t out) {
  const int64_t n = x.size(dim);
  Tensors windows;
  windows.reserve(std::size_t(out));
  for (int64_t i = 0; i < out; ++i) {
    const int64_t begin = (i * n) / out, end = ((i + 1) * n + out - 1) / out;
    windows.push_back(max(x.narrow(dim, begin, end - begin), dim).first);  // first maximum, as PyTorch's scan
  }
  return stack(windows, dim);
}

Tensor adaptive_max(const char* op, const Tensor& x, const std::vector<int64_t>& out) {
  const int64_t spatial = int64_t(out.size());
  MG_CHECK(x.defined() && (x.dim() == spatial + 2 || x.dim() == spatial + 1), ShapeError, op, ": expected x ",
           spatial == 1 ? "[N, C, L] or [C, L]" : spatial == 2 ? "[N, C, H, W] or [C, H, W]"
                                                                : "[N, C, D, H, W] or [C, D, H, W]",
           ", got ", x.defined() ? describe(x) : "undefined");
  MG_CHECK(x.is_floating_point(), DTypeError, op, ": expected a floating input, got ", describe(x));
  const int64_t first = x.dim() - spatial;
  for (int64_t d = 0; d < spatial; ++d) {
    MG_CHECK(out[std::size_t(d)] >= 1, Error, op, ": output sizes must be >= 1, got ", out[std::size_t(d)]);
    MG_CHECK(x.size(first + d) >= 1, ShapeError, op, ": expected a non-empty input along its spatial dim ", d,
             ", got ", describe(x));
  }
  Tensor y = x;
  for (int64_t d = spatial - 1; d >= 0; --d) y = pool_dim(y, first + d, out[std::size_t(d)]);
  return y;
}

}  // namespace

Tensor adaptive_max_pool1d(const Tensor& x, int64_t output_size) {
  return adaptive_max("adaptive_max_pool1d", x, {output_size});
}

Tensor adaptive_max_pool2d(const Tensor& x, std::array<int64_t, 2> output_size) {
  return adaptive_max("adaptive_max_pool2d", x, {output_size[0], output_size[1]});
}

Tensor adaptive_max_pool3d(const Tensor& x, std::array<int64_t, 3> output_size) {
  return adaptive_max("adaptive_max_pool3d", x, {output_size[0], output_size[1], output_size[2]});
}

}  // namespace mg
