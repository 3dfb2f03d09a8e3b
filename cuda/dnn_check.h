// Checked cuDNN calls (DESIGN §7): a failing status throws mg::CudaError naming the call, the
// status and the current device:
//
//   cuDNN error: cudnnConvolutionForward(...) returned CUDNN_STATUS_BAD_PARAM (...) on cuda:0
//
// Internal to cuda/: it includes cuDNN's header (only cuda/dnn.cpp includes this file).
#pragma once
#include <cudnn.h>

namespace mg::cuda::detail {

[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line);
inline void check_cudnn(cudnnStatus_t status, const char* call, const char* file, int line) {
  if (status != CUDNN_STATUS_SUCCESS) throw_cudnn_error(status, call, file, line);
}

}  // namespace mg::cuda::detail

#define MG_CUDNN_CHECK(call) ::mg::cuda::detail::check_cudnn((call), #call, __FILE__, __LINE__)
