// How each linear-algebra op becomes a GemmProblem (ops/gemm_problem.h): shapes and strides of
// the operands broadcast against [batch..., rows, cols]; shapes were validated by the op's infer
// rule (ops/linalg.cpp), so nothing here checks them again.
#include "mixgrad/ops/gemm_problem.h"

#include "mixgrad/core/error.h"

namespace mg {
namespace {

// The operand `t` (shape `shape`, strides `strides`, possibly fewer dims) broadcast against
// [batch..., rows, cols]: right-aligned, stride 0 where `t` lacks a dim or has size 1 there.
GemmOperand operand(const void* ptr, const Shape& shape, const Strides& strides, const Shape& batch,
                    int input) {
  const int64_t full = int64_t(batch.size()) + 2;
  const int64_t lead = full - int64_t(shape.size());
  auto stride_at = [&](int64_t d) -> int64_t {
    const int64_t td = d - lead;
    if (td < 0 || shape[std::size_t(td)] == 1) return 0;
    return strides[std::size_t(td)];
  };
  GemmOperand op;
  op.ptr = ptr;
  op.input = input;
  for (int64_t d = 0; d < int64_t(batch.size()); ++d) op.batch_strides.push_back(stride_at(d));
  op.rs = stride_at(full - 2);
  op.cs = stride_at(full - 1);
  return op;
}
GemmOperand operand(const Tensors& in, int input, const Shape& batch) {
  const Tensor& t = in[std::size_t(input)];
  return operand(t.data_ptr(), t.shape(), t.strides(), batch, input);
}

Shape leading(const Shape& s, int64_t drop) { return Shape(s.begin(), s.end() - drop); }

// numpy matmul: a 1-D a is a row [1, k], a 1-D b a column [k, 1]; the output is dense
// [batch..., n, m] with the 1-D dims absent, which is the same memory.
GemmProblem matmul_problem(const Tensors& in, const Tensor& out) {
  const Tensor& a = in[0];
  const Tensor& b = in[1];
  const bool a1 = a.dim() == 1, b1 = b.dim() == 1;
  GemmProblem p;
  p.batch = leading(out.shape(), (a1 ? 0 : 1) + (b1 ? 0 : 1));
  p.n = a1 ? 1 : a.size(-2);
  p.k = a.size(-1);
  p.m = b1 ? 1 : b.size(-1);
  p.a = a1 ? operand(a.data_ptr(), {1, p.k}, {0, a.stride(0)}, p.batch, 0) : operand(in, 0, p.batch);
  p.b = b1 ? operand(b.data_ptr(), {p.k, 1}, {b.stride(0), 0}, p.batch, 1) : operand(in, 1, p.batch);
  return p;
}

// mm [n, k] @ [k, m] and bmm [B, n, k] @ [B, k, m].
GemmProblem mm_problem(const Tensors& in, const Tensor& out) {
  GemmProblem p;
  p.batch = leading(out.shape(), 2);
  p.n = in[0].size(-2);
  p.k = in[0].size(-1);
  p.m = in[1].size(-1);
  p.a = operand(in, 0, p.batch);
  p.b = operand(in, 1, p.batch);
  return p;
}

// addmm / baddbmm: (c, a, b) -> beta * c + alpha * a @ b, c broadcast to the output.
GemmProblem addmm_problem(const Tensors& in, const Tensor& out, const OpAttrs& attrs) {
  GemmProblem p;
  p.batch = leading(out.shape(), 2);
  p.n = in[1].size(-2);
  p.k = in[1].size(-1);
  p.m = in[2].size(-1);
  p.c = operand(in, 0, p.batch);
  p.a = operand(in, 1, p.batch);
  p.b = operand(in, 2, p.batch);
  p.alpha = attrs.alpha;
  p.beta = attrs.beta;
  // alpha = 0: the product is not formed, as BLAS (A and B "need not be set") and PyTorch: a NaN
  // or inf in a or b does not reach the output. An empty inner sum gives exactly beta * c.
  if (attrs.alpha == 0.0) p.k = 0;
  return p;
}

// linear: x [..., in] @ weight[out, in]^T + bias[out]. The weight is read transposed in place
// (strides swapped) and the bias broadcast over rows (row stride 0).
GemmProblem linear_problem(const Tensors& in) {
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  GemmProblem p;
  p.k = x.size(-1);
  p.m = w.size(0);
  if (x.dim() == 1) {
    p.n = 1;
    p.a = operand(x.data_ptr(), {1, p.k}, {0, x.stride(0)}, p.batch, 0);
  } else {
    p.batch = leading(x.shape(), 2);
    p.n = x.size(-2);
    p.a = operand(in, 0, p.batch);
  }
  p.b = operand(w.data_ptr(), {p.k, p.m}, {w.stride(1), w.stride(0)}, p.batch, 1);
  if (in.size() > 2) {
    p.c = operand(in[2].data_ptr(), {1, p.m}, {0, in[2].stride(0)}, p.batch, 2);
    p.beta = 1.0;
    p.c_is_row_bias = true;
  }
  return p;
}

}  // namespace

GemmProblem gemm_problem(OpId op, const Tensors& in, const Tensor& out, const OpAttrs& attrs) {
  GemmProblem p;
  switch (op) {
    case OpId::matmul: p = matmul_problem(in, out); break;
    case OpId::mm:
    case OpId::bmm: p = mm_problem(in, out); break;
    case OpId::addmm:
    case OpId::baddbmm: p = addmm_problem(in, out, attrs); break;
    case OpId::linear: p = linear_problem(in); break;
    default: MG_ASSERT(false, "gemm_problem: ", op_name(op), " is not a linear-algebra op");
  }
  p.out = out.data_ptr();
  return p;
}

}  // namespace mg
