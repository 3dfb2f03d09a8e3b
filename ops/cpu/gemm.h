// The one CPU GEMM driver behind matmul, mm, bmm, addmm, baddbmm and linear:
//   out[b] = beta * c[b] + alpha * a[b] @ b[b]     for every index b of a (broadcast) batch,
// with arbitrary element strides on a, b and c (0 for broadcast dims) and a dense row-major out.
//
// Decision: f32 and bf16 run oneDNN's GEMM (bf16 natively where oneDNN has it: avx512_core and
// up), f64 and small products Eigen's, both on the raw pointers (row-major or col-major with a
// leading dimension, so transposed views are not copied); bf16 accumulates in f32, and f16 (and
// bf16 on processors without a native bf16 GEMM) is converted to f32 scratch for the f32 GEMM; the
// output is rounded once (like cuBLAS COMPUTE_32F). Eigen's own half/bfloat16 GEMM is never used
// (10-400x slower than its f32 GEMM). Measurements: ops/cpu/gemm.cpp.
//
// The problem (GemmProblem, ops/gemm_problem.h) is device-neutral; gemm_problem() builds it for
// each linear-algebra op.
//
//   mg::cpu::gemm<float>(mg::gemm_problem(mg::OpId::mm, {a, b}, out, {}));
#pragma once
#include "mixgrad/ops/gemm_problem.h"

namespace mg::cpu {

// T is the dtype of a, b, c and out: double, float, Half or BFloat16.
template <typename T>
void gemm(const GemmProblem& p);

// Whether bf16 products run oneDNN's native bf16 GEMM on this processor (AVX512-BF16 or AMX: oneDNN
// 2.6 needs avx512_core); without it they are converted to f32 and run the f32 GEMM.
bool onednn_bf16_gemm_available();

}  // namespace mg::cpu
