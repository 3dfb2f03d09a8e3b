// Bulk f32 <-> f16/bf16 conversion. (Vector paths to be added; portable loops for now.)
#include "core/convert.h"

#include "core/parallel.h"

namespace mg {

void convert_f32_to_f16(const float* src, Half* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Half(src[i]);
}
void convert_f16_to_f32(const Half* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float(src[i]);
}
void convert_f32_to_bf16(const float* src, BFloat16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = BFloat16(src[i]);
}
void convert_bf16_to_f32(const BFloat16* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float(src[i]);
}
const char* convert_isa() { return "portable"; }
void convert_force_portable(bool) {}

}  // namespace mg
