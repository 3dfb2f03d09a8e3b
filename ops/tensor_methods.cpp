// Tensor's LibTorch-style member functions: each a one-line forward to the free function of the
// same name (ops/ops.h, ops/loss.h) with `*this` as its first argument, and the in-place ones to
// dispatch_inplace with the same op and attributes the free function passes. No math lives here:
// a method and its free function are one dispatcher call (tests/ops/test_tensor_methods.cpp
// checks they agree bit for bit).
#include <cmath>

#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/loss.h"
#include "mixgrad/ops/ops.h"

namespace mg::detail {
void check_bool_subtraction(const Tensor& a, const Tensor& b);  // ops/elementwise.cpp
}  // namespace mg::detail

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
  // A vector or a scalar: a new view all the same (an identity permute), as PyTorch's.
  if (dim() < 2) return mg::permute(*this, dim() == 0 ? std::vector<int64_t>{} : std::vector<int64_t>{0});
  return mg::transpose(*this, 0, 1);
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
Tensor Tensor::contiguous(MemoryFormat f) const { return mg::contiguous(*this, f); }
// As contiguous(f), and a tensor dense in both formats (size-1 dims) whose strides suggest the
// other one is restrided too, as PyTorch's to(memory_format=...): [N, 1, H, W] gets the
// channels-last strides that make the ops downstream keep NHWC.
Tensor Tensor::to(MemoryFormat f) const {
  if (f == MemoryFormat::ChannelsLast) check_channels_last_shape("to", shape());
  if (f == MemoryFormat::Preserve) return *this;
  return is_contiguous(f) && suggest_memory_format() == f ? *this : mg::clone(*this, f);
}
Tensor Tensor::clone() const { return mg::clone(*this); }
Tensor Tensor::to(DType t) const { return mg::to(*this, t); }
Tensor Tensor::to(Device d) const { return mg::to(*this, d); }
Tensor Tensor::to(Device d, bool non_blocking) const { return mg::to(*this, d, non_blocking); }
Tensor Tensor::pin_memory() const { return mg::pin_memory(*this); }

Tensor& Tensor::copy_(const Tensor& src) {
  // From another device, as PyTorch's copy_: the source moves to this tensor's device first (a
  // checkpoint's CPU tensors loaded into CUDA state, say); every other op refuses mixed devices.
  if (defined() && src.defined() && src.device() != device()) {
    dispatch_inplace(OpId::copy, *this, {mg::to(src, device())});
    return *this;
  }
  dispatch_inplace(OpId::copy, *this, {src});
  return *this;
}
Tensor& Tensor::add_(const Tensor& other, double alpha) {
  dispatch_inplace(OpId::add, *this, {other}, {.alpha = alpha});
  return *this;
}
Tensor& Tensor::add_(double value) { return add_(scalar_like(value, *this)); }
Tensor& Tensor::sub_(const Tensor& other, double alpha) {
  detail::check_bool_subtraction(*this, other);
  dispatch_inplace(OpId::sub, *this, {other}, {.alpha = alpha});
  return *this;
}
Tensor& Tensor::mul_(const Tensor& other) {
  dispatch_inplace(OpId::mul, *this, {other});
  return *this;
}
// Floating: the scalar in opmath, as operator* (mul_scalar).
Tensor& Tensor::mul_(double value) {
  if (defined() && is_floating(dtype())) {
    dispatch_inplace(OpId::mul_scalar, *this, {}, {.alpha = value});
    return *this;
  }
  return mul_(scalar_like(value, *this));
}
Tensor& Tensor::div_(const Tensor& other) {
  dispatch_inplace(OpId::div, *this, {other});
  return *this;
}
Tensor& Tensor::zero_() { return fill_(0.0); }
Tensor& Tensor::fill_(double value) {
  dispatch_inplace(OpId::fill, *this, {}, {.alpha = value});
  return *this;
}
Tensor& Tensor::sub_(double value) { return sub_(scalar_like(value, *this)); }
Tensor& Tensor::div_(double value) {
  if (defined() && is_floating(dtype())) {
    dispatch_inplace(OpId::div_scalar, *this, {}, {.alpha = value});
    return *this;
  }
  return div_(scalar_like(value, *this));
}

// ---- arithmetic ----
Tensor Tensor::add(const Tensor& other, double alpha) const { return mg::add(*this, other, alpha); }
Tensor Tensor::add(double other) const { return *this + other; }
Tensor Tensor::sub(const Tensor& other, double alpha) const { return mg::sub(*this, other, alpha); }
Tensor Tensor::sub(double other) const { return *this - other; }
Tensor Tensor::mul(const Tensor& other) const { return mg::mul(*this, other); }
Tensor Tensor::mul(double other) const { return *this * other; }
Tensor Tensor::div(const Tensor& other) const { return mg::div(*this, other); }
Tensor Tensor::div(double other) const { return *this / other; }
Tensor Tensor::neg() const { return mg::neg(*this); }
Tensor Tensor::abs() const { return mg::abs(*this); }
Tensor Tensor::sign() const { return mg::sign(*this); }
Tensor Tensor::maximum(const Tensor& other) const { return mg::maximum(*this, other); }
Tensor Tensor::minimum(const Tensor& other) const { return mg::minimum(*this, other); }

