// View ops: outputs share the input's storage (no kernel); the dispatcher marks them as views.
// Composite views (reshape, transpose, narrow, select, squeeze, unsqueeze, flatten) are built from
// the four primitive view ops, so autograd needs only four backward rules.
#include <algorithm>
#include <numeric>
#include <optional>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/ops/backward_ctx.h"
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/register.h"

namespace mg {
namespace {

Tensor alias(const Tensor& x, Shape shape, Strides strides, int64_t offset) {
  return make_tensor(x.impl()->storage, std::move(shape), std::move(strides), offset, x.dtype());
}

// Resolves one -1 in `shape` against numel.
Shape infer_size(const char* op, const Shape& shape, int64_t numel, const Tensor& x) {
  Shape out = shape;
  int64_t known = 1, infer_at = -1;
  bool overflow = false;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      MG_CHECK(infer_at < 0, ShapeError, op, ": only one dimension can be -1, got ", shape);
      infer_at = int64_t(i);
    } else {
      MG_CHECK(out[i] >= 0, ShapeError, op, ": invalid size ", out[i], " in shape ", shape);
      overflow = __builtin_mul_overflow(known, out[i], &known) || overflow;  // no signed overflow (UB)
    }
  }
  if (std::find(out.begin(), out.end(), 0) != out.end()) {
    known = 0, overflow = false;  // a 0 anywhere: empty, however large the other sizes
  }
  MG_CHECK(!overflow, ShapeError, op, ": shape ", shape, " has more than 2^63 - 1 elements (input ", describe(x), ")");
  if (infer_at >= 0) {
    MG_CHECK(known != 0 && numel % known == 0, ShapeError, op, ": shape ", shape,
             " is invalid for input ", describe(x), " with ", numel, " elements");
    out[infer_at] = numel / known;
  }
  MG_CHECK(shape_numel(out) == numel, ShapeError, op, ": shape ", shape, " is invalid for input ",
           describe(x), " with ", numel, " elements");
  return out;
}

