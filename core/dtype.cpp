#include "mixgrad/core/dtype.h"

#include <cmath>

#include "mixgrad/core/error.h"

namespace mg {

const char* dtype_name(DType t) {
  switch (t) {
#define MG_NAME_CASE(E, n, T) \
  case DType::E:              \
    return #n;
    MG_FORALL_DTYPES(MG_NAME_CASE)
#undef MG_NAME_CASE
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
#define MG_PARSE_CASE(E, n, T) \
  if (name == #n) return DType::E;
  MG_FORALL_DTYPES(MG_PARSE_CASE)
#undef MG_PARSE_CASE
  MG_THROW(DTypeError, "dtype: unknown dtype \"", name,
           "\"; expected one of f64, f32, f16, bf16, i64, i32, u8, bool");
}

std::size_t dtype_size(DType t) {
  switch (t) {
#define MG_SIZE_CASE(E, n, T) \
  case DType::E:              \
    return sizeof(T);
    MG_FORALL_DTYPES(MG_SIZE_CASE)
#undef MG_SIZE_CASE
  }
  return 0;
}

bool is_floating(DType t) {
  return t == DType::F64 || t == DType::F32 || t == DType::F16 || t == DType::BF16;
}
bool is_low_precision(DType t) { return t == DType::F16 || t == DType::BF16; }
bool is_integral(DType t) { return t == DType::I64 || t == DType::I32 || t == DType::U8; }

double machine_epsilon(DType t) {
  switch (t) {
    case DType::F64: return 0x1p-52;
    case DType::F32: return 0x1p-23;
    case DType::F16: return 0x1p-10;
    case DType::BF16: return 0x1p-7;
    default: MG_THROW(Error, "machine_epsilon: ", dtype_name(t), " is not a floating dtype");
  }
}

bool integral_holds(DType t, double v) {
  // [lo, hi) as doubles: every bound is a power of two (or zero), so exact; trunc(v) < hi.
  double lo = 0, hi = 0;
  switch (t) {
    case DType::I64: lo = -0x1p63, hi = 0x1p63; break;
    case DType::I32: lo = -0x1p31, hi = 0x1p31; break;
    case DType::U8: lo = 0, hi = 0x1p8; break;
    default: return true;
  }
  const double r = std::trunc(v);  // NaN stays NaN and fails both comparisons
  return r >= lo && r < hi;
}

namespace {
// Rank in the promotion lattice; f16 and bf16 share a rank and meet at f32.
int rank(DType t) {
  switch (t) {
    case DType::Bool: return 0;
    case DType::U8: return 1;
    case DType::I32: return 2;
    case DType::I64: return 3;
    case DType::F16:
    case DType::BF16: return 4;
    case DType::F32: return 5;
    case DType::F64: return 6;
  }
  return 0;
}
}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (is_low_precision(a) && is_low_precision(b)) return DType::F32;
  return rank(a) >= rank(b) ? a : b;
}

}  // namespace mg