// ---- unary math ----
Tensor Tensor::exp() const { return mg::exp(*this); }
Tensor Tensor::log() const { return mg::log(*this); }
Tensor Tensor::log1p() const { return mg::log1p(*this); }
Tensor Tensor::expm1() const { return mg::expm1(*this); }
Tensor Tensor::sqrt() const { return mg::sqrt(*this); }
Tensor Tensor::rsqrt() const { return mg::rsqrt(*this); }
Tensor Tensor::reciprocal() const { return mg::reciprocal(*this); }
Tensor Tensor::sin() const { return mg::sin(*this); }
Tensor Tensor::cos() const { return mg::cos(*this); }
Tensor Tensor::tanh() const { return mg::tanh(*this); }
Tensor Tensor::sigmoid() const { return mg::sigmoid(*this); }
Tensor Tensor::relu() const { return mg::relu(*this); }
Tensor Tensor::gelu() const { return mg::gelu(*this); }
Tensor Tensor::gelu(GeluApprox approximate) const { return mg::gelu(*this, approximate); }
Tensor Tensor::silu() const { return mg::silu(*this); }
Tensor Tensor::softplus(double beta, double threshold) const { return mg::softplus(*this, beta, threshold); }
Tensor Tensor::erf() const { return mg::erf(*this); }
Tensor Tensor::pow(double exponent) const { return mg::pow(*this, exponent); }
Tensor Tensor::pow(const Tensor& exponent) const { return mg::pow(*this, exponent); }
Tensor Tensor::clamp(double min, double max) const { return mg::clamp(*this, min, max); }
Tensor Tensor::clamp_min(double min) const { return mg::clamp_min(*this, min); }
Tensor Tensor::clamp_max(double max) const { return mg::clamp_max(*this, max); }

// ---- comparisons ----
Tensor Tensor::eq(const Tensor& other) const { return mg::eq(*this, other); }
Tensor Tensor::eq(double other) const { return mg::eq(*this, scalar_like(other, *this)); }
Tensor Tensor::ne(const Tensor& other) const { return mg::ne(*this, other); }
Tensor Tensor::ne(double other) const { return mg::ne(*this, scalar_like(other, *this)); }
Tensor Tensor::lt(const Tensor& other) const { return mg::lt(*this, other); }
Tensor Tensor::lt(double other) const { return mg::lt(*this, scalar_like(other, *this)); }
Tensor Tensor::le(const Tensor& other) const { return mg::le(*this, other); }
Tensor Tensor::le(double other) const { return mg::le(*this, scalar_like(other, *this)); }
Tensor Tensor::gt(const Tensor& other) const { return mg::gt(*this, other); }
Tensor Tensor::gt(double other) const { return mg::gt(*this, scalar_like(other, *this)); }
Tensor Tensor::ge(const Tensor& other) const { return mg::ge(*this, other); }
Tensor Tensor::ge(double other) const { return mg::ge(*this, scalar_like(other, *this)); }
Tensor Tensor::where(const Tensor& condition, const Tensor& other) const {
  return mg::where(condition, *this, other);
}

// ---- reductions ----
Tensor Tensor::sum(const std::vector<int64_t>& dims, bool keepdim) const { return mg::sum(*this, dims, keepdim); }
Tensor Tensor::mean(const std::vector<int64_t>& dims, bool keepdim) const { return mg::mean(*this, dims, keepdim); }
Tensor Tensor::prod(const std::vector<int64_t>& dims, bool keepdim) const { return mg::prod(*this, dims, keepdim); }
Tensor Tensor::amax(const std::vector<int64_t>& dims, bool keepdim) const { return mg::amax(*this, dims, keepdim); }
Tensor Tensor::amin(const std::vector<int64_t>& dims, bool keepdim) const { return mg::amin(*this, dims, keepdim); }
Tensor Tensor::max() const { return mg::max(*this); }
Tensor Tensor::min() const { return mg::min(*this); }
std::pair<Tensor, Tensor> Tensor::max(int64_t dim, bool keepdim) const { return mg::max(*this, dim, keepdim); }
std::pair<Tensor, Tensor> Tensor::min(int64_t dim, bool keepdim) const { return mg::min(*this, dim, keepdim); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return mg::argmax(*this, dim, keepdim); }
Tensor Tensor::argmin(int64_t dim, bool keepdim) const { return mg::argmin(*this, dim, keepdim); }
Tensor Tensor::var(const std::vector<int64_t>& dims, double correction, bool keepdim) const {
  return mg::var(*this, dims, correction, keepdim);
}
Tensor Tensor::std(const std::vector<int64_t>& dims, double correction, bool keepdim) const {
  return mg::std(*this, dims, correction, keepdim);
}
Tensor Tensor::norm(double p, const std::vector<int64_t>& dims, bool keepdim) const {
  return mg::norm(*this, p, dims, keepdim);
}
Tensor Tensor::logsumexp(const std::vector<int64_t>& dims, bool keepdim) const {
  return mg::logsumexp(*this, dims, keepdim);
}
Tensor Tensor::cumsum(int64_t dim) const { return mg::cumsum(*this, dim); }

