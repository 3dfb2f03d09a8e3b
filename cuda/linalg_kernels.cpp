// CUDA kernels of the linear-algebra ops (matmul, mm, bmm, addmm, baddbmm, linear) in f64, f32,
// f16 and bf16: each op's operands come from the shared gemm_problem() (ops/gemm_problem.h), the
// plan from plan_gemm() (cuda/host/gemm_plan.h), and this file does what the plan asks before
// cuBLASLt runs it (cuda/blas.h): inputs that no cuBLASLt layout can read are made contiguous, a
// general c is copied into out (then beta * out is added by cuBLASLt in place), k = 0 is a fill.
// Should the heuristic offer no algorithm for a plan, the kernel retries without the bias
// epilogue, then with dense aligned copies of a and b, before it throws CudaError.
// Shapes, dtypes and errors were checked by the ops' infer rules (ops/linalg.cpp).
#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/half.h"
#include "mixgrad/cuda/blas.h"
#include "mixgrad/cuda/cuda.h"
#include "mixgrad/cuda/host/gemm_plan.h"
#include "mixgrad/ops/gemm_problem.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/ops.h"

namespace mg::cuda {
namespace {

template <OpId op, typename T>
void linalg_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  NoGradGuard no_grad;  // the copies below are part of the kernel, not of the graph
  const Tensor& o = out[0];
  const DType dtype = dtype_v<T>;
  const int device = o.device().index;
  GemmPlanOptions options{.allow_tf32 = allow_tf32()};
  Tensors args = in;
  GemmProblem p = gemm_problem(op, args, o, attrs);
  GemmPlan plan = plan_gemm(p, dtype, options);
  if (plan.copy_a || plan.copy_b) {
    // A step slice or a broadcast inside a matrix: one dense copy, then every layout fits.
    if (plan.copy_a) args[std::size_t(p.a.input)] = contiguous(args[std::size_t(p.a.input)]);
    if (plan.copy_b) args[std::size_t(p.b.input)] = contiguous(args[std::size_t(p.b.input)]);
    p = gemm_problem(op, args, o, attrs);
    plan = plan_gemm(p, dtype, options);
    MG_ASSERT(!plan.copy_a && !plan.copy_b, op_name(op), ": contiguous operands still need a copy: ", describe(plan));
  }
  switch (plan.kind) {
    case GemmKind::Empty: return;
    case GemmKind::Zero: out[0].zero_(); return;
    case GemmKind::ScaleC: {
      // k = 0: out = beta * c. As on the CPU, f16/bf16 c and beta are multiplied in f32 and the
      // product rounded once to the output (a scalar of c's own dtype would round beta first).
      const Tensor c = expand(args[std::size_t(p.c.input)], o.shape());
      const Tensor wide = dtype == DType::F64 ? c : to(c, DType::F32);
      out[0].copy_(plan.beta == 1.0 ? c : wide * plan.beta);
      return;
    }
    case GemmKind::Matmul: break;
  }
  // One attempt: a general c goes into out first (again on a retry: run_gemm returns false before
  // it writes anything), then cuBLASLt.
  auto attempt = [&] {
    if (plan.c_mode == GemmCMode::CopyToOut) out[0].copy_(expand(args[std::size_t(p.c.input)], o.shape()));
    return run_gemm(plan, device);
  };
  if (attempt()) return;
  // No cuBLASLt algorithm for this plan. First without the bias epilogue (the bias as a general
  // c), then with dense, freshly allocated (so 256-byte aligned) copies of a and b.
  if (plan.c_mode == GemmCMode::Bias) {
    options.allow_bias_epilogue = false;
    plan = plan_gemm(p, dtype, options);
    if (attempt()) return;
  }
  args[std::size_t(p.a.input)] = clone(args[std::size_t(p.a.input)]);
  args[std::size_t(p.b.input)] = clone(args[std::size_t(p.b.input)]);
  p = gemm_problem(op, args, o, attrs);
  plan = plan_gemm(p, dtype, options);
  const bool ran = !plan.copy_a && !plan.copy_b && attempt();
  MG_CHECK(ran, CudaError, op_name(op), ": cuBLASLt has no algorithm for ", describe(plan), " on ",
           o.device().str());
}

template <OpId op>
void reg_all() {
  register_kernel(op, DeviceType::CUDA, DType::F64, linalg_kernel<op, double>);
  register_kernel(op, DeviceType::CUDA, DType::F32, linalg_kernel<op, float>);
  register_kernel(op, DeviceType::CUDA, DType::F16, linalg_kernel<op, Half>);
  register_kernel(op, DeviceType::CUDA, DType::BF16, linalg_kernel<op, BFloat16>);
}

}  // namespace

void register_linalg_kernels() {
  reg_all<OpId::matmul>();
  reg_all<OpId::mm>();
  reg_all<OpId::bmm>();
  reg_all<OpId::addmm>();
  reg_all<OpId::baddbmm>();
  reg_all<OpId::linear>();
}

}  // namespace mg::cuda
