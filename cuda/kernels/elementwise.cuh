// The CUDA elementwise launchers (DESIGN §6): one grid-stride kernel per shape of loop, applying
// a shared functor (ops/functors.h) in opmath (f32 for f16/bf16: load, compute, round once).
// - dense: every operand contiguous (inputs may be broadcast scalars) — 16-byte vector loads and
//   stores when the pointers allow, a scalar tail;
// - strided: any strides and broadcasting through OffsetCalculator, 32-bit index math when every
//   offset fits, 64-bit otherwise.
// Kernels run on the current stream of the output's device.
#pragma once
#include <cuda_runtime.h>

#include "mixgrad/core/dtype.h"
#include "mixgrad/core/tensor.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/index_math.h"
#include "mixgrad/cuda/kernels/launch.h"
#include "mixgrad/ops/loop_plan.h"

namespace mg::cuda {

template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

// out = op(in): O and A are storage types; F works in opmath of A.
template <typename O, typename A, typename F>
struct UnaryApply {
  F f;
  __device__ O operator()(A a) const { return static_cast<O>(f(static_cast<opmath_t<A>>(a))); }
};
// out = op(a, b), both inputs of storage type T.
template <typename O, typename T, typename F>
struct BinaryApply {
  F f;
  __device__ O operator()(T a, T b) const {
    return static_cast<O>(f(static_cast<opmath_t<T>>(a), static_cast<opmath_t<T>>(b)));
  }
};

// No __restrict__: in-place ops (add_, copy_ onto itself) pass an output that aliases an input.
// Each element is read before the same thread writes it, so aliasing is safe.
template <int V, typename O, typename A, typename Apply>
__global__ void unary_dense_kernel(int64_t n, O* out, const A* in, Apply apply) {
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t nvec = n / V;
  for (int64_t i = tid; i < nvec; i += stride) {
    const Vec<A, V> a = reinterpret_cast<const Vec<A, V>*>(in)[i];
    Vec<O, V> o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = apply(a.v[j]);
    reinterpret_cast<Vec<O, V>*>(out)[i] = o;
  }
  for (int64_t i = nvec * V + tid; i < n; i += stride) out[i] = apply(in[i]);
}

template <typename Index, typename O, typename A, typename Apply>
__global__ void unary_strided_kernel(Index n, OffsetCalculator<2, Index> calc, char* out, const char* in, Apply apply) {
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += Index(gridDim.x) * blockDim.x) {
    Index off[2];
    calc.offsets(i, off);
    *reinterpret_cast<O*>(out + off[0]) = apply(*reinterpret_cast<const A*>(in + off[1]));
  }
}

// a_scalar / b_scalar: that input is one value broadcast over the output.
template <int V, typename O, typename T, typename Apply>
__global__ void binary_dense_kernel(int64_t n, O* out, const T* a, bool a_scalar,
                                    const T* b, bool b_scalar, Apply apply) {
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t nvec = n / V;
  const T a0 = a_scalar ? a[0] : T(), b0 = b_scalar ? b[0] : T();
  for (int64_t i = tid; i < nvec; i += stride) {
    Vec<T, V> va, vb;
    if (a_scalar) {
#pragma unroll
      for (int j = 0; j < V; ++j) va.v[j] = a0;
    } else {
      va = reinterpret_cast<const Vec<T, V>*>(a)[i];
    }
    if (b_scalar) {
#pragma unroll
      for (int j = 0; j < V; ++j) vb.v[j] = b0;
    } else {
      vb = reinterpret_cast<const Vec<T, V>*>(b)[i];
    }
    Vec<O, V> o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = apply(va.v[j], vb.v[j]);
    reinterpret_cast<Vec<O, V>*>(out)[i] = o;
  }
  for (int64_t i = nvec * V + tid; i < n; i += stride) {
    out[i] = apply(a_scalar ? a0 : a[i], b_scalar ? b0 : b[i]);
  }
}

template <typename Index, typename O, typename T, typename Apply>
__global__ void binary_strided_kernel(Index n, OffsetCalculator<3, Index> calc, char* out, const char* a,
                                      const char* b, Apply apply) {
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += Index(gridDim.x) * blockDim.x) {
    Index off[3];
    calc.offsets(i, off);
    *reinterpret_cast<O*>(out + off[0]) =
        apply(*reinterpret_cast<const T*>(a + off[1]), *reinterpret_cast<const T*>(b + off[2]));
  }
}