// Strides that view `old` (shape/strides) as `shape` without copying, or empty when impossible.
// Walks groups of old dims that are contiguous with each other and matches new dims to them.
std::optional<Strides> view_strides(const Shape& old_shape, const Strides& old_strides, const Shape& shape) {
  if (shape_numel(old_shape) == 0 || old_shape.empty()) return contiguous_strides(shape);
  Strides out(shape.size());
  int64_t view_d = int64_t(shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.empty() ? 1 : old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    // End of a contiguous chunk of old dims: assign the new dims that cover it.
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

Tensor view_fn(const Tensor& x, const OpAttrs& a) {
  const Shape shape = infer_size("view", a.ints, x.numel(), x);
  auto strides = view_strides(x.shape(), x.strides(), shape);
  MG_CHECK(strides.has_value(), ShapeError, "view: cannot view ", describe(x), " with strides ",
           x.strides(), " as shape ", shape, " without copying",
           "\n  hint: use reshape(), or contiguous() before view()");
  return alias(x, shape, *strides, x.offset());
}

Tensor permute_fn(const Tensor& x, const OpAttrs& a) {
  const int64_t n = x.dim();
  MG_CHECK(int64_t(a.dims.size()) == n, ShapeError, "permute: expected ", n, " dims for ",
           describe(x), ", got ", a.dims);
  std::vector<bool> seen(n, false);
  Shape shape(n);
  Strides strides(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t d = wrap_dim(a.dims[i], n, "permute");
    MG_CHECK(!seen[d], IndexError, "permute: dim ", d, " appears twice in ", a.dims);
    seen[d] = true;
    shape[i] = x.shape()[d];
    strides[i] = x.strides()[d];
  }
  return alias(x, shape, strides, x.offset());
}

Tensor expand_fn(const Tensor& x, const OpAttrs& a) {
  const Shape& target = a.ints;
  const int64_t n = int64_t(target.size()), m = x.dim();
  MG_CHECK(n >= m, ShapeError, "expand: cannot expand ", describe(x), " to fewer dims: ", target);
  Shape shape(n);
  Strides strides(n);
  for (int64_t i = n - 1; i >= 0; --i) {
    const int64_t j = i - (n - m);
    const int64_t size = j >= 0 ? x.shape()[j] : 1;
    int64_t want = target[i];
    if (want == -1) {
      MG_CHECK(j >= 0, ShapeError, "expand: -1 is not allowed for a new leading dim; target ", target);
      want = size;
    }
    MG_CHECK(want >= 0, ShapeError, "expand: the target size ", want, " of dim ", i, " is negative (only -1, keep the "
             "size, is allowed); target ", target);
    MG_CHECK(size == want || size == 1, ShapeError, "expand: cannot expand ", describe(x), " to ",
             target, " (dim ", i, ": ", size, " vs ", want, ")");
    shape[i] = want;
    strides[i] = (j >= 0 && size == want) ? x.strides()[j] : 0;
  }
  return alias(x, shape, strides, x.offset());
}

Tensor slice_fn(const Tensor& x, const OpAttrs& a) {
  const int64_t d = wrap_dim(a.dim, x.dim(), "slice");
  const int64_t size = x.shape()[d];
  int64_t start = a.ints[0], end = a.ints[1];
  const int64_t step = a.ints[2];
  MG_CHECK(step > 0, Error, "slice: step must be positive, got ", step);
  // Python semantics: negative indices count from the end; out-of-range bounds are clamped.
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  Shape shape = x.shape();
  Strides strides = x.strides();
  shape[d] = end > start ? 1 + (end - start - 1) / step : 0;  // no overflow for a step near INT64_MAX
  // With two or more elements, step < size keeps stride * step inside the storage's reach; with
  // one or none the stride is never used, and a step near INT64_MAX would overflow it.
  if (shape[d] > 1) strides[d] *= step;
  return alias(x, shape, strides, x.offset() + start * x.strides()[d]);
}

// d view = reshape back
Tensors view_bw(const BackwardCtx& c, const Tensors& g) { return {reshape(g[0], c.input_shape(0))}; }
// d permute = inverse permutation
Tensors permute_bw(const BackwardCtx& c, const Tensors& g) {
  const auto& dims = c.attrs().dims;
  const int64_t n = int64_t(dims.size());
  std::vector<int64_t> inv(n);
  for (int64_t i = 0; i < n; ++i) inv[(dims[i] % n + n) % n] = i;
  return {permute(g[0], inv)};
}
// d expand = sum over the broadcast dims (done by the dispatcher's sum_to)
Tensors expand_bw(const BackwardCtx&, const Tensors& g) { return {g[0]}; }
// d slice = the gradient placed into zeros at the sliced positions. An ordinary backward writes
// it with one strided copy into a slice view of the zeros (a scatter_add with an expanded index
// tensor was 3.5-5% of a CIFAR ResNet step: the option-A shortcut slices every other pixel). When
// the backward is itself recorded (create_graph = true) it stays the differentiable scatter_add.
// Both give the gradient's values exactly (0 + g = g; only a -0 becomes +0 in the scatter_add).
Tensors slice_bw(const BackwardCtx& c, const Tensors& g) {
  const Shape& in_shape = c.input_shape(0);
  const int64_t d = wrap_dim(c.attrs().dim, int64_t(in_shape.size()), "slice");
  const Tensor& grad = g[0];
  const int64_t size = in_shape[d];
  int64_t start = c.attrs().ints[0];
  if (start < 0) start += size;
  start = std::clamp<int64_t>(start, 0, size);
  const int64_t step = c.attrs().ints[2];
  const int64_t n = grad.shape()[d];
  Tensor base = zeros(in_shape, {.dtype = grad.dtype(), .device = grad.device()});
  if (n == 0) return {base};
  // One past the last position: start + step * n could overflow for one element and a step near
  // INT64_MAX; this stays below the dim's size.
  const int64_t stop = start + step * (n - 1) + 1;
  if (!GradMode::is_enabled()) {
    slice(base, d, start, stop, step).copy_(grad);
    return {base};
  }
  Shape idx_shape(in_shape.size(), 1);
  idx_shape[d] = n;
  const Tensor idx =
      arange(start, stop, step, {.dtype = DType::I64, .device = grad.device()}).view(idx_shape).expand(grad.shape());
  return {scatter_add(base, d, idx, grad)};
}

}  // namespace

void register_view_rules() {
  set_op_rule(OpId::view, {.view = view_fn, .backward = view_bw});
  set_op_rule(OpId::permute, {.view = permute_fn, .backward = permute_bw});
  set_op_rule(OpId::expand, {.view = expand_fn, .backward = expand_bw});
  set_op_rule(OpId::slice, {.view = slice_fn, .backward = slice_bw});
}

Tensor view(const Tensor& x, const Shape& shape) { return dispatch1(OpId::view, {x}, {.ints = shape}); }

Tensor reshape(const Tensor& x, const Shape& shape) {
  const Shape resolved = infer_size("reshape", shape, x.numel(), x);
  if (view_strides(x.shape(), x.strides(), resolved)) return view(x, resolved);
  return view(clone(x), resolved);
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  return dispatch1(OpId::permute, {x}, {.dims = dims});
}

// A view op that changes nothing (squeeze of a dim that is not 1, transpose of a 0-d tensor, t()
// of a vector) still returns a new view, as PyTorch's: a hook, retain_grad or requires_grad_ on
// the result must not act on the input itself.
namespace {
Tensor same_view(const Tensor& x) {
  std::vector<int64_t> dims(std::size_t(x.dim()));
  std::iota(dims.begin(), dims.end(), 0);
  return permute(x, dims);
}
}  // namespace

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  const int64_t n = x.dim();
  if (n == 0) {  // a 0-d tensor takes dims -1 and 0 only, as PyTorch
    wrap_dim(d0, 0, "transpose");
    wrap_dim(d1, 0, "transpose");
    return same_view(x);
  }
  d0 = wrap_dim(d0, n, "transpose");
  d1 = wrap_dim(d1, n, "transpose");
  std::vector<int64_t> dims(n);
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[d0], dims[d1]);
  return permute(x, dims);
}

