// CUDA kernels of softmax, log_softmax and their backward ops (softmax_backward,
// log_softmax_backward) along any dim, f64/f32/f16/bf16, mirroring ops/cpu/loss_kernels.cpp:
// max-shifted, accumulated in f32 for f16/bf16/f32 and f64 for f64 (acc_t), the output rounded
// once on store. Inputs are made dense first (as on the CPU); the output is dense.
//
// Two shapes of kernel:
// - last dim (inner == 1): one block per row (grid-stride over rows). The block size grows with
//   the row (32 .. 1024 threads, at most ~32 elements per thread up to rows of 32768, then at
//   most size / 1024), each thread sums its strided elements sequentially, and the block combines
//   the partial sums as a tree: warp shuffles (xor butterfly), then one value per warp through
//   shared memory, then a shuffle tree in warp 0. A row of 32768 is therefore 32 terms per
//   thread + a 1024-leaf tree; rows beyond 131072 exceed 128 sequential terms per thread.
// - other dims (inner > 1): a block is a tile of 32 consecutive inner positions (threadIdx.x,
//   coalesced) by ry threads along the reduced dim (threadIdx.y, ry a power of two <= 32 chosen
//   so each thread sums at most ~32 terms for sizes up to 1024, size / 32 beyond); the ry partial
//   sums of a column are combined by a tree in shared memory.
// The max uses the CPU's NaN-propagating max, so a NaN in a line makes the whole line NaN, and a
// line of -inf gives NaN (exp(-inf - -inf)), as on the CPU. Results differ from the CPU's only by
// summation order and by CUDA's expf/logf (an ulp or two).
#include <cuda_runtime.h>

#include <algorithm>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/half.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/kernels/launch.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/ops.h"

namespace mg::cuda {
namespace {

__device__ __forceinline__ float acc_exp(float v) { return expf(v); }
__device__ __forceinline__ double acc_exp(double v) { return ::exp(v); }
__device__ __forceinline__ float acc_log(float v) { return logf(v); }
__device__ __forceinline__ double acc_log(double v) { return ::log(v); }

template <typename A>
__device__ __forceinline__ A neg_inf();
template <>
__device__ __forceinline__ float neg_inf<float>() { return __int_as_float(0xff800000); }
template <>
__device__ __forceinline__ double neg_inf<double>() { return __longlong_as_double(0xfff0000000000000ULL); }

// The CPU's max (nan_max): NaN wins, so the tree and the sequential order agree.
struct MaxOp {
  template <typename A>
  __device__ A operator()(A m, A v) const { return (v > m || v != v) ? v : m; }
  template <typename A>
  __device__ static A identity() { return neg_inf<A>(); }
};
struct SumOp {
  template <typename A>
  __device__ A operator()(A a, A b) const { return a + b; }
  template <typename A>
  __device__ static A identity() { return A(0); }
};

template <typename A, typename Op>
__device__ A warp_reduce(A v, Op op) {
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, s));
  return v;
}

// The reduction of v over the block (blockDim.x a multiple of 32, blockDim.y == 1), returned to
// every thread. `sh` holds 32 values; the leading barrier lets a previous call's readers finish.
template <typename A, typename Op>
__device__ A block_reduce(A v, Op op, A* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_reduce(v, op);
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    A w = lane < warps ? sh[lane] : Op::template identity<A>();
    w = warp_reduce(w, op);
    if (lane == 0) sh[0] = w;
  }
  __syncthreads();
  return sh[0];
}

// The reduction of v over threadIdx.y for each threadIdx.x (blockDim = (32, ry), ry a power of
// two), returned to every thread of the column. `sh` holds 32 * 32 values.
template <typename A, typename Op>
__device__ A column_reduce(A v, Op op, A* sh) {
  const int x = threadIdx.x, y = threadIdx.y;
  __syncthreads();
  sh[y * 32 + x] = v;
  __syncthreads();
  for (int s = int(blockDim.y) >> 1; s > 0; s >>= 1) {
    if (y < s) sh[y * 32 + x] = op(sh[y * 32 + x], sh[(y + s) * 32 + x]);
    __syncthreads();
  }
  return sh[x];
}

