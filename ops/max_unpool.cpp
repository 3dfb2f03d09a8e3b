#include "mixgrad/ops/max_unpool.h"

#include "mixgrad/core/error.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/ops/arg_checks.h"
#include "mixgrad/ops/conv.h"
#include "mixgrad/ops/nonzero.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/sort.h"
#include "mixgrad/ops/unbatched.h"

namespace mg {
namespace {

// x and idx [N, C, P] -> [N, C, plane]: out[n, c, idx[n, c, p]] = x[n, c, p], the last p of a
// repeated index winning.
Tensor unpool_planes(const char* op, const Tensor& x, const Tensor& idx, int64_t plane) {
  MG_CHECK(x.defined() && idx.defined(), Error, op, ": got an undefined tensor");
  MG_CHECK(idx.dtype() == DType::I64, DTypeError, op, ": indices must be i64, got ", describe(idx));
  MG_CHECK(idx.shape() == x.shape(), ShapeError, op, ": indices ", describe(idx), " must have the shape of x ",
           describe(x));
  MG_CHECK(idx.device() == x.device(), DeviceError, op, ": x ", describe(x), " and indices ", describe(idx),
           " are on different devices");
  const int64_t n = x.size(0), c = x.size(1), rows = n * c, p = x.numel() / (rows == 0 ? 1 : rows);
  const Tensor x2 = reshape(x, {rows, p}), i2 = reshape(idx, {rows, p});
  if (x.numel() > 0) {  // one host read, as PyTorch's check
    const auto [lo, hi] = index_bounds(i2);
    MG_CHECK(lo >= 0 && hi < plane, IndexError, op, ": found the index ", lo < 0 ? lo : hi,
             ", outside the output plane of ", plane, " elements");
  }
  Tensor out = zeros({rows * plane}, {.dtype = x.dtype(), .device = x.device()});
  if (x.numel() == 0) return out;
  // The last of each run of equal indices, in x's order: a stable sort keeps the order of ties.
  const Tensor order = argsort(i2, 1);
  const Tensor sorted = gather(i2, 1, order);
  const Tensor next_differs = ne(slice(sorted, 1, 1, p), slice(sorted, 1, 0, p - 1));
  const Tensor last = cat({next_differs, ones({rows, 1}, {.dtype = DType::Bool, .device = x.device()})}, 1);
  const Tensor row_base = reshape(arange(0, rows, 1, {.dtype = DType::I64, .device = x.device()}) * double(plane),
                                  {rows, 1});
  const Tensor dst = masked_select(sorted + row_base, last);
  const Tensor src = masked_select(gather(x2, 1, order), last);
  return scatter_add(out, 0, dst, src);  // one value per position: a write
}

}  // namespace

Tensor max_unpool2d(const Tensor& x, const Tensor& indices, std::array<int64_t, 2> output_size) {
  MG_CHECK(output_size[0] >= 0 && output_size[1] >= 0, ShapeError, "max_unpool2d: output_size must be >= 0, got [",
           output_size[0], ", ", output_size[1], "]");
  const bool unbatched = x.defined() && x.dim() == 3;
  MG_CHECK(x.defined() && (x.dim() == 4 || unbatched), ShapeError,
           "max_unpool2d: expected x [N, C, H, W] or [C, H, W], got ", x.defined() ? describe(x) : "undefined");
  const Tensor xb = unbatched ? unsqueeze(x, 0) : x;
  const Tensor ib = unbatched && indices.defined() && indices.dim() == 3 ? unsqueeze(indices, 0) : indices;
  const Tensor out = reshape(unpool_planes("max_unpool2d", xb, ib, output_size[0] * output_size[1]),
                             {xb.size(0), xb.size(1), output_size[0], output_size[1]});
  return unbatched ? squeeze(out, 0) : out;
}

Tensor max_unpool3d(const Tensor& x, const Tensor& indices, std::array<int64_t, 3> output_size) {
  const auto [d, h, w] = output_size;
  MG_CHECK(d >= 0 && h >= 0 && w >= 0, ShapeError, "max_unpool3d: output_size must be >= 0, got [", d, ", ", h, ", ",
           w, "]");
  const bool unbatched = x.defined() && x.dim() == 4;
  MG_CHECK(x.defined() && (x.dim() == 5 || unbatched), ShapeError,
           "max_unpool3d: expected x [N, C, D, H, W] or [C, D, H, W], got ", x.defined() ? describe(x) : "undefined");
  const Tensor xb = unbatched ? unsqueeze(x, 0) : x;
  const Tensor ib = unbatched && indices.defined() && indices.dim() == 4 ? unsqueeze(indices, 0) : indices;
  const Tensor out = reshape(unpool_planes("max_unpool3d", xb, ib, d * h * w), {xb.size(0), xb.size(1), d, h, w});
  return unbatched ? squeeze(out, 0) : out;
}

Tensor max_unpool1d(const Tensor& x, const Tensor& indices, int64_t output_size) {
  MG_CHECK(output_size >= 0, ShapeError, "max_unpool1d: output_size must be >= 0, got ", output_size);
  const bool unbatched = x.defined() && x.dim() == 2;
  MG_CHECK(x.defined() && (x.dim() == 3 || unbatched), ShapeError,
           "max_unpool1d: expected x [N, C, L] or [C, L], got ", x.defined() ? describe(x) : "undefined");
  const Tensor xb = unbatched ? unsqueeze(x, 0) : x;
  const Tensor ib = unbatched && indices.defined() && indices.dim() == 2 ? unsqueeze(indices, 0) : indices;
  const Tensor out = reshape(unpool_planes("max_unpool1d", xb, ib, output_size), {xb.size(0), xb.size(1), output_size});
  return unbatched ? squeeze(out, 0) : out;
}

Tensor max_pool1d_indices(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation,
                          bool ceil_mode) {
  return detail::as_batch_of_one(x, 3, [&](const Tensor& xb) {
    MG_CHECK(xb.defined() && xb.dim() == 3, ShapeError, "max_pool1d_indices: expected x [N, C, L] or [C, L], got ",
             xb.defined() ? describe(xb) : "undefined");
    // A [N, C, 1, L] plane: its positions h * L + w are w.
    return squeeze(max_pool2d_indices(unsqueeze(xb, 2), {1, kernel}, {1, stride == 0 ? kernel : stride}, {0, padding},
                                      {1, dilation}, ceil_mode),
                   2);
  });
}

}  // namespace mg
