// CPU elementwise launchers (DESIGN §6): a strided N-operand loop over an output shape, split
// across threads with parallel_for. Operand 0 is the output; inputs are broadcast to the output
// shape with zero strides. Dims that are contiguous for every operand are merged first, so dense
// tensors run as one flat loop the compiler vectorises.
#pragma once
#include <array>
#include <cstdint>

#include "mixgrad/core/convert.h"
#include "mixgrad/core/parallel.h"
#include "mixgrad/core/tensor.h"
#include "mixgrad/ops/loop_plan.h"

namespace mg::cpu {

// Dense f16/bf16 runs are converted to f32 in blocks of kLowpBlock with the bulk (SIMD)
// converters, computed in f32 (vectorised), and rounded back once — instead of converting one
// element at a time with scalar bit manipulation.
inline constexpr int64_t kLowpBlock = 256;
template <typename T>
inline constexpr bool kIsLowp = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
using mg::load_f32;  // core/convert.h
using mg::store_f32;

// The loop plan (dim merging, broadcast strides) is shared with the CUDA launchers.
using mg::broadcast_strides;
using mg::LoopPlan;
using mg::make_plan;

// Calls inner(ptrs, n, inner_strides) for runs of n elements along the innermost dim, covering
// all elements of `plan`, in parallel for large shapes.
template <int N, typename Inner>
void run_plan(const LoopPlan<N>& plan, std::array<char*, N> base, Inner&& inner,
              int64_t grain = kDefaultGrain) {
  const int64_t ndim = int64_t(plan.shape.size());
  const int64_t inner_size = plan.shape.back();
  int64_t numel = 1;
  for (int64_t s : plan.shape) numel *= s;
  std::array<int64_t, N> inner_strides;
  for (int k = 0; k < N; ++k) inner_strides[k] = plan.strides[k].back();
  parallel_for(0, numel, grain, [&](int64_t begin, int64_t end) {
    // Multi-index of `begin`.
    std::vector<int64_t> idx(ndim);
    int64_t rem = begin;
    for (int64_t d = ndim - 1; d >= 0; --d) {
      idx[d] = rem % plan.shape[d];
      rem /= plan.shape[d];
    }
    int64_t pos = begin;
    while (pos < end) {
      std::array<char*, N> ptrs;
      for (int k = 0; k < N; ++k) {
        int64_t off = 0;
        for (int64_t d = 0; d < ndim; ++d) off += idx[d] * plan.strides[k][d];
        ptrs[k] = base[k] + off;
      }
      const int64_t n = std::min(end - pos, inner_size - idx[ndim - 1]);
      inner(ptrs, n, inner_strides);
      pos += n;
      idx[ndim - 1] += n;
      for (int64_t d = ndim - 1; d > 0 && idx[d] == plan.shape[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
      }
    }
  });
}

// out[i] = f(a[i]) computed in opmath; A and O are storage types.
template <typename O, typename A, typename F>
void unary_loop(const Tensor& a, const Tensor& out, F f) {
  using C = opmath_t<A>;
  const auto plan = make_elementwise_plan<2>(out.shape(), {out.strides(), broadcast_strides(a, out.shape())},
                                 {int64_t(sizeof(O)), int64_t(sizeof(A))});
  run_plan<2>(plan, {static_cast<char*>(out.data_ptr()), static_cast<char*>(a.data_ptr())},
              [&](const std::array<char*, 2>& p, int64_t n, const std::array<int64_t, 2>& s) {
                O* o = reinterpret_cast<O*>(p[0]);
                const A* x = reinterpret_cast<const A*>(p[1]);
                if constexpr (kIsLowp<A> && std::is_same_v<O, A>) {
                  if (s[0] == sizeof(O) && s[1] == sizeof(A)) {
                    float buf[kLowpBlock];
                    for (int64_t b = 0; b < n; b += kLowpBlock) {
                      const int64_t m = std::min(kLowpBlock, n - b);
                      load_f32(x + b, buf, m);
                      for (int64_t i = 0; i < m; ++i) buf[i] = f(buf[i]);
                      store_f32(buf, o + b, m);
                    }
                    return;
                  }
                }
                if (s[0] == sizeof(O) && s[1] == sizeof(A)) {
                  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<O>(f(static_cast<C>(x[i])));
                } else {
                  const int64_t so = s[0] / int64_t(sizeof(O)), sa = s[1] / int64_t(sizeof(A));
                  for (int64_t i = 0; i < n; ++i) o[i * so] = static_cast<O>(f(static_cast<C>(x[i * sa])));
                }
              });
}

// out[i] = f(a[i], b[i]) with broadcasting, computed in opmath of T.
template <typename O, typename T, typename F>
void binary_loop(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  using C = opmath_t<T>;
  const auto plan = make_elementwise_plan<3>(
      out.shape(), {out.strides(), broadcast_strides(a, out.shape()), broadcast_strides(b, out.shape())},
      {int64_t(sizeof(O)), int64_t(sizeof(T)), int64_t(sizeof(T))});
  run_plan<3>(plan,
              {static_cast<char*>(out.data_ptr()), static_cast<char*>(a.data_ptr()),
               static_cast<char*>(b.data_ptr())},
              [&](const std::array<char*, 3>& p, int64_t n, const std::array<int64_t, 3>& s) {
                O* o = reinterpret_cast<O*>(p[0]);
                const T* x = reinterpret_cast<const T*>(p[1]);
                const T* y = reinterpret_cast<const T*>(p[2]);
                const int64_t t = sizeof(T);
                if constexpr (kIsLowp<T> && std::is_same_v<O, T>) {
                  // Dense output; each input dense or broadcast (stride 0, e.g. a scalar).
                  if (s[0] == t && (s[1] == t || s[1] == 0) && (s[2] == t || s[2] == 0)) {
                    float bx[kLowpBlock], by[kLowpBlock], bo[kLowpBlock];
                    const float x0 = float(x[0]), y0 = float(y[0]);
                    for (int64_t b = 0; b < n; b += kLowpBlock) {
                      const int64_t m = std::min(kLowpBlock, n - b);
                      if (s[1] == 0) {
                        for (int64_t i = 0; i < m; ++i) bx[i] = x0;
                      } else {
                        load_f32(x + b, bx, m);
                      }
                      if (s[2] == 0) {
                        for (int64_t i = 0; i < m; ++i) by[i] = y0;
                      } else {
                        load_f32(y + b, by, m);
                      }
                      for (int64_t i = 0; i < m; ++i) bo[i] = f(bx[i], by[i]);
                      store_f32(bo, o + b, m);
                    }
                    return;
                  }
                }
                if (s[0] == int64_t(sizeof(O)) && s[1] == t && s[2] == t) {
                  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<O>(f(static_cast<C>(x[i]), static_cast<C>(y[i])));
                } else if (s[0] == int64_t(sizeof(O)) && s[1] == t && s[2] == 0) {
                  const C yv = static_cast<C>(y[0]);
                  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<O>(f(static_cast<C>(x[i]), yv));
                } else {
                  const int64_t so = s[0] / int64_t(sizeof(O)), sx = s[1] / t, sy = s[2] / t;
                  for (int64_t i = 0; i < n; ++i)
                    o[i * so] = static_cast<O>(f(static_cast<C>(x[i * sx]), static_cast<C>(y[i * sy])));
                }
              });
}

}  // namespace mg::cpu
