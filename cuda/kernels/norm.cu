// CUDA kernels of the norm op group, mirroring ops/cpu/norm_kernels.cpp: layer_norm, rms_norm,
// group_norm and batch_norm (training and eval) forward, and the fused first-order backward of
// layer_norm, group_norm and batch_norm, f64/f32/f16/bf16. The one decision a reader must know:
// every statistic and every sum accumulates in A = acc_t<T> (f32 for f16/bf16/f32, f64 for f64)
// through fixed trees (cuda/kernels/block_reduce.cuh: per-thread partials in leaves of 32
// terms, then warp shuffles and shared memory), with no atomics, so results are deterministic run to run; each
// output element is rounded once on store. Inputs are made dense first (batch norm: in the layout
// its output was allocated in, cuda/kernels/layout.h, so NHWC stays NHWC; as the CPU reads
// them); parameters, saved statistics and running stats are converted to dense A copies (they
// may have another dtype than x, as on the CPU).
//
// Four shapes of kernel:
// - rows (layer_norm, rms_norm, group_norm: a (sample, group) of group_norm is one contiguous row
//   of C/G·S elements): one block per row, grid-stride. Forward: the CPU's corrected two-pass
//   moments (m0 = Σx / n; then Σd, Σd² with d = x - m0 in one pass; mean = m0 + Σd / n,
//   ss = max(0, Σd² - (Σd)² / n)), the row re-read from L2 by each pass. Backward: Σgxhat and
//   Σgxhat·xhat by the tree, then dx.
// - planes (batch_norm statistics and backward sums, group_norm dweight/dbias): one block per
//   (sample, channel) plane of S contiguous elements writes its K = 2 partial sums; a second
//   kernel, one block per channel, sums the N plane partials of the channel by the tree and
//   finishes the statistic (fixed order: deterministic).
// - layer_norm dweight/dbias: column sums over the M rows in tiles of 32 columns × 32 row lanes
//   (each lane at most 128 rows of a chunk of 4096, then a shared-memory tree), one partial row
//   per chunk, summed in chunk order by a last kernel.
// - columns (batch_norm on channels-last x, a row-major [M = N·H·W, C] matrix): the same tiling
//   (cuda/host/column_plan.h) writes each chunk's two partial sums per channel, and the planes'
//   per-channel finish kernel sums the chunks in chunk order; y and dx are elementwise with the
//   channel i % C. So an NHWC network runs batch norm with no transpose; its statistics differ
//   from the NCHW kernels' by summation order only (y, dx: per-element arithmetic is identical).
// Results differ from the CPU's by summation order (a tree here, the cascade rule there) and by
// nvcc's fused multiply-adds: a few ulps of A, one ulp of an f16/bf16 output.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/core/half.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/host/column_plan.h"
#include "mixgrad/cuda/kernels/block_reduce.cuh"
#include "mixgrad/cuda/kernels/launch.h"
#include "mixgrad/cuda/kernels/layout.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/ops.h"

namespace mg::cuda {
namespace {

constexpr int64_t kHasWeight = 1, kHasBias = 2, kHasRunning = 4;
constexpr int64_t kMaxGrid = int64_t(1) << 30;

__device__ __forceinline__ float acc_sqrt(float v) { return sqrtf(v); }  // correctly rounded (no fast math)
__device__ __forceinline__ double acc_sqrt(double v) { return ::sqrt(v); }
// v clamped at 0 against rounding, as on the CPU; a NaN stays NaN
template <typename A>
__device__ __forceinline__ A max0(A v) { return v < A(0) ? A(0) : v; }

// ---- rows -----------------------------------------------------------------------------------

// Rows of d contiguous elements. The parameter index of element i of row r is i (groups == 0,
// layer/rms norm) or the channel (r % groups) * cg + i / s (group_norm: cg channels of s).
template <typename A>
struct RowArgs {
  int64_t rows = 0, d = 0, groups = 0, cg = 1, s = 1;
  const A* w = nullptr;  // dense A copies, null when absent
  const A* b = nullptr;
  A eps = 0;
  bool rms = false;
};

template <typename A>
__device__ __forceinline__ int64_t param_index(const RowArgs<A>& p, int64_t r, int64_t i) {
  return p.groups == 0 ? i : (r % p.groups) * p.cg + i / p.s;
}

// y = (x - mean) * rstd [* w] [+ b]   (rms: y = x * rstd [* w], mean not written)
template <typename T>
__global__ void norm_rows_forward_kernel(RowArgs<acc_t<T>> p, const T* __restrict__ x, T* __restrict__ y,
                                         acc_t<T>* __restrict__ mean_out, acc_t<T>* __restrict__ rstd_out) {
  using A = acc_t<T>;
  __shared__ A sh[2 * 32];
  const int64_t d = p.d;
  const A n = static_cast<A>(d);
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const T* xr = x + r * d;
    A s1[1];  // Σx (Σx² for rms), per thread then the tree
    {
      LeafSums<1, A> acc;
      for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
        const A v = static_cast<A>(xr[i]);
        acc.add({p.rms ? v * v : v});
      }
      acc.result(s1);
    }
    block_sum<1>(s1, sh);
    A mu = 0, rs;
    if (p.rms) {
      rs = A(1) / acc_sqrt((d > 0 ? s1[0] / n : A(0)) + p.eps);
    } else {
      const A m0 = d > 0 ? s1[0] / n : A(0);
      A s2[2];  // Σd, Σd² with d = x - m0
      LeafSums<2, A> acc;
      for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
        const A dv = static_cast<A>(xr[i]) - m0;
        acc.add({dv, dv * dv});
      }
      acc.result(s2);
      block_sum<2>(s2, sh);
      A var = 0;
      if (d > 0) {
        mu = m0 + s2[0] / n;
        var = max0(s2[1] - s2[0] * s2[0] / n) / n;
      }
      rs = A(1) / acc_sqrt(var + p.eps);
    }
    if (threadIdx.x == 0) {
      if (!p.rms) mean_out[r] = mu;
      rstd_out[r] = rs;
    }
    T* yr = y + r * d;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const A xv = static_cast<A>(xr[i]);
      A v;
      if (p.rms) {
        v = xv * rs;
        if (p.w) v *= p.w[i];
      } else {
        const int64_t k = param_index(p, r, i);
        v = (xv - mu) * rs;
        if (p.w) v *= p.w[k];
        if (p.b) v += p.b[k];
      }
      yr[i] = static_cast<T>(v);
    }
  }
}