Tensor expand(const Tensor& x, const Shape& shape) { return dispatch1(OpId::expand, {x}, {.ints = shape}); }

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  MG_CHECK(x.dim() > 0, ShapeError, "slice: cannot slice a 0-d tensor");
  return dispatch1(OpId::slice, {x}, {.ints = {start, end, step}, .dim = dim});
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  MG_CHECK(x.dim() > 0, ShapeError, "narrow: cannot narrow a 0-d tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "narrow");
  const int64_t size = x.shape()[d];
  if (start < 0) start += size;
  MG_CHECK(start >= 0 && start <= size && length >= 0 && length <= size - start, IndexError, "narrow: start ", start,
           " and length ", length, " are out of bounds for dim ", d, " of size ", size, " in ", describe(x));
  return slice(x, d, start, start + length, 1);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  MG_CHECK(x.dim() > 0, ShapeError, "select: cannot select from a 0-d tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "select");
  const int64_t size = x.shape()[d];
  MG_CHECK(index >= -size && index < size, IndexError, "select: index ", index,
           " is out of range for dim ", d, " of size ", size, " in ", describe(x));
  if (index < 0) index += size;
  return squeeze(slice(x, d, index, index + 1, 1), d);
}

Tensor squeeze(const Tensor& x) {
  Shape shape;
  for (int64_t s : x.shape()) {
    if (s != 1) shape.push_back(s);
  }
  return shape == x.shape() ? same_view(x) : view(x, shape);
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  if (x.dim() == 0) {  // dims -1 and 0 only, as PyTorch
    wrap_dim(dim, 0, "squeeze");
    return same_view(x);
  }
  const int64_t d = wrap_dim(dim, x.dim(), "squeeze");
  if (x.shape()[d] != 1) return same_view(x);
  Shape shape = x.shape();
  shape.erase(shape.begin() + d);
  return view(x, shape);
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  const int64_t d = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Shape shape = x.shape();
  shape.insert(shape.begin() + d, 1);
  return view(x, shape);
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  if (x.dim() == 0) {  // dims -1 and 0 only, as PyTorch
    wrap_dim(start_dim, 0, "flatten");
    wrap_dim(end_dim, 0, "flatten");
    return reshape(x, {1});
  }
  const int64_t s = wrap_dim(start_dim, x.dim(), "flatten");
  const int64_t e = wrap_dim(end_dim, x.dim(), "flatten");
  MG_CHECK(s <= e, Error, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim);
  Shape shape(x.shape().begin(), x.shape().begin() + s);
  int64_t merged = 1;
  bool overflow = false, has_zero = false;
  for (int64_t d = s; d <= e; ++d) {
    has_zero = has_zero || x.shape()[d] == 0;
    overflow = __builtin_mul_overflow(merged, x.shape()[d], &merged) || overflow;  // no signed overflow (UB)
  }
  if (has_zero) merged = 0;
  MG_CHECK(has_zero || !overflow, ShapeError, "flatten: dims ", s, " to ", e, " of ", describe(x),
           " merge into more than 2^63 - 1 elements");
  shape.push_back(merged);
  shape.insert(shape.end(), x.shape().begin() + e + 1, x.shape().end());
  return reshape(x, shape);
}

}  // namespace mg
