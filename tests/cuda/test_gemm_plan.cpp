// The cuBLASLt plan of every linear-algebra op (cuda/host/gemm_plan.h), checked exactly on the CPU:
// problems built by the shared gemm_problem() from real CPU tensors and views (only their pointers
// and strides matter), so these are the plans the GPU kernels will run. Column-major view:
// D [M = m, N = n] = A [M, K] @ B [K, N], with A = b^T, B = a^T, D = out^T.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/factory.h"
#include "cublaslt_model.h"
#include "cuda/host/gemm_plan.h"
#include "ops/gemm_problem.h"
#include "ops/ops.h"

using namespace mg;
using namespace mg::cuda;

namespace {

GemmPlan plan_of(OpId op, const Tensors& in, const Shape& out_shape, DType dt = DType::F32, OpAttrs attrs = {},
                 GemmPlanOptions options = {}) {
  const Tensor out = empty(out_shape, {.dtype = dt});
  return plan_gemm(gemm_problem(op, in, out, attrs), dt, options);
}

Tensor t(const Shape& shape, DType dt = DType::F32) { return empty(shape, {.dtype = dt}); }

// The operand's layout without its pointer and alignment (checked separately).
void check_matrix(const LtMatrix& x, bool transpose, int64_t rows, int64_t cols, int64_t ld, int64_t stride = 0) {
  CHECK(x.transpose == transpose);
  CHECK(x.rows == rows);
  CHECK(x.cols == cols);
  CHECK(x.ld == ld);
  CHECK(x.batch_stride == stride);
}

}  // namespace

TEST_CASE("gemm plan: contiguous mm is b^T a^T with no transposes", "[cuda][gemm]") {
  const Tensor a = t({5, 4}), b = t({4, 3});
  const Tensor out = t({5, 3});
  const GemmPlan p = plan_gemm(gemm_problem(OpId::mm, {a, b}, out, {}), DType::F32);
  INFO(describe(p));
  CHECK(p.kind == GemmKind::Matmul);
  CHECK_FALSE(p.copy_a);
  CHECK_FALSE(p.copy_b);
  CHECK(p.M == 3);
  CHECK(p.N == 5);
  CHECK(p.K == 4);
  check_matrix(p.A, false, 3, 4, 3);  // b [4, 3] row-major = b^T [3, 4] column-major, ld 3
  check_matrix(p.B, false, 4, 5, 4);  // a^T [4, 5], ld 4
  check_matrix(p.D, false, 3, 5, 3);  // out^T [3, 5], ld 3
  CHECK(p.A.ptr == b.data_ptr());
  CHECK(p.B.ptr == a.data_ptr());
  CHECK(p.D.ptr == out.data_ptr());
  CHECK(p.A.alignment >= 64);  // CPU tensors are 64-byte aligned
  CHECK(p.batch_count == 1);
  CHECK(p.loop.empty());
  CHECK(p.c_mode == GemmCMode::None);
  CHECK(p.alpha == 1.0);
  CHECK(p.beta == 0.0);
  CHECK(p.compute == GemmCompute::F32);
  CHECK_FALSE(p.f32_reductions_only);
}

TEST_CASE("gemm plan: transposed views are passed with op T, not copied", "[cuda][gemm]") {
  const Tensor x = t({4, 5}), y = t({3, 4});
  const GemmPlan p = plan_of(OpId::mm, {x.t(), y.t()}, {5, 3});  // a [5, 4] strides (1, 5), b [4, 3] (1, 4)
  INFO(describe(p));
  CHECK_FALSE(p.copy_a);
  CHECK_FALSE(p.copy_b);
  check_matrix(p.A, true, 4, 3, 4);  // b^T = y: stored [4, 3]... y [3, 4] row-major is [4, 3] col-major, ld 4
  check_matrix(p.B, true, 5, 4, 5);  // a^T = x: [4, 5] row-major is [5, 4] col-major, ld 5, op T
  check_matrix(p.D, false, 3, 5, 3);
}

TEST_CASE("gemm plan: sliced views keep their large leading dimension", "[cuda][gemm]") {
  const Tensor big = t({10, 20});
  const Tensor a = big.slice(0, 1, 6).slice(1, 2, 6);  // [5, 4] strides (20, 1), offset 22 elements
  const Tensor b = t({8, 30}).slice(1, 0, 3).slice(0, 4, 8);  // [4, 3] strides (30, 1), offset 120
  const GemmPlan p = plan_of(OpId::mm, {a, b}, {5, 3});
  INFO(describe(p));
  CHECK_FALSE(p.copy_a);
  CHECK_FALSE(p.copy_b);
  check_matrix(p.B, false, 4, 5, 20);
  check_matrix(p.A, false, 3, 4, 30);
  CHECK(p.B.alignment == 8);   // 64-aligned base + 88 bytes
  CHECK(p.A.alignment == 32);  // + 480 bytes
  // A transposed slice: a = big[1:5, 2:7]^T -> [5, 4] strides (1, 20): op T with ld 20.
  const GemmPlan q = plan_of(OpId::mm, {big.slice(0, 1, 5).slice(1, 2, 7).t(), t({4, 3})}, {5, 3});
  check_matrix(q.B, true, 5, 4, 20);
}

