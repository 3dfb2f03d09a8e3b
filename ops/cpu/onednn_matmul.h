// GEMMs through oneDNN's matmul primitive (brgemm kernels): the CPU GEMM driver's (ops/cpu/gemm.cpp)
// path for the products where it measured faster than oneDNN's BLAS-like GEMMs (rules and numbers:
// onednn_matmul.cpp):
// - bf16 on AMX tiles (and, from 2 threads on, AMD's AVX512-BF16 for x @ W^T and dY @ W) instead
//   of dnnl_gemm_bf16bf16f32, the f32 result rounded to bf16 by the driver;
// - f32 weight gradients dY^T @ x whose transposed dY has a leading dimension that is a multiple of
//   1024 floats (4 KiB), and products x @ W^T whose transposed W has such a leading dimension,
//   instead of dnnl_sgemm, which reads such an operand up to 2x slower (3x at 2 threads).
// Both accumulate in f32, as the BLAS-like GEMMs do.
//
//   if (!(matmul_bf16_picks(a_col, n, k, m) && matmul_bf16(a, a_col, lda, b, b_col, ldb, out, n, k, m, 1.f, 0.f)))
//     run_the_blas_like_gemm();
#pragma once
#include <cstdint>

#include "mixgrad/core/half.h"

namespace mg::cpu {

// Whether oneDNN's effective ISA `isa` (a dnnl_cpu_isa_t) includes `want`: the values are bit
// masks, not an order (avx2_vnni, 0x407, is numerically above avx512_core_amx, 0x3e7, without
// any AVX-512), so "at least" is "every bit of want set".
bool onednn_isa_includes(unsigned isa, unsigned want);

// Whether oneDNN runs bf16 matmul primitives on AMX on this processor (its effective ISA
// includes avx512_core_amx: AMX exposed by the CPU and allowed by the kernel).
bool onednn_amx_available();

// Whether bf16 GEMMs and convolutions should run natively in bf16 here (oneDNN's AVX512-BF16 or
// AMX kernels, f32 accumulation) rather than widened to f32 for the f32 kernels. True on AMX
// processors, and on AMD processors with AVX512-BF16 (Zen 4 and later), whose vdpbf16ps runs at
// twice the f32 FMA's flop rate: oneDNN's bf16 GEMM measured 1.8-2.4x faster than the f32 path
// there. False on Intel processors with AVX512-BF16 but no AMX, where it measured 1.1-2.2x slower
// (ops/cpu/gemm.cpp), and wherever oneDNN has no bf16 kernels. Fixed per processor, so a machine's
// results do not depend on timing.
bool native_bf16_preferred();

// Whether the driver runs this bf16 product (out[n, m] = A[n, k] @ B[k, m], A col-major when
// a_col) here, outside parallel regions, for the measured shapes: on AMX processors, and on AMD's
// AVX512-BF16 ones (native_bf16_preferred without AMX) from 2 threads on for a row-major A and
// m <= 1024.
bool matmul_bf16_picks(bool a_col, int64_t n, int64_t k, int64_t m);

// out[n, m] (dense row-major f32) = alpha * A @ B + beta * out. A [n, k] row-major with leading
// dimension lda, or col-major (element (i, j) at a[i + j * lda]) when a_col; B [k, m] likewise.
// out is not read when beta == 0. The primitive for the shape is cached. Returns false, touching
// nothing, where oneDNN has no brgemm kernel for these strides: the caller then runs its GEMM.
bool matmul_bf16(const BFloat16* a, bool a_col, int64_t lda, const BFloat16* b, bool b_col, int64_t ldb, float* out,
                 int64_t n, int64_t k, int64_t m, float alpha, float beta);

// How many bf16 products this process has run here (tests check which path ran).
int64_t matmul_bf16_calls();

// Whether oneDNN's matmul primitive has brgemm kernels for f32 on this processor (its effective ISA
// is avx512_core or above; below, it runs the same jit kernels as dnnl_sgemm).
bool onednn_f32_brgemm_available();

// Whether the driver runs this f32 product here, outside parallel regions, for n >= 16 and
// k >= 1024: `a` col-major (a transposed dY) with a leading dimension that is a multiple of 1024 and
// m <= 512, or `b` col-major (a transposed weight, x @ W^T) with a leading dimension that is a
// multiple of 1024.
bool matmul_f32_picks(bool a_col, int64_t lda, bool b_col, int64_t ldb, int64_t n, int64_t k, int64_t m);

// matmul_bf16 for f32 operands. Returns false, touching nothing, where oneDNN offers no brgemm
// kernel (processors below avx512_core, leading dimensions it does not take).
bool matmul_f32(const float* a, bool a_col, int64_t lda, const float* b, bool b_col, int64_t ldb, float* out,
                int64_t n, int64_t k, int64_t m, float alpha, float beta);

// How many f32 products this process has run here.
int64_t matmul_f32_calls();

}  // namespace mg::cpu
