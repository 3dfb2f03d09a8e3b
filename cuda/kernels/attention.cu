// CUDA kernels of fused attention (`attention`, `attention_backward`; ops/attention_fused.h),
// mirroring ops/cpu/attention_kernels.cpp with the row math of ops/attention_rows.h. Where the CPU
// walks one head at a time, the GPU runs each step over the whole batch:
//   forward   S = scale q kᵀ by cuBLASLt with f32 output (f16/bf16 operands on Tensor Cores, f32
//             accumulation, not rounded: GemmPlanOptions::out_dtype), one block per row for the
//             masks, the softmax (fast::exp_rounded, the CPU's e^x formula; nvcc may contract its
//             multiply-adds where g++ did not, so an exp can differ in its last bit) and the
//             dropout (the dropout op's Philox rule, cuda/host/dropout_mask.h), writing P̃ in the
//             operand dtype and each row's {max, 1/Σexp}; out = P̃ v by cuBLASLt, rounded once.
//   backward  S and dP = dO vᵀ by cuBLASLt in f32, one block per row for P (from the statistics),
//             P̃ and dS = P (dP - Σ P dP) scale in the operand dtype, then dv = P̃ᵀ dO, dq = dS k
//             and dk = dSᵀ q by cuBLASLt.
// Row sums are a thread's leaves then the block's fixed tree (cuda/kernels/block_reduce.cuh):
// deterministic run to run, in another order than the CPU's. The mask is expanded to the scores'
// shape and made dense once per call. Under a CUDA graph capture the dropout reads its stream
// position from the device (attrs.ints[2]), as the dropout op does.
#include <cuda_runtime.h>

#include <cstdint>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/core/fast_math.h"
#include "mixgrad/core/half.h"
#include "mixgrad/cuda/blas.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/cuda.h"
#include "mixgrad/cuda/graph.h"
#include "mixgrad/cuda/host/dropout_mask.h"
#include "mixgrad/cuda/host/gemm_plan.h"
#include "mixgrad/cuda/kernels/block_reduce.cuh"
#include "mixgrad/cuda/kernels/launch.h"
#include "mixgrad/ops/attention_args.h"
#include "mixgrad/ops/attention_rows.h"
#include "mixgrad/ops/gemm_problem.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/ops.h"

namespace mg::cuda {
namespace {

constexpr int kRowThreads = 128;  // one block per row of the scores

// What a row kernel reads besides its buffers.
struct RowArgs {
  int64_t rows = 0, lq = 0, lk = 0;
  const void* mask = nullptr;  // dense [rows, lk]: bool, or T (added)
  bool bool_mask = false;
  bool causal = false;
  float p = 0.0f;              // dropout probability (0: none)
  uint64_t seed = 0, offset = 0;
  const int64_t* base = nullptr;  // a graph capture's device {seed, base offset}
};

template <typename A>
__device__ __forceinline__ A neg_inf() {
  if constexpr (sizeof(A) == 4) {
    return f32_from_bits(0xff800000u);
  } else {
    return fast::f64_from_bits(0xfff0000000000000ull);
  }
}

// Score j of row r with the masks applied (ops/cpu/attention_kernels.cpp's mask_row).
template <typename T, typename A>
__device__ __forceinline__ A masked_score(A s, int64_t r, int64_t j, const RowArgs& a) {
  if (a.mask != nullptr) {
    if (a.bool_mask) {
      if (!static_cast<const bool*>(a.mask)[r * a.lk + j]) s = neg_inf<A>();
    } else {
      s += static_cast<A>(static_cast<const T*>(a.mask)[r * a.lk + j]);
    }
  }
  if (a.causal && j > r % a.lq) s = neg_inf<A>();
  return s;
}

// The block's maximum of v (NaN wins, as the CPU's line_max), to every thread.
template <typename A>
__device__ A block_max(A v, A* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  auto step = [](A m, A x) { return (x > m || x != x) ? x : m; };
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) v = step(v, __shfl_xor_sync(0xffffffffu, v, s));
  __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    A w = lane < warps ? sh[lane] : neg_inf<A>();
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) w = step(w, __shfl_xor_sync(0xffffffffu, w, s));
    if (lane == 0) sh[0] = w;
  }
  __syncthreads();
  return sh[0];
}

