// Tests of the linear-algebra ops (matmul, mm, bmm, addmm, baddbmm, linear): golden values, every
// matmul shape case against a naive f64 triple loop, strided/transposed operands, f16/bf16 f32
// accumulation with one rounding, exact f32/bf16 products on the oneDNN path, f64
// central-difference gradient checks (also of the gradients themselves: double backward) and
// error texts.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "ops/cpu/gemm.h"
#include "ops/ops.h"

using namespace mg;

namespace {

Generator& gen() {
  static Generator g(1234);
  return g;
}

Tensor rnd(const Shape& shape, DType dtype = DType::F64) { return randn(shape, {.dtype = dtype}, &gen()); }

// The values of t in row-major order, as doubles.
std::vector<double> values(const Tensor& t) {
  const Tensor c = contiguous(to(t, DType::F64));
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

// Naive numpy matmul in f64: 1-D promotion, broadcast batch dims, triple loop.
Tensor ref_matmul(const Tensor& a0, const Tensor& b0) {
  Tensor a = to(a0, DType::F64), b = to(b0, DType::F64);
  const bool a1 = a.dim() == 1, b1 = b.dim() == 1;
  if (a1) a = unsqueeze(a, 0);
  if (b1) b = unsqueeze(b, 1);
  const int64_t n = a.size(-2), k = a.size(-1), m = b.size(-1);
  const Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  const Shape batch = broadcast_shapes(ba, bb, "ref");
  Shape fa = batch, fb = batch;
  fa.insert(fa.end(), {n, k});
  fb.insert(fb.end(), {k, m});
  const std::vector<double> va = values(expand(a, fa)), vb = values(expand(b, fb));
  const int64_t nb = shape_numel(batch);
  std::vector<double> out(std::size_t(nb * n * m), 0.0);
  for (int64_t q = 0; q < nb; ++q) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < m; ++j) {
        double s = 0;
        for (int64_t l = 0; l < k; ++l) s += va[std::size_t(q * n * k + i * k + l)] * vb[std::size_t(q * k * m + l * m + j)];
        out[std::size_t(q * n * m + i * m + j)] = s;
      }
    }
  }
  Shape os = batch;
  if (!a1) os.push_back(n);
  if (!b1) os.push_back(m);
  return from_vector<double>(out, os.empty() ? Shape{1} : os).reshape(os);
}

// |got - want| <= atol + rtol |want| elementwise, with equal shapes.
void require_close(const Tensor& got, const Tensor& want, double rtol, double atol) {
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> g = values(got), w = values(want);
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << ": got " << g[i] << ", want " << w[i]);
    REQUIRE(std::abs(g[i] - w[i]) <= atol + rtol * std::abs(w[i]));
  }
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor ca = contiguous(a), cb = contiguous(b);
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), std::size_t(ca.numel()) * dtype_size(ca.dtype())) == 0;
}

// f64 central-difference check of d/d inputs <v, f(inputs)> for a random cotangent v.
void check_grad(const std::function<Tensor(const Tensors&)>& f, Tensors inputs) {
  for (Tensor& x : inputs) x = contiguous(x).detach().requires_grad_(true);
  const Tensor y = f(inputs);
  const Tensor v = rnd(y.shape());
  // An input the output does not depend on (d/dA of a gradient that is linear in A) gets zeros.
  Tensors analytic = autograd::grad({y}, inputs, {v}, std::nullopt, false, /*allow_unused=*/true);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!analytic[i].defined()) analytic[i] = zeros_like(inputs[i]);
  }
  const double eps = 1e-6;
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    double* p = inputs[i].data<double>();
    const std::vector<double> an = values(analytic[i]);
    REQUIRE(analytic[i].shape() == inputs[i].shape());
    for (int64_t e = 0; e < inputs[i].numel(); ++e) {
      const double keep = p[e];
      p[e] = keep + eps;
      const double up = sum(f(inputs) * v).item<double>();
      p[e] = keep - eps;
      const double down = sum(f(inputs) * v).item<double>();
      p[e] = keep;
      const double numeric = (up - down) / (2 * eps);
      INFO("input " << i << " element " << e << ": analytic " << an[std::size_t(e)] << ", numeric " << numeric);
      REQUIRE(std::abs(an[std::size_t(e)] - numeric) <= 1e-6 * (1.0 + std::abs(numeric)));
    }
  }
}

