// The per-element keep decision of dropout, shared by the CUDA kernel (cuda/kernels/dropout.cu)
// and its host test: element i of a dropout at (seed, offset) is kept when the uniform from word
// i % 4 of Philox block i / 4 of the stream is >= p — the CPU kernel's rule (ops/cpu/norm_kernels.cpp,
// which draws the same blocks in batches through core/philox_batch.h). Counter-based, so any
// thread can compute any element: the GPU's mask equals the CPU's bit for bit.
#pragma once
#include <cstdint>

#include "mixgrad/core/macros.h"
#include "mixgrad/core/philox.h"

namespace mg::cuda {

// The keep bits of elements 4 * block .. 4 * block + 3 (bit j: element 4 * block + j), drop
// probability `p` as the f32 the CPU compares with.
MG_HOST_DEVICE unsigned dropout_keep4(uint64_t seed, uint64_t offset, uint64_t block, float p) {
  const Philox4 w = philox_block(seed, offset, block);
  unsigned bits = 0;
  for (int j = 0; j < 4; ++j) bits |= unsigned(philox_uniform(w.v[j]) >= p) << j;
  return bits;
}

// Element i alone.
MG_HOST_DEVICE bool dropout_keep(uint64_t seed, uint64_t offset, uint64_t i, float p) {
  return (dropout_keep4(seed, offset, i / 4, p) >> (i % 4)) & 1u;
}

}  // namespace mg::cuda
