// Shape and indexing ops: cat, stack, split, chunk, index_select, gather, scatter_add,
// masked_fill, one_hot — public functions, inference and backward rules.
//
// Decisions a reader must know:
// - stack, split and chunk are composites (unsqueeze + cat; narrow views), so they need no
//   kernel or rule of their own and their gradients come from cat and slice.
// - Index values must lie in [0, size) for index_select, gather and scatter_add alike (a negative
//   one is refused, as PyTorch's); one_hot takes class values 0 <= v < num_classes. Out-of-range
//   values throw IndexError naming the value and the valid range (the kernels check).
// - scatter_add needs self and src of one dtype (PyTorch's rule); under autocast its promote
//   policy converts them first.
// - Every backward rule is written with public ops, so double backward works.
#include <algorithm>
#include <limits>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/fill_values.h"
#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/ops/backward_ctx.h"
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/infer.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/register.h"

namespace mg {
namespace {

// The autograd node records at most 16 differentiable inputs (ops/dispatcher.cpp); a longer
// cat is done as a cat of cats of at most this many tensors.
constexpr std::size_t kMaxCatGradInputs = 16;

void check_index(const char* op, const Tensor& index) {
  MG_CHECK(index.dtype() == DType::I64 || index.dtype() == DType::I32, DTypeError, op,
           ": expected an i64 or i32 index tensor, got ", describe(index),
           "\n  hint: convert the index with .to(mg::DType::I64)");
}

// ---- cat ----
InferResult infer_cat(const Tensors& in, const OpAttrs& a) {
  MG_CHECK(!in.empty(), Error, "cat: expected a non-empty list of tensors");
  const Tensor& first = in[0];
  const int64_t nd = first.dim();
  const int64_t dim = a.dim;
  Shape shape = first.shape();
  shape.at(dim) = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const Tensor& x = in[i];
    MG_CHECK(x.dtype() == first.dtype(), DTypeError, "cat: expected tensors of one dtype, got ",
             describe(first), " at position 0 and ", describe(x), " at position ", i);
    MG_CHECK(x.dim() > 0, ShapeError, "cat: a 0-d tensor cannot be concatenated; got ", describe(x),
             " at position ", i, "\n  hint: use mg::stack to join 0-d tensors into a 1-D tensor");
    MG_CHECK(x.dim() == nd, ShapeError, "cat: expected tensors with the same number of dims; got ",
             describe(first), " at position 0 and ", describe(x), " at position ", i);
    for (int64_t d = 0; d < nd; ++d) {
      MG_CHECK(d == dim || x.shape()[d] == first.shape()[d], ShapeError,
               "cat: sizes must match except in dim ", dim, "; got ", describe(first), " at position 0 and ",
               describe(x), " at position ", i, " (dim ", d, ": ", first.shape()[d], " vs ", x.shape()[d], ")");
    }
    shape[dim] += x.shape()[dim];
  }
  return {{{shape, first.dtype()}}, first.dtype()};
}

// d cat(x0, x1, ...) / d xi = the gradient narrowed to xi's slab along dim
Tensors cat_bw(const BackwardCtx& c, const Tensors& g) {
  const int64_t dim = c.attrs().dim;
  Tensors grads(std::size_t(c.num_inputs()));
  int64_t offset = 0;
  for (int i = 0; i < c.num_inputs(); ++i) {
    const int64_t len = c.input_shape(i)[dim];
    if (c.needs_grad(i)) grads[i] = narrow(g[0], dim, offset, len);
    offset += len;
  }
  return grads;
}

// ---- index_select ----
InferResult infer_index_select(const Tensors& in, const OpAttrs& a) {
  const Tensor &x = in[0], &index = in[1];
  check_index("index_select", index);
  MG_CHECK(x.dim() > 0, ShapeError, "index_select: expected an input with at least 1 dim, got ", describe(x));
  MG_CHECK(index.dim() <= 1, ShapeError, "index_select: expected a 1-D index, got ", describe(index),
           "\n  hint: flatten the index, select, then reshape the result");
  Shape shape = x.shape();
  shape.at(a.dim) = index.numel();
  return {{{shape, x.dtype()}}, x.dtype()};
}

// d index_select: gx[.., index[j], ..] += g[.., j, ..] — the gradient scatter-added into zeros at
// the selected positions along dim, so repeated indices accumulate
Tensors index_select_bw(const BackwardCtx& c, const Tensors& g) {
  const int64_t dim = c.attrs().dim;
  const Shape& in_shape = c.input_shape(0);
  const Tensor index = c.input(1);
  Shape idx_shape(in_shape.size(), 1);
  idx_shape[dim] = index.numel();
  const Tensor idx = expand(reshape(index, idx_shape), g[0].shape());
  const Tensor base = zeros(in_shape, {.dtype = g[0].dtype(), .device = g[0].device()});
  return {scatter_add(base, dim, idx, g[0]), Tensor()};
}

// ---- gather / scatter_add ----
// gather/scatter shape rule: index has the input's rank, and index.size(d) <= input.size(d) for
// every d != dim (PyTorch's rule); for scatter also index.size(d) <= src.size(d) for all d. An
// empty index reads and writes nothing, so its sizes are not compared (as PyTorch's).
void check_gather_shapes(const char* op, const Tensor& x, int64_t dim, const Tensor& index,
                         const Tensor* src) {
  check_index(op, index);
  MG_CHECK(index.dim() == x.dim(), ShapeError, op,
           ": index must have the same number of dims as the input; got index ", describe(index),
           " and input ", describe(x));
  for (int64_t d = 0; d < x.dim() && index.numel() > 0; ++d) {
    MG_CHECK(d == dim || index.shape()[d] <= x.shape()[d], ShapeError, op, ": index ", describe(index),
             " is larger than input ", describe(x), " in dim ", d);
    if (src) {
      MG_CHECK(index.shape()[d] <= src->shape()[d], ShapeError, op, ": index ", describe(index),
               " is larger than src ", describe(*src), " in dim ", d);
    }
  }
}

InferResult infer_gather(const Tensors& in, const OpAttrs& a) {
  check_gather_shapes("gather", in[0], a.dim, in[1], nullptr);
  return {{{in[1].shape(), in[0].dtype()}}, in[0].dtype()};
}

InferResult infer_scatter_add(const Tensors& in, const OpAttrs& a) {
  check_same_dtype("scatter_add", in[0], in[2]);
  MG_CHECK(in[2].dim() == in[0].dim(), ShapeError,
           "scatter_add: src must have the same number of dims as self; got self ", describe(in[0]),
           " and src ", describe(in[2]));
  check_gather_shapes("scatter_add", in[0], a.dim, in[1], &in[2]);
  return {{{in[0].shape(), in[0].dtype()}}, in[0].dtype()};
}

// d gather: gx[index[i][j]][j] += g[i][j] (dim 0) — scatter_add of the gradient into zeros
Tensors gather_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor index = c.input(1);
  const Tensor base = zeros(c.input_shape(0), {.dtype = g[0].dtype(), .device = g[0].device()});
  return {scatter_add(base, c.attrs().dim, index, g[0]), Tensor()};
}

