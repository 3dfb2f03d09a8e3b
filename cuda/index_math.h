// Index arithmetic of the CUDA elementwise launchers, written as host-device code so the CPU
// tests check exactly what the kernels compute (tests/cuda/test_index_math.cpp):
// - OffsetCalculator: the byte offsets of N operands for a linear index of a loop plan
//   (ops/loop_plan.h), one divide/modulo per merged dim, in 32-bit math when every offset fits;
// - grid_stride_blocks: how many blocks a grid-stride launch uses;
// - dense_vector_width: how many elements one 16-byte vector access moves.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>

#include "mixgrad/core/error.h"
#include "mixgrad/core/macros.h"
#include "mixgrad/ops/loop_plan.h"

namespace mg::cuda {

// Merged dims a strided launch supports; tensors rarely have more than 6 after merging.
inline constexpr int kMaxLoopDims = 10;

template <int N, typename Index>
struct OffsetCalculator {
  int ndim = 0;
  Index sizes[kMaxLoopDims] = {};
  Index strides[kMaxLoopDims][N] = {};  // bytes, per dim and operand

  // Byte offsets of every operand for the element with row-major linear index `linear`.
  MG_HOST_DEVICE void offsets(Index linear, Index (&out)[N]) const {
    for (int k = 0; k < N; ++k) out[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const Index i = linear % sizes[d];
      linear /= sizes[d];
      for (int k = 0; k < N; ++k) out[k] += i * strides[d][k];
    }
  }
};

// True when every operand's largest byte offset fits in int32 and the element count is at most
// 2^30 (so a grid-stride index plus the grid's stride cannot overflow either), so the strided
// kernel may use 32-bit index math (about twice as fast as 64-bit division).
template <int N>
bool fits_int32(const LoopPlan<N>& plan) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  int64_t numel = 1;
  for (int64_t s : plan.shape) numel *= s;
  if (numel > (int64_t(1) << 30)) return false;
  for (int k = 0; k < N; ++k) {
    int64_t reach = 0;
    for (std::size_t d = 0; d < plan.shape.size(); ++d) reach += (plan.shape[d] - 1) * std::abs(plan.strides[k][d]);
    if (reach > kMax) return false;
  }
  return true;
}

template <int N, typename Index>
OffsetCalculator<N, Index> make_offset_calculator(const LoopPlan<N>& plan) {
  MG_CHECK(int(plan.shape.size()) <= kMaxLoopDims, NotImplementedError, "cuda: a strided elementwise loop over ",
           plan.shape.size(), " dims that cannot be merged (at most ", kMaxLoopDims,
           ")\n  hint: call contiguous() on the inputs first");
  OffsetCalculator<N, Index> c;
  c.ndim = int(plan.shape.size());
  for (int d = 0; d < c.ndim; ++d) {
    c.sizes[d] = Index(plan.shape[std::size_t(d)]);
    for (int k = 0; k < N; ++k) c.strides[d][k] = Index(plan.strides[k][std::size_t(d)]);
  }
  return c;
}

// Blocks of `threads` threads for `work` items in a grid-stride loop: enough to cover the work,
// at most `max_blocks` (a few waves of the device's SMs; each thread then loops), at least 1.
inline int64_t grid_stride_blocks(int64_t work, int threads, int64_t max_blocks) {
  const int64_t needed = (work + threads - 1) / threads;
  return std::max<int64_t>(1, std::min(needed, max_blocks));
}

// Elements per 16-byte vector for operands of these byte sizes (the widest decides), and 1 when a
// pointer is not aligned to the vector of its own type.
inline int dense_vector_width(std::initializer_list<std::pair<const void*, int>> operands) {
  int widest = 1;
  for (const auto& [ptr, size] : operands) widest = std::max(widest, size);
  const int width = std::max(1, 16 / widest);
  for (const auto& [ptr, size] : operands) {
    if (ptr != nullptr && reinterpret_cast<std::uintptr_t>(ptr) % std::uintptr_t(size * width) != 0) return 1;
  }
  return width;
}

// True when every operand of the plan is dense (its stride is its element size) or, where
// `allow_scalar` says so, a broadcast scalar (stride 0), over a single merged dim.
template <int N>
bool is_dense_plan(const LoopPlan<N>& plan, const std::array<int64_t, N>& elem_sizes,
                   const std::array<bool, N>& allow_scalar) {
  if (plan.shape.size() != 1) return false;
  for (int k = 0; k < N; ++k) {
    const int64_t s = plan.strides[k][0];
    if (s != elem_sizes[k] && !(allow_scalar[k] && s == 0)) return false;
  }
  return true;
}

}  // namespace mg::cuda
