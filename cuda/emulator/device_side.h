// The CUDA emulator's device-side language (MG_WITH_CUDA=EMULATE, docs/cuda_emulator.md):
// force-included (-include) into every cuda/kernels/*.cu, which the build compiles as C++ after
// rewrite_launches turned each `kernel<<<config>>>(args)` into
// `(::mg_emu::Launch(config) | [=](auto&... a) { kernel(a...); })(args)`.
// The CUDA keywords become plain C++ (a __shared__ variable is a static: the blocks of a launch run
// one at a time), threadIdx and friends read the running fiber's coordinates, and the intrinsics
// the kernels use are defined here with the GPU's semantics. Neither __CUDACC__ nor __CUDA_ARCH__
// is defined, so the shared functors take their host paths (the same math: DESIGN §6).
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include "mixgrad/cuda/emulator/grid_runner.h"

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __constant__
#undef __forceinline__
#undef __launch_bounds__
#undef __grid_constant__
#define __global__
#define __device__
#define __host__
#define __constant__
#define __shared__ static
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __grid_constant__

#define threadIdx (::mg_emu::thread_idx())
#define blockIdx (::mg_emu::block_idx())
#define blockDim (::mg_emu::block_dim())
#define gridDim (::mg_emu::grid_dim())

inline void __syncthreads() { ::mg_emu::sync_threads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::mg_emu::sync_warp(mask); }
// Blocks run one at a time and their threads one at a time: every store is visible to the next
// thread that runs, so the fences order nothing further.
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __threadfence_system() {}

template <typename T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  T out;
  const int lane = ::mg_emu::lane_id();
  ::mg_emu::warp_exchange(mask, &v, &out, sizeof(T), (lane & ~(width - 1)) + (src & (width - 1)));
  return out;
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  T out;
  const int lane = ::mg_emu::lane_id();
  const int src = lane ^ lane_mask;
  // Outside the caller's width-segment the lane reads its own value (the GPU's rule).
  ::mg_emu::warp_exchange(mask, &v, &out, sizeof(T), (src & ~(width - 1)) == (lane & ~(width - 1)) ? src : lane);
  return out;
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  T out;
  const int lane = ::mg_emu::lane_id();
  const int src = lane + int(delta);
  ::mg_emu::warp_exchange(mask, &v, &out, sizeof(T), (src & ~(width - 1)) == (lane & ~(width - 1)) ? src : lane);
  return out;
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  T out;
  const int lane = ::mg_emu::lane_id();
  const int src = lane - int(delta);
  ::mg_emu::warp_exchange(mask, &v, &out, sizeof(T), src >= (lane & ~(width - 1)) ? src : lane);
  return out;
}

// Atomics: the threads of the emulator run one at a time, so a read-modify-write is atomic.
template <typename T, typename F>
T atomic_update(T* p, F f) {
  const T old = *p;
  *p = f(old);
  return old;
}
template <typename T> T atomicAdd(T* p, T v) { return atomic_update(p, [=](T o) { return o + v; }); }
template <typename T> T atomicMax(T* p, T v) { return atomic_update(p, [=](T o) { return v > o ? v : o; }); }
template <typename T> T atomicMin(T* p, T v) { return atomic_update(p, [=](T o) { return v < o ? v : o; }); }
template <typename T> T atomicExch(T* p, T v) { return atomic_update(p, [=](T) { return v; }); }
template <typename T> T atomicOr(T* p, T v) { return atomic_update(p, [=](T o) { return o | v; }); }
template <typename T> T atomicCAS(T* p, T compare, T v) {
  return atomic_update(p, [=](T o) { return o == compare ? v : o; });
}

inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }
inline long long __double_as_longlong(double d) { long long i; std::memcpy(&i, &d, 8); return i; }
// The explicitly rounded operations: one IEEE operation each (the emulated build compiles with
// -ffp-contract=off, so no other product is fused either).
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }

namespace mg_emu {

// One launch: validates the configuration, then runs the kernel now or, while its stream is being
// captured, records it into the graph (cudart.cpp).
struct Launch {
  LaunchShape shape;
  cudaStream_t stream;
  Launch(dim3 grid, dim3 block, std::size_t shared = 0, cudaStream_t s = nullptr)
      : shape{grid, block, shared}, stream(s) {}
};

// Submits a launch of `body` (runs the kernel's code for the current thread) on `stream`.
void submit_launch(const LaunchShape& shape, cudaStream_t stream, void (*body)(void*), void* arg,
                   void (*copy)(const void*, void**), void (*destroy)(void*));

template <typename F, typename... A>
struct BoundKernel {
  F f;
  std::tuple<A...> args;
  static void run(void* self) {
    auto* k = static_cast<BoundKernel*>(self);
    std::apply([&](auto&... a) { k->f(a...); }, k->args);
  }
  static void copy(const void* self, void** out) { *out = new BoundKernel(*static_cast<const BoundKernel*>(self)); }
  static void destroy(void* self) { delete static_cast<BoundKernel*>(self); }
};

template <typename F>
struct PendingLaunch {
  Launch launch;
  F f;
  template <typename... A>
  void operator()(A&&... args) const {
    BoundKernel<F, std::decay_t<A>...> k{f, {std::forward<A>(args)...}};
    submit_launch(launch.shape, launch.stream, &decltype(k)::run, &k, &decltype(k)::copy, &decltype(k)::destroy);
  }
};

template <typename F>
PendingLaunch<F> operator|(const Launch& l, F f) {
  return PendingLaunch<F>{l, f};
}

}  // namespace mg_emu