// Checks the gradients of f and (double backward) the gradients of d<v, f>/d input `wrt`.
void check_grad_twice(const std::function<Tensor(const Tensors&)>& f, const Tensors& inputs, int wrt = 0) {
  check_grad(f, inputs);
  const Tensor v = rnd(f(inputs).shape());
  check_grad(
      [&](const Tensors& xs) {
        EnableGradGuard enable_grad;
        Tensors leaves = xs;
        const Tensor y = f(leaves);
        return autograd::grad({y}, {leaves[std::size_t(wrt)]}, {v}, true, /*create_graph=*/true)[0];
      },
      inputs);
}

}  // namespace

TEST_CASE("mm golden values", "[ops][linalg]") {
  // [[1,2,3],[4,5,6]] @ [[7,8],[9,10],[11,12]] = [[1*7+2*9+3*11, 1*8+2*10+3*12], [...]]
  const Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = from_vector<float>({7, 8, 9, 10, 11, 12}, {3, 2});
  const Tensor y = mm(a, b);
  REQUIRE(y.shape() == Shape{2, 2});
  REQUIRE(y.dtype() == DType::F32);
  REQUIRE(values(y) == std::vector<double>{58, 64, 139, 154});
  REQUIRE(values(matmul(a, b)) == std::vector<double>{58, 64, 139, 154});
  // 1-D . 1-D: 1*4 + 2*5 + 3*6 = 32, a 0-d tensor
  const Tensor d = matmul(from_vector<double>({1, 2, 3}), from_vector<double>({4, 5, 6}));
  REQUIRE(d.dim() == 0);
  REQUIRE(d.item<double>() == 32.0);
  // addmm: 2 * [[1, 1], [1, 1]] + 0.5 * [[58, 64], [139, 154]]
  const Tensor c = addmm(ones({2, 2}), a, b, 2.0, 0.5);
  REQUIRE(values(c) == std::vector<double>{31, 34, 71.5, 79});
  // linear: x [1, 3] @ W^T with W = b^T, plus bias [1, -1]
  const Tensor l = linear(from_vector<float>({1, 2, 3}, {1, 3}), b.t(), from_vector<float>({1, -1}));
  REQUIRE(values(l) == std::vector<double>{59, 63});
}

TEST_CASE("matmul matches a naive f64 reference for every shape case", "[ops][linalg]") {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3}, {3}},          {{3}, {3, 4}},          {{2, 3}, {3}},       {{2, 3}, {3, 4}},
      {{5, 2, 3}, {3, 4}}, {{3}, {5, 3, 4}},       {{5, 2, 3}, {3}},    {{2, 1, 3, 4}, {5, 4, 2}},
      {{4, 3}, {2, 3, 5}}, {{1, 2, 3}, {4, 3, 2}}, {{3, 2, 3}, {3, 3, 1}}, {{1, 3}, {3, 1}},
      {{2, 3, 4, 5}, {5, 6}}, {{6, 0}, {0, 2}}};
  const std::vector<Shape> expected = {{},        {4},       {2},          {2, 4},    {5, 2, 4},
                                       {5, 4},    {5, 2},    {2, 5, 3, 2}, {2, 4, 5}, {4, 2, 2},
                                       {3, 2, 1}, {1, 1},    {2, 3, 4, 6}, {6, 2}};
  for (DType dt : {DType::F64, DType::F32}) {
    for (std::size_t i = 0; i < cases.size(); ++i) {
      INFO(shape_str(cases[i].first) << " @ " << shape_str(cases[i].second) << " in " << dtype_name(dt));
      const Tensor a = rnd(cases[i].first, dt), b = rnd(cases[i].second, dt);
      const Tensor y = matmul(a, b);
      REQUIRE(y.shape() == expected[i]);
      REQUIRE(y.dtype() == dt);
      require_close(y, ref_matmul(a, b), dt == DType::F64 ? 1e-12 : 1e-5, dt == DType::F64 ? 1e-12 : 1e-5);
    }
  }
}