// dx = rstd * (gxhat - Σgxhat / d - xhat * Σ(gxhat·xhat) / d), gxhat = g [* w]
template <typename T>
__global__ void norm_rows_backward_kernel(RowArgs<acc_t<T>> p, const T* __restrict__ g, const T* __restrict__ x,
                                          const acc_t<T>* __restrict__ mean, const acc_t<T>* __restrict__ rstd,
                                          T* __restrict__ dx) {
  using A = acc_t<T>;
  __shared__ A sh[2 * 32];
  const int64_t d = p.d;
  const A n = static_cast<A>(d);
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const T* xr = x + r * d;
    const T* gr = g + r * d;
    const A mu = mean[r], rs = rstd[r];
    A s[2];  // Σgxhat, Σgxhat·xhat
    {
      LeafSums<2, A> acc;
      for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
        const A xh = (static_cast<A>(xr[i]) - mu) * rs;
        A gh = static_cast<A>(gr[i]);
        if (p.w) gh *= p.w[param_index(p, r, i)];
        acc.add({gh, gh * xh});
      }
      acc.result(s);
    }
    block_sum<2>(s, sh);
    const A m1 = d > 0 ? s[0] / n : A(0), m2 = d > 0 ? s[1] / n : A(0);
    T* dr = dx + r * d;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const A xh = (static_cast<A>(xr[i]) - mu) * rs;
      A gh = static_cast<A>(gr[i]);
      if (p.w) gh *= p.w[param_index(p, r, i)];
      dr[i] = static_cast<T>(rs * (gh - m1 - xh * m2));
    }
  }
}

// layer_norm dweight/dbias, first pass: block (tile, chunk) sums the rows [chunk * kChunkRows, ...)
// of 32 columns: lane y of column x adds rows r0 + y, r0 + y + 32, ... (at most 128), then a tree
// over the 32 lanes in shared memory. part[(chunk * d + col) * 2 + {0, 1}] = Σg·xhat, Σg. Chunks
// beyond the grid's y limit (65535) are taken by the same blocks in turn (chunk += gridDim.y).
constexpr int64_t kChunkRows = 32 * 128;
template <typename T>
__global__ void layer_norm_columns_kernel(int64_t rows, int64_t d, int64_t chunks, const T* __restrict__ g,
                                          const T* __restrict__ x, const acc_t<T>* __restrict__ mean,
                                          const acc_t<T>* __restrict__ rstd, acc_t<T>* __restrict__ part) {
  using A = acc_t<T>;
  __shared__ A sh[2][32][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t col = int64_t(blockIdx.x) * 32 + tx;
  for (int64_t chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
    const int64_t r0 = chunk * kChunkRows;
    const int64_t r1 = rows < r0 + kChunkRows ? rows : r0 + kChunkRows;
    LeafSums<2, A> acc;  // leaves of 32 terms (docs/numerics.md's column rule)
    if (col < d) {
      for (int64_t r = r0 + ty; r < r1; r += 32) {
        const A gv = static_cast<A>(g[r * d + col]);
        const A t[2] = {gv * ((static_cast<A>(x[r * d + col]) - mean[r]) * rstd[r]), gv};
        acc.add(t);
      }
    }
    A v[2];
    acc.result(v);
    const A sw = v[0], sb = v[1];
    sh[0][ty][tx] = sw;
    sh[1][ty][tx] = sb;
    __syncthreads();
    for (int s = 16; s > 0; s >>= 1) {
      if (ty < s) {
        sh[0][ty][tx] += sh[0][ty + s][tx];
        sh[1][ty][tx] += sh[1][ty + s][tx];
      }
      __syncthreads();
    }
    if (ty == 0 && col < d) {
      part[(chunk * d + col) * 2] = sh[0][0][tx];
      part[(chunk * d + col) * 2 + 1] = sh[1][0][tx];
    }
    __syncthreads();  // the next chunk reuses sh
  }
}

// Second pass: column i's chunk partials in chunk order.
template <typename A>
__global__ void layer_norm_columns_finish_kernel(int64_t chunks, int64_t d, const A* __restrict__ part,
                                                 A* __restrict__ dweight, A* __restrict__ dbias) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < d; i += int64_t(gridDim.x) * blockDim.x) {
    LeafSums<2, A> acc;  // leaves of 32 chunks: a long plain sum would exceed the column bound
    for (int64_t c = 0; c < chunks; ++c) {
      const A t[2] = {part[(c * d + i) * 2], part[(c * d + i) * 2 + 1]};
      acc.add(t);
    }
    A v[2];
    acc.result(v);
    if (dweight) dweight[i] = v[0];
    if (dbias) dbias[i] = v[1];
  }
}

