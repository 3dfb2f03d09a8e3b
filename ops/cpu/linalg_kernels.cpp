// CPU kernels of the linear-algebra ops: each op's operands are described once, device-neutrally,
// by gemm_problem() (ops/gemm_problem.h) and run by the CPU GEMM driver (ops/cpu/gemm.h), which
// accumulates f16/bf16 products in f32 and rounds the output once. Shapes were validated by the
// op's infer rule.
#include "mixgrad/ops/cpu/gemm.h"
#include "mixgrad/ops/gemm_problem.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/register.h"

namespace mg::cpu {
namespace {

template <OpId op, typename T>
void linalg_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  gemm<T>(gemm_problem(op, in, out[0], attrs));
}

template <OpId op>
void reg_all() {
  register_kernel(op, DeviceType::CPU, DType::F64, linalg_kernel<op, double>);
  register_kernel(op, DeviceType::CPU, DType::F32, linalg_kernel<op, float>);
  register_kernel(op, DeviceType::CPU, DType::F16, linalg_kernel<op, Half>);
  register_kernel(op, DeviceType::CPU, DType::BF16, linalg_kernel<op, BFloat16>);
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

}  // namespace mg::cpu
