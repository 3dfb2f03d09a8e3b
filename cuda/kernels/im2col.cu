// CUDA kernels of the conv lowering (cuda/kernels/im2col.h): im2col, the gathering col2im, the bias
// fill, the permutation of the output gradient for the weight GEMM, and the final conversion. One
// thread per output element in a grid-stride loop; the index math is cuda/host/conv_plan.h's
// host-device code, which tests/cuda/test_conv_plan.cpp checks against the CPU's im2col/col2im.
// Decision: col2im gathers (each dx element adds its own taps in a fixed order, in f32 for
// f16/bf16, f64 for f64, and rounds once), so there are no atomics and results repeat bit for bit.
#include <cuda_runtime.h>

#include "mixgrad/core/half.h"
#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/kernels/im2col.h"
#include "mixgrad/cuda/kernels/launch.h"

namespace mg::cuda {
namespace {

#define MG_GRID_STRIDE(i, total) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (total); i += int64_t(gridDim.x) * blockDim.x)

// x [nb, C, H, W] -> col (layout) [nb * C * kH * kW * Ho * Wo]
template <typename T>
__global__ void conv_im2col_kernel(int64_t total, ConvDims g, ColLayout layout, int64_t nb, const T* __restrict__ x,
                                   T* __restrict__ col) {
  MG_GRID_STRIDE(e, total) {
    const int64_t src = im2col_source(g, layout, nb, e);
    col[e] = src < 0 ? T(0.0f) : x[src];
  }
}

// dcol [nb, G, K, Ho*Wo] (A) -> dx [nb, C, H, W] (T)
template <typename T, typename A>
__global__ void conv_col2im_kernel(int64_t total, ConvDims g, const A* __restrict__ dcol, const T* __restrict__ bias,
                                   T* __restrict__ dx) {
  MG_GRID_STRIDE(e, total) {
    const A init = bias ? static_cast<A>(bias[(e / (g.H * g.W)) % g.C]) : A(0);
    dx[e] = static_cast<T>(col2im_gather<A>(g, e, dcol, init));  // the one rounding
  }
}

// bias [O] -> y [N, O, Ho*Wo]
template <typename T>
__global__ void conv_fill_bias_kernel(int64_t total, int64_t O, int64_t hw, const T* __restrict__ bias,
                                      T* __restrict__ y) {
  MG_GRID_STRIDE(e, total) { y[e] = bias[(e / hw) % O]; }
}

// gy [nb, O, hw] -> gp [O, nb, hw] (= [G, og, nb, hw])
template <typename T>
__global__ void conv_permute_grad_kernel(int64_t total, int64_t O, int64_t nb, int64_t hw, const T* __restrict__ gy,
                                         T* __restrict__ gp) {
  MG_GRID_STRIDE(e, total) {
    const int64_t p = e % hw, n = (e / hw) % nb, o = e / (hw * nb);
    gp[e] = gy[(n * O + o) * hw + p];
  }
}

template <typename D, typename S>
__global__ void conv_convert_kernel(int64_t total, const S* __restrict__ src, D* __restrict__ dst) {
  MG_GRID_STRIDE(e, total) { dst[e] = static_cast<D>(src[e]); }
}

}  // namespace

void conv_im2col(const ConvDims& g, ColLayout layout, int64_t nb, DType dtype, const void* x, void* col,
                 Device device) {
  const int64_t total = nb * g.C * g.kk() * g.hw_out();
  if (total == 0) return;
  const LaunchContext ctx(device);
  visit_floating(dtype, "conv im2col", [&]<typename T>() {
    conv_im2col_kernel<T><<<ctx.blocks(total), kThreads, 0, ctx.stream>>>(total, g, layout, nb,
                                                                         static_cast<const T*>(x), static_cast<T*>(col));
  });
  MG_CUDA_CHECK_LAUNCH("conv im2col kernel");
}

void conv_col2im(const ConvDims& g, int64_t nb, DType dtype, const void* dcol, const void* bias, void* dx,
                 Device device) {
  const int64_t total = nb * g.C * g.H * g.W;
  if (total == 0) return;
  const LaunchContext ctx(device);
  visit_floating(dtype, "conv col2im", [&]<typename T>() {
    using A = opmath_t<T>;  // f32 for f16/bf16 (conv_acc_dtype), f64 for f64
    conv_col2im_kernel<T, A><<<ctx.blocks(total), kThreads, 0, ctx.stream>>>(
        total, g, static_cast<const A*>(dcol), static_cast<const T*>(bias), static_cast<T*>(dx));
  });
  MG_CUDA_CHECK_LAUNCH("conv col2im kernel");
}

void conv_fill_bias(const ConvDims& g, DType dtype, const void* bias, void* y, Device device) {
  const int64_t total = g.N * g.O * g.hw_out();
  if (total == 0) return;
  const LaunchContext ctx(device);
  visit_floating(dtype, "conv bias", [&]<typename T>() {
    conv_fill_bias_kernel<T><<<ctx.blocks(total), kThreads, 0, ctx.stream>>>(
        total, g.O, g.hw_out(), static_cast<const T*>(bias), static_cast<T*>(y));
  });
  MG_CUDA_CHECK_LAUNCH("conv bias fill kernel");
}

void conv_permute_grad(const ConvDims& g, int64_t nb, DType dtype, const void* gy, void* gp, Device device) {
  const int64_t total = nb * g.O * g.hw_out();
  if (total == 0) return;
  const LaunchContext ctx(device);
  visit_floating(dtype, "conv grad permute", [&]<typename T>() {
    conv_permute_grad_kernel<T><<<ctx.blocks(total), kThreads, 0, ctx.stream>>>(
        total, g.O, nb, g.hw_out(), static_cast<const T*>(gy), static_cast<T*>(gp));
  });
  MG_CUDA_CHECK_LAUNCH("conv grad permute kernel");
}

void conv_convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n, Device device) {
  if (n == 0) return;
  const LaunchContext ctx(device);
  if (src == nullptr) {  // every floating dtype's +0 is all-zero bits
    MG_CUDA_CHECK(cudaMemsetAsync(dst, 0, std::size_t(n) * dtype_size(dst_dtype), ctx.stream));
    return;
  }
  MG_ASSERT(src_dtype == DType::F32, "conv convert: expected an f32 accumulator, got ", dtype_name(src_dtype));
  visit_floating(dst_dtype, "conv convert", [&]<typename D>() {
    conv_convert_kernel<D, float><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(n, static_cast<const float*>(src),
                                                                             static_cast<D*>(dst));
  });
  MG_CUDA_CHECK_LAUNCH("conv convert kernel");
}

}  // namespace mg::cuda