TEST_CASE("mm, bmm, addmm, baddbmm and linear match the reference", "[ops][linalg]") {
  const Tensor a = rnd({4, 5}), b = rnd({5, 3});
  require_close(mm(a, b), ref_matmul(a, b), 1e-12, 1e-12);
  // bmm with more matrices than threads (batch-parallel path) and with one
  const Tensor ba = rnd({9, 4, 5}), bb = rnd({9, 5, 3});
  require_close(bmm(ba, bb), ref_matmul(ba, bb), 1e-12, 1e-12);
  const Tensor ba1 = rnd({1, 4, 5}), bb1 = rnd({1, 5, 3});
  require_close(bmm(ba1, bb1), ref_matmul(ba1, bb1), 1e-12, 1e-12);
  // addmm with c broadcast as a row [m], a column [n, 1], a 0-d scalar and a full matrix
  for (const Shape& cs : {Shape{3}, Shape{4, 1}, Shape{}, Shape{4, 3}}) {
    const Tensor c = rnd(cs);
    require_close(addmm(c, a, b, 0.5, -2.0), 0.5 * c + -2.0 * ref_matmul(a, b), 1e-12, 1e-12);
  }
  // baddbmm with c [n, m] broadcast over the batch, and a full c
  for (const Shape& cs : {Shape{4, 3}, Shape{9, 4, 3}, Shape{9, 1, 3}}) {
    const Tensor c = rnd(cs);
    require_close(baddbmm(c, ba, bb, 2.0, 3.0), 2.0 * c + 3.0 * ref_matmul(ba, bb), 1e-12, 1e-12);
  }
  // linear with and without bias, 1-D, 2-D and 3-D input
  const Tensor w = rnd({6, 5}), bias = rnd({6});
  for (const Shape& xs : {Shape{5}, Shape{4, 5}, Shape{2, 3, 5}}) {
    const Tensor x = rnd(xs);
    require_close(linear(x, w), ref_matmul(x, w.t()), 1e-12, 1e-12);
    require_close(linear(x, w, bias), ref_matmul(x, w.t()) + bias, 1e-12, 1e-12);
  }
}

TEST_CASE("beta = 0 ignores c, even NaN - an empty inner dim gives beta * c", "[ops][linalg]") {
  const Tensor a = rnd({2, 3}), b = rnd({3, 2});
  const Tensor c = full({2, 2}, NAN, {.dtype = DType::F64});
  require_close(addmm(c, a, b, 0.0, 1.0), ref_matmul(a, b), 1e-12, 1e-12);
  const Tensor y = addmm(full({2, 2}, 3.0, {.dtype = DType::F64}), rnd({2, 0}), rnd({0, 2}), 2.0, 1.0);
  REQUIRE(values(y) == std::vector<double>{6, 6, 6, 6});
  REQUIRE(values(mm(rnd({2, 0}), rnd({0, 3}))) == std::vector<double>(6, 0.0));
}