// ---- planes ---------------------------------------------------------------------------------

// Planes p = n * C + c of S contiguous elements; the statistic of plane p is at index c (batch
// norm, groups == 0) or n * groups + c / cg (group_norm).
enum class PlaneSum { X, Centred, Grad };
template <typename A>
struct PlaneArgs {
  int64_t planes = 0, c = 1, s = 0, groups = 0, cg = 1;
  const A* mean = nullptr;  // Centred: m0 per channel; Grad: the saved mean
  const A* rstd = nullptr;  // Grad: the saved rstd / invstd
  A* part = nullptr;        // [planes, 2]
};

// X: Σx. Centred: Σ(x - m0), Σ(x - m0)². Grad: Σg, Σg·xhat.
template <typename T, PlaneSum kSum>
__global__ void plane_sums_kernel(PlaneArgs<acc_t<T>> p, const T* __restrict__ x, const T* __restrict__ g) {
  using A = acc_t<T>;
  __shared__ A sh[2 * 32];
  for (int64_t pl = blockIdx.x; pl < p.planes; pl += gridDim.x) {
    const int64_t ch = pl % p.c;
    const int64_t si = p.groups == 0 ? ch : (pl / p.c) * p.groups + ch / p.cg;
    const T* xp = x + pl * p.s;
    LeafSums<2, A> acc;
    if constexpr (kSum == PlaneSum::X) {
      for (int64_t k = threadIdx.x; k < p.s; k += blockDim.x) acc.add({static_cast<A>(xp[k]), A(0)});
    } else if constexpr (kSum == PlaneSum::Centred) {
      const A m0 = p.mean[si];
      for (int64_t k = threadIdx.x; k < p.s; k += blockDim.x) {
        const A dv = static_cast<A>(xp[k]) - m0;
        acc.add({dv, dv * dv});
      }
    } else {
      const T* gp = g + pl * p.s;
      const A mu = p.mean[si], rs = p.rstd[si];
      for (int64_t k = threadIdx.x; k < p.s; k += blockDim.x) {
        const A gv = static_cast<A>(gp[k]);
        acc.add({gv, gv * ((static_cast<A>(xp[k]) - mu) * rs)});
      }
    }
    A v[2];
    acc.result(v);
    block_sum<2>(v, sh);
    if (threadIdx.x == 0) {
      p.part[pl * 2] = v[0];
      p.part[pl * 2 + 1] = v[1];
    }
  }
}

// Channels-last x (and g) [M, C]: block (tile, chunk) writes part[(chunk * C + ch) * 2 + {0, 1}],
// the plane sums' two values over the chunk's rows of channel ch; accumulated in A (per lane at
// most chunk_rows / 32 sequential adds, then a tree over the 32 lanes in shared memory).
template <typename T, PlaneSum kSum>
__global__ void column_sums_kernel(ColumnPlan cp, PlaneArgs<acc_t<T>> p, const T* __restrict__ x,
                                   const T* __restrict__ g) {
  using A = acc_t<T>;
  __shared__ A sh[2][kColumnLanes][kColumnTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t ch = int64_t(blockIdx.x) * kColumnTile + tx, chunk = blockIdx.y;
  const int64_t c = cp.cols;
  LeafSums<2, A> acc;  // leaves of 32 terms: a chunk may give a lane many (column_plan.h)
  if (ch < c) {
    const A m = kSum == PlaneSum::X ? A(0) : p.mean[ch];
    const A rs = kSum == PlaneSum::Grad ? p.rstd[ch] : A(0);
    for (int64_t r = cp.begin(chunk) + ty; r < cp.end(chunk); r += kColumnLanes) {
      const A xv = static_cast<A>(x[r * c + ch]);
      if constexpr (kSum == PlaneSum::X) {
        const A t[2] = {xv, A(0)};
        acc.add(t);
      } else if constexpr (kSum == PlaneSum::Centred) {
        const A dv = xv - m;
        const A t[2] = {dv, dv * dv};
        acc.add(t);
      } else {
        const A gv = static_cast<A>(g[r * c + ch]);
        const A t[2] = {gv, gv * ((xv - m) * rs)};
        acc.add(t);
      }
    }
  }
  A sums[2];
  acc.result(sums);
  const A s0 = sums[0], s1 = sums[1];
  sh[0][ty][tx] = s0;
  sh[1][ty][tx] = s1;
  __syncthreads();
  for (int h = kColumnLanes / 2; h > 0; h >>= 1) {
    if (ty < h) {
      sh[0][ty][tx] += sh[0][ty + h][tx];
      sh[1][ty][tx] += sh[1][ty + h][tx];
    }
    __syncthreads();
  }
  if (ty == 0 && ch < c) {
    p.part[(chunk * c + ch) * 2] = sh[0][0][tx];
    p.part[(chunk * c + ch) * 2 + 1] = sh[1][0][tx];
  }
}

// Per channel c: the two sums over the N planes n * C + c (block tree), then the statistic.
enum class Finish { Mean0, Stats, Grads };
template <typename A>
struct FinishArgs {
  int64_t n = 0, c = 0;
  A cnt = 0;              // N · S, the terms of a channel
  A cnt_m1 = 0;           // N · S - 1 converted exactly as the CPU does (not cnt - 1 in A: above 2^24 they differ)
  const A* part = nullptr;
  A* m0 = nullptr;        // Mean0: written; Stats: read
  A* mean_out = nullptr;  // Stats
  A* invstd_out = nullptr;
  A eps = 0;
  const A* running_mean = nullptr;  // Stats, training with running stats (null otherwise)
  const A* running_var = nullptr;
  double momentum = 0;
  double* new_mean = nullptr;  // (1 - momentum) running + momentum batch, in double as on the CPU
  double* new_var = nullptr;
  const A* w = nullptr;  // Grads: the weight (null: 1)
  A* dweight = nullptr;  // Grads: written when not null
  A* dbias = nullptr;
  A* coef = nullptr;     // Grads (batch norm): [C, 2] = w Σg / cnt, w Σg·xhat / cnt
};

template <typename A, Finish kFinish>
__global__ void channel_finish_kernel(FinishArgs<A> p) {
  __shared__ A sh[2 * 32];
  for (int64_t ch = blockIdx.x; ch < p.c; ch += gridDim.x) {
    LeafSums<2, A> acc;
    for (int64_t i = threadIdx.x; i < p.n; i += blockDim.x)
      acc.add({p.part[(i * p.c + ch) * 2], p.part[(i * p.c + ch) * 2 + 1]});
    A v[2];
    acc.result(v);
    block_sum<2>(v, sh);
    if (threadIdx.x != 0) continue;
    const bool any = p.cnt > A(0);
    if constexpr (kFinish == Finish::Mean0) {
      p.m0[ch] = any ? v[0] / p.cnt : A(0);
    } else if constexpr (kFinish == Finish::Stats) {
      A mu = 0, ss = 0;
      if (any) {
        mu = p.m0[ch] + v[0] / p.cnt;
        ss = max0(v[1] - v[0] * v[0] / p.cnt);
      }
      const A var = any ? ss / p.cnt : A(0);
      const A var_b = p.cnt > A(1) ? ss / p.cnt_m1 : var;
      p.mean_out[ch] = mu;
      p.invstd_out[ch] = A(1) / acc_sqrt(var + p.eps);
      if (p.new_mean) {
        p.new_mean[ch] = (1.0 - p.momentum) * double(p.running_mean[ch]) + p.momentum * double(mu);
        p.new_var[ch] = (1.0 - p.momentum) * double(p.running_var[ch]) + p.momentum * double(var_b);
      }
    } else {
      if (p.dweight) p.dweight[ch] = v[1];
      if (p.dbias) p.dbias[ch] = v[0];
      if (p.coef) {
        const A wc = p.w ? p.w[ch] : A(1);
        p.coef[ch * 2] = any ? wc * v[0] / p.cnt : A(0);
        p.coef[ch * 2 + 1] = any ? wc * v[1] / p.cnt : A(0);
      }
    }
  }
}

// batch_norm eval: the running statistics.
template <typename A>
__global__ void batch_norm_eval_stats_kernel(int64_t c, const A* __restrict__ rm, const A* __restrict__ rv, A eps,
                                             A* __restrict__ mean_out, A* __restrict__ invstd_out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < c; i += int64_t(gridDim.x) * blockDim.x) {
    mean_out[i] = rm[i];
    invstd_out[i] = A(1) / acc_sqrt(rv[i] + eps);
  }
}