// d scatter_add: d self = identity; d src[i][j] = g[index[i][j]][j] (dim 0) — the gradient gathered
// at the scattered positions. src may be larger than index in any dim: its elements outside
// index's extent were not used and get zero (the gathered block padded with zeros by cat).
Tensors scatter_add_bw(const BackwardCtx& c, const Tensors& g) {
  Tensor gsrc;
  if (c.needs_grad(2)) {
    gsrc = gather(g[0], c.attrs().dim, c.input(1));
    const Shape& src_shape = c.input_shape(2);
    for (std::size_t d = 0; d < src_shape.size(); ++d) {
      const int64_t pad = src_shape[d] - gsrc.shape()[d];
      if (pad <= 0) continue;
      Shape zshape = gsrc.shape();
      zshape[d] = pad;
      gsrc = cat({gsrc, zeros(zshape, {.dtype = gsrc.dtype(), .device = gsrc.device()})}, int64_t(d));
    }
  }
  return {c.needs_grad(0) ? g[0] : Tensor(), Tensor(), gsrc};
}

// ---- masked_fill ----
InferResult infer_masked_fill(const Tensors& in, const OpAttrs& a) {
  const Tensor &x = in[0], &mask = in[1];
  MG_CHECK(mask.dtype() == DType::Bool, DTypeError, "masked_fill: expected a bool mask, got ", describe(mask),
           "\n  hint: build the mask with a comparison (mg::ne(m, mg::scalar_like(0, m))) or .to(mg::DType::Bool)");
  bool ok = mask.dim() <= x.dim();
  for (int64_t i = 1; ok && i <= mask.dim(); ++i) {
    const int64_t m = mask.shape()[mask.dim() - i], s = x.shape()[x.dim() - i];
    ok = m == s || m == 1;
  }
  MG_CHECK(ok, ShapeError, "masked_fill: mask ", describe(mask), " cannot be broadcast to the input's shape ",
           x.shape(), "; got input ", describe(x));
  MG_CHECK(fill_value_holds(x.dtype(), a.alpha), Error, "masked_fill: value ", a.alpha, " cannot be converted to ",
           dtype_name(x.dtype()), " without overflow; got input ", describe(x));
  return {{{x.shape(), x.dtype()}}, x.dtype()};
}

