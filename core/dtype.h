// DTypes from one X-macro list: enum, names, sizes and C++ storage types all come from
// MG_FORALL_DTYPES, so adding a dtype is one line. Promotion follows DESIGN §3:
// bool < integers < f16, bf16 < f32 < f64, and f16 with bf16 gives f32.
//
//   mg::DType t = mg::promote_types(mg::DType::F16, mg::DType::BF16);  // F32
#pragma once
#include <cstdint>
#include <ostream>
#include <string>

#include "mixgrad/core/half.h"

namespace mg {

// (Enum, short name, storage type)
#define MG_FORALL_DTYPES(_) \
  _(F64, f64, double)       \
  _(F32, f32, float)        \
  _(F16, f16, Half)         \
  _(BF16, bf16, BFloat16)   \
  _(I64, i64, int64_t)      \
  _(I32, i32, int32_t)      \
  _(U8, u8, uint8_t)        \
  _(Bool, bool, bool)

enum class DType : uint8_t {
#define MG_DTYPE_ENUM(E, n, T) E,
  MG_FORALL_DTYPES(MG_DTYPE_ENUM)
#undef MG_DTYPE_ENUM
};

#define MG_DTYPE_COUNT(E, n, T) +1
inline constexpr int kNumDTypes = 0 MG_FORALL_DTYPES(MG_DTYPE_COUNT);
#undef MG_DTYPE_COUNT
static_assert(kNumDTypes == 8, "update promote_types() when adding a dtype");

// Short name as printed in errors: "f16", "i64".
const char* dtype_name(DType t);
// Prints the short name ("bf16").
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }
// Parses a short name ("f16", "bf16", ...); throws mg::Error for an unknown name.
DType dtype_from_name(const std::string& name);
// Bytes per element.
std::size_t dtype_size(DType t);
bool is_floating(DType t);       // f64 f32 f16 bf16
bool is_low_precision(DType t);  // f16 bf16
bool is_integral(DType t);       // i64 i32 u8 (not bool)
// torch.finfo(t).eps: the gap between 1 and the next value of a floating dtype (f64 2^-52, f32
// 2^-23, f16 2^-10, bf16 2^-7). Throws mg::Error for a dtype that is not floating.
double machine_epsilon(DType t);
// Whether the integral dtype t (i64, i32, u8) holds v truncated toward zero: false for NaN, +-inf
// and values outside its range (C++ leaves such conversions undefined), true for every other dtype.
// Factories and scalar attributes check this before a double becomes an integer, as PyTorch's
// "value cannot be converted to type ... without overflow".
bool integral_holds(DType t, double v);
// Result dtype of a binary op on tensors of dtypes a and b (outside autocast).
DType promote_types(DType a, DType b);

// Maps a C++ storage type to its DType: dtype_of<float>::value == DType::F32.
template <typename T>
struct dtype_of;
#define MG_DTYPE_OF(E, n, T) \
  template <>                \
  struct dtype_of<T> {       \
    static constexpr DType value = DType::E; \
  };
MG_FORALL_DTYPES(MG_DTYPE_OF)
#undef MG_DTYPE_OF
template <typename T>
inline constexpr DType dtype_v = dtype_of<T>::value;

// "opmath": the type arithmetic on a storage type is done in (DESIGN §3). f16/bf16 compute in
// f32, every other type in itself.
template <typename T>
struct opmath {
  using type = T;
};
template <>
struct opmath<Half> {
  using type = float;
};
template <>
struct opmath<BFloat16> {
  using type = float;
};
template <typename T>
using opmath_t = typename opmath<T>::type;

// Accumulation type of reductions: f32 for f16/bf16/f32, f64 for f64, i64 for integers.
template <typename T>
struct acc {
  using type = opmath_t<T>;
};
template <>
struct acc<int32_t> {
  using type = int64_t;
};
template <>
struct acc<uint8_t> {
  using type = int64_t;
};
template <>
struct acc<bool> {
  using type = int64_t;
};
template <typename T>
using acc_t = typename acc<T>::type;

}  // namespace mg
