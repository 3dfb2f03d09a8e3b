#include "mixgrad/ops/inplace_view.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include "mixgrad/autograd/node.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/ops/custom_function.h"
#include "mixgrad/ops/ops.h"

namespace mg {
namespace {

// Where a view's elements lie among its base's, in the base's storage order: geometry only, so a
// graph that fills a buffer row by row keeps O(1) per write; index() and mask() are made when the
// backward runs.
struct ViewPositions {
  Shape base_shape;
  std::vector<int64_t> order;    // base dims, outermost in memory first
  std::vector<int64_t> inverse;  // permute(x, inverse) undoes permute(x, order)
  Shape stored_shape;            // base_shape permuted by `order`: row-major in storage order
  Shape view_shape;
  Strides view_strides;
  int64_t view_start = 0;  // storage-order position of the view's first element
  Device device;

  // i64 [numel(view)]: view element (row-major) -> position in storage order.
  Tensor index() const;
  // bool [numel(base)]: the positions the view covers.
  Tensor mask() const;

 private:
  std::vector<int64_t> positions() const;
};

std::vector<int64_t> ViewPositions::positions() const {
  const int64_t n = shape_numel(view_shape), base_n = shape_numel(base_shape);
  std::vector<int64_t> out(std::size_t(n), 0);
  std::vector<int64_t> at(view_shape.size(), 0);
  int64_t pos = view_start;
  for (int64_t i = 0; i < n; ++i) {
    MG_ASSERT(pos >= 0 && pos < base_n, "in-place view: element ", i, " of the view lies outside its base");
    out[std::size_t(i)] = pos;
    for (std::size_t d = at.size(); d-- > 0;) {  // odometer over the view's dims
      pos += view_strides[d];
      if (++at[d] < view_shape[d]) break;
      pos -= view_strides[d] * view_shape[d];
      at[d] = 0;
    }
  }
  return out;
}

Tensor ViewPositions::index() const {
  return from_vector(positions(), {shape_numel(view_shape)}, {.device = device});
}

Tensor ViewPositions::mask() const {
  std::vector<uint8_t> m(std::size_t(shape_numel(base_shape)), 0);
  for (const int64_t pos : positions()) m[std::size_t(pos)] = 1;
  return from_buffer(m.data(), {int64_t(m.size())}, {.dtype = DType::Bool, .device = device});
}

// The base's dims ordered outermost-first in memory, or nothing when its elements do not fill a
// dense block (gaps or overlap). Size-1 dims take any stride.
std::optional<std::vector<int64_t>> dense_order(const TensorImpl& t) {
  std::vector<int64_t> order(t.shape.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  if (shape_numel(t.shape) == 0) return order;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return t.strides[a] > t.strides[b]; });
  int64_t expected = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (t.shape[*it] == 1) continue;
    if (t.strides[*it] != expected) return std::nullopt;
    expected *= t.shape[*it];
  }
  return order;
}

// The base's elements in storage order as one 1-D tensor (differentiable).
Tensor to_storage_order(const Tensor& x, const ViewPositions& p) {
  return reshape(permute(x, p.order), {shape_numel(p.base_shape)});
}
// The inverse: a 1-D tensor in storage order back to the base's shape (differentiable).
Tensor from_storage_order(const Tensor& flat, const ViewPositions& p) {
  return permute(reshape(flat, p.stored_shape), p.inverse);
}

std::shared_ptr<const ViewPositions> view_positions(const TensorImpl& view, const TensorImpl& base) {
  auto p = std::make_shared<ViewPositions>();
  p->base_shape = base.shape;
  p->order = *dense_order(base);  // checked by check_view_rebase
  p->inverse.resize(p->order.size());
  for (std::size_t k = 0; k < p->order.size(); ++k) {
    p->inverse[std::size_t(p->order[k])] = int64_t(k);
    p->stored_shape.push_back(base.shape[std::size_t(p->order[k])]);
  }
  p->view_shape = view.shape;
  p->view_strides = view.strides;
  // The storage-order position of the base element at storage offset o is o - base.offset (a
  // dense base starts its storage-order run there).
  p->view_start = view.offset - base.offset;
  p->device = base.storage->device();
  return p;
}

// Backward of B_new (the base after the write): the gradient of B_old is B_new's with the view's
// positions zeroed; the op's result gets B_new's gradient at those positions.
class CopySlices final : public autograd::Node {
 public:
  CopySlices(std::shared_ptr<const ViewPositions> p, bool base_needs_grad)
      : Node(1), p_(std::move(p)), base_needs_grad_(base_needs_grad) {}
  Tensors apply(Tensors&& grads) override {
    const Tensor& g = grads[0];
    if (!g.defined()) return {Tensor(), Tensor()};
    const Tensor flat = to_storage_order(g, *p_);
    Tensor g_result = reshape(index_select(flat, 0, p_->index()), p_->view_shape);
    Tensor g_base = base_needs_grad_ ? from_storage_order(masked_fill(flat, p_->mask(), 0.0), *p_) : Tensor();
    return {g_base, g_result};
  }
  std::string name() const override { return "CopySlices"; }