TEST_CASE("gemm plan: step slices, broadcast rows and overlapping rows are copied first", "[cuda][gemm]") {
  const Tensor big = t({10, 20});
  {
    const Tensor a = big.slice(1, 0, 8, 2);  // [10, 4] strides (20, 2)
    const GemmPlan p = plan_of(OpId::mm, {a, t({4, 3})}, {10, 3});
    CHECK(p.kind == GemmKind::Matmul);
    CHECK(p.copy_a);
    CHECK_FALSE(p.copy_b);
  }
  {
    const Tensor b = expand(t({1, 3}), {4, 3});  // strides (0, 1): every row the same
    const GemmPlan p = plan_of(OpId::mm, {t({5, 4}), b}, {5, 3});
    CHECK_FALSE(p.copy_a);
    CHECK(p.copy_b);
  }
  {
    // a [5, 4] whose rows overlap (row stride 2 < 4 columns): no leading dimension fits.
    GemmProblem pr;
    pr.n = 5;
    pr.k = 4;
    pr.m = 3;
    pr.a = {.ptr = reinterpret_cast<const void*>(uintptr_t(0x10000)), .rs = 2, .cs = 1, .input = 0};
    pr.b = {.ptr = reinterpret_cast<const void*>(uintptr_t(0x20000)), .rs = 3, .cs = 1, .input = 1};
    pr.out = reinterpret_cast<void*>(uintptr_t(0x30000));
    const GemmPlan p = plan_gemm(pr, DType::F32);
    CHECK(p.copy_a);
    CHECK_FALSE(p.copy_b);
  }
  // After the copy (contiguous), the plan needs none.
  const GemmPlan p = plan_of(OpId::mm, {contiguous(big.slice(1, 0, 8, 2)), t({4, 3})}, {10, 3});
  CHECK_FALSE(p.copy_a);
  check_matrix(p.B, false, 4, 10, 4);
}

TEST_CASE("gemm plan: broadcast batch dims become a strided batch and a loop", "[cuda][gemm]") {
  // a [2, 1, 3, 4] @ b [3, 4, 2] -> out [2, 3, 3, 2]: batch [2, 3]; a's strides (12, 0), b's
  // (0, 8), out's (18, 6). The inner dim (3) is one strided batch (a 0, b 8, out 6); the outer
  // dim (2) does not merge with it (a: 12 != 0 * 3), so it is a loop of 2 calls.
  const GemmPlan p = plan_of(OpId::matmul, {t({2, 1, 3, 4}), t({3, 4, 2})}, {2, 3, 3, 2});
  INFO(describe(p));
  CHECK(p.batch_count == 3);
  check_matrix(p.A, false, 2, 4, 2, 8);
  check_matrix(p.B, false, 4, 3, 4, 0);
  check_matrix(p.D, false, 2, 3, 2, 6);
  CHECK(p.loop == Shape{2});
  CHECK(p.loop_a == Strides{12});
  CHECK(p.loop_b == Strides{0});
  CHECK(p.loop_out == Strides{18});
  // Contiguous batch dims [2, 3] merge into one batch of 6 with no loop.
  const GemmPlan q = plan_of(OpId::matmul, {t({2, 3, 3, 4}), t({2, 3, 4, 2})}, {2, 3, 3, 2});
  CHECK(q.batch_count == 6);
  CHECK(q.loop.empty());
  check_matrix(q.A, false, 2, 4, 2, 8);
  check_matrix(q.B, false, 4, 3, 4, 12);
  check_matrix(q.D, false, 2, 3, 2, 6);
}

