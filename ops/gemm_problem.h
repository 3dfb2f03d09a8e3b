// The device-neutral description of one GEMM, shared by the CPU driver (ops/cpu/gemm.h) and the
// CUDA one (cuda/blas.h):
//   out[b] = beta * c[b] + alpha * a[b] @ b[b]     for every index b of a (broadcast) batch,
// with arbitrary element strides on a, b and c (0 for broadcast dims) and a dense row-major out.
// gemm_problem() is the one place that says how each linear-algebra op (matmul, mm, bmm, addmm,
// baddbmm, linear) maps its tensors onto this description, so both devices read every op's
// operands the same way.
//
//   const mg::GemmProblem p = mg::gemm_problem(mg::OpId::linear, {x, w, bias}, out, {});
//   mg::cpu::gemm<float>(p);        // or mg::cuda::gemm<float>(p)
#pragma once
#include <cstdint>

#include "mixgrad/core/shape.h"
#include "mixgrad/core/tensor.h"
#include "mixgrad/ops/op.h"

namespace mg {

// One strided matrix operand: element (i, j) of batch entry `b` lives at
//   ptr + offset(b) + i * rs + j * cs            (in elements of the operand's dtype)
// where offset(b) = sum over batch dims of index_d * batch_strides[d].
struct GemmOperand {
  const void* ptr = nullptr;  // nullptr: absent (only allowed for c)
  Strides batch_strides;      // one per dim of GemmProblem::batch; 0 where broadcast
  int64_t rs = 0;             // row stride
  int64_t cs = 0;             // column stride
  int input = -1;             // which of the op's inputs this operand reads (-1: none/internal)
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
                       // (addmm/baddbmm with alpha = 0 come with k = 0: a and b are not read either)
  bool c_is_row_bias = false;  // c is a vector [m] broadcast over every row and batch (linear)
};

// One matrix operand at element strides (rs, cs), for kernels that build their own products.
inline GemmOperand gemm_matrix(const void* ptr, int64_t rs, int64_t cs) {
  GemmOperand o;
  o.ptr = ptr;
  o.rs = rs;
  o.cs = cs;
  return o;
}
// out [n, m] (dense row-major) = alpha a [n, k] @ b [k, m]: one matrix, no c.
inline GemmProblem single_gemm(int64_t n, int64_t k, int64_t m, const GemmOperand& a, const GemmOperand& b, void* out,
                               double alpha = 1.0) {
  GemmProblem p;
  p.n = n;
  p.k = k;
  p.m = m;
  p.a = a;
  p.b = b;
  p.out = out;
  p.alpha = alpha;
  return p;
}

// The GEMM that computes op `op` (matmul, mm, bmm, addmm, baddbmm or linear) on inputs `in`
// (validated by the op's infer rule) into `out` (dense, the inferred shape). Throws mg::Error
// for any other op.
GemmProblem gemm_problem(OpId op, const Tensors& in, const Tensor& out, const OpAttrs& attrs);

}  // namespace mg
