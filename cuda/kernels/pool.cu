// CUDA kernels of the pooling ops (NCHW, f64/f32/f16/bf16), mirroring ops/cpu/pool_kernels.cpp
// and its windows (ops/cpu/pool_window.h); the per-element work is host-device code in
// cuda/host/pool_windows.h, which the host tests run against the CPU kernels:
// - max_pool2d / max_pool2d_indices: one thread per output; the window is scanned row-major in
//   the compute type with the CPU's rule (first maximum wins, a NaN wins and stays, padding
//   skipped), and the winning element is copied, so values and indices equal the CPU's exactly.
// - max_pool2d_backward: a gather, one thread per input element: the outputs whose window holds
//   it (a few taps per dim), oh then ow ascending, adding g where the stored index is this element
//   (the scatter_add it replaced scanned every output of the plane for every input element).
// - avg_pool2d / adaptive_avg_pool2d: one thread per output, summing its window in opmath (f32
//   for f16/bf16, f64 for f64) in the CPU's order — in order up to kSumLeaf (128) taps, else
//   row-major leaves of 128 combined by the CPU's binary counter (core/cascade_sum.h) — then one
//   divide and one rounding: the same operations as the CPU, so the same bits.
// - avg_pool2d_backward / adaptive_avg_pool2d_backward: gather, no atomics: one thread per input
//   element walks the outputs whose window holds it, oh then ow ascending (the CPU's scatter
//   order), adding g / divisor in opmath, and rounds once: deterministic and equal to the CPU.
// Layouts: the kernels run natively in NCHW or NHWC (cuda/host/pool_windows.h's PoolLayout): the
// layout is the one the op's infer rule gave the large tensor (x forward, dx backward; ops/layout.h),
// the other operand is made dense in it (a no-op in an NHWC network), and threads walk outputs in
// memory order, so in NHWC adjacent threads read adjacent channels. Same arithmetic, same bits.
#include <cuda_runtime.h>

#include <algorithm>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/half.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/device_checks.h"
#include "mixgrad/cuda/host/pool_windows.h"
#include "mixgrad/cuda/kernels/device_check.cuh"
#include "mixgrad/cuda/kernels/launch.h"
#include "mixgrad/cuda/kernels/layout.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/ops.h"

namespace mg::cuda {
namespace {

// x [N, C, H, W] -> values (T) or indices (i64 into H * W) [N, C, Ho, Wo], both in layout l
template <typename T>
__global__ void max_pool2d_forward_kernel(int64_t total, int64_t Ho, int64_t Wo, PoolWin h, PoolWin w, PoolLayout l,
                                          const T* __restrict__ x, T* __restrict__ y, int64_t* __restrict__ idx) {
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += int64_t(gridDim.x) * blockDim.x) {
    int64_t base = 0;
    const int64_t best = max_pool_argmax(o, Ho, Wo, h, w, l, x, &base);
    if (idx != nullptr) {
      idx[o] = best;
    } else {
      y[o] = x[base + best * l.step()];
    }
  }
}

// x [N, C, H, W] -> y [N, C, Ho, Wo]: the mean over each window
template <typename T>
__global__ void avg_pool2d_forward_kernel(int64_t total, AvgGeom g, PoolLayout l, const T* __restrict__ x,
                                          T* __restrict__ y) {
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += int64_t(gridDim.x) * blockDim.x)
    y[o] = avg_pool_at(o, g, l, x);
}

// gr [N, C, Ho, Wo] -> dx [N, C, H, W]: each input element sums g / divisor over the windows holding it
template <typename T>
__global__ void avg_pool2d_backward_kernel(int64_t total, AvgGeom g, PoolLayout l, const T* __restrict__ gr,
                                           T* __restrict__ dx) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    dx[i] = avg_pool_grad_at(i, g, l, gr);
}

// gr, idx [N, C, Ho, Wo] -> dx [N, C, H, W]: each input element sums g over the windows whose maximum it is
template <typename T>
__global__ void max_pool2d_backward_kernel(int64_t total, int64_t Ho, int64_t Wo, PoolWin h, PoolWin w, PoolLayout l,
                                           const T* __restrict__ gr, const int64_t* __restrict__ idx,
                                           T* __restrict__ dx) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    dx[i] = max_pool_grad_at(i, Ho, Wo, h, w, l, gr, idx);
}

