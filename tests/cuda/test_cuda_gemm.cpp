// The CUDA GEMM kernels (cuBLASLt) of matmul, mm, bmm, addmm, baddbmm and linear against the CPU's
// (the reference) in f64, f32, f16 and bf16: odd sizes, k = 0, empty batches, transposed, sliced,
// misaligned, step-sliced and broadcast operands, broadcast batches, 1-D operands, beta/alpha and
// broadcast c, linear with and without bias; the TF32 switch; the heuristic cache, the workspace
// and the absence of host synchronisation.
//
// Tolerance (per element). Both devices compute s = sum_l a_il b_lj (+ beta c_ij) in the
// accumulator type (f32 for f32/f16/bf16, f64 for f64), in different orders, and round once to the
// output type. A sum of k+1 terms in any order is within (k+1) u_acc S of the exact value, where
// S = |alpha| sum_l |a_il| |b_lj| + |beta| |c_ij| and u_acc the accumulator's unit roundoff
// (2^-24, 2^-53). Rounding the output adds at most u_out |s| <= u_out S (1 + small) with u_out the
// output's unit roundoff (2^-11 for f16, 2^-8 for bf16; 0 when the output is the accumulator). Two
// such results differ by at most
//     tol_ij = (2 u_out + 2 (k+1) u_acc) S_ij + 2 * (the output's smallest subnormal),
// the last term covering results that round in the subnormal range (an absolute, not relative,
// rounding). S is computed on the CPU in f64 by the same op on |inputs| with |alpha|, |beta|. This
// is a worst-case bound (random data lands far inside it), so a failure is a real bug, not noise.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "cuda/blas.h"
#include "cuda/cuda.h"
#include "cuda_test_util.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::gpu;
using mg::test::values;

namespace {

// f(inputs, beta, alpha): the op under test, applying any views to `inputs` itself so that the
// views exist on both devices (moving a view to the GPU makes it dense).
using GemmFn = std::function<Tensor(const Tensors&, double beta, double alpha)>;

struct GemmCase {
  std::string name;
  std::vector<Shape> shapes;  // of the base inputs (normal random values)
  int64_t k;                  // the inner dimension, for the tolerance
  GemmFn f;
  double beta = 1.0, alpha = 1.0;
  bool nan_first = false;     // the first input is all NaN (c with beta = 0 must not be read)
};

double unit_roundoff_out(DType dt) {
  switch (dt) {
    case DType::F16: return 0x1p-11;
    case DType::BF16: return 0x1p-8;
    default: return 0;  // f32/f64: the output is the accumulator
  }
}
double unit_roundoff_acc(DType dt) { return dt == DType::F64 ? 0x1p-53 : 0x1p-24; }
double smallest_subnormal(DType dt) {
  switch (dt) {
    case DType::F16: return 0x1p-24;
    case DType::BF16: return 0x1p-133;
    case DType::F32: return 0x1p-149;
    default: return std::numeric_limits<double>::denorm_min();
  }
}

Tensors make_inputs(const GemmCase& c, DType dt, uint64_t seed) {
  Generator gen(seed);
  Tensors in;
  for (std::size_t i = 0; i < c.shapes.size(); ++i) {
    if (i == 0 && c.nan_first) {
      in.push_back(full(c.shapes[i], std::nan(""), {.dtype = dt}));
    } else {
      in.push_back(to(randn(c.shapes[i], {.dtype = DType::F64}, &gen), dt));
    }
  }
  return in;
}

void check_case(const GemmCase& c, DType dt, uint64_t seed = 1) {
  NoGradGuard no_grad;
  INFO(c.name << " " << dtype_name(dt));
  const Tensors cpu_in = make_inputs(c, dt, seed);
  Tensors gpu_in, abs_in;
  for (const Tensor& t : cpu_in) {
    gpu_in.push_back(to(t, gpu()));
    abs_in.push_back(abs(to(t, DType::F64)));
  }
  const Tensor want = c.f(cpu_in, c.beta, c.alpha);
  const Tensor got = c.f(gpu_in, c.beta, c.alpha);
  const Tensor scale = c.f(abs_in, std::abs(c.beta), std::abs(c.alpha));
  REQUIRE(got.device() == gpu());
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> g = values(got), w = values(want), s = values(scale);
  const double rel = 2 * unit_roundoff_out(dt) + 2 * double(c.k + 1) * unit_roundoff_acc(dt);
  const double abs_floor = 2 * smallest_subnormal(dt);
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double tol = rel * s[i] + abs_floor;
    const bool ok = (std::isnan(g[i]) && std::isnan(w[i])) || g[i] == w[i] || std::abs(g[i] - w[i]) <= tol;
    if (!ok) FAIL(c.name << " " << dtype_name(dt) << " element " << i << ": cuda " << g[i] << " cpu " << w[i]
                         << " (tolerance " << tol << ", scale " << s[i] << ")");
  }
}

