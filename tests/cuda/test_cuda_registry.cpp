// Which (op, dtype) kernels the CUDA backend registers (no GPU needed: registration happens in
// every CUDA build). The elementwise ops of ops/elementwise_ops.def and the copies must cover
// exactly the CPU's dtypes on CUDA, and so must the indexing, softmax, loss, dropout, pooling, norm and conv ops; the ops still
// without a CUDA kernel (for any dtype) are listed in the test output. A CPU-only build registers no CUDA kernel at all.
#include <catch2/catch.hpp>

#include "cuda/cuda.h"
#include "ops/dispatcher.h"
#include "ops/op_rule.h"
#include "ops/kernel_registry.h"
#include "ops/ops.h"

using namespace mg;

namespace {

const std::vector<DType> kAllDTypes = {DType::F64, DType::F32, DType::F16, DType::BF16,
                                       DType::I64, DType::I32, DType::U8,  DType::Bool};

const std::vector<OpId> kTableOps = {
#define MG_UNARY(op, F, dtypes) OpId::op,
#define MG_BINARY(op, F, dtypes) OpId::op,
#define MG_COMPARE(op, F) OpId::op,
#include "ops/elementwise_ops.def"
#undef MG_UNARY
#undef MG_BINARY
#undef MG_COMPARE
#define MG_ACTIVATION_BACKWARD(op, F) OpId::op,
#include "ops/activation_backward_ops.def"
#undef MG_ACTIVATION_BACKWARD
    OpId::gelu, OpId::gelu_backward, OpId::relu_backward, OpId::where, OpId::fill,
    OpId::clone, OpId::to_dtype, OpId::copy, OpId::to_device,
    // cuda/kernels/indexing.cu and softmax.cu (with the class losses)
    OpId::cat, OpId::index_select, OpId::gather, OpId::scatter_add, OpId::masked_fill,
    OpId::softmax, OpId::log_softmax, OpId::softmax_backward, OpId::log_softmax_backward,
    OpId::cross_entropy, OpId::cross_entropy_backward, OpId::nll_loss, OpId::embedding,
    // cuda/kernels/dropout.cu, pool.cu and cuda/loss_kernels.cpp (the composite losses)
    OpId::dropout, OpId::max_pool2d, OpId::max_pool2d_indices, OpId::avg_pool2d, OpId::avg_pool2d_backward,
    OpId::adaptive_avg_pool2d, OpId::adaptive_avg_pool2d_backward, OpId::mse_loss, OpId::l1_loss,
    OpId::smooth_l1_loss, OpId::binary_cross_entropy_with_logits, OpId::kl_div, OpId::binary_cross_entropy,
    // cuda/kernels/norm.cu
    OpId::layer_norm, OpId::layer_norm_backward, OpId::rms_norm, OpId::group_norm, OpId::group_norm_backward,
    OpId::batch_norm, OpId::batch_norm_backward,
    // cuda/conv_kernels.cpp (im2col + cuBLASLt)
    OpId::conv2d, OpId::conv2d_backward_input, OpId::conv2d_backward_weight, OpId::conv_transpose2d};

}  // namespace

TEST_CASE("CUDA kernels cover the CPU's dtypes for every elementwise and copy op", "[cuda][registry]") {
  init();
  if (!cuda::built_with_cuda()) {
    for (int op = 0; op < kNumOps; ++op) {
      for (DType dt : kAllDTypes) REQUIRE_FALSE(has_kernel(OpId(op), DeviceType::CUDA, dt));
    }
    return;
  }
  for (OpId op : kTableOps) {
    for (DType dt : kAllDTypes) {
      INFO(op_name(op) << " " << dtype_name(dt));
      CHECK(has_kernel(op, DeviceType::CUDA, dt) == has_kernel(op, DeviceType::CPU, dt));
    }
    // every op with floating kernels has all three (the bitwise ops have integer ones only)
    if (!has_kernel(op, DeviceType::CPU, DType::F32)) continue;
    for (DType dt : {DType::F32, DType::F16, DType::BF16}) CHECK(has_kernel(op, DeviceType::CUDA, dt));
  }
  // one_hot is keyed by its index dtype (i64, i32)
  for (DType dt : kAllDTypes) {
    CHECK(has_kernel(OpId::one_hot, DeviceType::CUDA, dt) == has_kernel(OpId::one_hot, DeviceType::CPU, dt));
  }
  std::string missing;
  int with_cuda = 0;
  for (int op = 0; op < kNumOps; ++op) {
    if (op_rule(OpId(op)).view != nullptr) continue;  // views have no kernel on any device
    bool any = false;  // a kernel for some dtype (one_hot has integer kernels only)
    for (DType dt : kAllDTypes) any = any || has_kernel(OpId(op), DeviceType::CUDA, dt);
    if (any) {
      ++with_cuda;
    } else {
      missing += std::string(missing.empty() ? "" : ", ") + op_name(OpId(op));
    }
  }
  WARN("ops with CUDA kernels: " << with_cuda << "; still without: " << missing);
  REQUIRE(with_cuda >= int(kTableOps.size()));
}

TEST_CASE("CUDA kernels cover every linear-algebra op in f64, f32, f16 and bf16", "[cuda][registry][gemm]") {
  init();
  if (!cuda::built_with_cuda()) return;  // checked above: no CUDA kernel at all
  for (OpId op : {OpId::matmul, OpId::mm, OpId::bmm, OpId::addmm, OpId::baddbmm, OpId::linear}) {
    for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
      INFO(op_name(op) << " " << dtype_name(dt));
      CHECK(has_kernel(op, DeviceType::CUDA, dt));
    }
  }
}