 private:
  std::shared_ptr<const ViewPositions> p_;
  bool base_needs_grad_;
};

// Backward of V_new = V's elements of B_new: the view's gradient placed at its positions in a
// zero gradient of the base.
class ViewOfBase final : public autograd::Node {
 public:
  explicit ViewOfBase(std::shared_ptr<const ViewPositions> p) : Node(1), p_(std::move(p)) {}
  Tensors apply(Tensors&& grads) override {
    const Tensor& g = grads[0];
    if (!g.defined()) return {Tensor()};
    const Tensor zero = zeros({shape_numel(p_->base_shape)}, {.dtype = g.dtype(), .device = g.device()});
    return {from_storage_order(scatter_add(zero, 0, p_->index(), reshape(g, {shape_numel(p_->view_shape)})), *p_)};
  }
  std::string name() const override { return "ViewOfBase"; }

 private:
  std::shared_ptr<const ViewPositions> p_;
};

// Gives `t` the history (node, 0), moving a retained gradient along (PyTorch's rule: a tensor that
// retains its gradient retains the new value's), and marks its history current.
void set_history_of(const Tensor& t, const std::shared_ptr<autograd::Node>& node) {
  TensorImpl* impl = t.impl();
  AutogradMeta& a = impl->autograd;
  if (a.retains_grad && a.grad_fn) a.grad_fn->clear_retained(a.output_nr);
  a.grad_fn = node;
  a.output_nr = 0;
  a.requires_grad = true;
  if (a.retains_grad) node->set_retained(0, t.impl_ptr());
  impl->view_version = t.version();
}

// The view's history "its elements of the base's current value" (after rebase_view_history set
// the base's, or for a stale view).
void set_view_of_base_history(const Tensor& view, const std::shared_ptr<const ViewPositions>& p) {
  auto node = std::make_shared<ViewOfBase>(p);
  node->next_edges = {autograd::gradient_edge(Tensor(view.impl()->view_base))};
  set_history_of(view, node);
}

}  // namespace

bool refresh_view_history(const Tensor& view) {
  // A custom function's output aliasing its input, or a view of one, whose memory was written
  // since: "the base's current value" would bypass the function's backward (PyTorch refuses too).
  if (is_custom_function_alias(view)) return false;
  TensorImpl* v = view.impl();
  if (!v->view_base || v->view_base->storage != v->storage || !dense_order(*v->view_base)) return false;
  if (!v->view_base->autograd.requires_grad) return false;
  set_view_of_base_history(view, view_positions(*v, *v->view_base));
  return true;
}

void check_recorded_input_view(const char* op, std::size_t i, const Tensor& t) {
  if (!t.defined()) return;
  if (t.requires_grad()) {
    MG_CHECK(autograd::make_view_current(t), AutogradError, op, ": input ", i, " (", describe(t),
             ") is a view whose base was modified in place after the view was taken",
             "\n  hint: take the view again after the in-place operation");
    return;
  }
  MG_CHECK(!t.impl()->view_base || !t.impl()->view_base->autograd.grad_fn || t.version() == t.impl()->view_version,
           AutogradError, op, ": input ", i, " (", describe(t), ") is a view that does not require grad, but its base "
           "was modified in place since the view was taken and now has gradient history",
           "\n  hint: take the view again after the in-place operation");
}

void check_view_rebase(const Tensor& self, const char* op) {
  const TensorImpl* s = self.impl();
  MG_ASSERT(s->view_base, "check_view_rebase: ", describe(self), " is not a differentiable view");
  const Tensor base(s->view_base);
  MG_CHECK(!(base.is_leaf() && base.requires_grad()), AutogradError, op,
           "_: a view of a leaf tensor that requires grad (the view ", describe(self), " of ", describe(base),
           ") cannot be modified in place while grad mode is on",
           "\n  hint: modify the leaf under a NoGradGuard, or clone() it first and modify the clone");
  MG_CHECK(s->view_base->storage == s->storage, AutogradError, op, "_: the view ", describe(self),
           " no longer shares memory with its base (the base was given other data)",
           "\n  hint: take the view again");
  MG_CHECK(dense_order(*s->view_base).has_value(), NotImplementedError, op, "_: the view's base ",
           describe(base), " does not fill its memory densely (strides ", s->view_base->strides,
           "), so autograd cannot place the view's gradient in it",
           "\n  hint: take the view of base.contiguous() instead");
}

void rebase_view_history(const Tensor& self, const Tensor& result) {
  TensorImpl* s = self.impl();
  const Tensor base(s->view_base);
  const auto p = view_positions(*s, *s->view_base);
  auto copy_slices = std::make_shared<CopySlices>(p, base.requires_grad());
  copy_slices->next_edges = {autograd::gradient_edge(base), autograd::gradient_edge(result)};
  // Both histories describe their values again.
  set_history_of(base, copy_slices);
  set_view_of_base_history(self, p);
}

}  // namespace mg