TEST_CASE("gemm plan: a broadcast a is a stride-0 batch, a shared b folds into rows", "[cuda][gemm]") {
  {
    // bmm(a expanded [1, 3, 4] -> [5, 3, 4], b [5, 4, 2]): a's batch stride 0.
    const GemmPlan p = plan_of(OpId::bmm, {expand(t({1, 3, 4}), {5, 3, 4}), t({5, 4, 2})}, {5, 3, 2});
    INFO(describe(p));
    CHECK(p.batch_count == 5);
    CHECK(p.loop.empty());
    check_matrix(p.B, false, 4, 3, 4, 0);
    check_matrix(p.A, false, 2, 4, 2, 8);
    check_matrix(p.D, false, 2, 3, 2, 6);
    // matmul's broadcast: a [3, 4] @ b [5, 4, 2], the same plan.
    const GemmPlan q = plan_of(OpId::matmul, {t({3, 4}), t({5, 4, 2})}, {5, 3, 2});
    CHECK(q.batch_count == 5);
    check_matrix(q.B, false, 4, 3, 4, 0);
  }
  {
    // bmm(a [5, 3, 4], b expanded [1, 4, 2] -> [5, 4, 2]): one GEMM [15, 4] @ [4, 2].
    const GemmPlan p = plan_of(OpId::bmm, {t({5, 3, 4}), expand(t({1, 4, 2}), {5, 4, 2})}, {5, 3, 2});
    INFO(describe(p));
    CHECK(p.batch_count == 1);
    CHECK(p.N == 15);
    check_matrix(p.B, false, 4, 15, 4);
    check_matrix(p.A, false, 2, 4, 2);
    check_matrix(p.D, false, 2, 15, 2);
    // matmul x [2, 3, 5, 4] @ W [4, 2]: the same fold, 30 rows.
    const GemmPlan q = plan_of(OpId::matmul, {t({2, 3, 5, 4}), t({4, 2})}, {2, 3, 5, 2});
    CHECK(q.batch_count == 1);
    CHECK(q.N == 30);
  }
  {
    // A shared b but a's batch entries transposed (rows not mergeable): a strided batch instead.
    const Tensor a = t({5, 4, 3}).transpose(1, 2);  // [5, 3, 4] strides (12, 1, 3)
    const GemmPlan p = plan_of(OpId::matmul, {a, t({4, 2})}, {5, 3, 2});
    INFO(describe(p));
    CHECK(p.batch_count == 5);
    check_matrix(p.B, true, 3, 4, 3, 12);
    check_matrix(p.A, false, 2, 4, 2, 0);
  }
}

TEST_CASE("gemm plan: linear uses the bias epilogue where it can", "[cuda][gemm]") {
  const Tensor x = t({6, 4}), w = t({3, 4}), bias = t({3});
  {
    const GemmPlan p = plan_of(OpId::linear, {x, w, bias}, {6, 3});
    INFO(describe(p));
    CHECK(p.c_mode == GemmCMode::Bias);
    CHECK(p.bias == bias.data_ptr());
    CHECK(p.bias_alignment >= 64);
    CHECK(p.beta == 0.0);
    check_matrix(p.A, true, 4, 3, 4);  // the weight [3, 4] row-major = [4, 3] col-major, op T
    check_matrix(p.B, false, 4, 6, 4);
    check_matrix(p.D, false, 3, 6, 3);
  }
  {
    // Batched input folds into rows and keeps the epilogue.
    const GemmPlan p = plan_of(OpId::linear, {t({2, 6, 4}), w, bias}, {2, 6, 3});
    CHECK(p.c_mode == GemmCMode::Bias);
    CHECK(p.N == 12);
    CHECK(p.batch_count == 1);
  }
  {
    const GemmPlan p = plan_of(OpId::linear, {x, w}, {6, 3});
    CHECK(p.c_mode == GemmCMode::None);
    CHECK(p.bias == nullptr);
    CHECK(p.beta == 0.0);
  }
  // Otherwise the bias is copied into out and added with beta = 1: f64, the epilogue disallowed
  // (the kernels' fallback when cuBLASLt has no algorithm for it), a misaligned or strided bias,
  // a single row, a batch that does not fold.
  auto copied = [](const GemmPlan& p) { return p.c_mode == GemmCMode::CopyToOut && p.beta == 1.0; };
  CHECK(copied(plan_of(OpId::linear, {t({6, 4}, DType::F64), t({3, 4}, DType::F64), t({3}, DType::F64)}, {6, 3},
                       DType::F64)));
  CHECK(copied(plan_of(OpId::linear, {x, w, bias}, {6, 3}, DType::F32, {}, {.allow_bias_epilogue = false})));
  CHECK(copied(plan_of(OpId::linear, {x, w, t({4}).slice(0, 1, 4)}, {6, 3})));
  CHECK(copied(plan_of(OpId::linear, {x, w, t({6}).slice(0, 0, 6, 2)}, {6, 3})));
  CHECK(copied(plan_of(OpId::linear, {t({1, 4}), w, bias}, {1, 3})));
  CHECK(copied(plan_of(OpId::linear, {t({2, 4, 6}).transpose(1, 2), w, bias}, {2, 6, 3})));
  // bf16 with an aligned bias: the epilogue, and split-K sums kept in f32.
  const GemmPlan h = plan_of(OpId::linear, {t({6, 4}, DType::BF16), t({3, 4}, DType::BF16), t({3}, DType::BF16)},
                             {6, 3}, DType::BF16);
  CHECK(h.c_mode == GemmCMode::Bias);
  CHECK(h.compute == GemmCompute::F32);
  CHECK(h.f32_reductions_only);
  CHECK(h.no_split_k);  // cuBLASLt may add the bias in bf16 after a split-K reduction
  // f32 keeps split-K with the epilogue; a bf16 product without one keeps its f32 split-K sums.
  CHECK_FALSE(plan_of(OpId::linear, {x, w, bias}, {6, 3}).no_split_k);
  CHECK_FALSE(plan_of(OpId::mm, {t({6, 4}, DType::BF16), t({4, 3}, DType::BF16)}, {6, 3}, DType::BF16).no_split_k);
}

