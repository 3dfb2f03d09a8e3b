// A CPU model of cuBLASLt running a Matmul plan (cuda/host/gemm_plan.h), straight from its
// documented semantics: column-major storage, op N/T, leading dimensions, strided batch, the host
// loop, the bias epilogue, D = alpha op(A) op(B) + beta C with C = D. It reads and writes f64
// whatever dtype the plan names (only element offsets matter), so tests run any plan on f64 data:
// tests/cuda/test_gemm_plan.cpp (the linalg ops) and tests/cuda/test_conv_plan.cpp (the conv lowering).
#pragma once
#include <cstdint>
#include <vector>

#include "cuda/host/gemm_plan.h"

namespace mg::test {

inline void execute_like_cublaslt(const cuda::GemmPlan& p) {
  using cuda::GemmCMode;
  const auto* a0 = static_cast<const double*>(p.A.ptr);
  const auto* b0 = static_cast<const double*>(p.B.ptr);
  auto* d0 = static_cast<double*>(const_cast<void*>(p.D.ptr));
  const auto* bias = static_cast<const double*>(p.bias);
  const int64_t calls = shape_numel(p.loop);
  std::vector<int64_t> idx(p.loop.size(), 0);
  for (int64_t call = 0; call < calls; ++call) {
    int64_t oa = 0, ob = 0, oo = 0;  // our a, b, out (cuBLAS's B, A, D)
    for (std::size_t i = 0; i < idx.size(); ++i) {
      oa += idx[i] * p.loop_a[i];
      ob += idx[i] * p.loop_b[i];
      oo += idx[i] * p.loop_out[i];
    }
    for (int64_t e = 0; e < p.batch_count; ++e) {
      const double* A = a0 + ob + e * p.A.batch_stride;
      const double* B = b0 + oa + e * p.B.batch_stride;
      double* D = d0 + oo + e * p.D.batch_stride;
      for (int64_t r = 0; r < p.M; ++r) {
        for (int64_t c = 0; c < p.N; ++c) {
          double acc = 0;
          for (int64_t l = 0; l < p.K; ++l) {
            const double x = p.A.transpose ? A[l + r * p.A.ld] : A[r + l * p.A.ld];  // op(A)[r, l]
            const double y = p.B.transpose ? B[c + l * p.B.ld] : B[l + c * p.B.ld];  // op(B)[l, c]
            acc += x * y;
          }
          double& d = D[r + c * p.D.ld];
          double v = p.alpha * acc;
          if (p.beta != 0.0) v += p.beta * d;
          if (p.c_mode == GemmCMode::Bias) v += bias[r];
          d = v;
        }
      }
    }
    for (std::size_t i = idx.size(); i-- > 0;) {
      if (++idx[i] < p.loop[i]) break;
      idx[i] = 0;
    }
  }
}

}  // namespace mg::test
