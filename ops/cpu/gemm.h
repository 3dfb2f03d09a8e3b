// The one CPU GEMM driver behind matmul, mm, bmm, addmm, baddbmm and linear:
//   out[b] = beta * c[b] + alpha * a[b] @ b[b]     for every index b of a (broadcast) batch,
// with arbitrary element strides on a, b and c (0 for broadcast dims) and a dense row-major out.
//
// Decision: f32 and bf16 run oneDNN's GEMM (bf16 natively on AMX and AMD Zen 4+ processors, where
// it measured faster; the shapes listed in ops/cpu/onednn_matmul.h on its matmul primitive), f64 and
// small products Eigen's, all on the raw pointers (row-major or col-major with a leading dimension, so
// transposed views are not copied); bf16 accumulates in f32, and f16 (and bf16 on other
// processors) is converted to f32 scratch for the f32 GEMM; the output is rounded once (like
// cuBLAS COMPUTE_32F). Eigen's own half/bfloat16 GEMM is never used (10-400x slower than its f32
// GEMM). Measurements: ops/cpu/gemm.cpp.
//
// The problem (GemmProblem, ops/gemm_problem.h) is device-neutral; gemm_problem() builds it for
// each linear-algebra op.
//
//   mg::cpu::gemm<float>(mg::gemm_problem(mg::OpId::mm, {a, b}, out, {}));
#pragma once
#include <optional>

#include "mixgrad/ops/gemm_problem.h"

namespace mg::cpu {

// T is the dtype of a, b, c and out: double, float, Half or BFloat16.
template <typename T>
void gemm(const GemmProblem& p);
// The same product with out in the accumulation type acc_t<T> (float for f16/bf16/f32, double for
// f64) and not rounded: a, b and c are T, out is acc_t<T>*. For kernels that go on computing with
// the sums (fused attention's scores and gradients), so f16/bf16 products round only at the end.
template <typename T>
void gemm_acc(const GemmProblem& p);

// Whether oneDNN has a bf16 GEMM on this processor (oneDNN 2.6 needs avx512_core: AVX512-BF16 and
// AMX natively, emulated below). The driver uses it where native_bf16_preferred() too
// (GemmPaths::bf16_native).
bool onednn_bf16_gemm_available();

// The driver's processor-dependent choices, detected once (gemm_detected_paths()) and used by
// every call (gemm_paths()):
struct GemmPaths {
  // bf16 products run oneDNN's native bf16 GEMM (detected where native_bf16_preferred(): AMX, and
  // AMD's AVX512-BF16, 1.8-2.4x faster there; on Intel's AVX512-BF16 alone it measured 1.1-2.2x
  // slower than the f32 GEMM); false: both operands are converted to f32 and run the f32 GEMM (f32
  // accumulation and one rounding either way; the sums' order differs).
  bool bf16_native = false;
  // oneDNN 2.6's AVX2 sgemm (processors without avx512_core) runs about 2x slower when `a` is
  // transposed (a weight gradient dY^T @ x) with a leading dimension that is a multiple of 512
  // floats and m < 512, or when `b` is row-major with a leading dimension that is a multiple of 256
  // floats and k >= 512 (cache-set aliasing as it reads the operand); then such an operand is first
  // copied, or converted from f16/bf16, with a leading dimension 16 floats longer. The exact rules
  // and measurements: ops/cpu/gemm.cpp (pad_for_aliasing_a/_b).
  bool pad_aliased = false;
  // bf16 products of the shapes measured faster there run oneDNN's matmul primitive (brgemm on AMX
  // tiles; on AMD's AVX512-BF16 some shapes from 2 threads on) instead of its BLAS-like bf16 GEMM:
  // ops/cpu/onednn_matmul.h. Detected where bf16_native is.
  bool bf16_matmul = false;
  // f32 weight gradients dY^T @ x whose transposed dY has a leading dimension that is a multiple of
  // 1024 floats (k >= 1024, m <= 512), and products x @ W^T whose transposed W has one (k >= 1024),
  // run oneDNN's matmul primitive instead of its sgemm, which reads them up to 2-3x slower
  // (processors with avx512_core and up): ops/cpu/onednn_matmul.h. Also the f16 and bf16 products
  // converted to f32.
  bool f32_matmul = false;
};
GemmPaths gemm_detected_paths();
GemmPaths gemm_paths();

// Test hook: every call uses `paths` until gemm_force_paths(std::nullopt) restores the detected
// ones, so both sides of each choice are tested on any processor. bf16_native can be forced on only
// where oneDNN has a bf16 GEMM (onednn_bf16_gemm_available()); bf16_matmul only where it is detected,
// f32_matmul only where oneDNN has f32 brgemm kernels (onednn_f32_brgemm_available()).
//   mg::cpu::gemm_force_paths(mg::cpu::GemmPaths{.bf16_native = false, .pad_aliased = true});
void gemm_force_paths(const std::optional<GemmPaths>& paths);

}  // namespace mg::cpu