// y = (x - mean) * (w * invstd) + b, element i in channel channel_of(i, C, inner) (inner: S for NCHW,
// 1 for NHWC; centred first, as on the CPU).
template <typename T>
__global__ void batch_norm_apply_kernel(int64_t numel, int64_t c, int64_t inner, const T* __restrict__ x,
                                        const acc_t<T>* __restrict__ mean, const acc_t<T>* __restrict__ invstd,
                                        const acc_t<T>* __restrict__ w, const acc_t<T>* __restrict__ b,
                                        T* __restrict__ y) {
  using A = acc_t<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ch = channel_of(i, c, inner);
    const A scale = (w ? w[ch] : A(1)) * invstd[ch];
    const A shift = b ? b[ch] : A(0);
    y[i] = static_cast<T>((static_cast<A>(x[i]) - mean[ch]) * scale + shift);
  }
}

// dx = invstd * (g * w - coef0 - xhat * coef1)
template <typename T>
__global__ void batch_norm_dx_kernel(int64_t numel, int64_t c, int64_t inner, const T* __restrict__ g,
                                     const T* __restrict__ x, const acc_t<T>* __restrict__ mean,
                                     const acc_t<T>* __restrict__ invstd, const acc_t<T>* __restrict__ w,
                                     const acc_t<T>* __restrict__ coef, T* __restrict__ dx) {
  using A = acc_t<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < numel; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ch = channel_of(i, c, inner);
    const A rs = invstd[ch];
    const A xh = (static_cast<A>(x[i]) - mean[ch]) * rs;
    const A wc = w ? w[ch] : A(1);
    dx[i] = static_cast<T>(rs * (static_cast<A>(g[i]) * wc - coef[ch * 2] - xh * coef[ch * 2 + 1]));
  }
}

// ---- host -----------------------------------------------------------------------------------

int opt_index(int64_t mode, int64_t bit) {
  if (!(mode & bit)) return -1;
  int i = 1;
  for (int64_t b = 1; b < bit; b <<= 1) i += (mode & b) ? 1 : 0;
  return i;
}

// t as a dense tensor of dtype dt on its device (t itself when it already is one).
Tensor dense_as(const Tensor& t, DType dt) { return contiguous(t.dtype() == dt ? t : to(t, dt)); }

template <typename A>
const A* ptr(const Tensor& t) {
  return t.defined() ? static_cast<const A*>(t.data_ptr()) : nullptr;
}