TEST_CASE("gemm plan: addmm and baddbmm copy c into out and keep beta and alpha", "[cuda][gemm]") {
  OpAttrs attrs;
  attrs.beta = 0.5;
  attrs.alpha = 2.0;
  const GemmPlan p = plan_of(OpId::addmm, {t({3}), t({5, 4}), t({4, 3})}, {5, 3}, DType::F32, attrs);
  INFO(describe(p));
  CHECK(p.c_mode == GemmCMode::CopyToOut);
  CHECK(p.beta == 0.5);
  CHECK(p.alpha == 2.0);
  check_matrix(p.D, false, 3, 5, 3);
  // beta = 0: c is not read at all (NaN in c does not matter).
  attrs.beta = 0.0;
  const GemmPlan q = plan_of(OpId::addmm, {t({5, 3}), t({5, 4}), t({4, 3})}, {5, 3}, DType::F32, attrs);
  CHECK(q.c_mode == GemmCMode::None);
  CHECK(q.beta == 0.0);
  CHECK(q.alpha == 2.0);
  // baddbmm: batch 2 strided, c copied (even a row vector c: only linear's bias is an epilogue).
  const GemmPlan r = plan_of(OpId::baddbmm, {t({3}), t({2, 5, 4}), t({2, 4, 3})}, {2, 5, 3});
  CHECK(r.c_mode == GemmCMode::CopyToOut);
  CHECK(r.beta == 1.0);
  CHECK(r.batch_count == 2);
  check_matrix(r.D, false, 3, 5, 3, 15);
}

TEST_CASE("gemm plan: 1-D matmul operands", "[cuda][gemm]") {
  {
    // [4] @ [4, 3] -> [3]: a is a row [1, 4], a^T a column of 4.
    const GemmPlan p = plan_of(OpId::matmul, {t({4}), t({4, 3})}, {3});
    INFO(describe(p));
    CHECK(p.N == 1);
    check_matrix(p.B, false, 4, 1, 4);
    check_matrix(p.A, false, 3, 4, 3);
    check_matrix(p.D, false, 3, 1, 3);
  }
  {
    // [5, 4] @ [4] -> [5]: b is a column [4, 1], b^T a row [1, 4] with ld 1.
    const GemmPlan p = plan_of(OpId::matmul, {t({5, 4}), t({4})}, {5});
    CHECK(p.M == 1);
    check_matrix(p.A, false, 1, 4, 1);
    check_matrix(p.D, false, 1, 5, 1);
  }
  {
    // dot: [4] . [4] -> [].
    const GemmPlan p = plan_of(OpId::matmul, {t({4}), t({4})}, {});
    CHECK(p.M == 1);
    CHECK(p.N == 1);
    CHECK(p.K == 4);
    check_matrix(p.A, false, 1, 4, 1);
    check_matrix(p.B, false, 4, 1, 4);
  }
  {
    // A strided vector (every other element): a^T [4, 1] is the transpose of a stored [1, 4]
    // matrix with ld 2 (op T), no copy.
    const GemmPlan p = plan_of(OpId::matmul, {t({8}).slice(0, 0, 8, 2), t({4, 3})}, {3});
    CHECK_FALSE(p.copy_a);
    check_matrix(p.B, true, 1, 4, 2);
  }
  {
    // [4] @ [2, 4, 3] -> [2, 3]: the row is shared by the batch, b is batched (stride 12).
    const GemmPlan p = plan_of(OpId::matmul, {t({4}), t({2, 4, 3})}, {2, 3});
    CHECK(p.batch_count == 2);
    check_matrix(p.B, false, 4, 1, 4, 0);
    check_matrix(p.A, false, 3, 4, 3, 12);
    check_matrix(p.D, false, 3, 1, 3, 3);
  }
}

TEST_CASE("gemm plan: k = 0 fills, empty outputs do nothing", "[cuda][gemm]") {
  CHECK(plan_of(OpId::mm, {t({3, 0}), t({0, 2})}, {3, 2}).kind == GemmKind::Zero);
  OpAttrs attrs;
  attrs.beta = 2.0;
  const GemmPlan s = plan_of(OpId::addmm, {t({3, 2}), t({3, 0}), t({0, 2})}, {3, 2}, DType::F32, attrs);
  CHECK(s.kind == GemmKind::ScaleC);
  CHECK(s.beta == 2.0);
  attrs.beta = 0.0;
  CHECK(plan_of(OpId::addmm, {t({3, 2}), t({3, 0}), t({0, 2})}, {3, 2}, DType::F32, attrs).kind == GemmKind::Zero);
  CHECK(plan_of(OpId::linear, {t({3, 0}), t({2, 0}), t({2})}, {3, 2}).kind == GemmKind::ScaleC);
  CHECK(plan_of(OpId::mm, {t({0, 4}), t({4, 3})}, {0, 3}).kind == GemmKind::Empty);
  CHECK(plan_of(OpId::mm, {t({5, 4}), t({4, 0})}, {5, 0}).kind == GemmKind::Empty);
  CHECK(plan_of(OpId::bmm, {t({0, 3, 4}), t({0, 4, 2})}, {0, 3, 2}).kind == GemmKind::Empty);
  CHECK(plan_of(OpId::bmm, {t({0, 3, 0}), t({0, 0, 2})}, {0, 3, 2}).kind == GemmKind::Empty);
}

