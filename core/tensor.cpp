#include "mixgrad/core/tensor.h"

#include <cmath>

#include <limits>

#include "mixgrad/core/storage_bytes.h"
#include "mixgrad/core/visit_dtype.h"

// Every program that uses a tensor links the processor check of core/isa_guard.cpp (a file of
// the static library is linked only when something refers to it).
extern "C" const char mg_isa_guard_anchor;
[[maybe_unused]] __attribute__((used)) static const char* const kIsaGuard = &mg_isa_guard_anchor;

namespace mg {

// (A 0-d tensor has no dim to ask about: wrap_dim would accept 0 and -1 for it, as for ops.)
int64_t Tensor::size(int64_t d) const {
  MG_CHECK(dim() > 0, IndexError, "size(", d, "): the tensor ", describe(*this), " has no dimensions");
  return shape()[wrap_dim(d, dim(), "size")];
}
int64_t Tensor::stride(int64_t d) const {
  MG_CHECK(dim() > 0, IndexError, "stride(", d, "): the tensor ", describe(*this), " has no dimensions");
  return strides()[wrap_dim(d, dim(), "stride")];
}

void Tensor::throw_item_range(double v, const char* type) const {
  MG_THROW(Error, "item<", type, ">: the value ", v, " of ", describe(*this), " cannot be converted to ", type,
           " without overflow");
}

bool Tensor::is_contiguous() const {
  const Shape& sh = shape();
  const Strides& st = strides();
  if (numel() == 0) return true;  // no elements: any strides describe the same (empty) layout
  int64_t expected = 1;
  for (std::size_t i = sh.size(); i-- > 0;) {
    if (sh[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= sh[i];
  }
  return true;
}

bool Tensor::is_contiguous(MemoryFormat f) const {
  MG_CHECK(f != MemoryFormat::Preserve, Error, "is_contiguous: MemoryFormat::Preserve is not a layout",
           "\n  hint: ask for Contiguous or ChannelsLast");
  return is_contiguous_as(shape(), strides(), f);
}

void* Tensor::data_ptr() const {
  return static_cast<char*>(storage().data()) + offset() * int64_t(element_size());
}

Tensor& Tensor::requires_grad_(bool on) {
  MG_CHECK(!on || is_floating(dtype()), DTypeError,
           "requires_grad_: only floating tensors can require grad; got ", describe(*this));
  MG_CHECK(on || is_leaf(), AutogradError,
           "requires_grad_: cannot set requires_grad=false on a non-leaf tensor",
           "\n  hint: use detach() to get a tensor without history");
  impl_->autograd.requires_grad = on;
  return *this;
}

void Tensor::set_data(const Tensor& src) const {
  MG_CHECK(is_leaf(), AutogradError, "set_data: only a leaf tensor's data can be replaced; got ",
           describe(*this), " with history");
  MG_CHECK(src.defined(), Error, "set_data: source tensor is undefined");
  MG_CHECK(!requires_grad() || is_floating(src.dtype()), DTypeError,
           "set_data: a tensor that requires grad needs floating data, got ", describe(src));
  TensorImpl* d = checked();
  const TensorImpl* s = src.impl();
  d->storage = s->storage;
  d->shape = s->shape;
  d->strides = s->strides;
  d->offset = s->offset;
  d->dtype = s->dtype;
  d->is_view = false;
  d->view_base.reset();
  d->autograd.grad.reset();
}

Tensor Tensor::grad() const {
  const auto& g = checked()->autograd.grad;
  return g ? Tensor(g) : Tensor();
}

void Tensor::set_grad(const Tensor& g) const {
  if (g.defined()) {
    MG_CHECK(g.shape() == shape() && g.dtype() == dtype() && g.device() == device(), Error,
             "set_grad: gradient ", describe(g), " does not match tensor ", describe(*this));
    // Backward adds into .grad in place: a gradient in the tensor's own memory would overwrite
    // the tensor (PyTorch: "can't assign Variable as its own grad").
    MG_CHECK(!g.is_same(*this) && (numel() == 0 || g.storage().data() != storage().data()), Error,
             "set_grad: the gradient shares the tensor's own memory (", describe(*this),
             "); backward would write the gradient into the tensor\n  hint: pass a copy (clone())");
  }
  checked()->autograd.grad = g.impl_ptr();
}

double Tensor::item_double() const {
  MG_CHECK(numel() == 1, ShapeError, "item: expected a tensor with one element, got ",
           describe(*this));
  alignas(8) unsigned char buf[8];
  copy_bytes(buf, Device::cpu(), data_ptr(), device(), element_size());
  return visit_dtype(dtype(), [&]<typename T>() {
    T v;
    std::memcpy(&v, buf, sizeof(T));
    return static_cast<double>(static_cast<opmath_t<T>>(v));
  });
}

int64_t Tensor::item_int64() const {
  MG_CHECK(numel() == 1, ShapeError, "item: expected a tensor with one element, got ", describe(*this));
  MG_CHECK(!is_floating(dtype()), DTypeError, "item_int64: expected an integer or bool tensor, got ", describe(*this));
  alignas(8) unsigned char buf[8];
  copy_bytes(buf, Device::cpu(), data_ptr(), device(), element_size());
  return visit_dtype(dtype(), [&]<typename T>() -> int64_t {
    if constexpr (std::is_integral_v<T> || std::is_same_v<T, bool>) {
      T v;
      std::memcpy(&v, buf, sizeof(T));
      return static_cast<int64_t>(v);
    } else {
      return 0;  // unreachable: floating dtypes are refused above
    }
  });
}

Tensor make_tensor(std::shared_ptr<Storage> storage, Shape shape, Strides strides, int64_t offset,
                   DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor empty(const Shape& shape, TensorOptions options) {
  auto storage = std::make_shared<Storage>(checked_storage_bytes("empty", shape, options.dtype), options.device);
  MG_CHECK(options.memory_format != MemoryFormat::Preserve, Error,
           "empty: MemoryFormat::Preserve needs an input to preserve; got shape ", shape,
           "\n  hint: pass Contiguous or ChannelsLast");
  if (options.memory_format == MemoryFormat::ChannelsLast) check_channels_last_shape("empty", shape);
  Tensor t = make_tensor(std::move(storage), shape, memory_format_strides(shape, options.memory_format), 0,
                         options.dtype);
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}

std::string describe(const Tensor& t) {
  if (!t.defined()) return "(undefined tensor)";
  return str_cat(t.shape(), " ", dtype_name(t.dtype()), " ", t.device().str());
}

}  // namespace mg