unsigned grid_for(int64_t items, const LaunchContext& ctx) {
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(items, std::min(kMaxGrid, ctx.max_blocks * 8))));
}

int64_t trailing(const Tensor& x, int64_t k) {
  int64_t d = 1;
  for (int64_t i = x.dim() - k; i < x.dim(); ++i) d *= x.shape()[i];
  return d;
}

// Launches the row forward kernel for x dense [rows, d].
template <typename T>
void launch_rows_forward(const RowArgs<acc_t<T>>& p, const Tensor& x, const Tensor& y, const Tensor* mean,
                         const Tensor& rstd) {
  using A = acc_t<T>;
  if (p.rows == 0) return;
  const LaunchContext ctx(x.device());
  norm_rows_forward_kernel<T><<<grid_for(p.rows, ctx), line_threads(p.d), 0, ctx.stream>>>(
      p, static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()),
      mean ? static_cast<A*>(mean->data_ptr()) : nullptr, static_cast<A*>(rstd.data_ptr()));
  MG_CUDA_CHECK_LAUNCH("norm rows forward kernel");
}

template <typename T>
void layer_norm_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using A = acc_t<T>;
  NoGradGuard no_grad;  // the dense copies are not part of the graph
  const Tensor x = contiguous(in[0]);
  const int iw = opt_index(a.mode, kHasWeight), ib = opt_index(a.mode, kHasBias);
  const Tensor w = iw >= 0 ? dense_as(in[iw], dtype_v<A>) : Tensor(), b = ib >= 0 ? dense_as(in[ib], dtype_v<A>) : Tensor();
  RowArgs<A> p;
  p.d = trailing(x, a.dim);
  p.rows = out[1].numel();
  p.w = ptr<A>(w);
  p.b = ptr<A>(b);
  p.eps = static_cast<A>(a.alpha);
  launch_rows_forward<T>(p, x, out[0], &out[1], out[2]);
}

template <typename T>
void rms_norm_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using A = acc_t<T>;
  NoGradGuard no_grad;
  const Tensor x = contiguous(in[0]);
  const int iw = opt_index(a.mode, kHasWeight);
  const Tensor w = iw >= 0 ? dense_as(in[iw], dtype_v<A>) : Tensor();
  RowArgs<A> p;
  p.d = trailing(x, a.dim);
  p.rows = out[1].numel();
  p.w = ptr<A>(w);
  p.eps = static_cast<A>(a.alpha);
  p.rms = true;
  launch_rows_forward<T>(p, x, out[0], nullptr, out[1]);
}

// out itself when it is row-major, else a row-major tensor of its shape for the rows kernels to
// write (then copied into out: group_norm's y and dx keep a channels-last x's layout).
Tensor dense_output(const Tensor& out) {
  return out.is_contiguous() ? out : empty(out.shape(), {.dtype = out.dtype(), .device = out.device()});
}

template <typename T>
void group_norm_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using A = acc_t<T>;
  NoGradGuard no_grad;
  const Tensor x = contiguous(in[0]);
  const int iw = opt_index(a.mode, kHasWeight), ib = opt_index(a.mode, kHasBias);
  const Tensor w = iw >= 0 ? dense_as(in[iw], dtype_v<A>) : Tensor(), b = ib >= 0 ? dense_as(in[ib], dtype_v<A>) : Tensor();
  const int64_t n = x.shape()[0], c = x.shape()[1], grp = a.dim;
  RowArgs<A> p;
  p.groups = grp;
  p.cg = c / grp;
  p.s = n * c == 0 ? 0 : x.numel() / (n * c);
  p.d = p.cg * p.s;
  p.rows = n * grp;
  p.w = ptr<A>(w);
  p.b = ptr<A>(b);
  p.eps = static_cast<A>(a.alpha);
  if (p.s == 0) p.s = 1;  // no elements: param_index is never evaluated, but keep the divisor non-zero
  const Tensor y = dense_output(out[0]);
  launch_rows_forward<T>(p, x, y, &out[1], out[2]);
  if (!y.is_same(out[0])) out[0].copy_(y);  // a channels-last y (x's layout, the infer rule)
}

// Where the optional outputs of a fused backward are (dweight: mode bit0, dbias: bit1).
template <typename A>
struct GradOutputs {
  A* dweight = nullptr;
  A* dbias = nullptr;
  GradOutputs(Tensors& out, int64_t mode) {
    int k = 1;
    if (mode & kHasWeight) dweight = static_cast<A*>(out[k++].data_ptr());
    if (mode & kHasBias) dbias = static_cast<A*>(out[k++].data_ptr());
  }
};

template <typename T>
void launch_rows_backward(const RowArgs<acc_t<T>>& p, const Tensor& g, const Tensor& x, const Tensor& mean,
                          const Tensor& rstd, const Tensor& dx) {
  using A = acc_t<T>;
  if (p.rows == 0 || p.d == 0) return;
  const LaunchContext ctx(x.device());
  norm_rows_backward_kernel<T><<<grid_for(p.rows, ctx), line_threads(p.d), 0, ctx.stream>>>(
      p, static_cast<const T*>(g.data_ptr()), static_cast<const T*>(x.data_ptr()), ptr<A>(mean), ptr<A>(rstd),
      static_cast<T*>(dx.data_ptr()));
  MG_CUDA_CHECK_LAUNCH("norm rows backward kernel");
}

