// CUDA elementwise kernels against the CPU's (the reference): every unary and binary functor of
// ops/elementwise_ops.def on odd sizes (4097: vector body plus a scalar tail), transposed and
// broadcast inputs, broadcast scalars, empty tensors; comparisons, where, fill_ and every cast.
// The math is the same shared functor on both devices; results may differ by the last bit where
// nvcc contracts a*b+c into one FMA or CUDA's libm differs from glibc's, so floating results are
// compared with a tolerance of a few ulps of the dtype, and exact ones (casts, comparisons,
// integers, selections) exactly.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>

#include "core/factory.h"
#include "cuda_test_util.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::gpu;
using mg::test::values;

namespace {

// |cuda - cpu| <= rel * |cpu| + abs: a few ulps of the dtype, and one step of its subnormals
// (a last-bit difference in f32 can round a tiny f16/bf16 result to the neighbouring subnormal).
// f64 too: its functors call libm, and CUDA's and glibc's differ in the last bits.
struct Tolerance {
  double rel, abs;
};
Tolerance tolerance(DType dt) {
  switch (dt) {
    case DType::F64: return {16 * 0x1p-53, 0x1p-1074};
    case DType::F32: return {16 * 0x1p-24, 0x1p-149};
    case DType::F16: return {2 * 0x1p-11, 0x1p-24};
    case DType::BF16: return {2 * 0x1p-8, 0x1p-133};
    default: return {0, 0};  // integers and bool: exact
  }
}

// Runs f on CPU tensors and on copies of them on the GPU; the results must agree.
// `exact`: the op moves or converts bits (casts, comparisons, selections) and must agree exactly.
// `abs_floor`: an absolute slack for results that are small differences of larger terms.
// `rel_factor`: a wider relative slack for results that amplify the rounding of an intermediate.
void check_same(const std::string& what, const std::vector<Tensor>& cpu_inputs,
                const std::function<Tensor(const std::vector<Tensor>&)>& f, bool exact = false,
                double abs_floor = 0, double rel_factor = 1) {
  const mg::test::CpuGpuResults r = mg::test::run_on_cpu_and_gpu(what, cpu_inputs, f);
  const std::vector<double> g = values(r.got), w = values(r.want);
  Tolerance tol = exact ? Tolerance{0, 0} : tolerance(r.want.dtype());
  tol.rel *= rel_factor;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const bool same = (std::isnan(g[i]) && std::isnan(w[i])) || g[i] == w[i] ||
                      std::abs(g[i] - w[i]) <= tol.rel * std::abs(w[i]) + tol.abs + abs_floor;
    if (!same) FAIL(what << " element " << i << ": cuda " << g[i] << " cpu " << w[i]);
  }
}

Tensor inputs_in(DType dt, const Shape& shape, double scale, uint64_t seed) {
  Generator gen(seed);
  return to(mul(randn(shape, {}, &gen), full({1}, scale)), dt);
}

}  // namespace

