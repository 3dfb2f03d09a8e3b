// Runs a template lambda with the C++ storage type of a runtime dtype:
//
//   visit_dtype(t.dtype(), [&]<typename T>() { fill(t.data<T>(), ...); });
#pragma once
#include "mixgrad/core/dtype.h"
#include "mixgrad/core/error.h"

namespace mg {

template <typename F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
#define MG_VISIT_CASE(E, n, T) \
  case DType::E:               \
    return f.template operator()<T>();
    MG_FORALL_DTYPES(MG_VISIT_CASE)
#undef MG_VISIT_CASE
  }
  MG_ASSERT(false, "unknown dtype");
  return f.template operator()<float>();
}

// Same, restricted to the floating dtypes; `op` names the caller in the error.
template <typename F>
decltype(auto) visit_floating(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::F64: return f.template operator()<double>();
    case DType::F32: return f.template operator()<float>();
    case DType::F16: return f.template operator()<Half>();
    case DType::BF16: return f.template operator()<BFloat16>();
    default: break;
  }
  MG_THROW(DTypeError, op, ": expected a floating dtype (f64, f32, f16, bf16), got ", dtype_name(t));
}

}  // namespace mg