// The layout of a pooling launch (cuda/kernels/layout.h): the output's, or the input's when the
// output is dense in both.
PoolLayout pool_layout(const Tensor& out, const Tensor& in) { return {launch_channels_last(out, in), out.size(1)}; }

// in = (x [N, C, H, W]); out = max values [N, C, Ho, Wo] (T) or their indices (i64), x's layout;
// attrs.ints = {kH, kW, sH, sW, pH, pW, dH, dW}
template <typename T, bool kIndices>
void max_pool2d_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  NoGradGuard no_grad;  // the dense copy is not part of the graph
  const PoolLayout l = pool_layout(out[0], in[0]);
  const Tensor x = contiguous(in[0], launch_format(l.nhwc));
  const int64_t total = out[0].numel();
  if (total == 0) return;
  const LaunchContext ctx(x.device());
  max_pool2d_forward_kernel<T><<<ctx.blocks(total), kThreads, 0, ctx.stream>>>(
      total, out[0].size(2), out[0].size(3), max_pool_win(a.ints, 0, x.size(2)), max_pool_win(a.ints, 1, x.size(3)),
      l, static_cast<const T*>(x.data_ptr()), kIndices ? nullptr : static_cast<T*>(out[0].data_ptr()),
      kIndices ? static_cast<int64_t*>(out[0].data_ptr()) : nullptr);
  MG_CUDA_CHECK_LAUNCH("max_pool2d kernel");
}

// in = (x [N, C, H, W]); out = y [N, C, Ho, Wo], x's layout; attrs as avg_pool2d or adaptive_avg_pool2d
template <typename T, bool kAdaptive>
void avg_pool2d_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  NoGradGuard no_grad;
  const PoolLayout l = pool_layout(out[0], in[0]);
  const Tensor x = contiguous(in[0], launch_format(l.nhwc));
  const int64_t total = out[0].numel();
  if (total == 0) return;
  const AvgGeom g = avg_geom(kAdaptive, a.ints, a.mode, x.size(2), x.size(3), out[0].size(2), out[0].size(3), a.alpha);
  const LaunchContext ctx(x.device());
  avg_pool2d_forward_kernel<T><<<ctx.blocks(total), kThreads, 0, ctx.stream>>>(
      total, g, l, static_cast<const T*>(x.data_ptr()), static_cast<T*>(out[0].data_ptr()));
  MG_CUDA_CHECK_LAUNCH("avg_pool2d kernel");
}

// in = (g [N, C, Ho, Wo]); out = dx [N, C, H, W] (the forward input's layout); attrs as the *_backward op
template <typename T, bool kAdaptive>
void avg_pool2d_backward_kernel_fn(const Tensors& in, Tensors& out, const OpAttrs& a) {
  NoGradGuard no_grad;
  const PoolLayout l = pool_layout(out[0], in[0]);
  const Tensor gr = contiguous(in[0], launch_format(l.nhwc));  // [N, C, 1, 1] of a global pool: no copy
  const int64_t total = out[0].numel();
  if (total == 0) return;
  const AvgGeom g = avg_geom(kAdaptive, a.ints, a.mode, out[0].size(2), out[0].size(3), gr.size(2), gr.size(3), a.alpha);
  const LaunchContext ctx(gr.device());
  avg_pool2d_backward_kernel<T><<<ctx.blocks(total), kThreads, 0, ctx.stream>>>(
      total, g, l, static_cast<const T*>(gr.data_ptr()), static_cast<T*>(out[0].data_ptr()));
  MG_CUDA_CHECK_LAUNCH("avg_pool2d backward kernel");
}

// Whether flat index t (ih * W + iw) is a tap of output (oh, ow)'s window: the CPU kernel's rule.
__device__ __forceinline__ bool is_tap(const PoolWin& w, int64_t o, int64_t i) {
  const int64_t off = i - (o * w.s - w.p);
  return off >= 0 && off % w.d == 0 && off / w.d < w.k;
}

