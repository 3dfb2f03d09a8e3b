#include "mixgrad/ops/pad.h"

#include <cmath>

#include "mixgrad/core/factory.h"
#include "mixgrad/ops/composite.h"
#include "mixgrad/ops/ops.h"

namespace mg {

namespace {

// The source index of output position i (in [-before, n + after)) along a dim of size n.
int64_t source_index(PadMode mode, int64_t i, int64_t n) {
  switch (mode) {
    case PadMode::Reflect:
      if (i < 0) return -i;
      return i >= n ? 2 * (n - 1) - i : i;
    case PadMode::Replicate: return i < 0 ? 0 : (i >= n ? n - 1 : i);
    case PadMode::Circular: return ((i % n) + n) % n;
    case PadMode::Constant: break;
  }
  return i;
}

// x padded by (before, after) >= 0 along dim with a constant.
Tensor pad_constant_dim(const Tensor& x, int64_t dim, int64_t before, int64_t after, double value) {
  Tensors parts;
  Shape s = x.shape();
  const TensorOptions opts{.dtype = x.dtype(), .device = x.device()};
  if (before > 0) {
    s[dim] = before;
    parts.push_back(full(s, value, opts));
  }
  parts.push_back(x);
  if (after > 0) {
    s[dim] = after;
    parts.push_back(full(s, value, opts));
  }
  return parts.size() == 1 ? x : cat(parts, dim);
}

}  // namespace

const char* pad_mode_name(PadMode mode) {
  switch (mode) {
    case PadMode::Constant: return "constant";
    case PadMode::Reflect: return "reflect";
    case PadMode::Replicate: return "replicate";
    case PadMode::Circular: return "circular";
  }
  return "?";
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& amounts, PadMode mode, double value) {
  MG_CHECK(x.defined(), Error, "pad: got an undefined tensor");
  MG_CHECK(amounts.size() % 2 == 0, Error, "pad: expected an even number of amounts ((before, after) per dim, last dim "
           "first), got ", amounts.size());
  const int64_t dims = int64_t(amounts.size()) / 2;
  MG_CHECK(dims <= x.dim(), ShapeError, "pad: ", amounts.size(), " amounts pad ", dims, " dims, but the input is ",
           describe(x));
  MG_CHECK(mode == PadMode::Constant || value == 0.0, Error, "pad: a value is for the constant mode only, got ", value,
           " with mode ", pad_mode_name(mode));
  Tensor y = x;
  for (int64_t k = 0; k < dims; ++k) {
    const int64_t dim = x.dim() - 1 - k;
    const int64_t before = amounts[2 * k], after = amounts[2 * k + 1];
    const int64_t n = y.shape()[dim];
    if (mode == PadMode::Constant) {
      MG_CHECK(n + std::min<int64_t>(before, 0) + std::min<int64_t>(after, 0) >= 0, ShapeError, "pad: cropping (",
               before, ", ", after, ") from dim ", dim, " of size ", n, " leaves a negative size; input ", describe(x));
      // Negative amounts crop first, then the positive ones pad.
      y = slice(y, dim, std::max<int64_t>(-before, 0), n - std::max<int64_t>(-after, 0));
      y = pad_constant_dim(y, dim, std::max<int64_t>(before, 0), std::max<int64_t>(after, 0), value);
      continue;
    }
    MG_CHECK(before >= 0 && after >= 0, Error, "pad: ", pad_mode_name(mode), " padding needs amounts >= 0, got (",
             before, ", ", after, ") for dim ", dim);
    if (before == 0 && after == 0) continue;
    MG_CHECK(n > 0, ShapeError, "pad: ", pad_mode_name(mode), " padding of dim ", dim, " needs a non-empty dim; input ",
             describe(x));
    if (mode == PadMode::Reflect) {
      MG_CHECK(before < n && after < n, ShapeError, "pad: reflect padding (", before, ", ", after, ") of dim ", dim,
               " must be smaller than its size ", n, "; input ", describe(x));
    }
    if (mode == PadMode::Circular) {
      MG_CHECK(before <= n && after <= n, ShapeError, "pad: circular padding (", before, ", ", after, ") of dim ", dim,
               " must be at most its size ", n, "; input ", describe(x));
    }
    // Only the borders are gathered (index_select's backward costs O(size) per gathered element
    // on CUDA); the input itself is copied by cat.
    const auto border = [&](int64_t from, int64_t to_exclusive) {
      const std::string key = str_cat("pad ", pad_mode_name(mode), " ", n, " ", from, " ", to_exclusive);
      const Tensor index = detail::host_constant(key, y.device(), [&] {
        std::vector<int64_t> idx;
        for (int64_t i = from; i < to_exclusive; ++i) idx.push_back(source_index(mode, i, n));
        return from_vector(idx);
      });
      return index_select(y, dim, index);
    };
    Tensors parts;
    if (before > 0) parts.push_back(border(-before, 0));
    parts.push_back(y);
    if (after > 0) parts.push_back(border(n, n + after));
    y = cat(parts, dim);
  }
  // Always new memory, as PyTorch's F.pad: zero amounts (or crops alone) left x or a view of it,
  // and an in-place op on the result would have written the caller's tensor.
  if (&y.storage() == &x.storage()) y = clone(y);
  return y;
}

}  // namespace mg