// d masked_fill(x, mask, v) / dx = 0 where mask (the value replaced x), 1 elsewhere:
// where(mask, 0, g)
Tensors masked_fill_bw(const BackwardCtx& c, const Tensors& g) {
  return {where(c.input(1), scalar_like(0.0, g[0]), g[0]), Tensor()};
}

// ---- one_hot ----
InferResult infer_one_hot(const Tensors& in, const OpAttrs& a) {
  const Tensor& index = in[0];
  check_index("one_hot", index);
  const int64_t classes = a.ints.at(0);
  MG_CHECK(classes > 0, Error, "one_hot: num_classes must be positive (or -1 to infer it), got ", classes);
  Shape shape = index.shape();
  shape.push_back(classes);
  return {{{shape, DType::I64}}, index.dtype()};
}

// Largest value of an integer tensor (on the CPU; a device tensor is copied first).
int64_t max_index_value(const Tensor& index) {
  const Tensor host = contiguous(index.device().is_cpu() ? index : to(index, Device::cpu()));
  int64_t best = std::numeric_limits<int64_t>::min();
  visit_dtype(host.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, int32_t>) {
      const T* p = static_cast<const T*>(host.data_ptr());
      for (int64_t i = 0; i < host.numel(); ++i) best = std::max<int64_t>(best, int64_t(p[i]));
    }
  });
  return best;
}

Tensor cat_impl(const Tensors& xs, int64_t dim) {
  bool any_grad = false;
  for (const Tensor& x : xs) any_grad = any_grad || x.requires_grad();
  if (xs.size() <= kMaxCatGradInputs || !any_grad || !GradMode::is_enabled()) {
    return dispatch1(OpId::cat, xs, {.dim = dim});
  }
  Tensors groups;
  for (std::size_t b = 0; b < xs.size(); b += kMaxCatGradInputs) {
    const std::size_t e = std::min(xs.size(), b + kMaxCatGradInputs);
    groups.push_back(dispatch1(OpId::cat, Tensors(xs.begin() + std::ptrdiff_t(b), xs.begin() + std::ptrdiff_t(e)),
                               {.dim = dim}));
  }
  return cat_impl(groups, dim);
}

}  // namespace

void register_indexing_rules() {
  set_op_rule(OpId::cat, {.infer = infer_cat, .backward = cat_bw});
  set_op_rule(OpId::index_select, {.infer = infer_index_select, .backward = index_select_bw, .save = kSaveInput(1)});
  set_op_rule(OpId::gather, {.infer = infer_gather, .backward = gather_bw, .save = kSaveInput(1)});
  set_op_rule(OpId::scatter_add, {.infer = infer_scatter_add, .backward = scatter_add_bw, .save = kSaveInput(1)});
  set_op_rule(OpId::masked_fill, {.infer = infer_masked_fill, .backward = masked_fill_bw, .save = kSaveInput(1)});
  set_op_rule(OpId::one_hot, {.infer = infer_one_hot});
}

Tensor cat(const Tensors& xs, int64_t dim) {
  MG_CHECK(!xs.empty(), Error, "cat: expected a non-empty list of tensors");
  for (std::size_t i = 0; i < xs.size(); ++i) {
    MG_CHECK(xs[i].defined(), Error, "cat: tensor at position ", i, " is undefined");
  }
  DType t = xs[0].dtype();
  for (const Tensor& x : xs) t = promote_types(t, x.dtype());
  // PyTorch's legacy rule: a 1-D tensor of size 0 is skipped beside tensors of another rank
  // (torch.cat([x, torch.empty(0)]) is x). It still takes part in the dtype promotion.
  const auto legacy_empty = [](const Tensor& x) { return x.dim() == 1 && x.numel() == 0; };
  const auto ranked = std::find_if(xs.begin(), xs.end(), [&](const Tensor& x) { return !legacy_empty(x); });
  const Tensor& first = ranked == xs.end() ? xs[0] : *ranked;
  MG_CHECK(first.dim() > 0, ShapeError, "cat: a 0-d tensor cannot be concatenated; got ", describe(first),
           " at position ", ranked - xs.begin(), "\n  hint: use mg::stack to join 0-d tensors into a 1-D tensor");
  Tensors in;
  in.reserve(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    if (first.dim() != 1 && legacy_empty(x)) continue;
    // Checked here, where positions are the caller's (the infer rule sees the list without skips).
    MG_CHECK(x.dim() > 0, ShapeError, "cat: a 0-d tensor cannot be concatenated; got ", describe(x), " at position ", i,
             "\n  hint: use mg::stack to join 0-d tensors into a 1-D tensor");
    MG_CHECK(x.dim() == first.dim(), ShapeError, "cat: expected tensors with the same number of dims; got ",
             describe(first), " at position ", ranked - xs.begin(), " and ", describe(x), " at position ", i);
    in.push_back(x.dtype() == t ? x : to(x, t));
  }
  return cat_impl(in, wrap_dim(dim, first.dim(), "cat"));
}