TEST_CASE("CUDA unary ops match the CPU on odd sizes and strided inputs", "[cuda][gpu][elementwise]") {
  using U = Tensor (*)(const Tensor&);
  const std::vector<std::pair<const char*, U>> ops = {
      {"neg", neg}, {"abs", abs}, {"exp", exp}, {"expm1", expm1}, {"sin", sin}, {"cos", cos},
      {"tanh", tanh}, {"sigmoid", sigmoid}, {"relu", relu}, {"silu", silu}, {"erf", erf}, {"sign", sign}};
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    const Tensor x = inputs_in(dt, {4097}, 3.0, 1);
    const Tensor m = inputs_in(dt, {65, 33}, 3.0, 2);
    for (const auto& [name, op] : ops) {
      check_same(name, {x}, [op = op](const auto& in) { return op(in[0]); });
      check_same(std::string(name) + " transposed", {m}, [op = op](const auto& in) { return op(in[0].t()); });
    }
    const Tensor p = abs(x);  // the positive domain of log/sqrt/rsqrt
    check_same("log", {p}, [](const auto& in) { return log(in[0]); });
    check_same("sqrt", {p}, [](const auto& in) { return sqrt(in[0]); });
    check_same("rsqrt", {p}, [](const auto& in) { return rsqrt(in[0]); });
    // GELU on [-4, 4]: further out its result is a tiny multiple of e^(-x^2/2) (or e^(-2|u|)),
    // where the rounding of x^2 is amplified by x^2 and a contraction difference between nvcc and
    // g++ shows as tens of ulps; the CPU's tail accuracy is checked by the unary sweep, and the
    // GPU's tail below within 1e-4 relative.
    // Inside [-4, 4] the negative half still computes x e^(2u) / (1 + e^(2u)) (or its erf form),
    // which multiplies the rounding of u = c (x + 0.044715 x^3) by |2u| <= 10: a contraction
    // difference in u (FMA or not) moves the result by up to ~30 ulps, so 4x the slack (seen under
    // the CUDA emulator without contraction against g++'s FMAs: 17 ulps).
    const Tensor core = clamp(x, -4.0, 4.0);
    check_same("gelu", {core}, [](const auto& in) { return gelu(in[0]); }, false, 0, 4);
    check_same("gelu tanh", {core}, [](const auto& in) { return gelu(in[0], GeluApprox::Tanh); }, false, 0, 4);
    // gelu_backward = g (Phi(x) + x phi(x)): the two terms cancel for negative x (zero near
    // x = -0.75), so the slack is a few ulps of |g|, the size of the terms, not of the result.
    const Tensor g = inputs_in(dt, {4097}, 1.0, 11);
    check_same("gelu_backward", {core, g}, [](const auto& in) { return gelu_backward(in[1], in[0]); }, false,
               tolerance(dt).rel * 4.0);  // |g| <= ~4
    if (dt == DType::F32 || dt == DType::F64) {
      // x in [-9, -4]: results down to ~1e-18, normal in f32.
      const Tensor tail = clamp(sub(neg(abs(x)), full({1}, 4.0, {.dtype = dt})), -9.0, -4.0);
      const Tensor want = gelu(tail), got = gelu(tail.to(gpu()));
      const std::vector<double> w = values(want), gv = values(got);
      for (std::size_t i = 0; i < w.size(); ++i) {
        if (!(std::abs(gv[i] - w[i]) <= 1e-4 * std::abs(w[i]) + 1e-300)) FAIL("gelu tail " << i << ": " << gv[i] << " vs " << w[i]);
      }
    }
    check_same("relu_backward", {x, g}, [](const auto& in) { return relu_backward(in[1], relu(in[0])); }, true);
    // the fused activation backwards (ops/activation_backward_ops.def): no cancellation except
    // silu's near x = -1.28, where the slack is a few ulps of |g|, the size of its terms
    check_same("tanh_backward", {x, g}, [](const auto& in) { return tanh_backward(in[1], in[0]); });
    check_same("sigmoid_backward", {x, g}, [](const auto& in) { return sigmoid_backward(in[1], in[0]); });
    check_same("silu_backward", {x, g}, [](const auto& in) { return silu_backward(in[1], in[0]); }, false,
               tolerance(dt).rel * 4.0);
    check_same("erf_backward", {core, g}, [](const auto& in) { return erf_backward(in[1], in[0]); });
    check_same("reciprocal_backward", {x, g}, [](const auto& in) { return reciprocal_backward(in[1], in[0]); });
    check_same("rsqrt_backward", {p, g}, [](const auto& in) { return rsqrt_backward(in[1], in[0]); });
    check_same("tanh_backward transposed", {m, m}, [](const auto& in) { return tanh_backward(in[1].t(), in[0].t()); });
    check_same("clamp", {x}, [](const auto& in) { return clamp(in[0], -1.0, 0.5); });
    check_same("empty", {zeros({0, 4}, {.dtype = dt})}, [](const auto& in) { return exp(in[0]); });
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA binary ops match the CPU with broadcasting", "[cuda][gpu][elementwise]") {
  using B = Tensor (*)(const Tensor&, const Tensor&);
  const std::vector<std::pair<const char*, B>> ops = {
      {"mul", mul}, {"div", div}, {"maximum", maximum}, {"minimum", minimum}};
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    const Tensor a = inputs_in(dt, {37, 4097}, 2.0, 3);
    const Tensor row = inputs_in(dt, {4097}, 2.0, 4);
    const Tensor col = inputs_in(dt, {37, 1}, 2.0, 5);
    const Tensor scalar = inputs_in(dt, {}, 2.0, 6);
    const Tensor t = inputs_in(dt, {4097, 37}, 2.0, 7);
    for (const auto& [name, op] : ops) {
      check_same(name, {a, a}, [op = op](const auto& in) { return op(in[0], in[1]); });
      check_same(std::string(name) + " row", {a, row}, [op = op](const auto& in) { return op(in[0], in[1]); });
      check_same(std::string(name) + " col", {col, a}, [op = op](const auto& in) { return op(in[0], in[1]); });
      check_same(std::string(name) + " scalar", {a, scalar}, [op = op](const auto& in) { return op(in[0], in[1]); });
      check_same(std::string(name) + " transposed", {a, t}, [op = op](const auto& in) { return op(in[0], in[1].t()); });
    }
    check_same("add alpha", {a, row}, [](const auto& in) { return add(in[0], in[1], 0.25); });
    check_same("sub", {a, col}, [](const auto& in) { return sub(in[0], in[1]); });
    check_same("pow", {abs(a), row}, [](const auto& in) { return pow(in[0], in[1]); });
  }
  const Tensor i = randint(-1000, 1000, {4097}), j = randint(1, 50, {4097});
  check_same("i64 add", {i, j}, [](const auto& in) { return add(in[0], in[1]); });
  check_same("i64 mul", {i, j}, [](const auto& in) { return mul(in[0], in[1]); });
  check_same("i32 max", {to(i, DType::I32), to(j, DType::I32)}, [](const auto& in) { return maximum(in[0], in[1]); });
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA pow of integer tensors wraps as the CPU's", "[cuda][gpu][elementwise]") {
  const Tensor a = arange(-40, 4057);  // odd size, negative bases, overflow for large exponents
  for (const DType dt : {DType::I64, DType::I32, DType::U8}) {
    for (const double e : {0.0, 1.0, 2.0, 7.0, 31.0}) {
      INFO(dtype_name(dt) << " ** " << e);
      const Tensor x = to(a, dt);
      const Tensor want = pow(x, e), got = pow(x.to(gpu()), e);
      REQUIRE(got.dtype() == dt);
      CHECK(values(got) == values(want));
      CHECK(values(pow(x.to(gpu()).narrow(0, 1, 4000).unsqueeze(0).expand({2, 4000}), e)) ==
            values(pow(x.narrow(0, 1, 4000).unsqueeze(0).expand({2, 4000}), e)));
    }
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA comparisons, where and fill_ are exact", "[cuda][gpu][elementwise]") {
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::I64}) {
    const Tensor a = to(inputs_in(DType::F32, {4097}, 4.0, 8), dt);
    const Tensor b = to(inputs_in(DType::F32, {4097}, 4.0, 9), dt);
    check_same("lt", {a, b}, [](const auto& in) { return lt(in[0], in[1]); }, true);
    check_same("eq", {a, a}, [](const auto& in) { return eq(in[0], in[1]); }, true);
    check_same("where", {lt(a, b), a, b}, [](const auto& in) { return where(in[0], in[1], in[2]); }, true);
  }
  const Tensor t = zeros({64, 33}, {.device = gpu()});
  t.t().slice(0, 1, 33, 2).fill_(2.5);  // a strided destination
  const Tensor want = zeros({64, 33});
  want.t().slice(0, 1, 33, 2).fill_(2.5);
  REQUIRE(values(t) == values(want));
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA casts of edge values match the CPU: NaN, infinities, overflow, subnormals, integer ends",
          "[cuda][gpu][elementwise]") {
  // The random values of the test below stay within about +-2000: they never reach the 16-bit
  // formats' overflow, their subnormals, NaN or a float -> integer value out of range.
  const std::vector<double> edges = {NAN, -NAN, INFINITY, -INFINITY, -0.0, 0.0, 65504, 65519.99, 65520, 0x1p-24,
                                     0x1p-25, 0x1.8p-25, 3 * 0x1p-26, 1e-8, 0x1p-14 - 0x1p-24, 0x1p-126, 0x1p-149,
                                     2147483520.0, 2147483648.0, -2147483904.0, 9.3e18, -9.3e18, 1e20, -1e20, 255.5,
                                     -0.5, -3.7, 300, 3.4e38, 3.4028235677973366e38, 1.0000001, 0.99999994};
  const Tensor e = from_vector<double>(edges, {int64_t(edges.size())});
  const std::vector<DType> all = {DType::F64, DType::F32, DType::F16, DType::BF16,
                                  DType::I64, DType::I32, DType::U8, DType::Bool};
  for (DType from : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
    const Tensor x = to(e, from);  // the CPU's cast defines the source values
    for (DType target : all) {
      check_same(std::string("edge cast ") + dtype_name(from) + " -> " + dtype_name(target), {x},
                 [target](const auto& in) { return to(in[0], target); }, true);
    }
  }
  // Integer ends into every dtype.
  const Tensor ints = from_vector<int64_t>({INT64_MAX, INT64_MIN, (int64_t(1) << 53) + 1, -1, 0, 255, 256, -129,
                                            int64_t(INT32_MAX) + 1, int64_t(INT32_MIN) - 1, 65505, 65536},
                                           {12});
  for (DType target : all) {
    check_same(std::string("edge cast i64 -> ") + dtype_name(target), {ints},
               [target](const auto& in) { return to(in[0], target); }, true);
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA elementwise ops on misaligned dense views take the scalar path and match the CPU",
          "[cuda][gpu][elementwise]") {
  // A view one element in is dense but not 16-byte aligned: the vector width drops (to 1 for f32),
  // and a binary op may have one aligned operand and one not. In place too.
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    const Tensor a = inputs_in(dt, {4097}, 2.0, 71), b = inputs_in(dt, {4097}, 2.0, 72);
    check_same(std::string("misaligned unary ") + dtype_name(dt), {a},
               [](const auto& in) { return exp(in[0].slice(0, 1, 4097)); });
    check_same(std::string("misaligned + aligned binary ") + dtype_name(dt), {a, b},
               [](const auto& in) { return add(in[0].slice(0, 1, 4097), in[1].slice(0, 0, 4096)); });
    check_same(std::string("misaligned in-place add_ ") + dtype_name(dt), {a, b}, [](const auto& in) {
      Tensor y = in[0].clone();
      y.slice(0, 1, 4097).add_(in[1].slice(0, 0, 4096));
      return y;
    });
    check_same(std::string("misaligned copy_ ") + dtype_name(dt), {a, b}, [](const auto& in) {
      Tensor y = in[0].clone();
      y.slice(0, 2, 4097).copy_(in[1].slice(0, 1, 4096));
      return y;
    }, true);
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA casts between every pair of dtypes match the CPU bit for bit", "[cuda][gpu][elementwise]") {
  const std::vector<DType> all = {DType::F64, DType::F32, DType::F16, DType::BF16,
                                  DType::I64, DType::I32, DType::U8, DType::Bool};
  // Values around the 16-bit formats' rounding boundaries, overflow, subnormals, and integers.
  const Tensor base = mul(randn({4097}), full({1}, 300.0));
  for (DType from : all) {
    const Tensor x = from == DType::U8 ? to(clamp(abs(base), 0, 255), from) : to(base, from);
    // A float or signed value outside [0, 255] cast to u8 is undefined behaviour in C++ (x86 and
    // the GPU give different bytes), so u8 targets get values inside its range.
    const Tensor x_u8 = from == DType::U8 || from == DType::Bool ? x : to(clamp(abs(to(x, DType::F64)), 0, 255), from);
    for (DType target : all) {
      check_same(std::string("cast ") + dtype_name(from) + " -> " + dtype_name(target),
                 {target == DType::U8 ? x_u8 : x}, [target](const auto& in) { return to(in[0], target); }, true);
    }
  }
  mg::test::require_no_pending_cuda_error();
}