TEST_CASE("gemm plan: compute types and the TF32 switch", "[cuda][gemm]") {
  auto compute = [](DType dt, bool tf32) {
    return plan_of(OpId::mm, {t({5, 4}, dt), t({4, 3}, dt)}, {5, 3}, dt, {}, {.allow_tf32 = tf32}).compute;
  };
  CHECK(compute(DType::F32, false) == GemmCompute::F32);
  CHECK(compute(DType::F32, true) == GemmCompute::F32FastTf32);
  CHECK(compute(DType::F64, true) == GemmCompute::F64);
  CHECK(compute(DType::F16, true) == GemmCompute::F32);
  CHECK(compute(DType::BF16, false) == GemmCompute::F32);
  CHECK(plan_of(OpId::mm, {t({5, 4}, DType::F16), t({4, 3}, DType::F16)}, {5, 3}, DType::F16).f32_reductions_only);
}

TEST_CASE("gemm plan: alignment and the heuristic key", "[cuda][gemm]") {
  auto ptr = [](uintptr_t a) { return reinterpret_cast<const void*>(a); };
  CHECK(alignment_of(ptr(0x1000)) == 256);
  CHECK(alignment_of(ptr(0x1010)) == 16);
  CHECK(alignment_of(ptr(0x1002)) == 2);
  CHECK(alignment_of(ptr(0x1000), {0}) == 256);
  CHECK(alignment_of(ptr(0x1000), {6, 512}) == 2);
  CHECK(alignment_of(ptr(0x1000), {24}) == 8);

  auto problem = [&](uintptr_t a, uintptr_t b, uintptr_t out) {
    GemmProblem p;
    p.batch = {4};
    p.n = 64;
    p.k = 32;
    p.m = 16;
    p.a = {.ptr = ptr(a), .batch_strides = {64 * 32}, .rs = 32, .cs = 1, .input = 0};
    p.b = {.ptr = ptr(b), .batch_strides = {32 * 16}, .rs = 16, .cs = 1, .input = 1};
    p.out = reinterpret_cast<void*>(out);
    return p;
  };
  const GemmPlan p1 = plan_gemm(problem(0x100000, 0x200000, 0x300000), DType::F16);
  const GemmPlan p2 = plan_gemm(problem(0x500000, 0x600000, 0x700000), DType::F16);
  const GemmPlan p3 = plan_gemm(problem(0x100002, 0x200000, 0x300000), DType::F16);
  INFO(describe(p1));
  CHECK(p1.B.alignment == 256);
  CHECK(p3.B.alignment == 2);
  CHECK(heuristic_key(p1, 0) == heuristic_key(p2, 0));  // pointers do not matter
  CHECK(heuristic_key(p1, 0) != heuristic_key(p3, 0));  // their alignment does
  CHECK(heuristic_key(p1, 0) != heuristic_key(p1, 1));  // nor do devices share algorithms
  CHECK(heuristic_key(p1, 0) != heuristic_key(plan_gemm(problem(0x100000, 0x200000, 0x300000), DType::BF16), 0));
  CHECK(describe(p1) ==
        "matmul f16 compute 32F D[m=16, n=64, k=32] = A[16x32 N ld 16 stride 512 align 256] B[32x64 N ld 32 "
        "stride 2048 align 256] D[16x64 N ld 16 stride 1024 align 256] x batch 4, c none, alpha 1, beta 0");
}