Tensor stack(const Tensors& xs, int64_t dim) {
  MG_CHECK(!xs.empty(), Error, "stack: expected a non-empty list of tensors");
  for (std::size_t i = 0; i < xs.size(); ++i) {
    MG_CHECK(xs[i].defined(), Error, "stack: tensor at position ", i, " is undefined");
    MG_CHECK(xs[i].shape() == xs[0].shape(), ShapeError, "stack: expected tensors of one shape; got ",
             describe(xs[0]), " at position 0 and ", describe(xs[i]), " at position ", i);
  }
  const int64_t d = wrap_dim(dim, xs[0].dim() + 1, "stack");
  Tensors parts;
  parts.reserve(xs.size());
  for (const Tensor& x : xs) parts.push_back(unsqueeze(x, d));
  return cat(parts, d);
}

Tensors split(const Tensor& x, int64_t split_size, int64_t dim) {
  MG_CHECK(x.defined(), Error, "split: undefined tensor argument");
  MG_CHECK(x.dim() > 0, ShapeError, "split: cannot split a 0-d tensor, got ", describe(x));
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  const int64_t size = x.shape()[d];
  MG_CHECK(split_size > 0 || (split_size == 0 && size == 0), Error,
           "split: split_size must be positive, got ", split_size, " for ", describe(x));
  if (size == 0) return {narrow(x, d, 0, 0)};
  Tensors parts;
  for (int64_t start = 0; start < size; start += split_size) {
    parts.push_back(narrow(x, d, start, std::min(split_size, size - start)));
  }
  return parts;
}

Tensors split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  MG_CHECK(x.defined(), Error, "split: undefined tensor argument");
  MG_CHECK(x.dim() > 0, ShapeError, "split: cannot split a 0-d tensor, got ", describe(x));
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    MG_CHECK(s >= 0, Error, "split: split sizes must be non-negative, got ", sizes);
    // Each size is >= 0, so a sum past the dim's size can stop growing there (no overflow).
    total = s > x.shape()[d] - total ? x.shape()[d] + 1 : total + s;
  }
  MG_CHECK(total <= x.shape()[d], ShapeError, "split: split sizes ", sizes, " sum to more than the size ",
           x.shape()[d], " of dim ", d, " in ", describe(x));
  MG_CHECK(total == x.shape()[d], ShapeError, "split: split sizes ", sizes, " sum to ", total, " but dim ", d,
           " has size ", x.shape()[d], " in ", describe(x));
  Tensors parts;
  parts.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t s : sizes) {
    parts.push_back(narrow(x, d, start, s));
    start += s;
  }
  return parts;
}

Tensors chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  MG_CHECK(x.defined(), Error, "chunk: undefined tensor argument");
  MG_CHECK(chunks > 0, Error, "chunk: number of chunks must be positive, got ", chunks);
  MG_CHECK(x.dim() > 0, ShapeError, "chunk: cannot chunk a 0-d tensor, got ", describe(x));
  const int64_t d = wrap_dim(dim, x.dim(), "chunk");
  // PyTorch's rule: pieces of ceil(size / chunks), so fewer than `chunks` pieces may come back;
  // an empty dim gives `chunks` empty pieces (a loop over an empty batch's chunks still runs).
  const int64_t size = x.shape()[d];
  if (size == 0) {
    Tensors pieces;
    for (int64_t i = 0; i < chunks; ++i) pieces.push_back(x.narrow(d, 0, 0));  // distinct views
    return pieces;
  }
  return split(x, 1 + (size - 1) / chunks, d);  // ceil(size / chunks) without overflow
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  MG_CHECK(x.defined() && index.defined(), Error, "index_select: undefined tensor argument");
  if (x.dim() == 0) {
    // As PyTorch: a 0-d input is one element along dim 0 (or -1), selected by a one-element index.
    (void)wrap_dim(dim, 1, "index_select");
    MG_CHECK(index.numel() == 1 && index.dim() <= 1, ShapeError,
             "index_select: the index into a 0-d input must have one element, got ", describe(index));
    return reshape(index_select(reshape(x, {1}), 0, reshape(index, {1})), {});
  }
  return dispatch1(OpId::index_select, {x, index}, {.dim = wrap_dim(dim, x.dim(), "index_select")});
}

