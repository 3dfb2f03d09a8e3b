// Launchers of the conv lowering's device steps (cuda/kernels/im2col.cu), on the current stream
// of `device`, for the drivers of cuda/host/conv_plan.h; the per-element index math is that
// header's host-device code. Internal to cuda/; includes no CUDA header.
//
//   conv_im2col(g, ColLayout::ImageMajor, nb, DType::F16, x_ptr, col_ptr, x.device());
#pragma once
#include <cstdint>

#include "mixgrad/core/device.h"
#include "mixgrad/core/dtype.h"
#include "mixgrad/cuda/host/conv_plan.h"

namespace mg::cuda {

// col (dtype, `layout`) of the nb images x [nb, C, H, W] (dtype, dense); padding taps are 0.
void conv_im2col(const ConvDims& g, ColLayout layout, int64_t nb, DType dtype, const void* x, void* col,
                 Device device);
// dx [nb, C, H, W] (dtype) = bias[c] (dtype, or nullptr) + the taps of dcol [nb, G, K, Ho*Wo]
// (conv_acc_dtype(dtype)), gathered in the accumulator and rounded once.
void conv_col2im(const ConvDims& g, int64_t nb, DType dtype, const void* dcol, const void* bias, void* dx,
                 Device device);
// y [N, O, Ho, Wo] (dtype) = bias [O] broadcast.
void conv_fill_bias(const ConvDims& g, DType dtype, const void* bias, void* y, Device device);
// gp [G, og, nb, Ho*Wo] = gy [nb, O, Ho, Wo] (dtype), exact.
void conv_permute_grad(const ConvDims& g, int64_t nb, DType dtype, const void* gy, void* gp, Device device);
// dst (dst_dtype) = src (f32: the accumulator) for n elements, rounded once; src nullptr: dst = 0.
void conv_convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n, Device device);

}  // namespace mg::cuda
