#include "mixgrad/autograd/saved_tensor.h"

namespace mg::autograd {

SavedTensor::SavedTensor(const Tensor& t, bool is_output) : is_output_(is_output) {
  if (!t.defined()) return;
  saved_ = true;
  saved_version_ = t.version();
  requires_grad_ = t.requires_grad();
  if (is_output) {
    // Alias without autograd fields; grad_fn is re-attached on unpack.
    TensorImpl* src = t.impl();
    data_ = make_tensor(src->storage, src->shape, src->strides, src->offset, src->dtype);
    grad_fn_ = src->autograd.grad_fn;
    output_nr_ = src->autograd.output_nr;
  } else if (t.impl()->view_base && !(t.is_leaf() && t.requires_grad())) {
    // A view holds its base, and the base may later get history that leads back to the node
    // saving this view (an in-place write into the base: a graph whose backward the version check
    // refuses, but which would then never be freed). An alias with the view's data and history and
    // no base breaks that cycle; a leaf that requires grad is kept itself (its gradient goes to it).
    TensorImpl* src = t.impl();
    data_ = make_tensor(src->storage, src->shape, src->strides, src->offset, src->dtype);
    data_.impl()->autograd.grad_fn = src->autograd.grad_fn;
    data_.impl()->autograd.output_nr = src->autograd.output_nr;
    data_.impl()->autograd.requires_grad = src->autograd.requires_grad;
  } else {
    data_ = t;
  }
}

Tensor SavedTensor::unpack(const std::string& node_name) const {
  MG_CHECK(!released_, AutogradError, node_name,
           ": tried to backward through the graph a second time, but the tensors saved for "
           "backward were already freed",
           "\n  hint: pass retain_graph=true to the first backward() or grad() call");
  if (!data_.defined()) return data_;
  MG_CHECK(data_.version() == saved_version_, AutogradError, node_name,
           ": a tensor saved for backward (", describe(data_),
           ") was modified by an in-place operation (version ", saved_version_, " -> ",
           data_.version(), ")",
           "\n  hint: use the out-of-place op (e.g. add instead of add_) or clone() before modifying");
  if (!is_output_) return data_;
  TensorImpl* src = data_.impl();
  Tensor out = make_tensor(src->storage, src->shape, src->strides, src->offset, src->dtype);
  out.impl()->autograd.requires_grad = requires_grad_;
  if (auto fn = grad_fn_.lock()) {
    out.impl()->autograd.grad_fn = std::move(fn);
    out.impl()->autograd.output_nr = output_nr_;
  }
  return out;
}

void SavedTensor::release() {
  data_ = Tensor();
  grad_fn_.reset();
  released_ = true;
}

}  // namespace mg::autograd
