// Tensor's LibTorch-style member functions: thin forwards to the free functions of ops/ops.h and
// to dispatch_inplace for the in-place ones.
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/ops.h"

namespace mg {

Tensor Tensor::detach() const {
  TensorImpl* s = checked();
  Tensor out = make_tensor(s->storage, s->shape, s->strides, s->offset, s->dtype);
  out.impl()->is_view = true;
  out.impl()->view_version = version();
  return out;
}
Tensor Tensor::view(const Shape& shape) const { return mg::view(*this, shape); }
Tensor Tensor::reshape(const Shape& shape) const { return mg::reshape(*this, shape); }
Tensor Tensor::permute(const Shape& dims) const { return mg::permute(*this, dims); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return mg::transpose(*this, d0, d1); }
Tensor Tensor::t() const {
  MG_CHECK(dim() <= 2, ShapeError, "t: expected a tensor with at most 2 dims, got ", describe(*this));
  return dim() < 2 ? *this : mg::transpose(*this, 0, 1);
}
Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  return mg::narrow(*this, d, start, length);
}
Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  return mg::slice(*this, d, start, end, step);
}
Tensor Tensor::select(int64_t d, int64_t index) const { return mg::select(*this, d, index); }
Tensor Tensor::expand(const Shape& shape) const { return mg::expand(*this, shape); }
Tensor Tensor::squeeze(int64_t d) const { return mg::squeeze(*this, d); }
Tensor Tensor::squeeze() const { return mg::squeeze(*this); }
Tensor Tensor::unsqueeze(int64_t d) const { return mg::unsqueeze(*this, d); }
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  return mg::flatten(*this, start_dim, end_dim);
}
Tensor Tensor::contiguous() const { return mg::contiguous(*this); }
Tensor Tensor::clone() const { return mg::clone(*this); }
Tensor Tensor::to(DType t) const { return mg::to(*this, t); }
Tensor Tensor::to(Device d) const { return mg::to(*this, d); }

Tensor& Tensor::copy_(const Tensor& src) {
  dispatch_inplace(OpId::copy, *this, {src});
  return *this;
}
Tensor& Tensor::add_(const Tensor& other, double alpha) {
  dispatch_inplace(OpId::add, *this, {other}, {.alpha = alpha});
  return *this;
}
Tensor& Tensor::add_(double value) { return add_(scalar_like(value, *this)); }
Tensor& Tensor::sub_(const Tensor& other, double alpha) {
  dispatch_inplace(OpId::sub, *this, {other}, {.alpha = alpha});
  return *this;
}
Tensor& Tensor::mul_(const Tensor& other) {
  dispatch_inplace(OpId::mul, *this, {other});
  return *this;
}
Tensor& Tensor::mul_(double value) { return mul_(scalar_like(value, *this)); }
Tensor& Tensor::div_(const Tensor& other) {
  dispatch_inplace(OpId::div, *this, {other});
  return *this;
}
Tensor& Tensor::zero_() { return fill_(0.0); }
Tensor& Tensor::fill_(double value) {
  dispatch_inplace(OpId::fill, *this, {}, {.alpha = value});
  return *this;
}
Tensor Tensor::sum() const { return mg::sum(*this); }
Tensor Tensor::mean() const { return mg::mean(*this); }

}  // namespace mg
