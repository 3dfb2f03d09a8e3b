// Tests of the CPU GEMM driver's processor-dependent paths (ops/cpu/gemm.h, GemmPaths): bf16 on
// oneDNN's native bf16 GEMM, on its matmul primitive (AMX) and through the f32 fallback, f32 weight
// gradients on the matmul primitive, and the padded copy of a transposed `a` or row-major `b` that
// oneDNN's AVX2 sgemm wants. Every path is forced on every machine through the test hook
// (bf16_native only where the processor has it), and each must give the exact product: integer
// operands in [-8, 8] keep every f32 partial sum exact, so f32 equals the f64 product and f16/bf16
// the f64 product rounded once, bit for bit, whatever the summation order.
#include <catch2/catch.hpp>

#include <cstring>
#include <optional>

#include "autograd/engine.h"
#include "core/parallel.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/onednn_matmul.h"
#include "ops/ops.h"

using namespace mg;

namespace {

Generator& gen() {
  static Generator g(77);
  return g;
}

Tensor ints(const Shape& shape, DType dt) { return randint(-8, 9, shape, {.dtype = dt}, &gen()); }

bool bit_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor ca = contiguous(a), cb = contiguous(b);
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), std::size_t(ca.numel()) * dtype_size(ca.dtype())) == 0;
}

// The exact product of integer-valued operands in f64 (Eigen's f64 GEMM: every sum exact),
// rounded once to dt.
Tensor exact_mm(const Tensor& a, const Tensor& b, DType dt) {
  return to(matmul(to(a, DType::F64), to(b, DType::F64)), dt);
}

// Restores the detected paths when a test ends, also when a REQUIRE throws.
struct ForcePaths {
  explicit ForcePaths(cpu::GemmPaths p) { cpu::gemm_force_paths(p); }
  ~ForcePaths() { cpu::gemm_force_paths(std::nullopt); }
};

// Every combination of the choices (the bf16 and f32 matmul-primitive paths forced together).
std::vector<cpu::GemmPaths> all_paths() {
  std::vector<cpu::GemmPaths> out;
  for (bool native : {false, true}) {
    for (bool pad : {false, true}) {
      for (bool matmul : {false, true}) {
        out.push_back({.bf16_native = native, .pad_aliased = pad, .bf16_matmul = matmul, .f32_matmul = matmul});
      }
    }
  }
  return out;
}

}  // namespace

// oneDNN's ISA values are bit masks (oneDNN 2.6: avx2 0x7, avx512_core 0x27, avx512_core_bf16
// 0xe7, avx512_core_amx 0x3e7, avx2_vnni 0x407): compared with >=, an AVX-VNNI client processor
// without AVX-512 was taken for an AMX one.
TEST_CASE("GEMM paths: oneDNN's ISA is tested by its bits, not by its value", "[ops][linalg][gemm]") {
  constexpr unsigned avx2 = 0x7, avx512_core = 0x27, avx512_bf16 = 0xe7, amx = 0x3e7, avx2_vnni = 0x407;
  CHECK_FALSE(cpu::onednn_isa_includes(avx2_vnni, amx));
  CHECK_FALSE(cpu::onednn_isa_includes(avx2_vnni, avx512_core));
  CHECK(cpu::onednn_isa_includes(avx2_vnni, avx2));
  CHECK(cpu::onednn_isa_includes(amx, avx512_bf16));
  CHECK(cpu::onednn_isa_includes(avx512_bf16, avx512_core));
  CHECK_FALSE(cpu::onednn_isa_includes(avx512_core, avx512_bf16));
}

TEST_CASE("GEMM paths: detection, forcing and restoring", "[ops][linalg][gemm]") {
  const cpu::GemmPaths detected = cpu::gemm_detected_paths();
  // native bf16 is detected where its dot products outrun f32 FMAs (AMX, AMD's AVX512-BF16)
  REQUIRE(detected.bf16_native == (cpu::onednn_bf16_gemm_available() && cpu::native_bf16_preferred()));
  REQUIRE(cpu::gemm_paths().bf16_native == detected.bf16_native);
  REQUIRE(cpu::gemm_paths().pad_aliased == detected.pad_aliased);
  {
    ForcePaths force({.bf16_native = true, .pad_aliased = true});
    // native bf16 can be forced where oneDNN has it, not elsewhere; the padding can be forced anywhere
    REQUIRE(cpu::gemm_paths().bf16_native == cpu::onednn_bf16_gemm_available());
    REQUIRE(cpu::gemm_paths().pad_aliased);
    cpu::gemm_force_paths(cpu::GemmPaths{.bf16_native = false, .pad_aliased = false});
    REQUIRE_FALSE(cpu::gemm_paths().bf16_native);
    REQUIRE_FALSE(cpu::gemm_paths().pad_aliased);
  }
  REQUIRE(cpu::gemm_paths().bf16_native == detected.bf16_native);
  REQUIRE(cpu::gemm_paths().pad_aliased == detected.pad_aliased);
}

