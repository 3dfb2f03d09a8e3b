// CPU kernels of the linear-algebra ops: each describes its operands (shapes, strides, broadcast
// batch dims) as a GemmProblem and runs the shared GEMM driver (ops/cpu/gemm.h), which accumulates
// f16/bf16 products in f32 and rounds the output once. Shapes were validated by the op's infer rule.
#include "mixgrad/ops/cpu/gemm.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/register.h"

namespace mg::cpu {
namespace {

// The operand `t` (shape `shape`, strides `strides`, possibly fewer dims) broadcast against
// [batch..., rows, cols]: right-aligned, stride 0 where `t` lacks a dim or has size 1 there.
GemmOperand operand(const void* ptr, const Shape& shape, const Strides& strides, const Shape& batch) {
  const int64_t full = int64_t(batch.size()) + 2;
  const int64_t lead = full - int64_t(shape.size());
  auto stride_at = [&](int64_t d) -> int64_t {
    const int64_t td = d - lead;
    if (td < 0 || shape[std::size_t(td)] == 1) return 0;
    return strides[std::size_t(td)];
  };
  GemmOperand op;
  op.ptr = ptr;
  for (int64_t d = 0; d < int64_t(batch.size()); ++d) op.batch_strides.push_back(stride_at(d));
  op.rs = stride_at(full - 2);
  op.cs = stride_at(full - 1);
  return op;
}
GemmOperand operand(const Tensor& t, const Shape& batch) {
  return operand(t.data_ptr(), t.shape(), t.strides(), batch);
}

Shape leading(const Shape& s, int64_t drop) { return Shape(s.begin(), s.end() - drop); }

// numpy matmul: a 1-D a is a row [1, k], a 1-D b a column [k, 1]; the output is dense
// [batch..., n, m] with the 1-D dims absent, which is the same memory.
template <typename T>
void matmul_kernel(const Tensors& in, Tensors& out, const OpAttrs&) {
  const Tensor& a = in[0];
  const Tensor& b = in[1];
  const bool a1 = a.dim() == 1, b1 = b.dim() == 1;
  GemmProblem p;
  p.batch = leading(out[0].shape(), (a1 ? 0 : 1) + (b1 ? 0 : 1));
  p.n = a1 ? 1 : a.size(-2);
  p.k = a.size(-1);
  p.m = b1 ? 1 : b.size(-1);
  p.a = a1 ? operand(a.data_ptr(), {1, p.k}, {0, a.stride(0)}, p.batch) : operand(a, p.batch);
  p.b = b1 ? operand(b.data_ptr(), {p.k, 1}, {b.stride(0), 0}, p.batch) : operand(b, p.batch);
  p.out = out[0].data_ptr();
  gemm<T>(p);
}

// mm [n, k] @ [k, m] and bmm [B, n, k] @ [B, k, m].
template <typename T>
void mm_kernel(const Tensors& in, Tensors& out, const OpAttrs&) {
  GemmProblem p;
  p.batch = leading(out[0].shape(), 2);
  p.n = in[0].size(-2);
  p.k = in[0].size(-1);
  p.m = in[1].size(-1);
  p.a = operand(in[0], p.batch);
  p.b = operand(in[1], p.batch);
  p.out = out[0].data_ptr();
  gemm<T>(p);
}

// addmm / baddbmm: (c, a, b) -> beta * c + alpha * a @ b, c broadcast to the output.
template <typename T>
void addmm_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  GemmProblem p;
  p.batch = leading(out[0].shape(), 2);
  p.n = in[1].size(-2);
  p.k = in[1].size(-1);
  p.m = in[2].size(-1);
  p.c = operand(in[0], p.batch);
  p.a = operand(in[1], p.batch);
  p.b = operand(in[2], p.batch);
  p.out = out[0].data_ptr();
  p.alpha = attrs.alpha;
  p.beta = attrs.beta;
  gemm<T>(p);
}

// linear: x [..., in] @ weight[out, in]^T + bias[out]. The weight is read transposed in place
// (strides swapped) and the bias broadcast over rows (row stride 0).
template <typename T>
void linear_kernel(const Tensors& in, Tensors& out, const OpAttrs&) {
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  GemmProblem p;
  p.k = x.size(-1);
  p.m = w.size(0);
  if (x.dim() == 1) {
    p.n = 1;
    p.a = operand(x.data_ptr(), {1, p.k}, {0, x.stride(0)}, p.batch);
  } else {
    p.batch = leading(x.shape(), 2);
    p.n = x.size(-2);
    p.a = operand(x, p.batch);
  }
  p.b = operand(w.data_ptr(), {p.k, p.m}, {w.stride(1), w.stride(0)}, p.batch);
  if (in.size() > 2) {
    p.c = operand(in[2].data_ptr(), {1, p.m}, {0, in[2].stride(0)}, p.batch);
    p.beta = 1.0;
  }
  p.out = out[0].data_ptr();
  gemm<T>(p);
}

void reg_all(OpId op, KernelFn f64, KernelFn f32, KernelFn f16, KernelFn bf16) {
  register_kernel(op, DeviceType::CPU, DType::F64, f64);
  register_kernel(op, DeviceType::CPU, DType::F32, f32);
  register_kernel(op, DeviceType::CPU, DType::F16, f16);
  register_kernel(op, DeviceType::CPU, DType::BF16, bf16);
}

}  // namespace

void register_linalg_kernels() {
  reg_all(OpId::matmul, matmul_kernel<double>, matmul_kernel<float>, matmul_kernel<Half>,
          matmul_kernel<BFloat16>);
  reg_all(OpId::mm, mm_kernel<double>, mm_kernel<float>, mm_kernel<Half>, mm_kernel<BFloat16>);
  reg_all(OpId::bmm, mm_kernel<double>, mm_kernel<float>, mm_kernel<Half>, mm_kernel<BFloat16>);
  reg_all(OpId::addmm, addmm_kernel<double>, addmm_kernel<float>, addmm_kernel<Half>,
          addmm_kernel<BFloat16>);
  reg_all(OpId::baddbmm, addmm_kernel<double>, addmm_kernel<float>, addmm_kernel<Half>,
          addmm_kernel<BFloat16>);
  reg_all(OpId::linear, linear_kernel<double>, linear_kernel<float>, linear_kernel<Half>,
          linear_kernel<BFloat16>);
}

}  // namespace mg::cpu
