// cuDNN convolution execution (cuda/dnn.cpp): descriptors, the algorithm cache (heuristic or, in
// benchmark mode, measured), the workspace from the caching allocator with a fallback to
// algorithms that need less, and the call on the current stream. Internal to cuda/; includes no
// CUDA header. cuda/host/dnn_conv_plan.h has the host logic (keys, filtering, fallback order).
//
//   run_dnn_conv("conv2d", p, x.data_ptr(), w.data_ptr(), y.data_ptr(), /*accumulate=*/false);
#pragma once
#include <cstddef>

#include "mixgrad/cuda/host/dnn_conv_plan.h"

namespace mg::cuda {

// One convolution of problem `p` on the current stream of p.device. Pointers are device pointers
// of p.dtype, dense in p.layout (the filter too: NHWC is [O, kH, kW, C/groups]):
// - Forward:        y [N, O, Ho, Wo]  = conv(x [N, C, H, W], w)
// - BackwardInput:  x (dx)             = the input gradient of y (dy) through w
// - BackwardWeight: w (dw)             = the weight gradient from x and y (dy)
// The output is overwritten, or added to when `accumulate` (beta = 1: a bias written there first
// is added in f32 before the one rounding). Throws NotImplementedError (dnn_no_algo_message) when
// cuDNN offers no usable algorithm, OutOfMemoryError when no candidate's workspace fits.
void run_dnn_conv(const char* op, const DnnConvProblem& p, void* x, void* w, void* y, bool accumulate);

}  // namespace mg::cuda
