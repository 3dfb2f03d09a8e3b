#include "mixgrad/autograd/saved_tensor.h"

#include "mixgrad/autograd/grad_mode.h"

namespace mg::autograd {
namespace {

// A view of t's memory with t's geometry and none of its autograd fields.
Tensor history_free_alias(const Tensor& t) {
  const TensorImpl* src = t.impl();
  return make_tensor(src->storage, src->shape, src->strides, src->offset, src->dtype);
}

std::string describe_meta(const Shape& shape, DType dtype, Device device) {
  return str_cat(shape, " ", dtype_name(dtype), " ", device.str());
}

std::string version_error(const std::string& node_name, const std::string& what, uint64_t saved, uint64_t now) {
  return node_name + ": a tensor saved for backward (" + what + ") was modified by an in-place operation (version " +
         std::to_string(saved) + " -> " + std::to_string(now) + ")" +
         "\n  hint: use the out-of-place op (e.g. add instead of add_) or clone() before modifying";
}

}  // namespace

SavedTensor::SavedTensor(const Tensor& t, bool is_output) : is_output_(is_output) {
  if (!t.defined()) return;
  saved_ = true;
  saved_version_ = t.version();
  requires_grad_ = t.requires_grad();
  TensorImpl* src = t.impl();
  // A leaf that requires grad is saved as itself even under hooks: it is alive anyway, and the
  // gradient of its unpacked self must reach it.
  if (const auto& hooks = current_saved_tensor_hooks(); hooks && !(t.is_leaf() && t.requires_grad())) {
    hooks_ = hooks;
    shape_ = t.shape();
    dtype_ = t.dtype();
    device_ = t.device();
    storage_ = src->storage;
    output_nr_ = src->autograd.output_nr;
    if (is_output) {
      grad_fn_ = src->autograd.grad_fn;
    } else {
      input_grad_fn_ = src->autograd.grad_fn;
    }
    NoSavedTensorHooks no_hooks;
    NoGradGuard no_grad;
    packed_ = hooks_->pack(history_free_alias(t));
    return;
  }
  if (is_output) {
    // Alias without autograd fields; grad_fn is re-attached on unpack.
    data_ = history_free_alias(t);
    grad_fn_ = src->autograd.grad_fn;
    output_nr_ = src->autograd.output_nr;
  } else if (src->view_base && !(t.is_leaf() && t.requires_grad())) {
    // A view holds its base, and the base may later get history that leads back to the node
    // saving this view (an in-place write into the base: a graph whose backward the version check
    // refuses, but which would then never be freed). An alias with the view's data and history and
    // no base breaks that cycle; a leaf that requires grad is kept itself (its gradient goes to it).
    data_ = history_free_alias(t);
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
  if (hooks_) return unpack_hooked(node_name);
  if (!data_.defined()) return data_;
  MG_CHECK(data_.version() == saved_version_, AutogradError,
           version_error(node_name, describe(data_), saved_version_, data_.version()));
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

Tensor SavedTensor::unpack_hooked(const std::string& node_name) const {
  // The tensor that was packed, while it lives, must not have been written in place since.
  if (const std::shared_ptr<Storage> storage = storage_.lock()) {
    MG_CHECK(storage->version() == saved_version_, AutogradError,
             version_error(node_name, describe_meta(shape_, dtype_, device_), saved_version_, storage->version()));
  }
  Tensor t;
  {
    NoSavedTensorHooks no_hooks;
    NoGradGuard no_grad;
    t = hooks_->unpack(packed_);
  }
  MG_CHECK(t.defined() && t.shape() == shape_ && t.dtype() == dtype_ && t.device() == device_, AutogradError,
           node_name, ": the saved-tensor unpack hook returned ", t.defined() ? describe(t) : "an undefined tensor",
           " for a saved ", describe_meta(shape_, dtype_, device_),
           "\n  hint: unpack must give back a tensor with the saved one's shape, dtype and device");
  Tensor out = history_free_alias(t);
  out.impl()->autograd.requires_grad = requires_grad_;
  std::shared_ptr<Node> fn = is_output_ ? grad_fn_.lock() : input_grad_fn_;
  if (fn) {
    out.impl()->autograd.grad_fn = std::move(fn);
    out.impl()->autograd.output_nr = output_nr_;
  }
  return out;
}

void SavedTensor::release() {
  data_ = Tensor();
  grad_fn_.reset();
  input_grad_fn_.reset();
  packed_.reset();
  hooks_.reset();
  released_ = true;
}

}  // namespace mg::autograd