// out[i] = f(in[i]) over out's shape, `in` broadcast to it.
template <typename O, typename A, typename F>
void launch_unary(const Tensor& in, const Tensor& out, F f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const UnaryApply<O, A, F> apply{f};
  const auto plan = make_elementwise_plan<2>(out.shape(), {out.strides(), broadcast_strides(in, out.shape())},
                                 {int64_t(sizeof(O)), int64_t(sizeof(A))});
  const LaunchContext ctx(out.device());
  O* o = static_cast<O*>(out.data_ptr());
  const A* a = static_cast<const A*>(in.data_ptr());
  if (is_dense_plan<2>(plan, {int64_t(sizeof(O)), int64_t(sizeof(A))}, {false, false})) {
    const int v = dense_vector_width({{o, int(sizeof(O))}, {a, int(sizeof(A))}});
    constexpr int kV = 16 / (sizeof(O) > sizeof(A) ? sizeof(O) : sizeof(A));
    if (v == kV && kV > 1) {
      unary_dense_kernel<kV><<<ctx.blocks(n / kV + 1), kThreads, 0, ctx.stream>>>(n, o, a, apply);
    } else {
      unary_dense_kernel<1><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(n, o, a, apply);
    }
  } else if (fits_int32<2>(plan)) {
    unary_strided_kernel<int32_t, O, A><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(
        int32_t(n), make_offset_calculator<2, int32_t>(plan), reinterpret_cast<char*>(o),
        reinterpret_cast<const char*>(a), apply);
  } else {
    unary_strided_kernel<int64_t, O, A><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(
        n, make_offset_calculator<2, int64_t>(plan), reinterpret_cast<char*>(o), reinterpret_cast<const char*>(a),
        apply);
  }
  MG_CUDA_CHECK_LAUNCH("elementwise unary kernel");
}

// out[i] = f(a[i], b[i]) over out's shape, both inputs broadcast to it.
template <typename O, typename T, typename F>
void launch_binary(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const BinaryApply<O, T, F> apply{f};
  const std::array<int64_t, 3> sizes = {int64_t(sizeof(O)), int64_t(sizeof(T)), int64_t(sizeof(T))};
  const auto plan = make_elementwise_plan<3>(
      out.shape(), {out.strides(), broadcast_strides(a, out.shape()), broadcast_strides(b, out.shape())}, sizes);
  const LaunchContext ctx(out.device());
  O* o = static_cast<O*>(out.data_ptr());
  const T* pa = static_cast<const T*>(a.data_ptr());
  const T* pb = static_cast<const T*>(b.data_ptr());
  if (is_dense_plan<3>(plan, sizes, {false, true, true})) {
    const bool a_scalar = plan.strides[1][0] == 0, b_scalar = plan.strides[2][0] == 0;
    const int v = dense_vector_width(
        {{o, int(sizeof(O))}, {a_scalar ? nullptr : pa, int(sizeof(T))}, {b_scalar ? nullptr : pb, int(sizeof(T))}});
    constexpr int kV = 16 / (sizeof(O) > sizeof(T) ? sizeof(O) : sizeof(T));
    if (v == kV && kV > 1) {
      binary_dense_kernel<kV><<<ctx.blocks(n / kV + 1), kThreads, 0, ctx.stream>>>(n, o, pa, a_scalar, pb, b_scalar,
                                                                                  apply);
    } else {
      binary_dense_kernel<1><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(n, o, pa, a_scalar, pb, b_scalar, apply);
    }
  } else if (fits_int32<3>(plan)) {
    binary_strided_kernel<int32_t, O, T><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(
        int32_t(n), make_offset_calculator<3, int32_t>(plan), reinterpret_cast<char*>(o),
        reinterpret_cast<const char*>(pa), reinterpret_cast<const char*>(pb), apply);
  } else {
    binary_strided_kernel<int64_t, O, T><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(
        n, make_offset_calculator<3, int64_t>(plan), reinterpret_cast<char*>(o), reinterpret_cast<const char*>(pa),
        reinterpret_cast<const char*>(pb), apply);
  }
  MG_CUDA_CHECK_LAUNCH("elementwise binary kernel");
}

}  // namespace mg::cuda
