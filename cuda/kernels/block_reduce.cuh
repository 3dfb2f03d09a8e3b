// Deterministic block-wide sums for the CUDA kernels that reduce a line per block (the norm
// kernels, cuda/kernels/norm.cu): K sums carried together through one fixed tree — a warp
// shuffle butterfly, one value per warp through shared memory, then a shuffle tree in warp 0.
// The tree depends on blockDim.x alone, so a launch with the same shape gives the same bits on
// every run (no atomics). Internal to cuda/.
#pragma once
#include <cuda_runtime.h>

namespace mg::cuda {

// Sums of v[0..K) over the block (blockDim.x a multiple of 32, at most 1024; blockDim.y == 1),
// returned in v to every thread. `sh` holds 32 * K values; the leading barrier lets a previous
// call's readers finish before `sh` is overwritten.
template <int K, typename A>
__device__ __forceinline__ void block_sum(A (&v)[K], A* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
  for (int k = 0; k < K; ++k) {
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) v[k] += __shfl_xor_sync(0xffffffffu, v[k], s);
  }
  __syncthreads();
  if (lane == 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) sh[k * 32 + warp] = v[k];
  }
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      A w = lane < warps ? sh[k * 32 + lane] : A(0);
#pragma unroll
      for (int s = 16; s > 0; s >>= 1) w += __shfl_xor_sync(0xffffffffu, w, s);
      if (lane == 0) sh[k * 32] = w;
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = sh[k * 32];
}

// A thread's K running sums, in leaves of 32 terms: each leaf is summed in order, then added to
// the total, so n terms cost (32 + n / 32) u of error instead of n u (the same bits as a plain
// running sum up to 32 terms). With line_threads() that is at most 128 sequential additions per
// thread for lines up to 2^22 terms.
template <int K, typename A>
struct LeafSums {
  A total[K] = {}, leaf[K] = {};
  int count = 0;
  __device__ __forceinline__ void add(const A (&t)[K]) {
#pragma unroll
    for (int k = 0; k < K; ++k) leaf[k] += t[k];
    if (++count == 32) {
#pragma unroll
      for (int k = 0; k < K; ++k) total[k] += leaf[k], leaf[k] = A(0);
      count = 0;
    }
  }
  __device__ __forceinline__ void result(A (&v)[K]) const {
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = total[k] + leaf[k];
  }
};

// Threads per block for a line of `size` terms: 32 .. 1024, at most ~32 terms per thread up to
// lines of 32768 (size / 1024 beyond).
inline int line_threads(long long size) {
  int t = 32;
  while (t < 1024 && (long long)t * 32 < size) t *= 2;
  return t;
}

}  // namespace mg::cuda
