// Element access by cudaDataType for the emulated libraries (cuBLASLt, cuDNN): loads widen to
// double exactly, stores round once to the element type (f16/bf16 to nearest even, core/half.h).
#pragma once
#include <library_types.h>

#include <cstdint>
#include <cstring>

#include "mixgrad/core/half.h"

namespace mg_emu {

inline std::size_t element_size(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_64F: return 8;
    case CUDA_R_32F: return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    default: return 0;
  }
}

inline double load_element(const void* base, cudaDataType_t t, int64_t i) {
  switch (t) {
    case CUDA_R_64F: return static_cast<const double*>(base)[i];
    case CUDA_R_32F: return static_cast<const float*>(base)[i];
    case CUDA_R_16F: return mg::f16_bits_to_f32(static_cast<const uint16_t*>(base)[i]);
    case CUDA_R_16BF: return mg::bf16_bits_to_f32(static_cast<const uint16_t*>(base)[i]);
    default: return 0;
  }
}

// `v` is already rounded to f32 when the element type is 16-bit (one rounding from the f32
// accumulator, as the libraries do).
inline void store_element(void* base, cudaDataType_t t, int64_t i, double v) {
  switch (t) {
    case CUDA_R_64F: static_cast<double*>(base)[i] = v; break;
    case CUDA_R_32F: static_cast<float*>(base)[i] = float(v); break;
    case CUDA_R_16F: static_cast<uint16_t*>(base)[i] = mg::f32_to_f16_bits(float(v)); break;
    case CUDA_R_16BF: static_cast<uint16_t*>(base)[i] = mg::f32_to_bf16_bits(float(v)); break;
    default: break;
  }
}

// f32 rounded to TF32 (10 explicit mantissa bits, to nearest even): what the Tensor Cores read
// under CUBLAS_COMPUTE_32F_FAST_TF32 / CUDNN_TENSOR_OP_MATH with f32 data.
inline float round_to_tf32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace mg_emu