TEST_CASE("alpha = 0 ignores a and b, even NaN and inf - as BLAS, the output is beta * c", "[ops][linalg]") {
  for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
    INFO(dtype_name(dt));
    const Tensor a = to(from_vector<double>({NAN, 1, 2, 3, INFINITY, 5}, {2, 3}), dt), b = rnd({3, 2}, dt);
    const Tensor c = to(from_vector<double>({1, -2, 3.5, 0.25}, {2, 2}), dt);
    CHECK(values(addmm(c, a, b, 2.0, 0.0)) == std::vector<double>{2, -4, 7, 0.5});
    CHECK(values(addmm(c, a, b, 0.0, 0.0)) == std::vector<double>(4, 0.0));
    const Tensor ab = to(from_vector<double>({NAN, 1, 2, 3, INFINITY, 5, 1, 1, 1, 1, 1, 1}, {2, 2, 3}), dt);
    const Tensor bb = to(rnd({2, 3, 2}), dt);
    CHECK(values(baddbmm(c, ab, bb, 1.0, 0.0)) == std::vector<double>{1, -2, 3.5, 0.25, 1, -2, 3.5, 0.25});
  }
}

TEST_CASE("transposed, sliced and broadcast operands", "[ops][linalg]") {
  for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
    INFO(dtype_name(dt));
    const double tol = dt == DType::F64 ? 1e-12 : dt == DType::F32 ? 1e-5 : 2e-2;
    const Tensor at = rnd({5, 4}, dt), bt = rnd({3, 5}, dt);
    // transposed views (col-major for the GEMM, no copy)
    require_close(mm(at.t(), bt.t()), ref_matmul(at.t(), bt.t()), tol, tol);
    // every-other-row-and-column slices (general strides: copied)
    const Tensor big = rnd({8, 10}, dt);
    const Tensor s = big.slice(0, 0, 8, 2).slice(1, 0, 10, 2);  // [4, 5]
    require_close(mm(s, bt.t()), ref_matmul(s, bt.t()), tol, tol);
    // rows sliced out of a wider matrix (row stride > columns)
    const Tensor narrow_cols = big.narrow(1, 2, 5);  // [8, 5]
    require_close(matmul(narrow_cols, bt.t()), ref_matmul(narrow_cols, bt.t()), tol, tol);
    // an expanded (stride 0) operand
    const Tensor e = rnd({1, 5}, dt).expand({4, 5});
    require_close(mm(e, bt.t()), ref_matmul(e, bt.t()), tol, tol);
    // batched transposes and a permuted 3-D input to linear (batch dims that cannot be folded)
    const Tensor x = rnd({4, 2, 5}, dt).transpose(0, 1);  // [2, 4, 5], not contiguous
    const Tensor w = rnd({3, 5}, dt), bias = rnd({3}, dt);
    require_close(linear(x, w, bias), ref_matmul(x, w.t()) + to(bias, DType::F64), tol, tol);
    const Tensor xb = rnd({2, 5, 4}, dt).transpose(1, 2);  // [2, 4, 5] col-major matrices
    require_close(matmul(xb, w.t()), ref_matmul(xb, w.t()), tol, tol);
    const Tensor wb = rnd({2, 3, 5}, dt).transpose(1, 2);  // [2, 5, 3]
    require_close(bmm(xb, wb), ref_matmul(xb, wb), tol, tol);
  }
}

TEST_CASE("f16/bf16 GEMM equals the f32 GEMM of the same values rounded once", "[ops][linalg]") {
  for (DType dt : {DType::F16, DType::BF16}) {
    INFO(dtype_name(dt));
    const Tensor a = rnd({33, 70}, dt), b = rnd({70, 21}, dt);
    const Tensor y = matmul(a, b);
    REQUIRE(y.dtype() == dt);
    // the contract: f32 accumulation, then one rounding
    REQUIRE(bit_equal(y, to(matmul(to(a, DType::F32), to(b, DType::F32)), dt)));
    // and close to the exact product of the stored values
    const double eps = dt == DType::F16 ? 1.0 / 1024 : 1.0 / 128;
    require_close(y, ref_matmul(a, b), eps, 1e-4);
    // batched, with bias and beta/alpha, transposed operand
    const Tensor c = rnd({21}, dt), bb = rnd({3, 70, 21}, dt);
    const Tensor x = rnd({3, 33, 70}, dt);
    REQUIRE(bit_equal(baddbmm(c, x, bb, 0.5, 2.0),
                      to(baddbmm(to(c, DType::F32), to(x, DType::F32), to(bb, DType::F32), 0.5, 2.0), dt)));
    const Tensor w = rnd({21, 70}, dt);
    REQUIRE(bit_equal(linear(x, w, c),
                      to(linear(to(x, DType::F32), to(w, DType::F32), to(c, DType::F32)), dt)));
  }
}