// The dropout's seed and offset: the attrs', or a captured graph's replay position.
__device__ __forceinline__ void stream_position(const RowArgs& a, uint64_t& seed, uint64_t& offset) {
  seed = a.seed;
  offset = a.offset;
  if (a.base != nullptr) {
    seed = uint64_t(a.base[0]);
    offset += uint64_t(a.base[1]);
  }
}

// s [rows, lk] the scores (A, overwritten by the exps); pt [rows, lk] the dropped weights in T;
// stats [rows, 2] {max, 1/Σ} ({0, 0} for a dead row).
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    attention_forward_rows(RowArgs a, acc_t<T>* __restrict__ s, T* __restrict__ pt, acc_t<T>* __restrict__ stats,
                           acc_t<T> sc) {
  using A = acc_t<T>;
  __shared__ A sh[32];
  uint64_t seed, offset;
  stream_position(a, seed, offset);
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    A* row = s + r * a.lk;
    A m = neg_inf<A>();
    for (int64_t j = threadIdx.x; j < a.lk; j += blockDim.x) {
      const A x = masked_score<T>(row[j], r, j, a);
      row[j] = x;
      m = (x > m || x != x) ? x : m;
    }
    m = block_max(m, sh);
    if (m == neg_inf<A>()) {  // a dead row (block-uniform): zero weights, statistics {0, 0}
      for (int64_t j = threadIdx.x; j < a.lk; j += blockDim.x) pt[r * a.lk + j] = static_cast<T>(A(0));
      if (threadIdx.x == 0) stats[2 * r] = stats[2 * r + 1] = A(0);
      continue;
    }
    LeafSums<1, A> acc;
    for (int64_t j = threadIdx.x; j < a.lk; j += blockDim.x) {
      const A e = fast::exp_rounded(row[j] - m);
      row[j] = e;
      const A t[1] = {e};
      acc.add(t);
    }
    A total[1];
    acc.result(total);
    block_sum<1>(total, sh);
    const A inv = A(1) / total[0];
    for (int64_t j = threadIdx.x; j < a.lk; j += blockDim.x) {
      A w = row[j] * inv;
      if (a.p > 0.0f) w = attention_dropped(w, dropout_keep(seed, offset, uint64_t(r * a.lk + j), a.p), sc);
      pt[r * a.lk + j] = static_cast<T>(w);
    }
    if (threadIdx.x == 0) {
      stats[2 * r] = m;
      stats[2 * r + 1] = inv;
    }
  }
}

// s [rows, lk] the scores (A); dp [rows, lk] dO vᵀ (A); out: pt the dropped weights and ds the
// scores' gradient, [rows, lk] in T.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    attention_backward_rows(RowArgs a, acc_t<T>* __restrict__ s, acc_t<T>* __restrict__ dp,
                            const acc_t<T>* __restrict__ stats, T* __restrict__ pt, T* __restrict__ ds, acc_t<T> sc,
                            acc_t<T> scale) {
  using A = acc_t<T>;
  __shared__ A sh[32];
  uint64_t seed, offset;
  stream_position(a, seed, offset);
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const A m = stats[2 * r], inv = stats[2 * r + 1];
    if (attention_dead_row(inv)) {  // no gradient through a dead row (block-uniform)
      for (int64_t j = threadIdx.x; j < a.lk; j += blockDim.x) {
        pt[r * a.lk + j] = static_cast<T>(A(0));
        ds[r * a.lk + j] = static_cast<T>(A(0));
      }
      continue;
    }
    LeafSums<1, A> acc;
    for (int64_t j = threadIdx.x; j < a.lk; j += blockDim.x) {
      const int64_t e = r * a.lk + j;
      const A p = fast::exp_rounded(masked_score<T>(s[e], r, j, a) - m) * inv;
      A g = dp[e];
      A w = p;
      if (a.p > 0.0f) {
        const bool kept = dropout_keep(seed, offset, uint64_t(e), a.p);
        w = attention_dropped(p, kept, sc);
        g = attention_undropped_grad(g, kept ? A(1) : A(0), sc);
      }
      pt[e] = static_cast<T>(w);
      s[e] = p;
      dp[e] = g;
      const A t[1] = {p * g};
      acc.add(t);
    }
    A dot[1];
    acc.result(dot);
    block_sum<1>(dot, sh);
    for (int64_t j = threadIdx.x; j < a.lk; j += blockDim.x) {
      const int64_t e = r * a.lk + j;
      ds[e] = static_cast<T>(attention_score_grad(s[e], dp[e], dot[0], scale));
    }
  }
}

