// reduce16: f16/bf16 chunks combined in f32 and rounded once per call (see reduce16.h).
#include "mixgrad/distributed/reduce16.h"

#include <algorithm>
#include <cmath>

#include "mixgrad/core/convert.h"
#include "mixgrad/core/error.h"

namespace mg::distributed {
namespace {

constexpr std::size_t kBlock = 1024;  // elements per step: 8 KiB of f32 scratch on the stack

void to_f32(DType t, const void* src, float* dst, std::size_t n) {
  if (t == DType::F16) convert_f16_to_f32(static_cast<const Half*>(src), dst, int64_t(n));
  else convert_bf16_to_f32(static_cast<const BFloat16*>(src), dst, int64_t(n));
}

void from_f32(DType t, const float* src, void* dst, std::size_t n) {
  if (t == DType::F16) convert_f32_to_f16(src, static_cast<Half*>(dst), int64_t(n));
  else convert_f32_to_bf16(src, static_cast<BFloat16*>(dst), int64_t(n));
}

// x[i] = op(x[i], y[i]) in f32 (the accumulation dtype of 16-bit floats).
void combine(ReduceOp op, float* x, const float* y, std::size_t n) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      for (std::size_t i = 0; i < n; ++i) x[i] += y[i];
      return;
    case ReduceOp::Max:
      for (std::size_t i = 0; i < n; ++i) {
        if (std::isnan(y[i]) || (!std::isnan(x[i]) && y[i] > x[i])) x[i] = y[i];
      }
      return;
    case ReduceOp::Min:
      for (std::size_t i = 0; i < n; ++i) {
        if (std::isnan(y[i]) || (!std::isnan(x[i]) && y[i] < x[i])) x[i] = y[i];
      }
      return;
  }
}

}  // namespace

void reduce16(DType dtype, ReduceOp op, void* out, const void* a, const void* b, std::size_t n) {
  MG_ASSERT(dtype == DType::F16 || dtype == DType::BF16, "reduce16 on ", dtype_name(dtype));
  float x[kBlock], y[kBlock];
  auto* o = static_cast<char*>(out);
  const auto* pa = static_cast<const char*>(a);
  const auto* pb = static_cast<const char*>(b);
  for (std::size_t i = 0; i < n; i += kBlock) {
    const std::size_t m = std::min(kBlock, n - i);
    const std::size_t off = i * 2;  // both dtypes are 2 bytes wide
    to_f32(dtype, pa + off, x, m);
    to_f32(dtype, pb + off, y, m);
    combine(op, x, y, m);
    from_f32(dtype, x, o + off, m);  // the one rounding of this hop
  }
}

}  // namespace mg::distributed