TEST_CASE("GEMM paths: every path gives the exact product for every dtype and layout", "[ops][linalg][gemm]") {
  // `a` transposed with a leading dimension of 512 (the aliasing case: padded when forced), one
  // of 1024 with only 600 rows used (ld != rows), and plain row-major; m < 512 throughout.
  const int64_t k = 48, m = 40;
  for (const cpu::GemmPaths& paths : all_paths()) {
    ForcePaths force(paths);
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      INFO("bf16_native " << paths.bf16_native << " pad " << paths.pad_aliased << " matmul " << paths.bf16_matmul << " "
                          << dtype_name(dt));
      const Tensor a512 = ints({k, 512}, dt).t();                        // [512, k], col-major, ld 512
      const Tensor a600 = ints({k, 1024}, dt).narrow(1, 0, 600).t();     // [600, k], col-major, ld 1024
      const Tensor arow = ints({512, k}, dt);                            // [512, k], row-major
      const Tensor b = ints({k, m}, dt), bt = ints({m, k}, dt).t();      // [k, m] row- and col-major
      for (const Tensor* a : {&a512, &a600, &arow}) {
        REQUIRE(bit_equal(mm(*a, b), exact_mm(*a, b, dt)));
        REQUIRE(bit_equal(mm(*a, bt), exact_mm(*a, bt, dt)));
      }
      // addmm: beta * c added in f32 before the one rounding
      const Tensor c = ints({512, m}, dt);
      REQUIRE(bit_equal(addmm(c, a512, b, 0.5, 2.0),
                        to(0.5 * to(c, DType::F64) + 2.0 * matmul(to(a512, DType::F64), to(b, DType::F64)), dt)));
      // a batch of transposed a's (3 matrices: batch-parallel on 2 threads), b broadcast
      const Tensor ba = ints({3, k, 512}, dt).transpose(1, 2);  // [3, 512, k], each col-major, ld 512
      REQUIRE(bit_equal(matmul(ba, b), exact_mm(ba, b, dt)));
    }
  }
}

TEST_CASE("GEMM paths: a row-major b with an aliasing leading dimension on every path", "[ops][linalg][gemm]") {
  // b [k, m] row-major with k >= 512 and a leading dimension of 256 (dense) or 1024 (300 of its
  // columns used): padded when forced; a row- and col-major.
  const int64_t n = 40, k = 512;
  for (const cpu::GemmPaths& paths : all_paths()) {
    ForcePaths force(paths);
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      INFO("bf16_native " << paths.bf16_native << " pad " << paths.pad_aliased << " matmul " << paths.bf16_matmul << " "
                          << dtype_name(dt));
      const Tensor b256 = ints({k, 256}, dt);                             // [k, 256], ld 256
      const Tensor b300 = ints({k, 1024}, dt).narrow(1, 0, 300);         // [k, 300], ld 1024
      const Tensor a = ints({n, k}, dt), at = ints({k, n}, dt).t();      // [n, k] row- and col-major
      for (const Tensor* b : {&b256, &b300}) {
        REQUIRE(bit_equal(mm(a, *b), exact_mm(a, *b, dt)));
        REQUIRE(bit_equal(mm(at, *b), exact_mm(at, *b, dt)));
      }
      // the MLP's hidden-layer dX: g [n, 1024] @ W [1024, 1024]
      const Tensor x = ints({n, 1024}, dt).requires_grad_(true), w = ints({1024, 1024}, dt), dy = ints({n, 1024}, dt);
      const Tensor dx = autograd::grad({linear(x, w)}, {x}, {dy})[0];
      REQUIRE(bit_equal(dx, exact_mm(dy, w, dt)));
    }
  }
}

TEST_CASE("GEMM paths: a linear layer's weight gradient dY^T @ x on every path", "[ops][linalg][gemm][grad]") {
  // linear(x [T, in], W [out, in]) with out = 1024: dW = dY^T @ x reads dY [T, out] transposed with
  // a leading dimension of 1024, the case the padded copy exists for (BERT-mini's FFN).
  const int64_t T = 64, in = 40, out = 1024;
  for (const cpu::GemmPaths& paths : all_paths()) {
    ForcePaths force(paths);
    for (DType dt : {DType::F32, DType::BF16}) {
      INFO("bf16_native " << paths.bf16_native << " pad " << paths.pad_aliased << " matmul " << paths.bf16_matmul << " "
                          << dtype_name(dt));
      const Tensor x = ints({T, in}, dt), dy = ints({T, out}, dt);
      const Tensor w = ints({out, in}, dt).requires_grad_(true);
      const Tensor y = linear(x, w);
      const Tensor dw = autograd::grad({y}, {w}, {dy})[0];
      REQUIRE(bit_equal(dw, exact_mm(dy.t(), x, dt)));
    }
  }
}