TEST_CASE("f32/bf16 oneDNN GEMMs: layouts, broadcast batches, alpha/beta, one rounding", "[ops][linalg]") {
  // Products of at least 32^3 multiply-adds (the oneDNN path). Integer operands in [-8, 8] and
  // alpha/beta with few mantissa bits keep every f32 partial sum exact, so f32 must equal the f64
  // reference and bf16 the f64 reference rounded to bf16 once, bit for bit: a wrong transpose or
  // batch offset, or a second rounding (say of alpha * a @ b before beta * c is added), fails.
  const int64_t n = 40, k = 64, m = 36;
  for (DType dt : {DType::F32, DType::BF16}) {
    INFO(dtype_name(dt));
    auto ints = [&](const Shape& shape) { return randint(-8, 9, shape, {.dtype = dt}, &gen()); };
    auto f64 = [](const Tensor& t) { return to(t, DType::F64); };
    auto check = [&](const Tensor& got, const Tensor& want_f64) {
      REQUIRE(got.dtype() == dt);
      REQUIRE(bit_equal(got, to(want_f64, dt)));
    };
    // both operands transposed views (passed to oneDNN as 'T', no copies); a step slice (copied)
    const Tensor at = ints({k, n}), bt = ints({m, k});
    const Tensor ab = ref_matmul(at.t(), bt.t());  // [n, m]
    check(mm(at.t(), bt.t()), ab);
    const Tensor s = ints({n, 2 * k}).slice(1, 0, 2 * k, 2);  // [n, k], column stride 2
    check(mm(s, bt.t()), ref_matmul(s, bt.t()));
    // addmm with a bias row broadcast over the rows; beta = 0 ignores NaN in c
    const Tensor bias = ints({m});
    check(addmm(bias, at.t(), bt.t(), 0.375, 1.5), 0.375 * f64(bias) + 1.5 * ab);
    check(addmm(full({n, m}, NAN, {.dtype = dt}), at.t(), bt.t(), 0.0, 0.5), 0.5 * ab);
    // baddbmm: per-matrix transposed a, b broadcast over the batch (batch stride 0), c [n, m]
    // broadcast too; 4 matrices on 2 threads run batch-parallel
    const Tensor xa = ints({4, k, n}).transpose(1, 2);  // [4, n, k]
    const Tensor wb = ints({1, k, m}).expand({4, k, m});
    const Tensor c = ints({n, m});
    check(baddbmm(c, xa, wb, -0.25, 1.5), -0.25 * f64(c) + 1.5 * ref_matmul(xa, wb));
    // matmul with broadcast batch dims: [2, 1, n, k] @ [3, k, m] -> [2, 3, n, m]
    const Tensor ba = ints({2, 1, n, k}), bb = ints({3, k, m});
    check(matmul(ba, bb), ref_matmul(ba, bb));
    // linear on [2, 20, k]: batch folded into the rows, weight transposed, bias added in f32
    const Tensor x = ints({2, n / 2, k}), w = ints({m, k});
    check(linear(x, w, bias), ref_matmul(x, w.t()) + f64(bias));
  }
}

