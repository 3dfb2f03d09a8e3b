// The one CPU GEMM driver behind matmul, mm, bmm, addmm, baddbmm and linear:
//   out[b] = beta * c[b] + alpha * a[b] @ b[b]     for every index b of a (broadcast) batch,
// with arbitrary element strides on a, b and c (0 for broadcast dims) and a dense row-major out.
//
// Decision: f32 and bf16 run oneDNN's GEMM (bf16 on AMX), f64 and small products Eigen's, both on
// the raw pointers (row-major or col-major with a leading dimension, so transposed views are not
// copied); bf16 accumulates in f32 and f16 is converted to f32 scratch for the f32 GEMM, and the
// output is rounded once (like cuBLAS COMPUTE_32F). Eigen's own half/bfloat16 GEMM is never used
// (10-400x slower than its f32 GEMM). Measurements: ops/cpu/gemm.cpp.
//
//   mg::cpu::GemmProblem p{.batch = {4}, .n = 3, .k = 5, .m = 2, ...};
//   mg::cpu::gemm<float>(p);
#pragma once
#include <cstdint>

#include "mixgrad/core/shape.h"

namespace mg::cpu {

// One strided matrix operand: element (i, j) of batch entry `b` lives at
//   ptr + offset(b) + i * rs + j * cs            (in elements of the operand's dtype)
// where offset(b) = sum over batch dims of index_d * batch_strides[d].
struct GemmOperand {
  const void* ptr = nullptr;  // nullptr: absent (only allowed for c)
  Strides batch_strides;      // one per dim of GemmProblem::batch; 0 where broadcast
  int64_t rs = 0;             // row stride
  int64_t cs = 0;             // column stride
};

struct GemmProblem {
  Shape batch;         // broadcast batch shape (empty: one matrix)
  int64_t n = 0;       // rows of a and out
  int64_t k = 0;       // columns of a, rows of b
  int64_t m = 0;       // columns of b and out
  GemmOperand a;       // [batch..., n, k]
  GemmOperand b;       // [batch..., k, m]
  GemmOperand c;       // [batch..., n, m] (broadcast strides allowed) or absent
  void* out = nullptr; // dense row-major [batch..., n, m]
  double alpha = 1.0;
  double beta = 0.0;   // c is read only when present and beta != 0 (so NaN in c is ignored at 0)
};

// T is the dtype of a, b, c and out: double, float, Half or BFloat16.
template <typename T>
void gemm(const GemmProblem& p);

}  // namespace mg::cpu