template <typename T>
void layer_norm_backward_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using A = acc_t<T>;
  NoGradGuard no_grad;
  const Tensor x = contiguous(in[1]), g = dense_as(in[0], x.dtype());
  const Tensor mean = dense_as(in[2], dtype_v<A>), rstd = dense_as(in[3], dtype_v<A>);
  const Tensor w = (a.mode & kHasWeight) ? dense_as(in[4], dtype_v<A>) : Tensor();
  RowArgs<A> p;
  p.d = trailing(x, a.dim);
  p.rows = mean.numel();
  p.w = ptr<A>(w);
  const Tensor dx = dense_output(out[0]);
  launch_rows_backward<T>(p, g, x, mean, rstd, dx);
  if (!dx.is_same(out[0])) out[0].copy_(dx);  // a channels-last dx (x's layout)
  const GradOutputs<A> pg(out, a.mode);
  if (!pg.dweight && !pg.dbias) return;
  if (p.d == 0) return;
  const LaunchContext ctx(x.device());
  const int64_t chunks = std::max<int64_t>(1, (p.rows + kChunkRows - 1) / kChunkRows);
  const Tensor part = empty({chunks * p.d * 2}, {.dtype = dtype_v<A>, .device = x.device()});
  A* pp = static_cast<A*>(part.data_ptr());
  const dim3 grid(unsigned((p.d + 31) / 32), unsigned(std::min<int64_t>(chunks, 65535)));
  layer_norm_columns_kernel<T><<<grid, dim3(32, 32), 0, ctx.stream>>>(
      p.rows, p.d, chunks, static_cast<const T*>(g.data_ptr()), static_cast<const T*>(x.data_ptr()), ptr<A>(mean),
      ptr<A>(rstd), pp);
  MG_CUDA_CHECK_LAUNCH("layer_norm dweight/dbias kernel");
  layer_norm_columns_finish_kernel<A><<<ctx.blocks(p.d), kThreads, 0, ctx.stream>>>(chunks, p.d, pp, pg.dweight,
                                                                                     pg.dbias);
  MG_CUDA_CHECK_LAUNCH("layer_norm dweight/dbias finish kernel");
}

// The plane partials of x (and g) [N, C, S], then the per-channel finish.
template <typename T, PlaneSum kSum, Finish kFinish>
void plane_pass(const LaunchContext& ctx, PlaneArgs<acc_t<T>> pa, FinishArgs<acc_t<T>> fa, const T* x, const T* g) {
  if (pa.planes > 0) {
    plane_sums_kernel<T, kSum><<<grid_for(pa.planes, ctx), line_threads(pa.s), 0, ctx.stream>>>(pa, x, g);
    MG_CUDA_CHECK_LAUNCH("norm plane sums kernel");
  }
  if (fa.c > 0) {
    fa.part = pa.part;
    channel_finish_kernel<acc_t<T>, kFinish><<<grid_for(fa.c, ctx), line_threads(fa.n), 0, ctx.stream>>>(fa);
    MG_CUDA_CHECK_LAUNCH("norm channel finish kernel");
  }
}

// Batch norm's per-channel sums of x (and g) over the N·S terms of each channel, then the finish:
// NCHW by planes (pa.planes, pa.s), NHWC by columns of the row-major [N·S, C] matrix (cuda/host/column_plan.h).
template <typename T, PlaneSum kSum, Finish kFinish>
void channel_pass(const LaunchContext& ctx, bool nhwc, const ColumnPlan& cp, PlaneArgs<acc_t<T>> pa,
                  FinishArgs<acc_t<T>> fa, const T* x, const T* g) {
  if (!nhwc) {
    plane_pass<T, kSum, kFinish>(ctx, pa, fa, x, g);
    return;
  }
  if (cp.rows > 0) {
    const dim3 grid(static_cast<unsigned>(cp.tiles), static_cast<unsigned>(cp.chunks));
    const dim3 block(static_cast<unsigned>(kColumnTile), static_cast<unsigned>(kColumnLanes));
    column_sums_kernel<T, kSum><<<grid, block, 0, ctx.stream>>>(cp, pa, x, g);
    MG_CUDA_CHECK_LAUNCH("batch_norm channels-last column sums kernel");
  }
  fa.n = cp.rows > 0 ? cp.chunks : 0;  // the chunk partials of each channel
  fa.part = pa.part;
  channel_finish_kernel<acc_t<T>, kFinish><<<grid_for(fa.c, ctx), line_threads(fa.n), 0, ctx.stream>>>(fa);
  MG_CUDA_CHECK_LAUNCH("norm channel finish kernel");
}

// The partial-sum buffer of channel_pass: [planes or chunks, C, 2] in A.
Tensor channel_partials(bool nhwc, const ColumnPlan& cp, int64_t n, int64_t c, DType acc, Device device) {
  const int64_t units = nhwc ? cp.chunks : n;
  return empty({std::max<int64_t>(1, units * c * 2)}, {.dtype = acc, .device = device});
}