TEST_CASE("bf16 GEMM runs natively exactly where oneDNN has one (avx512_core)", "[ops][linalg]") {
  // oneDNN 2.6 implements its bf16 GEMM from avx512_core (F, BW, VL, DQ) up; elsewhere (AVX2-only
  // processors) bf16 runs through the f32 GEMM, which the two cases above check bit for bit.
  const bool avx512_core = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  CHECK(mg::cpu::onednn_bf16_gemm_available() == avx512_core);
}

TEST_CASE("f16/bf16 dot of 4096 terms accumulates in f32 and rounds once", "[ops][linalg]") {
  // 4096 ones . ones = 4096. Accumulating in f16 would stop at 2048 (2048 + 1 rounds back to
  // 2048), in bf16 at 256; f32 holds every partial sum exactly.
  for (DType dt : {DType::F16, DType::BF16}) {
    INFO(dtype_name(dt));
    const Tensor a = ones({1, 4096}, {.dtype = dt}), b = ones({4096, 1}, {.dtype = dt});
    const Tensor y = matmul(a, b);
    REQUIRE(y.dtype() == dt);
    REQUIRE(y.item<double>() == 4096.0);
    REQUIRE(matmul(ones({4096}, {.dtype = dt}), ones({4096}, {.dtype = dt})).item<double>() == 4096.0);
  }
  // One final rounding: sum = 4095 ones + one 3 = 4098, exact in f32; in f16 (spacing 4 at 4096)
  // 4098 is a tie and rounds to even, 4096 — the same as rounding the exact f64 result.
  Tensor b = ones({4096, 1}, {.dtype = DType::F16});
  b.narrow(0, 17, 1).fill_(3.0);
  const Tensor y = matmul(ones({1, 4096}, {.dtype = DType::F16}), b);
  const Tensor exact = to(scalar_tensor(4098.0, {.dtype = DType::F64}), DType::F16);
  REQUIRE(bit_equal(y.reshape({}), exact));
  REQUIRE(y.item<double>() == 4096.0);
  // 4094 ones and two 3s: 4100 exactly representable, kept as is.
  b.narrow(0, 18, 1).fill_(3.0);
  REQUIRE(matmul(ones({1, 4096}, {.dtype = DType::F16}), b).item<double>() == 4100.0);
}

TEST_CASE("mm, bmm, addmm, baddbmm gradients (f64 central differences)", "[ops][linalg][grad]") {
  check_grad_twice([](const Tensors& x) { return mm(x[0], x[1]); }, {rnd({3, 4}), rnd({4, 2})});
  check_grad_twice([](const Tensors& x) { return bmm(x[0], x[1]); }, {rnd({2, 3, 4}), rnd({2, 4, 2})});
  for (const Shape& cs : {Shape{2}, Shape{3, 1}, Shape{}, Shape{3, 2}}) {
    INFO("addmm c " << shape_str(cs));
    check_grad_twice([](const Tensors& x) { return addmm(x[0], x[1], x[2], 0.5, -1.5); },
                     {rnd(cs), rnd({3, 4}), rnd({4, 2})}, /*wrt=*/1);
  }
  for (const Shape& cs : {Shape{3, 2}, Shape{2, 1, 2}, Shape{2, 3, 2}}) {
    INFO("baddbmm c " << shape_str(cs));
    check_grad_twice([](const Tensors& x) { return baddbmm(x[0], x[1], x[2], 2.0, 0.25); },
                     {rnd(cs), rnd({2, 3, 4}), rnd({2, 4, 2})}, /*wrt=*/1);
  }
}

TEST_CASE("matmul gradients for every shape case incl. broadcast batch dims", "[ops][linalg][grad]") {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3}, {3}},          {{3}, {3, 4}},       {{2, 3}, {3}},         {{2, 3}, {3, 4}},
      {{5, 2, 3}, {3, 4}}, {{3}, {2, 3, 4}},    {{2, 2, 3}, {3}},      {{2, 1, 3, 4}, {3, 4, 2}},
      {{4, 3}, {2, 3, 5}}, {{1, 2, 3}, {2, 3, 2}}, {{2, 2, 3}, {1, 3, 2}}};
  for (const auto& [sa, sb] : cases) {
    INFO(shape_str(sa) << " @ " << shape_str(sb));
    check_grad_twice([](const Tensors& x) { return matmul(x[0], x[1]); }, {rnd(sa), rnd(sb)});
  }
}