// Forward (kBackward false): a = x, out = softmax(x) or log_softmax(x) (`log`).
// Backward (kBackward true): a = g, b = y, out = y (g - sum(g y)) or g - exp(y) sum(g) (`log`).
// Rows of `size` contiguous elements, `rows` of them.
template <typename T, bool kBackward>
__global__ void softmax_rows_kernel(int64_t rows, int64_t size, const T* __restrict__ a, const T* __restrict__ b,
                                    T* __restrict__ out, bool log) {
  using A = acc_t<T>;  // f32 accumulation for f16/bf16/f32, f64 for f64
  __shared__ A sh[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* ar = a + r * size;
    const T* br = kBackward ? b + r * size : nullptr;
    T* orow = out + r * size;
    if constexpr (!kBackward) {
      A m = MaxOp::identity<A>();
      for (int64_t i = threadIdx.x; i < size; i += blockDim.x) m = MaxOp{}(m, static_cast<A>(ar[i]));
      m = block_reduce(m, MaxOp{}, sh);
      // sum of exp(x - max): per-thread partials, then the block tree, in A
      A s = 0;
      for (int64_t i = threadIdx.x; i < size; i += blockDim.x) s += acc_exp(static_cast<A>(ar[i]) - m);
      s = block_reduce(s, SumOp{}, sh);
      if (log) {
        const A shift = m + acc_log(s);
        for (int64_t i = threadIdx.x; i < size; i += blockDim.x) orow[i] = static_cast<T>(static_cast<A>(ar[i]) - shift);
      } else {
        const A inv = A(1) / s;
        for (int64_t i = threadIdx.x; i < size; i += blockDim.x)
          orow[i] = static_cast<T>(acc_exp(static_cast<A>(ar[i]) - m) * inv);
      }
    } else {
      // sum(g y) (softmax) or sum(g) (log_softmax) in A
      A s = 0;
      for (int64_t i = threadIdx.x; i < size; i += blockDim.x) {
        const A gv = static_cast<A>(ar[i]);
        s += log ? gv : gv * static_cast<A>(br[i]);
      }
      s = block_reduce(s, SumOp{}, sh);
      for (int64_t i = threadIdx.x; i < size; i += blockDim.x) {
        const A gv = static_cast<A>(ar[i]), yv = static_cast<A>(br[i]);
        orow[i] = static_cast<T>(log ? gv - acc_exp(yv) * s : yv * (gv - s));
      }
    }
  }
}

// The same over lines along a middle dim: tensor [outer, size, inner], line (o, i) starts at
// o * size * inner + i and steps by inner. Tiles of 32 inner positions per block, grid-stride.
template <typename T, bool kBackward>
__global__ void softmax_strided_kernel(int64_t outer, int64_t size, int64_t inner, const T* __restrict__ a,
                                       const T* __restrict__ b, T* __restrict__ out, bool log) {
  using A = acc_t<T>;  // f32 accumulation for f16/bf16/f32, f64 for f64
  __shared__ A sh[32 * 32];
  const int64_t tiles_inner = (inner + 31) / 32;
  const int64_t tiles = outer * tiles_inner;
  const int ry = int(blockDim.y);
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t o = t / tiles_inner;
    const int64_t ii = (t % tiles_inner) * 32 + threadIdx.x;
    const bool active = ii < inner;  // inactive threads still take part in the barriers
    const int64_t base = o * size * inner + ii;
    if constexpr (!kBackward) {
      A m = MaxOp::identity<A>();
      if (active) {
        for (int64_t j = threadIdx.y; j < size; j += ry) m = MaxOp{}(m, static_cast<A>(a[base + j * inner]));
      }
      m = column_reduce(m, MaxOp{}, sh);
      // sum of exp(x - max): per-thread partials, then the column tree, in A
      A s = 0;
      if (active) {
        for (int64_t j = threadIdx.y; j < size; j += ry) s += acc_exp(static_cast<A>(a[base + j * inner]) - m);
      }
      s = column_reduce(s, SumOp{}, sh);
      if (active) {
        if (log) {
          const A shift = m + acc_log(s);
          for (int64_t j = threadIdx.y; j < size; j += ry) {
            const int64_t k = base + j * inner;
            out[k] = static_cast<T>(static_cast<A>(a[k]) - shift);
          }
        } else {
          const A inv = A(1) / s;
          for (int64_t j = threadIdx.y; j < size; j += ry) {
            const int64_t k = base + j * inner;
            out[k] = static_cast<T>(acc_exp(static_cast<A>(a[k]) - m) * inv);
          }
        }
      }
    } else {
      // sum(g y) (softmax) or sum(g) (log_softmax) in A
      A s = 0;
      if (active) {
        for (int64_t j = threadIdx.y; j < size; j += ry) {
          const int64_t k = base + j * inner;
          const A gv = static_cast<A>(a[k]);
          s += log ? gv : gv * static_cast<A>(b[k]);
        }
      }
      s = column_reduce(s, SumOp{}, sh);
      if (active) {
        for (int64_t j = threadIdx.y; j < size; j += ry) {
          const int64_t k = base + j * inner;
          const A gv = static_cast<A>(a[k]), yv = static_cast<A>(b[k]);
          out[k] = static_cast<T>(log ? gv - acc_exp(yv) * s : yv * (gv - s));
        }
      }
    }
  }
}