// Publishes the first index (logical [planes, Ho, Wo] order, the CPU's) that is not a tap of its
// own output's window to the deferred device checks: the gather of max_pool_grad_at could not add
// it, so its gradient would be lost without a word (the CPU raises IndexError).
__global__ void max_pool2d_index_check_kernel(int64_t n, int64_t Ho, int64_t Wo, PoolWin h, PoolWin w, PoolLayout l,
                                              const int64_t* __restrict__ idx, CheckScratch* scratch,
                                              DeviceCheckSlot slot) {
  const int64_t H = h.n, W = w.n;
  auto at = [&](int64_t pos, int64_t* p, int64_t* oh, int64_t* ow) {
    *p = pos / (Ho * Wo);
    *oh = (pos / Wo) % Ho;
    *ow = pos % Wo;
    return idx[l.base(*p, Ho, Wo) + (*oh * Wo + *ow) * l.step()];
  };
  int64_t first = -1;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t p, oh, ow;
    const int64_t t = at(i, &p, &oh, &ow);
    if (!(t >= 0 && t < H * W && is_tap(h, oh, t / W) && is_tap(w, ow, t % W))) {
      first = i;
      break;
    }
  }
  note_first_bad(scratch, first);
  publish_first_bad(scratch, [&](int64_t position) {
    int64_t p, oh, ow;
    const int64_t t = at(position, &p, &oh, &ow);
    publish_device_check(slot, DeviceCheck::MaxPool2dBackward, t, H, W, p, oh, ow);
  });
}

// in = (g [N, C, Ho, Wo], indices i64 of the same shape); out = dx [N, C, H, W] (the forward
// input's layout); attrs.ints = max_pool2d's + {H, W}
template <typename T>
void max_pool2d_backward_kernel_fn(const Tensors& in, Tensors& out, const OpAttrs& a) {
  NoGradGuard no_grad;
  const PoolLayout l = pool_layout(out[0], in[0]);
  const Tensor gr = contiguous(in[0], launch_format(l.nhwc)), idx = contiguous(in[1], launch_format(l.nhwc));
  const int64_t total = out[0].numel();
  if (total == 0) return;
  const LaunchContext ctx(gr.device());
  const int64_t n_idx = idx.numel();
  if (n_idx > 0) {  // the indices' check, deferred (no host wait): cuda/host/device_check_report.h
    const Tensor scratch = zeros({kCheckScratchWords}, {.dtype = DType::I64, .device = idx.device()});  // a CheckScratch
    max_pool2d_index_check_kernel<<<ctx.blocks(n_idx), kThreads, 0, ctx.stream>>>(
        n_idx, gr.size(2), gr.size(3), max_pool_win(a.ints, 0, out[0].size(2)), max_pool_win(a.ints, 1, out[0].size(3)),
        l, idx.data<int64_t>(), static_cast<CheckScratch*>(scratch.data_ptr()), detail::device_check_slot(idx.device().index));
    MG_CUDA_CHECK_LAUNCH("max_pool2d backward index check kernel");
  }
  max_pool2d_backward_kernel<T><<<ctx.blocks(total), kThreads, 0, ctx.stream>>>(
      total, gr.size(2), gr.size(3), max_pool_win(a.ints, 0, out[0].size(2)), max_pool_win(a.ints, 1, out[0].size(3)),
      l, static_cast<const T*>(gr.data_ptr()), idx.data<int64_t>(), static_cast<T*>(out[0].data_ptr()));
  MG_CUDA_CHECK_LAUNCH("max_pool2d backward kernel");
}

template <typename T>
void reg() {
  constexpr DType d = dtype_v<T>;
  constexpr DeviceType cuda = DeviceType::CUDA;
  register_kernel(OpId::max_pool2d, cuda, d, max_pool2d_kernel<T, false>);
  register_kernel(OpId::max_pool2d_indices, cuda, d, max_pool2d_kernel<T, true>);
  register_kernel(OpId::max_pool2d_backward, cuda, d, max_pool2d_backward_kernel_fn<T>);
  register_kernel(OpId::avg_pool2d, cuda, d, avg_pool2d_kernel<T, false>);
  register_kernel(OpId::adaptive_avg_pool2d, cuda, d, avg_pool2d_kernel<T, true>);
  register_kernel(OpId::avg_pool2d_backward, cuda, d, avg_pool2d_backward_kernel_fn<T, false>);
  register_kernel(OpId::adaptive_avg_pool2d_backward, cuda, d, avg_pool2d_backward_kernel_fn<T, true>);
}

}  // namespace

void register_pool_kernels() {
  reg<double>();
  reg<float>();
  reg<Half>();
  reg<BFloat16>();
}

}  // namespace mg::cuda