TEST_CASE("linear gradients with and without bias, 1-D to 3-D input", "[ops][linalg][grad]") {
  for (const Shape& xs : {Shape{4}, Shape{3, 4}, Shape{2, 3, 4}}) {
    INFO("x " << shape_str(xs));
    check_grad_twice([](const Tensors& x) { return linear(x[0], x[1], x[2]); }, {rnd(xs), rnd({5, 4}), rnd({5})});
    check_grad_twice([](const Tensors& x) { return linear(x[0], x[1]); }, {rnd(xs), rnd({5, 4})});
  }
}

TEST_CASE("linear takes PyTorch's 1-D weight and a one-element bias", "[ops][linalg][grad]") {
  // A 1-D weight [in] is one output feature with its dim dropped: x [..., in] -> [...].
  const Tensor x = rnd({3, 4}), w = rnd({4}), w2 = rnd({5, 4});
  const Tensor y = linear(x, w);
  REQUIRE(y.shape() == Shape{3});
  REQUIRE(values(y) == values(matmul(x, w)));
  REQUIRE(linear(rnd({4}), w).dim() == 0);
  REQUIRE(linear(rnd({2, 3, 4}), w).shape() == Shape{2, 3});
  // A 0-d or [1] bias is added to every output feature, as PyTorch broadcasts it.
  const Tensor b0 = scalar_tensor(0.75, {.dtype = DType::F64});
  const std::vector<double> with_b = values(linear(x, w2, b0));
  const std::vector<double> plain = values(linear(x, w2));
  REQUIRE(with_b.size() == 15);
  for (size_t i = 0; i < with_b.size(); ++i) REQUIRE(with_b[i] == plain[i] + 0.75);
  REQUIRE(values(linear(x, w, b0)) == values(add(matmul(x, w), b0)));
  // Gradients reach the 1-D weight and the one-element bias (summed over the features).
  check_grad_twice([](const Tensors& t) { return linear(t[0], t[1]); }, {rnd({3, 4}), rnd({4})});
  check_grad([](const Tensors& t) { return linear(t[0], t[1], t[2]); }, {rnd({3, 4}), rnd({4}), rnd({})});
  check_grad([](const Tensors& t) { return linear(t[0], t[1], t[2]); }, {rnd({3, 4}), rnd({5, 4}), rnd({})});
  check_grad([](const Tensors& t) { return linear(t[0], t[1], t[2]); }, {rnd({2, 4}), rnd({5, 4}), rnd({1})});
}

TEST_CASE("gradients flow to the input dtype for f16 operands", "[ops][linalg][grad]") {
  const Tensor a = rnd({3, 4}, DType::F16).requires_grad_(true);
  const Tensor b = rnd({4, 2}, DType::F16).requires_grad_(true);
  const Tensor g = ones({3, 2}, {.dtype = DType::F16});
  const Tensors grads = autograd::grad({mm(a, b)}, {a, b}, {g});
  REQUIRE(grads[0].dtype() == DType::F16);
  REQUIRE(grads[0].shape() == Shape{3, 4});
  // dA = g @ b^T: row i of dA is the row sums of b
  require_close(grads[0], ref_matmul(to(g, DType::F64), to(b, DType::F64).t()), 1.0 / 1024, 1e-3);
}