TEST_CASE("GEMM paths: bf16 products of the measured shapes run the matmul primitive where bf16 is native",
          "[ops][linalg][gemm]") {
  const cpu::GemmPaths detected = cpu::gemm_detected_paths();
  REQUIRE(detected.bf16_matmul == (cpu::onednn_bf16_gemm_available() && cpu::native_bf16_preferred()));
  // x @ W^T and dY @ W (k <= 2048) pick it (without AMX: from 2 threads on), and dW = dY^T @ x over
  // more than 1024 rows and products with fewer than 16 rows do not (ops/cpu/onednn_matmul.cpp);
  // the exact product either way.
  const int64_t k = 96;
  const Tensor x = ints({64, k}, DType::BF16), w = ints({80, k}, DType::BF16);
  const Tensor dy_long = ints({1100, 32}, DType::BF16), x_long = ints({1100, 24}, DType::BF16);
  const int threads_before = num_threads();
  struct Restore {
    int threads;
    ~Restore() { set_num_threads(threads); }
  } restore{threads_before};
  for (const auto& [use_matmul, threads] : {std::pair{false, 2}, std::pair{true, 1}, std::pair{true, 2}}) {
    set_num_threads(threads);
    ForcePaths force({.bf16_native = true, .pad_aliased = false, .bf16_matmul = use_matmul});
    INFO("matmul forced " << use_matmul << ", detected " << detected.bf16_matmul << ", " << threads << " threads");
    const bool runs = use_matmul && detected.bf16_matmul && (cpu::onednn_amx_available() || threads >= 2);
    int64_t before = cpu::matmul_bf16_calls();
    REQUIRE(bit_equal(mm(x, w.t()), exact_mm(x, w.t(), DType::BF16)));
    REQUIRE(cpu::matmul_bf16_calls() - before == (runs ? 1 : 0));
    before = cpu::matmul_bf16_calls();
    REQUIRE(bit_equal(mm(dy_long.t(), x_long), exact_mm(dy_long.t(), x_long, DType::BF16)));  // k 1100, a transposed
    REQUIRE(bit_equal(mm(x.narrow(0, 0, 8), w.t()), exact_mm(x.narrow(0, 0, 8), w.t(), DType::BF16)));  // 8 rows
    REQUIRE(cpu::matmul_bf16_calls() == before);
    // a row-major `a` whose leading dimension is not the dense one: oneDNN has no brgemm kernel
    // for it, and the product stays on the BLAS-like GEMM, exactly
    before = cpu::matmul_bf16_calls();
    const Tensor x_wide = ints({64, k + 3}, DType::BF16).narrow(1, 0, k);  // [64, k], ld k + 3
    REQUIRE(bit_equal(mm(x_wide, w.t()), exact_mm(x_wide, w.t(), DType::BF16)));
    REQUIRE(cpu::matmul_bf16_calls() == before);
    // the same shape twice: the cached primitive, and addmm's alpha and beta
    const Tensor c = ints({64, 80}, DType::BF16);
    REQUIRE(bit_equal(addmm(c, x, w.t(), 0.5, 2.0),
                      to(0.5 * to(c, DType::F64) + 2.0 * matmul(to(x, DType::F64), to(w.t(), DType::F64)), DType::BF16)));
  }
}