void check_all_dtypes(const std::vector<GemmCase>& cases) {
  for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
    for (const GemmCase& c : cases) check_case(c, dt);
  }
}

Tensor op_mm(const Tensors& in, double, double) { return mm(in[0], in[1]); }
Tensor op_matmul(const Tensors& in, double, double) { return matmul(in[0], in[1]); }
Tensor op_bmm(const Tensors& in, double, double) { return bmm(in[0], in[1]); }

// Restores the TF32 switch when a test ends, even by a failed REQUIRE.
struct Tf32Restore {
  bool previous = cuda::allow_tf32();
  ~Tf32Restore() { cuda::set_allow_tf32(previous); }
};

}  // namespace

TEST_CASE("CUDA mm, matmul and bmm match the CPU on odd sizes", "[cuda][gpu][gemm]") {
  std::vector<GemmCase> cases;
  for (const auto& [n, k, m] : std::vector<std::array<int64_t, 3>>{{127, 65, 33}, {1, 1, 1}, {64, 128, 32},
                                                                    {3, 0, 5}, {0, 4, 3}, {5, 4, 0}, {2, 300, 1}}) {
    const std::string size = std::to_string(n) + "x" + std::to_string(k) + "x" + std::to_string(m);
    cases.push_back({"mm " + size, {{n, k}, {k, m}}, k, op_mm});
    cases.push_back({"matmul " + size, {{n, k}, {k, m}}, k, op_matmul});
    cases.push_back({"bmm 3x" + size, {{3, n, k}, {3, k, m}}, k, op_bmm});
  }
  cases.push_back({"bmm empty batch", {{0, 5, 4}, {0, 4, 3}}, 4, op_bmm});
  cases.push_back({"matmul empty batch", {{0, 2, 5, 4}, {4, 3}}, 4, op_matmul});
  check_all_dtypes(cases);
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA GEMMs read transposed, sliced and misaligned operands", "[cuda][gpu][gemm]") {
  const std::vector<GemmCase> cases = {
      // a = x^T, b = y^T: both passed with op T.
      {"mm a^T b^T", {{65, 127}, {33, 65}}, 65, [](const Tensors& in, double, double) { return mm(in[0].t(), in[1].t()); }},
      {"mm a^T", {{65, 127}, {65, 33}}, 65, [](const Tensors& in, double, double) { return mm(in[0].t(), in[1]); }},
      {"mm b^T", {{127, 65}, {33, 65}}, 65, [](const Tensors& in, double, double) { return mm(in[0], in[1].t()); }},
      // Slices of larger matrices: leading dimensions 100 and 90, offsets of odd element counts
      // (f16/bf16 pointers only 2-byte aligned).
      {"mm sliced", {{130, 100}, {70, 90}}, 65,
       [](const Tensors& in, double, double) {
         return mm(in[0].slice(0, 3, 130).slice(1, 1, 66), in[1].slice(0, 5, 70).slice(1, 7, 40));
       }},
      {"mm sliced transposed", {{100, 130}, {90, 70}}, 65,
       [](const Tensors& in, double, double) {
         return mm(in[0].slice(0, 1, 66).slice(1, 3, 130).t(), in[1].slice(0, 7, 40).slice(1, 5, 70).t());
       }},
      // Step slices and a broadcast inside a matrix: copied to dense first.
      {"mm step-sliced", {{127, 130}, {65, 66}}, 65,
       [](const Tensors& in, double, double) { return mm(in[0].slice(1, 0, 130, 2), in[1].slice(1, 0, 66, 2)); }},
      {"mm broadcast rows", {{1, 65}, {65, 33}}, 65,
       [](const Tensors& in, double, double) { return mm(in[0].expand({127, 65}), in[1]); }},
      // Batched views: per-entry transposes, a sliced batch.
      {"bmm transposed entries", {{4, 65, 127}, {4, 33, 65}}, 65,
       [](const Tensors& in, double, double) { return bmm(in[0].transpose(1, 2), in[1].transpose(1, 2)); }},
      {"bmm batch slice", {{9, 127, 65}, {4, 65, 33}}, 65,
       [](const Tensors& in, double, double) { return bmm(in[0].slice(0, 1, 9, 2), in[1]); }},
  };
  check_all_dtypes(cases);
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA matmul broadcasts batches and 1-D operands like the CPU", "[cuda][gpu][gemm]") {
  const std::vector<GemmCase> cases = {
      {"[2,1,5,7] @ [3,7,4]", {{2, 1, 5, 7}, {3, 7, 4}}, 7, op_matmul},            // a strided batch + a loop
      {"[5,7] @ [4,7,3]", {{5, 7}, {4, 7, 3}}, 7, op_matmul},                      // a's batch stride 0
      {"[4,5,7] @ [7,3]", {{4, 5, 7}, {7, 3}}, 7, op_matmul},                      // folded into 20 rows
      {"[2,3,5,7] @ [2,3,7,4]", {{2, 3, 5, 7}, {2, 3, 7, 4}}, 7, op_matmul},       // two dims, one batch
      {"[3,1,5,7] @ [1,2,7,4]", {{3, 1, 5, 7}, {1, 2, 7, 4}}, 7, op_matmul},
      {"bmm a expanded", {{1, 5, 7}, {6, 7, 3}}, 7,
       [](const Tensors& in, double, double) { return bmm(in[0].expand({6, 5, 7}), in[1]); }},
      {"bmm b expanded", {{6, 5, 7}, {1, 7, 3}}, 7,
       [](const Tensors& in, double, double) { return bmm(in[0], in[1].expand({6, 7, 3})); }},
      {"matmul transposed batch entries @ W", {{4, 7, 5}, {7, 3}}, 7,
       [](const Tensors& in, double, double) { return matmul(in[0].transpose(1, 2), in[1]); }},
      {"dot", {{65}, {65}}, 65, op_matmul},
      {"vec @ mat", {{65}, {65, 33}}, 65, op_matmul},
      {"mat @ vec", {{127, 65}, {65}}, 65, op_matmul},
      {"vec @ batch", {{65}, {3, 65, 33}}, 65, op_matmul},
      {"batch @ vec", {{3, 127, 65}, {65}}, 65, op_matmul},
      {"strided vec @ mat", {{130}, {65, 33}}, 65,
       [](const Tensors& in, double, double) { return matmul(in[0].slice(0, 0, 130, 2), in[1]); }},
      {"dot k=0", {{0}, {0}}, 0, op_matmul},
  };
  check_all_dtypes(cases);
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA addmm and baddbmm: beta, alpha and broadcast c", "[cuda][gpu][gemm]") {
  const GemmFn addmm_f = [](const Tensors& in, double beta, double alpha) { return addmm(in[0], in[1], in[2], beta, alpha); };
  const GemmFn baddbmm_f = [](const Tensors& in, double beta, double alpha) {
    return baddbmm(in[0], in[1], in[2], beta, alpha);
  };
  std::vector<GemmCase> cases;
  for (const Shape& c : std::vector<Shape>{{127, 33}, {33}, {1, 33}, {127, 1}, {}}) {
    const std::string cs = shape_str(c);
    cases.push_back({"addmm c " + cs, {c, {127, 65}, {65, 33}}, 65, addmm_f});
    cases.push_back({"addmm c " + cs + " beta 0.5 alpha 2", {c, {127, 65}, {65, 33}}, 65, addmm_f, 0.5, 2.0});
    cases.push_back({"addmm c " + cs + " beta -1.5 alpha -0.25", {c, {127, 65}, {65, 33}}, 65, addmm_f, -1.5, -0.25});
  }
  cases.push_back({"addmm c transposed", {{33, 127}, {127, 65}, {65, 33}}, 65,
                   [](const Tensors& in, double beta, double alpha) { return addmm(in[0].t(), in[1], in[2], beta, alpha); },
                   0.5, 1.0});
  cases.push_back({"addmm a^T b^T", {{127, 33}, {65, 127}, {33, 65}}, 65,
                   [](const Tensors& in, double beta, double alpha) {
                     return addmm(in[0], in[1].t(), in[2].t(), beta, alpha);
                   },
                   2.0, 0.5});
  // beta = 0: c is all NaN and must not be read.
  cases.push_back({"addmm beta 0 ignores NaN c", {{127, 33}, {127, 65}, {65, 33}}, 65, addmm_f, 0.0, 1.5, true});
  cases.push_back({"addmm k=0 beta 2", {{127, 33}, {127, 0}, {0, 33}}, 0, addmm_f, 2.0, 3.0});
  cases.push_back({"addmm k=0 beta 0.1", {{127, 33}, {127, 0}, {0, 33}}, 0, addmm_f, 0.1, 1.0});
  cases.push_back({"addmm k=0 beta 0", {{127, 33}, {127, 0}, {0, 33}}, 0, addmm_f, 0.0, 1.0, true});
  cases.push_back({"addmm 1x1x1", {{1, 1}, {1, 1}, {1, 1}}, 1, addmm_f, 0.5, 2.0});
  cases.push_back({"baddbmm", {{3, 127, 33}, {3, 127, 65}, {3, 65, 33}}, 65, baddbmm_f, 0.5, 2.0});
  cases.push_back({"baddbmm c [33]", {{33}, {3, 127, 65}, {3, 65, 33}}, 65, baddbmm_f, 1.0, -1.0});
  cases.push_back({"baddbmm c [127, 1]", {{127, 1}, {3, 127, 65}, {3, 65, 33}}, 65, baddbmm_f, -0.5, 1.0});
  cases.push_back({"baddbmm empty batch", {{0, 5, 3}, {0, 5, 4}, {0, 4, 3}}, 4, baddbmm_f, 0.5, 2.0});
  cases.push_back({"baddbmm k=0", {{3, 5, 3}, {3, 5, 0}, {3, 0, 3}}, 0, baddbmm_f, 0.5, 2.0});
  // alpha = 0: a (all NaN here) and b are not read, as PyTorch's; the output is beta * c.
  cases.push_back({"addmm alpha 0 ignores NaN a", {{127, 33}, {127, 65}, {65, 33}}, 65,
                   [](const Tensors& in, double beta, double alpha) { return addmm(in[0], in[1] * NAN, in[2], beta, alpha); },
                   1.5, 0.0});
  cases.push_back({"baddbmm alpha 0 ignores NaN b", {{3, 127, 33}, {3, 127, 65}, {3, 65, 33}}, 65,
                   [](const Tensors& in, double beta, double alpha) { return baddbmm(in[0], in[1], in[2] * NAN, beta, alpha); },
                   -0.5, 0.0});
  check_all_dtypes(cases);
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA linear with and without bias", "[cuda][gpu][gemm]") {
  const GemmFn with_bias = [](const Tensors& in, double, double) { return linear(in[0], in[1], in[2]); };
  const GemmFn no_bias = [](const Tensors& in, double, double) { return linear(in[0], in[1]); };
  const std::vector<GemmCase> cases = {
      {"linear bias", {{127, 65}, {33, 65}, {33}}, 65, with_bias},
      {"linear no bias", {{127, 65}, {33, 65}}, 65, no_bias},
      {"linear batched bias", {{2, 5, 65}, {33, 65}, {33}}, 65, with_bias},
      {"linear batched no bias", {{2, 5, 65}, {33, 65}}, 65, no_bias},
      {"linear 1-D input", {{65}, {33, 65}, {33}}, 65, with_bias},
      {"linear one row", {{1, 65}, {33, 65}, {33}}, 65, with_bias},
      {"linear one output", {{127, 65}, {1, 65}, {1}}, 65, with_bias},
      {"linear 1x1x1", {{1, 1}, {1, 1}, {1}}, 1, with_bias},
      {"linear in=0", {{127, 0}, {33, 0}, {33}}, 0, with_bias},
      {"linear empty batch", {{0, 65}, {33, 65}, {33}}, 65, with_bias},
      // A misaligned bias (offset 1 element), a strided bias, a transposed weight and input.
      {"linear misaligned bias", {{127, 65}, {33, 65}, {34}}, 65,
       [](const Tensors& in, double, double) { return linear(in[0], in[1], in[2].slice(0, 1, 34)); }},
      {"linear strided bias", {{127, 65}, {33, 65}, {66}}, 65,
       [](const Tensors& in, double, double) { return linear(in[0], in[1], in[2].slice(0, 0, 66, 2)); }},
      {"linear transposed weight", {{127, 65}, {65, 33}, {33}}, 65,
       [](const Tensors& in, double, double) { return linear(in[0], in[1].t(), in[2]); }},
      {"linear transposed batch input", {{2, 65, 5}, {33, 65}, {33}}, 65,
       [](const Tensors& in, double, double) { return linear(in[0].transpose(1, 2), in[1], in[2]); }},
      {"linear large", {{256, 512}, {384, 512}, {384}}, 512, with_bias},
  };
  check_all_dtypes(cases);
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA f16/bf16 linear rounds accumulator + bias once, with a long K (split-K territory)",
          "[cuda][gpu][gemm]") {
  // 2049 ones times ones is exact in f32 in any order; + 0.75 is 2049.75, which f16 rounds to 2050
  // (and bf16 to 2048). Rounding the product first (2049 -> 2048 in f16, ties to even) and then
  // adding the bias in f16 would give 2048: the double rounding a split-K reduction ahead of the
  // bias epilogue could bring (GemmPlan::no_split_k). K = 65536 invites split-K.
  const int64_t k = 65536;
  for (DType dt : {DType::F16, DType::BF16}) {
    INFO(dtype_name(dt));
    const Tensor x = ones({64, k}, {.dtype = dt});
    Tensor w = zeros({8, k}, {.dtype = DType::F32});
    for (int64_t i = 0; i < 2049; ++i) w.data<float>()[3 * k + i * 31] = 1.0f;
    const Tensor wd = to(w, dt), bias = to(full({8}, 0.75), dt);
    const Tensor want = linear(x, wd, bias);
    const Tensor got = linear(x.to(gpu()), wd.to(gpu()), bias.to(gpu()));
    REQUIRE(values(want)[3] == (dt == DType::F16 ? 2050.0 : 2048.0));
    CHECK(values(got) == values(want));
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA TF32 switch: f32 GEMMs on TF32 Tensor Cores only when allowed", "[cuda][gpu][gemm]") {
  NoGradGuard no_grad;
  const Tf32Restore restore;
  Generator gen(7);
  const Tensor a = randn({512, 512}, {}, &gen), b = randn({512, 512}, {}, &gen);
  const Tensor a_gpu = to(a, gpu()), b_gpu = to(b, gpu());
  const std::vector<double> cpu = values(mm(a, b));
  const std::vector<double> scale = values(mm(abs(to(a, DType::F64)), abs(to(b, DType::F64))));
  // max_ij |x_ij - y_ij| / S_ij with S = |a| @ |b|: the error relative to the size of the sum.
  auto max_rel = [&](const std::vector<double>& x, const std::vector<double>& y) {
    double r = 0;
    for (std::size_t i = 0; i < x.size(); ++i) r = std::max(r, std::abs(x[i] - y[i]) / scale[i]);
    return r;
  };
  cuda::set_allow_tf32(false);
  const std::vector<double> strict = values(mm(a_gpu, b_gpu));
  CHECK(max_rel(strict, cpu) < 1e-5);
  cuda::set_allow_tf32(true);
  REQUIRE(cuda::allow_tf32());
  const std::vector<double> tf32 = values(mm(a_gpu, b_gpu));
  // TF32 keeps 10 mantissa bits of each input (unit roundoff 2^-11): errors of order 1e-4 of S.
  CHECK(max_rel(tf32, strict) > 1e-5);
  CHECK(max_rel(tf32, strict) < 1e-2);
  CHECK(max_rel(tf32, cpu) < 1e-2);
  // f16/bf16 are unaffected by the switch (always Tensor Cores with f32 accumulation).
  const Tensor h = to(a_gpu, DType::BF16), g = to(b_gpu, DType::BF16);
  const std::vector<double> bf16_on = values(mm(h, g));
  cuda::set_allow_tf32(false);
  const std::vector<double> bf16_off = values(mm(h, g));
  CHECK(bf16_on == bf16_off);
  const std::vector<double> strict_again = values(mm(a_gpu, b_gpu));
  CHECK(max_rel(strict_again, cpu) < 1e-5);
  CHECK(strict_again == strict);
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA GEMM: heuristic cache, workspace memory and no host synchronisation", "[cuda][gpu][gemm]") {
  NoGradGuard no_grad;
  const Tensor a = to(randn({37, 41}), gpu()), b = to(randn({41, 43}), gpu());
  cuda::synchronize();
  const std::size_t cached = cuda::gemm_heuristic_cache_size();
  const std::size_t allocated = cuda::memory_stats().allocated;
  const uint64_t syncs = cuda::sync_count();
  {
    const Tensor c1 = mm(a, b);
    CHECK(cuda::gemm_heuristic_cache_size() == cached + 1);  // a new shape: one heuristic query
    const Tensor c2 = mm(a, b);
    const Tensor c3 = mm(a, b);
    CHECK(cuda::gemm_heuristic_cache_size() == cached + 1);  // the same shape again: cached
    CHECK(cuda::sync_count() == syncs);                       // GEMMs never wait for the device
    CHECK(values(c3) == values(c1));                          // the same algorithm: the same bits
  }
  // The outputs and every workspace went back to the allocator.
  CHECK(cuda::memory_stats().allocated == allocated);
  mg::test::require_no_pending_cuda_error();
}