// ---- the plans, executed ----
// A CPU model of cuBLASLt running a Matmul plan, straight from its documented semantics
// (column-major storage, op N/T, leading dimensions, strided batch, the host loop, the bias
// epilogue, D = alpha op(A) op(B) + beta C with C = D), and of the CUDA kernel's steps around it
// (cuda/linalg_kernels.cpp: copies, c into out, k = 0); the model is tests/cuda/cublaslt_model.h.
// Run on f64 data for every kind of operand, it checks that each plan computes the op, not just
// that it has the expected fields.
namespace {

using mg::test::execute_like_cublaslt;

struct Seen {
  int copies = 0, loops = 0, batches = 0, bias = 0, copied_c = 0, fills = 0, empty = 0;
};

// The kernel's steps with the model for cuBLASLt. Planned as f32 on f64 data: the plan's only
// dtype-dependent choices are the bias epilogue (never f64) and the alignments, which the model
// does not need, so the epilogue path is exercised too.
Tensor run_like_cuda_kernel(OpId op, Tensors args, const Shape& out_shape, const OpAttrs& attrs,
                            GemmPlanOptions options, Seen& seen) {
  Tensor out = empty(out_shape, {.dtype = DType::F64});
  GemmProblem pr = gemm_problem(op, args, out, attrs);
  GemmPlan plan = plan_gemm(pr, DType::F32, options);
  if (plan.copy_a || plan.copy_b) {
    ++seen.copies;
    if (plan.copy_a) args[std::size_t(pr.a.input)] = contiguous(args[std::size_t(pr.a.input)]);
    if (plan.copy_b) args[std::size_t(pr.b.input)] = contiguous(args[std::size_t(pr.b.input)]);
    pr = gemm_problem(op, args, out, attrs);
    plan = plan_gemm(pr, DType::F32, options);
    REQUIRE_FALSE(plan.copy_a);
    REQUIRE_FALSE(plan.copy_b);
  }
  INFO(describe(plan));
  switch (plan.kind) {
    case GemmKind::Empty: ++seen.empty; return out;
    case GemmKind::Zero: ++seen.fills; out.zero_(); return out;
    case GemmKind::ScaleC:
      ++seen.fills;
      out.copy_(expand(args[std::size_t(pr.c.input)], out.shape()) * plan.beta);
      return out;
    case GemmKind::Matmul: break;
  }
  if (!plan.loop.empty()) ++seen.loops;
  if (plan.batch_count > 1) ++seen.batches;
  if (plan.c_mode == GemmCMode::Bias) ++seen.bias;
  if (plan.c_mode == GemmCMode::CopyToOut) {
    ++seen.copied_c;
    out.copy_(expand(args[std::size_t(pr.c.input)], out.shape()));
  }
  execute_like_cublaslt(plan);
  return out;
}

Tensor run_op(OpId op, const Tensors& in, const OpAttrs& attrs) {
  switch (op) {
    case OpId::matmul: return matmul(in[0], in[1]);
    case OpId::mm: return mm(in[0], in[1]);
    case OpId::bmm: return bmm(in[0], in[1]);
    case OpId::addmm: return addmm(in[0], in[1], in[2], attrs.beta, attrs.alpha);
    case OpId::baddbmm: return baddbmm(in[0], in[1], in[2], attrs.beta, attrs.alpha);
    case OpId::linear: return in.size() > 2 ? linear(in[0], in[1], in[2]) : linear(in[0], in[1]);
    default: FAIL("not a linalg op"); return {};
  }
}

struct ExecCase {
  std::string name;
  OpId op;
  std::vector<Shape> shapes;                         // base inputs, normal random f64
  std::function<Tensors(const Tensors&)> views = {};  // applied to the base inputs
  double beta = 1.0, alpha = 1.0;
  bool nan_first = false;
};

}  // namespace