TEST_CASE("GEMM paths: f32 weight gradients at aliasing strides run the matmul primitive where it has brgemm",
          "[ops][linalg][gemm][grad]") {
  const cpu::GemmPaths detected = cpu::gemm_detected_paths();
  REQUIRE(detected.f32_matmul == cpu::onednn_f32_brgemm_available());
  // dW = dY^T @ x over 1024 tokens with 1024 outputs: dY^T is col-major with a leading dimension of
  // 1024 (the rule: lda % 1024 == 0, k >= 1024, m <= 512). Integer operands keep every sum exact.
  const int64_t T = 1024, out = 1024, in = 40;
  for (bool use_matmul : {false, true}) {
    ForcePaths force({.bf16_native = detected.bf16_native, .pad_aliased = false, .f32_matmul = use_matmul});
    REQUIRE(cpu::gemm_paths().f32_matmul == (use_matmul && detected.f32_matmul));
    // f16 always runs the f32 GEMM; bf16 does where it is not native (processors without AMX)
    for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
      INFO("f32_matmul forced " << use_matmul << ", detected " << detected.f32_matmul << ", " << dtype_name(dt));
      const bool runs = use_matmul && detected.f32_matmul && !(dt == DType::BF16 && detected.bf16_native);
      const Tensor x = ints({T, in}, dt), dy = ints({T, out}, dt);
      const Tensor w = ints({out, in}, dt).requires_grad_(true);
      int64_t before = cpu::matmul_f32_calls();
      const Tensor dw = autograd::grad({linear(x, w)}, {w}, {dy})[0];
      REQUIRE(cpu::matmul_f32_calls() - before == (runs ? 1 : 0));
      REQUIRE(bit_equal(dw, exact_mm(dy.t(), x, dt)));
      // alpha and beta (addmm), the cached primitive on a second call
      const Tensor c = ints({out, in}, dt);
      before = cpu::matmul_f32_calls();
      REQUIRE(bit_equal(addmm(c, dy.t(), x, 0.5, 2.0),
                        to(0.5 * to(c, DType::F64) + 2.0 * matmul(to(dy.t(), DType::F64), to(x, DType::F64)), dt)));
      REQUIRE(cpu::matmul_f32_calls() - before == (runs ? 1 : 0));
    }
    // outside the rule: m > 512, k < 1024, a leading dimension of 768; the exact product on sgemm
    const int64_t before = cpu::matmul_f32_calls();
    const Tensor dy = ints({T, out}, DType::F32), wide = ints({T, 600}, DType::F32);
    REQUIRE(bit_equal(mm(dy.t(), wide), exact_mm(dy.t(), wide, DType::F32)));
    const Tensor short_dy = ints({512, out}, DType::F32), short_x = ints({512, in}, DType::F32);
    REQUIRE(bit_equal(mm(short_dy.t(), short_x), exact_mm(short_dy.t(), short_x, DType::F32)));
    const Tensor dy768 = ints({T, 768}, DType::F32), x = ints({T, in}, DType::F32);
    REQUIRE(bit_equal(mm(dy768.t(), x), exact_mm(dy768.t(), x, DType::F32)));
    REQUIRE(cpu::matmul_f32_calls() == before);
    // a leading dimension of 2048 with 1000 of its rows used: oneDNN may decline these strides, and
    // the product is exact whichever GEMM runs it
    const Tensor dy_narrow = ints({T, 2048}, DType::F32).narrow(1, 0, 1000);
    REQUIRE(bit_equal(mm(dy_narrow.t(), x), exact_mm(dy_narrow.t(), x, DType::F32)));
  }
}

TEST_CASE("GEMM paths: f32 products with a transposed weight at aliasing strides run the matmul primitive",
          "[ops][linalg][gemm]") {
  const cpu::GemmPaths detected = cpu::gemm_detected_paths();
  // x @ W^T with W [out, 1024]: W^T is col-major with a leading dimension of 1024 (the rule:
  // ldb % 1024 == 0, k >= 1024, n >= 16). Integer operands keep every sum exact.
  const int64_t rows = 64, in = 1024, out = 300;
  for (bool use_matmul : {false, true}) {
    ForcePaths force({.bf16_native = detected.bf16_native, .pad_aliased = false, .f32_matmul = use_matmul});
    for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
      INFO("f32_matmul forced " << use_matmul << ", detected " << detected.f32_matmul << ", " << dtype_name(dt));
      const bool runs = use_matmul && detected.f32_matmul && !(dt == DType::BF16 && detected.bf16_native);
      const Tensor x = ints({rows, in}, dt), w = ints({out, in}, dt), bias = ints({out}, dt);
      int64_t before = cpu::matmul_f32_calls();
      REQUIRE(bit_equal(linear(x, w), exact_mm(x, w.t(), dt)));
      REQUIRE(cpu::matmul_f32_calls() - before == (runs ? 1 : 0));
      // the bias as the GEMM's accumulator (beta = 1)
      before = cpu::matmul_f32_calls();
      REQUIRE(bit_equal(linear(x, w, bias),
                        to(to(bias, DType::F64) + matmul(to(x, DType::F64), to(w.t(), DType::F64)), dt)));
      REQUIRE(cpu::matmul_f32_calls() - before == (runs ? 1 : 0));
    }
    // outside the rule: a leading dimension of 768, or k < 1024 within a wider W (a narrowed view)
    const int64_t before = cpu::matmul_f32_calls();
    const Tensor x768 = ints({rows, 768}, DType::F32), w768 = ints({out, 768}, DType::F32);
    REQUIRE(bit_equal(linear(x768, w768), exact_mm(x768, w768.t(), DType::F32)));
    const Tensor w_wide = ints({out, 2048}, DType::F32).narrow(1, 0, 512), x512 = ints({rows, 512}, DType::F32);
    REQUIRE(bit_equal(mm(x512, w_wide.t()), exact_mm(x512, w_wide.t(), DType::F32)));
    REQUIRE(cpu::matmul_f32_calls() == before);
  }
}
