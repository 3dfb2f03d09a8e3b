// Builds an elementwise functor (ops/functors.h) from an op's attributes: most functors have no
// parameters; softplus, pow_scalar, clamp, add, sub, leaky_relu and the ELU family read
// attrs.alpha / attrs.beta (/ attrs.mode), forward and backward alike. Shared by
// the CPU and CUDA kernels, so both read the attributes the same way.
#pragma once
#include "mixgrad/ops/functors.h"
#include "mixgrad/ops/op.h"

namespace mg {

template <typename F>
F functor_from_attrs(const OpAttrs&) {
  return F{};
}
template <>
inline fn::Softplus functor_from_attrs<fn::Softplus>(const OpAttrs& a) {
  return {a.alpha, a.beta};
}
template <>
inline fn::PowScalar functor_from_attrs<fn::PowScalar>(const OpAttrs& a) {
  return {a.alpha};
}
template <>
inline fn::MulScalar functor_from_attrs<fn::MulScalar>(const OpAttrs& a) {
  return {a.alpha};
}
template <>
inline fn::DivScalar functor_from_attrs<fn::DivScalar>(const OpAttrs& a) {
  return {a.alpha};
}
template <>
inline fn::Clamp functor_from_attrs<fn::Clamp>(const OpAttrs& a) {
  return {a.alpha, a.beta};
}
template <>
inline fn::Add functor_from_attrs<fn::Add>(const OpAttrs& a) {
  return {a.alpha};
}
template <>
inline fn::Sub functor_from_attrs<fn::Sub>(const OpAttrs& a) {
  return {a.alpha};
}

template <>
inline fn::LeakyRelu functor_from_attrs<fn::LeakyRelu>(const OpAttrs& a) {
  return {a.alpha};
}
template <>
inline fn::LeakyReluBackward functor_from_attrs<fn::LeakyReluBackward>(const OpAttrs& a) {
  return {a.alpha};
}
template <>
inline fn::SoftplusBackward functor_from_attrs<fn::SoftplusBackward>(const OpAttrs& a) {
  return {a.alpha, a.beta};
}
// The ELU family: attrs.alpha = alpha, attrs.beta = scale, attrs.mode 1 = CELU's input scale
// 1 / alpha (else 1).
inline double elu_input_scale(const OpAttrs& a) { return a.mode == 1 ? 1.0 / a.alpha : 1.0; }
template <>
inline fn::Elu functor_from_attrs<fn::Elu>(const OpAttrs& a) {
  return {a.alpha, a.beta, elu_input_scale(a)};
}
template <>
inline fn::EluBackward functor_from_attrs<fn::EluBackward>(const OpAttrs& a) {
  return {a.alpha, a.beta, elu_input_scale(a)};
}

}  // namespace mg
