// Macros shared by host and device code. MG_HOST_DEVICE marks functions that both g++ and nvcc
// compile (DESIGN §6): the elementwise functors, the f16/bf16 conversions and the Philox RNG.
#pragma once

#if defined(__CUDACC__)
#define MG_HOST_DEVICE __host__ __device__ inline
#define MG_DEVICE __device__ inline
#else
#define MG_HOST_DEVICE inline
#define MG_DEVICE inline
#endif