// ---- linear algebra ----
Tensor Tensor::matmul(const Tensor& other) const { return mg::matmul(*this, other); }
Tensor Tensor::mm(const Tensor& other) const { return mg::mm(*this, other); }
Tensor Tensor::bmm(const Tensor& other) const { return mg::bmm(*this, other); }
Tensor Tensor::addmm(const Tensor& a, const Tensor& b, double beta, double alpha) const {
  return mg::addmm(*this, a, b, beta, alpha);
}
Tensor Tensor::baddbmm(const Tensor& a, const Tensor& b, double beta, double alpha) const {
  return mg::baddbmm(*this, a, b, beta, alpha);
}

// ---- softmax family ----
Tensor Tensor::softmax(int64_t dim) const { return mg::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return mg::log_softmax(*this, dim); }

// ---- indexing and splitting ----
Tensor Tensor::masked_fill(const Tensor& mask, double value) const { return mg::masked_fill(*this, mask, value); }
Tensor Tensor::index_select(int64_t dim, const Tensor& index) const { return mg::index_select(*this, dim, index); }
Tensor Tensor::gather(int64_t dim, const Tensor& index) const { return mg::gather(*this, dim, index); }
Tensor Tensor::scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const {
  return mg::scatter_add(*this, dim, index, src);
}
Tensors Tensor::split(int64_t split_size, int64_t dim) const { return mg::split(*this, split_size, dim); }
Tensors Tensor::split(const std::vector<int64_t>& sizes, int64_t dim) const { return mg::split(*this, sizes, dim); }
Tensors Tensor::chunk(int64_t chunks, int64_t dim) const { return mg::chunk(*this, chunks, dim); }

// ---- in-place unary math: the free function's op and attributes through dispatch_inplace ----
namespace {
Tensor& unary_(OpId op, Tensor& self, const OpAttrs& attrs = {}) {
  dispatch_inplace(op, self, {}, attrs);
  return self;
}
}  // namespace

Tensor& Tensor::neg_() { return unary_(OpId::neg, *this); }
Tensor& Tensor::abs_() { return unary_(OpId::abs, *this); }
Tensor& Tensor::sign_() { return unary_(OpId::sign, *this); }
Tensor& Tensor::exp_() { return unary_(OpId::exp, *this); }
Tensor& Tensor::log_() { return unary_(OpId::log, *this); }
Tensor& Tensor::log1p_() { return unary_(OpId::log1p, *this); }
Tensor& Tensor::expm1_() { return unary_(OpId::expm1, *this); }
Tensor& Tensor::sqrt_() { return unary_(OpId::sqrt, *this); }
Tensor& Tensor::rsqrt_() { return unary_(OpId::rsqrt, *this); }
Tensor& Tensor::reciprocal_() { return unary_(OpId::reciprocal, *this); }
Tensor& Tensor::sin_() { return unary_(OpId::sin, *this); }
Tensor& Tensor::cos_() { return unary_(OpId::cos, *this); }
Tensor& Tensor::tanh_() { return unary_(OpId::tanh, *this); }
Tensor& Tensor::sigmoid_() { return unary_(OpId::sigmoid, *this); }
Tensor& Tensor::relu_() { return unary_(OpId::relu, *this); }
Tensor& Tensor::erf_() { return unary_(OpId::erf, *this); }
Tensor& Tensor::pow_(double exponent) { return unary_(OpId::pow_scalar, *this, {.alpha = exponent}); }
Tensor& Tensor::clamp_(double min, double max) {
  return unary_(OpId::clamp, *this, {.alpha = min, .beta = max});
}
Tensor& Tensor::clamp_min_(double min) { return clamp_(min, INFINITY); }
Tensor& Tensor::clamp_max_(double max) { return clamp_(-INFINITY, max); }
Tensor& Tensor::masked_fill_(const Tensor& mask, double value) {
  dispatch_inplace(OpId::masked_fill, *this, {mask}, {.alpha = value});
  return *this;
}

}  // namespace mg