// PyTorch treats a 0-d operand of gather and scatter_add as 1-D with one element, so 0-d and 1-D
// operands mix; the result keeps the 0-d shape (gather: the index's, scatter_add: self's).
Tensor as_1d(const Tensor& t) { return t.dim() == 0 ? reshape(t, {1}) : t; }
bool mixes_0d_and_1d(std::initializer_list<const Tensor*> ts) {
  bool any0 = false, any1 = false;
  for (const Tensor* t : ts) {
    any0 = any0 || t->dim() == 0;
    any1 = any1 || t->dim() == 1;
    if (t->dim() > 1) return false;
  }
  return any0 && any1;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  MG_CHECK(x.defined() && index.defined(), Error, "gather: undefined tensor argument");
  if (mixes_0d_and_1d({&x, &index})) {
    (void)wrap_dim(dim, 1, "gather");
    return reshape(gather(as_1d(x), 0, as_1d(index)), index.shape());
  }
  return dispatch1(OpId::gather, {x, index}, {.dim = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "gather")});
}

Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  MG_CHECK(self.defined() && index.defined() && src.defined(), Error, "scatter_add: undefined tensor argument");
  if (mixes_0d_and_1d({&self, &index, &src})) {
    (void)wrap_dim(dim, 1, "scatter_add");
    return reshape(scatter_add(as_1d(self), 0, as_1d(index), as_1d(src)), self.shape());
  }
  return dispatch1(OpId::scatter_add, {self, index, src}, {.dim = wrap_dim(dim, std::max<int64_t>(self.dim(), 1), "scatter_add")});
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  MG_CHECK(x.defined() && mask.defined(), Error, "masked_fill: undefined tensor argument");
  // Out of place, x and mask broadcast together (PyTorch's masked_fill); the kernel fills an
  // output of x's shape, so x is expanded (a view) when the mask is the larger one. In place
  // (masked_fill_), the mask must broadcast to x.
  if (mask.dim() > x.dim() || !std::equal(mask.shape().rbegin(), mask.shape().rend(), x.shape().rbegin(),
                                          [](int64_t m, int64_t s) { return m == s || m == 1; })) {
    const Shape &a = x.shape(), &b = mask.shape();
    const std::size_t n = std::max(a.size(), b.size());
    Shape both(n);
    bool ok = true;
    for (std::size_t i = 0; i < n && ok; ++i) {
      const int64_t sa = i < n - a.size() ? 1 : a[i - (n - a.size())];
      const int64_t sb = i < n - b.size() ? 1 : b[i - (n - b.size())];
      ok = sa == sb || sa == 1 || sb == 1;
      both[i] = sa == 1 ? sb : sa;
    }
    if (ok) return dispatch1(OpId::masked_fill, {expand(x, both), mask}, {.alpha = value});
  }
  return dispatch1(OpId::masked_fill, {x, mask}, {.alpha = value});
}

Tensor one_hot(const Tensor& index, int64_t num_classes) {
  MG_CHECK(index.defined(), Error, "one_hot: undefined tensor argument");
  check_index("one_hot", index);
  if (num_classes == -1) {
    MG_CHECK(index.numel() > 0, Error, "one_hot: cannot infer num_classes from an empty index ",
             describe(index), "\n  hint: pass num_classes explicitly");
    const int64_t max_value = max_index_value(index);
    MG_CHECK(max_value >= 0, IndexError, "one_hot: class values must be non-negative, got a largest value of ",
             max_value, " in ", describe(index));
    MG_CHECK(max_value < std::numeric_limits<int64_t>::max(), IndexError, "one_hot: the largest class value ",
             max_value, " leaves no room for num_classes = value + 1");
    num_classes = max_value + 1;
  }
  return dispatch1(OpId::one_hot, {index}, {.ints = {num_classes}});
}

}  // namespace mg