// out = alpha * a @ b by cuBLASLt (matmul's broadcasting and layouts), operands of dtype `dtype`,
// out in its own dtype (f32 for f16/bf16 operands: the sums not rounded). As the matmul kernel
// (cuda/linalg_kernels.cpp): operands no layout reads are copied, and without an algorithm the
// product is retried on fresh dense copies before it is an error.
void product(Tensor a, Tensor b, const Tensor& out, double alpha, DType dtype, const char* what) {
  GemmPlanOptions options{.allow_tf32 = allow_tf32()};
  if (out.dtype() != dtype) options.out_dtype = out.dtype();
  const int device = out.device().index;
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (attempt == 2) {
      a = clone(a);
      b = clone(b);
    }
    GemmProblem p = gemm_problem(OpId::matmul, {a, b}, out, {});
    p.alpha = alpha;
    GemmPlan plan = plan_gemm(p, dtype, options);
    if (plan.copy_a || plan.copy_b) {
      if (plan.copy_a) a = contiguous(a);
      if (plan.copy_b) b = contiguous(b);
      continue;
    }
    if (plan.kind == GemmKind::Empty) return;
    if (plan.kind == GemmKind::Zero) {
      Tensor(out).zero_();  // out is the kernel's output buffer (a handle to it)
      return;
    }
    if (run_gemm(plan, device)) return;
    if (attempt == 2) {
      MG_CHECK(false, CudaError, what, ": cuBLASLt has no algorithm for ", describe(plan), " on ", out.device().str());
    }
  }
  MG_CHECK(false, CudaError, what, ": no cuBLASLt layout for the product on ", out.device().str());
}

RowArgs row_args(const AttentionArgs& at, const Tensor& mask, int64_t rows, int64_t lq, int64_t lk) {
  RowArgs a;
  a.rows = rows;
  a.lq = lq;
  a.lk = lk;
  a.mask = mask.defined() ? mask.data_ptr() : nullptr;
  a.bool_mask = at.bool_mask;
  a.causal = at.causal;
  a.p = float(at.dropout_p);
  a.seed = at.seed;
  a.offset = at.offset;
  a.base = reinterpret_cast<const int64_t*>(std::intptr_t(at.device_base));
  return a;
}

Shape scores_shape(const Tensor& q, int64_t lk) {
  Shape s(q.shape().begin(), q.shape().end() - 1);
  s.push_back(lk);
  return s;
}

unsigned row_blocks(const LaunchContext& ctx, int64_t rows) {
  return unsigned(std::min<int64_t>(rows, ctx.max_blocks * 4));
}

// in: (q, k, v[, mask]) -> (out [B.., Lq, Ev], stats [B.., Lq, 2] in acc_t<T>)
template <typename T>
void attention_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  using A = acc_t<T>;
  NoGradGuard no_grad;  // the buffers and copies are part of the kernel, not of the graph
  const AttentionArgs at = AttentionArgs::from(attrs);
  // As the dropout op: captured without a device stream position, every replay would drop the
  // same weights.
  MG_CHECK(at.dropout_p == 0.0 || at.device_base != 0 || !is_capturing(), Error,
           "scaled_dot_product_attention: its dropout drew from a generator that is not part of the CUDA graph "
           "being captured: its mask would repeat at every replay\n  hint: add the generator to the graph before "
           "the capture (cuda::Graph::add_generator; the default generator is part of every graph)");
  const Tensor &q = in[0], &k = in[1], &v = in[2];
  const DType dt = dtype_v<T>, acc = dtype_v<A>;
  const int64_t lq = q.size(-2), lk = k.size(-2);
  const Shape ss = scores_shape(q, lk);
  const int64_t rows = out[1].numel() / 2;  // B.. x Lq
  const Tensor s = empty(ss, {.dtype = acc, .device = q.device()});
  product(q, transpose(k, -1, -2), s, at.scale, dt, "attention");
  const Tensor mask = at.mask ? contiguous(expand(in[3], ss)) : Tensor();
  const Tensor pt = empty(ss, {.dtype = dt, .device = q.device()});
  if (rows > 0) {
    const LaunchContext ctx(q.device());
    attention_forward_rows<T><<<row_blocks(ctx, rows), kRowThreads, 0, ctx.stream>>>(
        row_args(at, mask, rows, lq, lk), static_cast<A*>(s.data_ptr()), static_cast<T*>(pt.data_ptr()),
        static_cast<A*>(out[1].data_ptr()), A(1.0 / (1.0 - at.dropout_p)));
    MG_CUDA_CHECK_LAUNCH("attention forward rows");
  }
  product(pt, v, out[0], 1.0, dt, "attention");
}

