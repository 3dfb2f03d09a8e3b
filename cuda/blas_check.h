// Checked cuBLAS/cuBLASLt calls (DESIGN §7): a failing status throws mg::CudaError naming the
// call, the status and the current device:
//
//   cuBLAS error: cublasLtMatmul(...) returned CUBLAS_STATUS_INVALID_VALUE (an invalid value was
//   used as an argument) on cuda:0
//
// Internal to cuda/: it includes cuBLASLt's header.
#pragma once
#include <cublasLt.h>

namespace mg::cuda::detail {

[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);
inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) throw_cublas_error(status, call, file, line);
}

}  // namespace mg::cuda::detail

#define MG_CUBLAS_CHECK(call) ::mg::cuda::detail::check_cublas((call), #call, __FILE__, __LINE__)