template <typename T>
void group_norm_backward_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using A = acc_t<T>;
  NoGradGuard no_grad;
  const Tensor x = contiguous(in[1]), g = dense_as(in[0], x.dtype());
  const Tensor mean = dense_as(in[2], dtype_v<A>), rstd = dense_as(in[3], dtype_v<A>);
  const Tensor w = (a.mode & kHasWeight) ? dense_as(in[4], dtype_v<A>) : Tensor();
  const int64_t n = x.shape()[0], c = x.shape()[1], grp = a.dim;
  const int64_t s = n * c == 0 ? 0 : x.numel() / (n * c);
  RowArgs<A> p;
  p.groups = grp;
  p.cg = c / grp;
  p.s = s == 0 ? 1 : s;
  p.d = p.cg * s;
  p.rows = n * grp;
  p.w = ptr<A>(w);
  const Tensor dx = dense_output(out[0]);
  launch_rows_backward<T>(p, g, x, mean, rstd, dx);
  if (!dx.is_same(out[0])) out[0].copy_(dx);  // a channels-last dx (x's layout)
  const GradOutputs<A> pg(out, a.mode);
  if (!pg.dweight && !pg.dbias) return;
  const LaunchContext ctx(x.device());
  const Tensor part = empty({std::max<int64_t>(1, n * c * 2)}, {.dtype = dtype_v<A>, .device = x.device()});
  PlaneArgs<A> pa;
  pa.planes = n * c;
  pa.c = c;
  pa.s = s;
  pa.groups = grp;
  pa.cg = p.cg;
  pa.mean = ptr<A>(mean);
  pa.rstd = ptr<A>(rstd);
  pa.part = static_cast<A*>(part.data_ptr());
  FinishArgs<A> fa;
  fa.n = n;
  fa.c = c;
  fa.cnt = static_cast<A>(n * s);
  fa.cnt_m1 = static_cast<A>(n * s - 1);
  fa.dweight = pg.dweight;
  fa.dbias = pg.dbias;
  plane_pass<T, PlaneSum::Grad, Finish::Grads>(ctx, pa, fa, static_cast<const T*>(x.data_ptr()),
                                               static_cast<const T*>(g.data_ptr()));
}

// Writes a double tensor's values into the running statistic r (contiguous, any floating
// dtype) in place, rounded as on the CPU (double -> r's compute type -> r), without bumping r's
// version: the CPU kernel writes the memory directly too.
void store_running(const Tensor& r, const Tensor& values) {
  const Tensor v = to(values, r.dtype());
  const LaunchContext ctx(r.device());
  MG_CUDA_CHECK(cudaMemcpyAsync(r.data_ptr(), v.data_ptr(), std::size_t(r.numel()) * dtype_size(r.dtype()),
                                cudaMemcpyDeviceToDevice, ctx.stream));
}

template <typename T>
void batch_norm_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using A = acc_t<T>;
  NoGradGuard no_grad;
  const bool nhwc = launch_channels_last(out[0], in[0]);  // y is in x's layout (ops/layout.h)
  const Tensor x = contiguous(in[0], launch_format(nhwc));  // no copy when x is dense already
  const int iw = opt_index(a.mode, kHasWeight), ib = opt_index(a.mode, kHasBias), ir = opt_index(a.mode, kHasRunning);
  const Tensor w = iw >= 0 ? dense_as(in[iw], dtype_v<A>) : Tensor(), b = ib >= 0 ? dense_as(in[ib], dtype_v<A>) : Tensor();
  const Tensor rm = ir >= 0 ? dense_as(in[ir], dtype_v<A>) : Tensor(), rv = ir >= 0 ? dense_as(in[ir + 1], dtype_v<A>) : Tensor();
  const bool training = a.keepdim;
  const int64_t n = x.shape()[0], c = x.shape()[1];
  const int64_t s = n * c == 0 ? 0 : x.numel() / (n * c);
  const ColumnPlan cp = make_column_plan(n * s, std::max<int64_t>(c, 1));  // NHWC: rows (n, h, w) of C
  A* mean_out = static_cast<A*>(out[1].data_ptr());
  A* invstd_out = static_cast<A*>(out[2].data_ptr());
  const LaunchContext ctx(x.device());
  if (c == 0) return;
  if (training && n * s == 0) {
    // An empty batch (N = 0 or H = W = 0), accepted as PyTorch does: statistics 0 and
    // 1/sqrt(eps), as the CPU gives; the running statistics are left alone; nothing to apply.
    const Tensor zero = zeros({c}, {.dtype = dtype_v<A>, .device = x.device()});
    batch_norm_eval_stats_kernel<A><<<ctx.blocks(c), kThreads, 0, ctx.stream>>>(
        c, ptr<A>(zero), ptr<A>(zero), static_cast<A>(a.alpha), mean_out, invstd_out);
    MG_CUDA_CHECK_LAUNCH("batch_norm empty-batch statistics kernel");
    return;
  }
  if (training) {
    const Tensor part = channel_partials(nhwc, cp, n, c, dtype_v<A>, x.device());
    const Tensor m0 = empty({c}, {.dtype = dtype_v<A>, .device = x.device()});
    const bool update = ir >= 0;
    const Tensor nm = update ? empty({c}, {.dtype = DType::F64, .device = x.device()}) : Tensor();
    const Tensor nv = update ? empty({c}, {.dtype = DType::F64, .device = x.device()}) : Tensor();
    PlaneArgs<A> pa;
    pa.planes = n * c;
    pa.c = c;
    pa.s = s;
    pa.part = static_cast<A*>(part.data_ptr());
    FinishArgs<A> fa;
    fa.n = n;
    fa.c = c;
    fa.cnt = static_cast<A>(n * s);
    fa.cnt_m1 = static_cast<A>(n * s - 1);
    fa.m0 = static_cast<A*>(m0.data_ptr());
    const T* px = static_cast<const T*>(x.data_ptr());
    channel_pass<T, PlaneSum::X, Finish::Mean0>(ctx, nhwc, cp, pa, fa, px, nullptr);  // m0 = Σx / cnt
    pa.mean = fa.m0;
    fa.mean_out = mean_out;
    fa.invstd_out = invstd_out;
    fa.eps = static_cast<A>(a.alpha);
    if (update) {
      fa.running_mean = ptr<A>(rm);
      fa.running_var = ptr<A>(rv);
      fa.momentum = a.beta;
      fa.new_mean = static_cast<double*>(nm.data_ptr());
      fa.new_var = static_cast<double*>(nv.data_ptr());
    }
    channel_pass<T, PlaneSum::Centred, Finish::Stats>(ctx, nhwc, cp, pa, fa, px, nullptr);  // mean, invstd, running
    if (update) {
      store_running(in[ir], nm);
      store_running(in[ir + 1], nv);
    }
  } else {
    batch_norm_eval_stats_kernel<A><<<ctx.blocks(c), kThreads, 0, ctx.stream>>>(
        c, ptr<A>(rm), ptr<A>(rv), static_cast<A>(a.alpha), mean_out, invstd_out);
    MG_CUDA_CHECK_LAUNCH("batch_norm eval statistics kernel");
  }
  const int64_t numel = x.numel();
  if (numel == 0) return;
  batch_norm_apply_kernel<T><<<ctx.blocks(numel), kThreads, 0, ctx.stream>>>(
      numel, c, nhwc ? 1 : s, static_cast<const T*>(x.data_ptr()), mean_out, invstd_out, ptr<A>(w), ptr<A>(b),
      static_cast<T*>(out[0].data_ptr()));
  MG_CUDA_CHECK_LAUNCH("batch_norm apply kernel");
}

