// Builds an elementwise functor (ops/functors.h) from an op's attributes: most functors have no
// parameters; softplus, pow_scalar, clamp, add and sub read attrs.alpha / attrs.beta. Shared by
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

}  // namespace mg