TEST_CASE("gemm plan: every plan, executed like cuBLASLt, computes the op", "[cuda][gemm]") {
  using V = std::function<Tensors(const Tensors&)>;
  const V t01 = [](const Tensors& x) { return Tensors{x[0].t(), x[1].t()}; };
  const std::vector<ExecCase> cases = {
      {"mm", OpId::mm, {{7, 5}, {5, 3}}},
      {"mm a^T b^T", OpId::mm, {{5, 7}, {3, 5}}, t01},
      {"mm sliced", OpId::mm, {{12, 9}, {8, 11}},
       [](const Tensors& x) { return Tensors{x[0].slice(0, 2, 9).slice(1, 1, 6), x[1].slice(0, 3, 8).slice(1, 4, 7)}; }},
      {"mm sliced transposed", OpId::mm, {{9, 12}, {11, 8}},
       [](const Tensors& x) {
         return Tensors{x[0].slice(0, 1, 6).slice(1, 2, 9).t(), x[1].slice(0, 4, 7).slice(1, 3, 8).t()};
       }},
      {"mm step-sliced", OpId::mm, {{7, 10}, {5, 6}},
       [](const Tensors& x) { return Tensors{x[0].slice(1, 0, 10, 2), x[1].slice(1, 0, 6, 2)}; }},
      {"mm broadcast rows", OpId::mm, {{1, 5}, {5, 3}}, [](const Tensors& x) { return Tensors{x[0].expand({7, 5}), x[1]}; }},
      {"mm 1x1x1", OpId::mm, {{1, 1}, {1, 1}}},
      {"mm k=0", OpId::mm, {{7, 0}, {0, 3}}},
      {"mm empty", OpId::mm, {{0, 5}, {5, 3}}},
      {"bmm", OpId::bmm, {{4, 7, 5}, {4, 5, 3}}},
      {"bmm transposed entries", OpId::bmm, {{4, 5, 7}, {4, 3, 5}},
       [](const Tensors& x) { return Tensors{x[0].transpose(1, 2), x[1].transpose(1, 2)}; }},
      {"bmm a expanded", OpId::bmm, {{1, 7, 5}, {4, 5, 3}}, [](const Tensors& x) { return Tensors{x[0].expand({4, 7, 5}), x[1]}; }},
      {"bmm b expanded", OpId::bmm, {{4, 7, 5}, {1, 5, 3}}, [](const Tensors& x) { return Tensors{x[0], x[1].expand({4, 5, 3})}; }},
      {"bmm batch slice", OpId::bmm, {{9, 7, 5}, {4, 5, 3}}, [](const Tensors& x) { return Tensors{x[0].slice(0, 1, 9, 2), x[1]}; }},
      {"bmm empty batch", OpId::bmm, {{0, 7, 5}, {0, 5, 3}}},
      {"matmul [2,1,5,7] @ [3,7,4]", OpId::matmul, {{2, 1, 5, 7}, {3, 7, 4}}},
      {"matmul [3,1,5,7] @ [1,2,7,4]", OpId::matmul, {{3, 1, 5, 7}, {1, 2, 7, 4}}},
      {"matmul [5,7] @ [4,7,3]", OpId::matmul, {{5, 7}, {4, 7, 3}}},
      {"matmul [4,5,7] @ [7,3]", OpId::matmul, {{4, 5, 7}, {7, 3}}},
      {"matmul [2,3,5,7] @ [2,3,7,4]", OpId::matmul, {{2, 3, 5, 7}, {2, 3, 7, 4}}},
      {"matmul transposed entries @ W", OpId::matmul, {{4, 7, 5}, {7, 3}},
       [](const Tensors& x) { return Tensors{x[0].transpose(1, 2), x[1]}; }},
      {"matmul [2,3,5,7] with a transposed batch dim", OpId::matmul, {{3, 2, 5, 7}, {2, 3, 7, 4}},
       [](const Tensors& x) { return Tensors{x[0].transpose(0, 1), x[1]}; }},
      {"dot", OpId::matmul, {{6}, {6}}},
      {"vec @ mat", OpId::matmul, {{6}, {6, 4}}},
      {"mat @ vec", OpId::matmul, {{5, 6}, {6}}},
      {"vec @ batch", OpId::matmul, {{6}, {3, 6, 4}}},
      {"batch @ vec", OpId::matmul, {{3, 5, 6}, {6}}},
      {"strided vec @ mat^T", OpId::matmul, {{12}, {4, 6}},
       [](const Tensors& x) { return Tensors{x[0].slice(0, 0, 12, 2), x[1].t()}; }},
      {"addmm c [7,3]", OpId::addmm, {{7, 3}, {7, 5}, {5, 3}}, {}, 0.5, 2.0},
      {"addmm c [3]", OpId::addmm, {{3}, {7, 5}, {5, 3}}, {}, -1.5, 0.25},
      {"addmm c [1,3]", OpId::addmm, {{1, 3}, {7, 5}, {5, 3}}},
      {"addmm c [7,1]", OpId::addmm, {{7, 1}, {7, 5}, {5, 3}}, {}, 2.0, -1.0},
      {"addmm c []", OpId::addmm, {{}, {7, 5}, {5, 3}}, {}, 0.5, 1.0},
      {"addmm c^T a^T b^T", OpId::addmm, {{3, 7}, {5, 7}, {3, 5}},
       [](const Tensors& x) { return Tensors{x[0].t(), x[1].t(), x[2].t()}; }, 0.5, 2.0},
      {"addmm beta 0, NaN c", OpId::addmm, {{7, 3}, {7, 5}, {5, 3}}, {}, 0.0, 1.5, true},
      {"addmm k=0", OpId::addmm, {{7, 3}, {7, 0}, {0, 3}}, {}, 2.0, 3.0},
      {"baddbmm", OpId::baddbmm, {{4, 7, 3}, {4, 7, 5}, {4, 5, 3}}, {}, 0.5, 2.0},
      {"baddbmm c [3], b expanded", OpId::baddbmm, {{3}, {4, 7, 5}, {1, 5, 3}},
       [](const Tensors& x) { return Tensors{x[0], x[1], x[2].expand({4, 5, 3})}; }, -0.5, 1.0},
      {"linear bias", OpId::linear, {{7, 5}, {3, 5}, {3}}},
      {"linear no bias", OpId::linear, {{7, 5}, {3, 5}}},
      {"linear batched bias", OpId::linear, {{2, 7, 5}, {3, 5}, {3}}},
      {"linear 1-D", OpId::linear, {{5}, {3, 5}, {3}}},
      {"linear one row", OpId::linear, {{1, 5}, {3, 5}, {3}}},
      {"linear misaligned bias", OpId::linear, {{7, 5}, {3, 5}, {4}},
       [](const Tensors& x) { return Tensors{x[0], x[1], x[2].slice(0, 1, 4)}; }},
      {"linear strided bias", OpId::linear, {{7, 5}, {3, 5}, {6}},
       [](const Tensors& x) { return Tensors{x[0], x[1], x[2].slice(0, 0, 6, 2)}; }},
      {"linear transposed weight", OpId::linear, {{7, 5}, {5, 3}, {3}},
       [](const Tensors& x) { return Tensors{x[0], x[1].t(), x[2]}; }},
      {"linear transposed batch input", OpId::linear, {{2, 5, 7}, {3, 5}, {3}},
       [](const Tensors& x) { return Tensors{x[0].transpose(1, 2), x[1], x[2]}; }},
      {"linear in=0", OpId::linear, {{7, 0}, {3, 0}, {3}}},
  };
  Seen seen;
  Generator gen(3);
  for (const bool epilogue : {true, false}) {
    for (const ExecCase& c : cases) {
      INFO(c.name << (epilogue ? "" : " (no bias epilogue)"));
      Tensors base;
      for (std::size_t i = 0; i < c.shapes.size(); ++i) {
        base.push_back(i == 0 && c.nan_first ? full(c.shapes[i], std::nan(""), {.dtype = DType::F64})
                                             : randn(c.shapes[i], {.dtype = DType::F64}, &gen));
      }
      const Tensors in = c.views ? c.views(base) : base;
      OpAttrs attrs;
      attrs.beta = c.beta;
      attrs.alpha = c.alpha;
      const Tensor want = run_op(c.op, in, attrs);
      const Tensor got =
          run_like_cuda_kernel(c.op, in, want.shape(), attrs, {.allow_bias_epilogue = epilogue}, seen);
      REQUIRE(got.shape() == want.shape());
      const Tensor w = contiguous(want), g = contiguous(got);
      const double* pw = w.data<double>();
      const double* pg = g.data<double>();
      for (int64_t i = 0; i < w.numel(); ++i) {
        INFO("element " << i);
        REQUIRE(std::abs(pg[i] - pw[i]) <= 1e-12 * (1 + std::abs(pw[i])));
      }
    }
  }
  // Every path of the plan was taken.
  CHECK(seen.copies > 0);
  CHECK(seen.loops > 0);
  CHECK(seen.batches > 0);
  CHECK(seen.bias > 0);
  CHECK(seen.copied_c > 0);
  CHECK(seen.fills > 0);
  CHECK(seen.empty > 0);
}

