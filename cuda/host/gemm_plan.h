// How a GemmProblem (ops/gemm_problem.h) runs on cuBLASLt, decided by plain host code so that every
// choice is unit-tested on the CPU (tests/cuda/test_gemm_plan.cpp); cuda/blas.cpp only executes it.
//
// Decision: cuBLASLt is column-major and our out is row-major, so out [n, m] (ld m) is read as the
// column-major D [m, n] = b^T a^T: cuBLAS's A is our b^T (m x k), its B our a^T (k x n). A row-major
// operand is then a column-major one as is (op N), a column-major one (a transposed view, linear's
// weight) is passed with op T; either way with its own leading dimension, so transposed and
// sliced views are never copied. Only an operand with neither a unit row nor a unit column stride
// (a step slice, a broadcast inside the matrix) or with overlapping rows is copied first. Batch
// dims become one strided batch where they collapse (a uniform stride per operand, 0 where
// broadcast), else a host loop over the leading dims around strided-batch calls; a batch over a
// shared b (x [B, T, in] @ W) folds into the rows: one big GEMM.
//
//   const GemmPlan plan = plan_gemm(gemm_problem(op, in, out, attrs), DType::BF16, allow_tf32());
//   if (plan.copy_a || plan.copy_b) ... make those inputs contiguous and plan again
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mixgrad/core/dtype.h"
#include "mixgrad/ops/gemm_problem.h"

namespace mg::cuda {

// What the kernel does.
enum class GemmKind : uint8_t {
  Empty,   // out has no element: nothing to do
  Zero,    // k == 0 without c (or beta == 0): out = 0
  ScaleC,  // k == 0 with c and beta != 0: out = beta * c broadcast
  Matmul,  // a cuBLASLt matmul (after the preparations below)
};

// The cuBLASLt compute type (CUBLAS_COMPUTE_*) and the scale type of alpha/beta.
enum class GemmCompute : uint8_t {
  F64,        // CUBLAS_COMPUTE_64F, double scale (f64)
  F32,        // CUBLAS_COMPUTE_32F, float scale (f32 strict; f16/bf16 on Tensor Cores, f32 accumulation)
  F32FastTf32 // CUBLAS_COMPUTE_32F_FAST_TF32, float scale (f32 when allow_tf32())
};

// How c enters.
enum class GemmCMode : uint8_t {
  None,      // no c (or beta == 0): D = alpha op(A) op(B), C not read (beta 0)
  Bias,      // linear's bias: CUBLASLT_EPILOGUE_BIAS, a vector of length m (the rows of the
             // column-major D) added to every column, i.e. to every row of out; beta 0
  CopyToOut, // c broadcast is copied into out first, then D = alpha op(A) op(B) + beta D in place
};

// One matrix as cuBLASLt sees it: the stored column-major matrix [rows, cols] with leading
// dimension ld, used as is (op N) or transposed (op T), and the element stride to the next matrix
// of the strided batch.
struct LtMatrix {
  const void* ptr = nullptr;  // batch entry 0
  bool transpose = false;
  int64_t rows = 0, cols = 0, ld = 0;
  int64_t batch_stride = 0;
  int alignment = 0;  // bytes: the largest power of two <= 256 dividing ptr and every offset used
  bool operator==(const LtMatrix&) const = default;
};

struct GemmPlan {
  GemmKind kind = GemmKind::Empty;
  // The op's input that must be made contiguous before planning again (a, b of the problem).
  bool copy_a = false, copy_b = false;
  GemmCMode c_mode = GemmCMode::None;
  const void* bias = nullptr;  // Bias: the vector [m]
  int bias_alignment = 0;
  // The column-major product D [M, N] = op(A) [M, K] @ op(B) [K, N].
  int64_t M = 0, N = 0, K = 0;
  LtMatrix A;  // our b^T
  LtMatrix B;  // our a^T
  LtMatrix D;  // our out (also C, for CopyToOut)
  int64_t batch_count = 1;  // strided batch of one cuBLASLt call
  // Leading batch dims that did not collapse: one call per index, offset (in elements) by
  // index . stride for a, b and out. Empty: one call.
  Shape loop;
  Strides loop_a, loop_b, loop_out;
  double alpha = 1.0, beta = 0.0;  // beta as passed to cuBLASLt (0 unless CopyToOut)
  DType dtype = DType::F32;        // of A and B (and of C, D and the bias unless out_dtype says otherwise)
  DType out_dtype = DType::F32;    // of C, D and the bias: dtype, or f32 for f16/bf16 inputs (GemmPlanOptions)
  GemmCompute compute = GemmCompute::F32;
  // f16/bf16: split-K partial sums are kept in f32 (CUBLASLT_REDUCTION_SCHEME_NONE | COMPUTE_TYPE),
  // never rounded to the output type in between, so the output is rounded once.
  bool f32_reductions_only = false;
  // f16/bf16 with the bias epilogue: no split-K reduction at all (CUBLASLT_REDUCTION_SCHEME_NONE):
  // PyTorch found cuBLASLt adding the bias in the output type after a split-K reduction
  // (pytorch/pytorch#180875), a second rounding. Without split-K, bias + accumulator is rounded once.
  bool no_split_k = false;
};

struct GemmPlanOptions {
  bool allow_tf32 = false;            // f32 on TF32 Tensor Cores
  bool allow_bias_epilogue = true;    // false: linear's bias goes through CopyToOut
  // The dtype of out (and c): none means the inputs' dtype. f16/bf16 inputs may ask for an f32
  // out (cuBLASLt: A/B 16F or 16BF, C/D 32F under CUBLAS_COMPUTE_32F), so that a product that is
  // summed further (the conv's columns before col2im, its per-chunk weight gradients) is never
  // rounded to 16 bits in between.
  std::optional<DType> out_dtype;
};

// The plan for `p` with operands of dtype `dtype` (f64, f32, f16 or bf16) and an output of
// options.out_dtype (default `dtype`; only f32 may differ, and only for f16/bf16 inputs).
GemmPlan plan_gemm(const GemmProblem& p, DType dtype, GemmPlanOptions options = {});

// The largest power of two <= 256 that divides `address` and every byte offset in `offsets`.
int alignment_of(const void* address, const std::vector<int64_t>& byte_offsets = {});

// The heuristic cache's key of a Matmul plan: every property cuBLASLt's choice of algorithm
// depends on (dtype, compute type, ops, shapes, leading dims, batch strides and count, epilogue,
// alignments) and nothing else (not the pointers), plus the device.
std::vector<int64_t> heuristic_key(const GemmPlan& plan, int device);

// One line describing the plan, for messages and test failures:
// "matmul f32 D[m=5, n=3] = A[5x4 T ld 4] B[4x3 N ld 4] x batch 1, c none".
std::string describe(const GemmPlan& plan);

}  // namespace mg::cuda