TEST_CASE("linalg error messages", "[ops][linalg][errors]") {
  const Tensor a = zeros({2, 3}), b = zeros({4, 5});
  REQUIRE_THROWS_AS(mm(a, b), ShapeError);
  REQUIRE_THROWS_WITH(mm(a, b), "mm: a has 3 columns but b has 4 rows; got a [2, 3] f32 cpu, b [4, 5] f32 cpu");
  REQUIRE_THROWS_AS(mm(a, zeros({3, 4}, {.dtype = DType::F16})), DTypeError);
  REQUIRE_THROWS_WITH(mm(a, zeros({3, 4}, {.dtype = DType::F16})),
                      Catch::StartsWith("mm: expected tensors of the same dtype, got [2, 3] f32 cpu and [3, 4] f16 cpu"));
  REQUIRE_THROWS_WITH(mm(zeros({2, 3}, {.dtype = DType::I64}), zeros({3, 4}, {.dtype = DType::I64})),
                      Catch::StartsWith("mm: expected a floating tensor"));
  REQUIRE_THROWS_WITH(mm(zeros({2, 2, 3}), zeros({3, 4})),
                      Catch::StartsWith("mm: expected 2-D tensors, got a [2, 2, 3] f32 cpu and b [3, 4] f32 cpu") &&
                          Catch::Contains("hint: use matmul"));
  REQUIRE_THROWS_WITH(bmm(zeros({2, 3}), zeros({3, 4})), Catch::StartsWith("bmm: expected 3-D tensors"));
  REQUIRE_THROWS_WITH(bmm(zeros({2, 2, 3}), zeros({3, 3, 4})),
                      Catch::StartsWith("bmm: batch sizes differ (2 and 3)"));
  REQUIRE_THROWS_WITH(bmm(zeros({2, 2, 3}), zeros({2, 4, 4})),
                      Catch::StartsWith("bmm: a has 3 columns but b has 4 rows"));
  REQUIRE_THROWS_AS(matmul(scalar_tensor(1.0), zeros({3})), ShapeError);
  REQUIRE_THROWS_WITH(matmul(zeros({3}), zeros({4})),
                      "matmul: a's last dim (3) does not match b's size (4); got a [3] f32 cpu, b [4] f32 cpu");
  REQUIRE_THROWS_WITH(matmul(zeros({2, 2, 3}), zeros({3, 3, 4})),
                      Catch::StartsWith("matmul: batch dims [2] and [3] cannot be broadcast together"));
  REQUIRE_THROWS_WITH(addmm(zeros({3, 5}), zeros({2, 3}), zeros({3, 4})),
                      "addmm: c [3, 5] f32 cpu cannot be broadcast to the product's shape [2, 4]");
  REQUIRE_THROWS_WITH(baddbmm(zeros({3, 2, 4}), zeros({2, 2, 3}), zeros({2, 3, 4})),
                      Catch::StartsWith("baddbmm: c [3, 2, 4] f32 cpu cannot be broadcast"));
  REQUIRE_THROWS_AS(linear(zeros({128, 3}), zeros({10, 784})), ShapeError);
  REQUIRE_THROWS_WITH(linear(zeros({128, 3}), zeros({10, 784})),
                      "linear: input has 3 features but weight expects 784; got input [128, 3] f32 cpu, "
                      "weight [10, 784] f32 cpu");
  REQUIRE_THROWS_WITH(linear(zeros({2, 3}), zeros({1, 4, 3})), Catch::StartsWith("linear: expected a 2-D weight"));
  REQUIRE_THROWS_WITH(linear(zeros({2, 3}), zeros({3}), zeros({2})),
                      "linear: expected a bias of shape [1], got bias [2] f32 cpu");
  REQUIRE_THROWS_WITH(linear(zeros({2, 3}), zeros({4, 3}), zeros({5})),
                      "linear: expected a bias of shape [4], got bias [5] f32 cpu");
  REQUIRE_THROWS_WITH(linear(zeros({2, 3}), zeros({4, 3}), zeros({4}, {.dtype = DType::F64})),
                      Catch::StartsWith("linear: expected tensors of the same dtype"));
}