// Lines along `dim` of a dense tensor of `shape`: [outer, size, inner].
struct Lines {
  int64_t outer = 1, size = 0, inner = 1;
};
Lines lines_along(const Shape& shape, int64_t dim) {
  Lines g;
  if (shape.empty()) {  // a 0-d tensor: one line of one element
    g.size = 1;
    return g;
  }
  g.size = shape[dim];
  for (int64_t d = 0; d < dim; ++d) g.outer *= shape[d];
  for (std::size_t d = dim + 1; d < shape.size(); ++d) g.inner *= shape[d];
  return g;
}

// Threads for one row: a power of two in [32, 1024], about one per 32 elements.
int row_threads(int64_t size) {
  int t = 32;
  while (t < 1024 && int64_t(t) * 32 < size) t *= 2;
  return t;
}
// Threads along the reduced dim of the strided kernel: a power of two in [1, 32].
int column_threads(int64_t size) {
  int t = 1;
  while (t < 32 && int64_t(t) * 32 < size) t *= 2;
  return t;
}

template <typename T, bool kBackward>
void launch_softmax(const Tensor& a, const Tensor* b, const Tensor& out, int64_t dim, bool log) {
  const Lines g = lines_along(out.shape(), dim);
  if (g.size == 0 || g.outer == 0 || g.inner == 0) return;
  const LaunchContext ctx(out.device());
  const T* pa = static_cast<const T*>(a.data_ptr());
  const T* pb = b != nullptr ? static_cast<const T*>(b->data_ptr()) : nullptr;
  T* po = static_cast<T*>(out.data_ptr());
  constexpr int64_t kMaxGrid = int64_t(1) << 30;
  if (g.inner == 1) {
    const int64_t blocks = std::min<int64_t>(g.outer, std::min(kMaxGrid, ctx.max_blocks * 8));
    softmax_rows_kernel<T, kBackward><<<unsigned(blocks), row_threads(g.size), 0, ctx.stream>>>(
        g.outer, g.size, pa, pb, po, log);
  } else {
    const int64_t tiles = g.outer * ((g.inner + 31) / 32);
    const int64_t blocks = std::min<int64_t>(tiles, std::min(kMaxGrid, ctx.max_blocks * 8));
    const dim3 threads(32, unsigned(column_threads(g.size)));
    softmax_strided_kernel<T, kBackward><<<unsigned(blocks), threads, 0, ctx.stream>>>(g.outer, g.size, g.inner, pa,
                                                                                       pb, po, log);
  }
  MG_CUDA_CHECK_LAUNCH(kBackward ? "softmax backward kernel" : "softmax kernel");
}

// out [x's shape] = softmax(x) or log_softmax(x) along attrs.dim
template <typename T, bool kLog>
void softmax_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  NoGradGuard no_grad;  // the dense copy is not part of the graph
  const Tensor x = contiguous(in[0]);
  launch_softmax<T, false>(x, nullptr, out[0], a.dim, kLog);
}

// in = (g, y): out = y (g - sum(g y)) (softmax) or g - exp(y) sum(g) (log_softmax) along attrs.dim
template <typename T, bool kLog>
void softmax_backward_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  NoGradGuard no_grad;  // the dense copies are not part of the graph
  const Tensor g = contiguous(in[0]), y = contiguous(in[1]);
  launch_softmax<T, true>(g, &y, out[0], a.dim, kLog);
}

template <typename T>
void reg() {
  constexpr DType d = dtype_v<T>;
  constexpr DeviceType cuda = DeviceType::CUDA;
  register_kernel(OpId::softmax, cuda, d, softmax_kernel<T, false>);
  register_kernel(OpId::log_softmax, cuda, d, softmax_kernel<T, true>);
  register_kernel(OpId::softmax_backward, cuda, d, softmax_backward_kernel<T, false>);
  register_kernel(OpId::log_softmax_backward, cuda, d, softmax_backward_kernel<T, true>);
}

}  // namespace

void register_softmax_kernels() {
  reg<double>();
  reg<float>();
  reg<Half>();
  reg<BFloat16>();
}

}  // namespace mg::cuda