template <typename T>
void batch_norm_backward_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using A = acc_t<T>;
  NoGradGuard no_grad;
  const bool nhwc = launch_channels_last(out[0], in[1]);  // dx is in x's layout (ops/layout.h)
  const Tensor x = contiguous(in[1], launch_format(nhwc));
  const Tensor g = contiguous(in[0].dtype() == x.dtype() ? in[0] : to(in[0], x.dtype()), launch_format(nhwc));
  const Tensor mean = dense_as(in[2], dtype_v<A>), invstd = dense_as(in[3], dtype_v<A>);
  const Tensor w = (a.mode & kHasWeight) ? dense_as(in[4], dtype_v<A>) : Tensor();
  const int64_t n = x.shape()[0], c = x.shape()[1];
  const int64_t s = n * c == 0 ? 0 : x.numel() / (n * c);
  if (c == 0) return;
  if (n * s == 0) {  // an empty batch: zero weight and bias gradients, an empty dx
    for (std::size_t k = 1; k < out.size(); ++k) out[k].zero_();
    return;
  }
  const ColumnPlan cp = make_column_plan(n * s, c);  // NHWC: rows (n, h, w) of C
  const GradOutputs<A> pg(out, a.mode);
  const LaunchContext ctx(x.device());
  const Tensor part = channel_partials(nhwc, cp, n, c, dtype_v<A>, x.device());
  const Tensor coef = empty({c * 2}, {.dtype = dtype_v<A>, .device = x.device()});
  PlaneArgs<A> pa;
  pa.planes = n * c;
  pa.c = c;
  pa.s = s;
  pa.mean = ptr<A>(mean);
  pa.rstd = ptr<A>(invstd);
  pa.part = static_cast<A*>(part.data_ptr());
  FinishArgs<A> fa;
  fa.n = n;
  fa.c = c;
  fa.cnt = static_cast<A>(n * s);
  fa.cnt_m1 = static_cast<A>(n * s - 1);
  fa.w = ptr<A>(w);
  fa.dweight = pg.dweight;
  fa.dbias = pg.dbias;
  fa.coef = static_cast<A*>(coef.data_ptr());
  const T* px = static_cast<const T*>(x.data_ptr());
  channel_pass<T, PlaneSum::Grad, Finish::Grads>(ctx, nhwc, cp, pa, fa, px, static_cast<const T*>(g.data_ptr()));
  const int64_t numel = x.numel();
  if (numel == 0) return;
  batch_norm_dx_kernel<T><<<ctx.blocks(numel), kThreads, 0, ctx.stream>>>(
      numel, c, nhwc ? 1 : s, static_cast<const T*>(g.data_ptr()), px, ptr<A>(mean), ptr<A>(invstd), ptr<A>(w),
      fa.coef, static_cast<T*>(out[0].data_ptr()));
  MG_CUDA_CHECK_LAUNCH("batch_norm dx kernel");
}

#define MG_CUDA_REGISTER_FLOATS(op, kernel)                                      \
  register_kernel(OpId::op, DeviceType::CUDA, DType::F64, kernel<double>);      \
  register_kernel(OpId::op, DeviceType::CUDA, DType::F32, kernel<float>);       \
  register_kernel(OpId::op, DeviceType::CUDA, DType::F16, kernel<Half>);        \
  register_kernel(OpId::op, DeviceType::CUDA, DType::BF16, kernel<BFloat16>)

}  // namespace

void register_norm_kernels() {
  MG_CUDA_REGISTER_FLOATS(layer_norm, layer_norm_kernel);
  MG_CUDA_REGISTER_FLOATS(layer_norm_backward, layer_norm_backward_kernel);
  MG_CUDA_REGISTER_FLOATS(rms_norm, rms_norm_kernel);
  MG_CUDA_REGISTER_FLOATS(group_norm, group_norm_kernel);
  MG_CUDA_REGISTER_FLOATS(group_norm_backward, group_norm_backward_kernel);
  MG_CUDA_REGISTER_FLOATS(batch_norm, batch_norm_kernel);  // NCHW and NHWC (the input's layout)
  MG_CUDA_REGISTER_FLOATS(batch_norm_backward, batch_norm_backward_kernel);
}

#undef MG_CUDA_REGISTER_FLOATS

}  // namespace mg::cuda