TEST_CASE("gemm plan: an f32 output for f16/bf16 inputs", "[cuda][gemm]") {
  // The conv's input-gradient columns and weight-gradient partials: A/B 16-bit, C/D f32 under
  // CUBLAS_COMPUTE_32F. Everything but D's dtype and alignment is the plan of the same inputs.
  auto ptr = [](uintptr_t a) { return reinterpret_cast<const void*>(a); };
  GemmProblem p;
  p.batch = {3};
  p.n = 5;
  p.k = 4;
  p.m = 3;  // out [3, 5, 3]: batch stride 15 elements
  p.a = {.ptr = ptr(0x100000), .batch_strides = {20}, .rs = 4, .cs = 1, .input = 0};
  p.b = {.ptr = ptr(0x200000), .batch_strides = {12}, .rs = 3, .cs = 1, .input = 1};
  p.out = reinterpret_cast<void*>(uintptr_t(0x300000));
  for (const DType dt : {DType::F16, DType::BF16}) {
    INFO(dtype_name(dt));
    const GemmPlan same = plan_gemm(p, dt);
    const GemmPlan wide = plan_gemm(p, dt, {.out_dtype = DType::F32});
    CHECK(same.out_dtype == dt);  // the default: the inputs' dtype
    CHECK(wide.dtype == dt);
    CHECK(wide.out_dtype == DType::F32);
    CHECK(wide.compute == GemmCompute::F32);
    CHECK(wide.f32_reductions_only);
    CHECK(wide.A == same.A);
    CHECK(wide.B == same.B);
    CHECK(same.D.alignment == 2);  // 15 elements of 2 bytes apart
    CHECK(wide.D.alignment == 4);  // 15 elements of 4 bytes apart
    CHECK(heuristic_key(wide, 0) != heuristic_key(same, 0));
    CHECK(describe(wide).rfind(std::string("matmul ") + dtype_name(dt) + " -> f32 compute 32F", 0) == 0);
  }
  CHECK(plan_gemm(p, DType::F32, {.out_dtype = DType::F32}).out_dtype == DType::F32);
  // No other mix: cuBLASLt has none for these dtypes under our compute types.
  CHECK_THROWS_AS(plan_gemm(p, DType::F32, {.out_dtype = DType::F16}), InternalError);
  CHECK_THROWS_AS(plan_gemm(p, DType::F16, {.out_dtype = DType::F64}), InternalError);
  CHECK_THROWS_AS(plan_gemm(p, DType::F64, {.out_dtype = DType::F32}), InternalError);
}