// in: (grad [B.., Lq, Ev], q, k, v, stats[, mask]) -> (dq, dk, dv) in T
template <typename T>
void attention_backward_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  using A = acc_t<T>;
  NoGradGuard no_grad;
  const AttentionArgs at = AttentionArgs::from(attrs);
  const Tensor &g = in[0], &q = in[1], &k = in[2], &v = in[3];
  const Tensor stats = contiguous(in[4]);
  const DType dt = dtype_v<T>, acc = dtype_v<A>;
  const int64_t lq = q.size(-2), lk = k.size(-2);
  const Shape ss = scores_shape(q, lk);
  const int64_t rows = stats.numel() / 2;
  const Tensor s = empty(ss, {.dtype = acc, .device = q.device()});
  const Tensor dp = empty(ss, {.dtype = acc, .device = q.device()});
  product(q, transpose(k, -1, -2), s, at.scale, dt, "attention_backward");
  product(g, transpose(v, -1, -2), dp, 1.0, dt, "attention_backward");
  const Tensor mask = at.mask ? contiguous(expand(in[5], ss)) : Tensor();
  const Tensor pt = empty(ss, {.dtype = dt, .device = q.device()});
  const Tensor ds = empty(ss, {.dtype = dt, .device = q.device()});
  if (rows > 0 && lk > 0) {
    const LaunchContext ctx(q.device());
    attention_backward_rows<T><<<row_blocks(ctx, rows), kRowThreads, 0, ctx.stream>>>(
        row_args(at, mask, rows, lq, lk), static_cast<A*>(s.data_ptr()), static_cast<A*>(dp.data_ptr()),
        static_cast<const A*>(stats.data_ptr()), static_cast<T*>(pt.data_ptr()), static_cast<T*>(ds.data_ptr()),
        A(1.0 / (1.0 - at.dropout_p)), A(at.scale));
    MG_CUDA_CHECK_LAUNCH("attention backward rows");
  }
  product(transpose(pt, -1, -2), g, out[2], 1.0, dt, "attention_backward");
  product(ds, k, out[0], 1.0, dt, "attention_backward");
  product(transpose(ds, -1, -2), q, out[1], 1.0, dt, "attention_backward");
}

}  // namespace

void register_attention_kernels() {
  constexpr DeviceType cuda = DeviceType::CUDA;
  register_kernel(OpId::attention, cuda, DType::F64, attention_kernel<double>);
  register_kernel(OpId::attention, cuda, DType::F32, attention_kernel<float>);
  register_kernel(OpId::attention, cuda, DType::F16, attention_kernel<Half>);
  register_kernel(OpId::attention, cuda, DType::BF16, attention_kernel<BFloat16>);
  register_kernel(OpId::attention_backward, cuda, DType::F64, attention_backward_kernel<double>);
  register_kernel(OpId::attention_backward, cuda, DType::F32, attention_backward_kernel<float>);
  register_kernel(OpId::attention_backward, cuda, DType::F16, attention_backward_kernel<Half>);
  register_kernel(OpId::attention_backward, cuda, DType::BF16, attention_backward_kernel<BFloat16>);
}

}  // namespace mg::cuda
