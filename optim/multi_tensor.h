// The CPU multi-tensor apply: the tensors of a parameter group (a parameter, its gradient and up
// to three state buffers each) are cut into chunks of kChunkSize elements, and a chunk body runs
// over them. The fused (multi-tensor) path runs one parallel_for over the chunks of all tensors;
// the per-parameter path runs one parallel_for per tensor over that tensor's chunks. A later CUDA
// issue mirrors the fused path with a multi-tensor-apply kernel (one block per chunk).
//
// The one decision a reader must know: the chunking does not depend on the path or on the number
// of threads, so per-chunk partial sums (LAMB's norms, clip_grad_norm_) are added in the same order
// on both paths and results are bit-identical.
//
//   std::vector<TensorSlot> slots = ...;                   // one per parameter with a gradient
//   for_each_chunk(slots, /*fused=*/true, [&](int64_t c, const TensorChunk& ch) { ... });
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "mixgrad/core/dtype.h"

namespace mg::optim {

// Elements per chunk (a multiple of every vector width).
inline constexpr int64_t kChunkSize = 32768;

// One tensor of a multi-tensor launch: raw pointers into contiguous CPU memory, all with `numel`
// elements. `param` and `grad` hold `dtype`; the state buffers hold opmath_t of it (f32, or f64
// for an f64 parameter). Unused pointers are null.
struct TensorSlot {
  DType dtype = DType::F32;
  int64_t numel = 0;
  void* param = nullptr;
  const void* grad = nullptr;
  std::array<void*, 3> state{};
};

// Elements [begin, end) of slot `tensor`.
struct TensorChunk {
  int64_t tensor = 0;
  int64_t begin = 0;
  int64_t end = 0;
};

// The chunks of all slots, tensor by tensor, each tensor cut at multiples of kChunkSize.
std::vector<TensorChunk> make_chunks(const std::vector<TensorSlot>& slots);

// Runs body(chunk_index, chunk) for every chunk of make_chunks(slots). fused: one parallel_for
// over all chunks; otherwise one parallel_for per tensor. Work below kDefaultGrain elements runs
// inline. Returns the chunks (their indices are the ones passed to body).
using ChunkBody = std::function<void(int64_t, const TensorChunk&)>;
std::vector<TensorChunk> for_each_chunk(const std::vector<TensorSlot>& slots, bool fused,
                                        const ChunkBody& body);

}  // namespace mg::optim
