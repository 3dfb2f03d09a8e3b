// CUDA reductions against the CPU's (the reference): every reduction op on odd sizes (4097,
// [33, 4097] and [4097, 33] over each dim, 3-D over two dims, all dims, keepdim, transposed and
// sliced inputs, empty reductions) in f32/f16/bf16/f64 and the integer dtypes; 10^7 × 0.1f summed
// within the bound; the same call twice gives the same bits; ties and NaNs pick the first index;
// NaN/inf propagate.
//
// Tolerances come from the summation rule's bound (docs/numerics.md, cuda/host/reducers.h): each
// side's sum of n terms is within D(n) · u · Σ|x_i| of the exact sum, with D(n) = 128 +
// ceil(log2 n) + 8 covering both the CPU's tree (d_leaf <= 128, + ceil(log2 leaves)) and the
// GPU's (d_leaf <= 128, + ceil(log2 n) + 6), and u = 2^-24 (f32 accumulation for f32/f16/bf16)
// or 2^-53 (f64). So |gpu - cpu| <= 2 · D(n) · u · Σ|x_i| before the output is rounded, and each
// side rounds once to the output dtype (half an ulp each: one ulp `q` of the result together;
// two to cover mean's extra division; plus two subnormal steps of the output dtype for results
// that round into its subnormal range). Per op:
//   sum, mean, norm 1:  2 D u Σ|x| (/ n for mean) + 2 q |want|
//   norm 2, general p:  relative 2 D u + 16 · 2^-24 (powf) + 2 q (the root halves the sum's error)
//   var:                2 D u Σx² / (n - c) + 2 q |want| (Σx² bounds the squared deviations'
//                       sums and the mean's error enters squared); std compares std² the same way
//   logsumexp:          2 (D + 2) u (the sum of e^(x-m) is relative, its terms within 2 ulp; log of
//                       a relative error e is an absolute e) + 2 q |want|
//   prod:               relative 2 n u + 2 q (every product rounds once; no tree shortens that)
//   amax, amin, max_dim, argmax, norm inf, integers: exact. cumsum: the CPU's bits (same adds).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>

#include "core/factory.h"
#include "cuda_test_util.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::gpu;
using mg::test::values;

namespace {

double acc_unit(DType dt) { return dt == DType::F64 ? 0x1p-53 : 0x1p-24; }
double out_ulp(DType dt) { return is_floating(dt) ? machine_epsilon(dt) : 0.0; }
// The output dtype's smallest subnormal: results that round into the subnormal range differ by it.
double out_denorm(DType dt) {
  switch (dt) {
    case DType::F64: return 0x1p-1074;
    case DType::F32: return 0x1p-149;
    case DType::F16: return 0x1p-24;
    case DType::BF16: return 0x1p-133;
    default: return 0;
  }
}
double depth(int64_t n) { return 128 + std::ceil(std::log2(double(std::max<int64_t>(n, 2)))) + 8; }

int64_t count_of(const Tensor& x, const std::vector<int64_t>& dims) {
  if (dims.empty()) return x.numel();
  int64_t n = 1;
  for (int64_t d : dims) n *= d < x.dim() ? x.shape()[std::size_t(d)] : 1;  // a 0-d input's "dim 0"
  return n;
}

enum class Tol { Exact, Sum, Mean, Root, Var, Std, Lse, Prod };

// The op on the CPU and on the GPU; outputs agree within the tolerance `kind` (see the top).
// scale: per output, Σ|x| (Sum, Mean) or Σx² (Var, Std) in f64 on the CPU.
void check_op(const std::string& what, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, Tol kind,
              const std::function<Tensor(const Tensor&)>& f, double correction = 1.0) {
  const Tensor want = f(x);
  const Tensor got = f(mg::test::to_gpu_keep_layout(x));  // a strided view stays strided
  INFO(what << " " << dtype_name(x.dtype()) << " " << shape_str(x.shape()) << " dims " << shape_str(dims)
            << (keepdim ? " keepdim" : ""));
  REQUIRE(got.device() == gpu());
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> g = values(got), w = values(want);
  const int64_t n = count_of(x, dims);
  const double u = acc_unit(x.dtype()), q = out_ulp(want.dtype()), D = depth(n);
  std::vector<double> scale(w.size(), 0.0);
  if (kind == Tol::Sum || kind == Tol::Mean || kind == Tol::Var || kind == Tol::Std) {
    const Tensor x64 = to(x, DType::F64);
    const Tensor s = kind == Tol::Var || kind == Tol::Std ? sum(mul(x64, x64), dims, keepdim) : sum(abs(x64), dims, keepdim);
    scale = values(s);
  }
  for (std::size_t i = 0; i < w.size(); ++i) {
    if ((std::isnan(g[i]) && std::isnan(w[i])) || g[i] == w[i]) continue;
    double tol = 0, gi = g[i], wi = w[i];
    switch (kind) {
      case Tol::Exact: break;
      case Tol::Sum: tol = 2 * D * u * scale[i] + 2 * q * std::abs(wi); break;
      case Tol::Mean: tol = 2 * D * u * scale[i] / double(n) + 2 * q * std::abs(wi); break;
      case Tol::Root: tol = (2 * D * u + 16 * 0x1p-24 + 2 * q) * std::abs(wi); break;
      case Tol::Var: tol = 2 * D * u * scale[i] / std::max(1.0, double(n) - correction) + 2 * q * std::abs(wi); break;
      case Tol::Std:
        gi = gi * gi;
        wi = wi * wi;
        tol = 2 * D * u * scale[i] / std::max(1.0, double(n) - correction) + 4 * q * std::abs(wi);
        break;
      case Tol::Lse: tol = 2 * (D + 2) * u + 2 * q * std::abs(wi); break;
      case Tol::Prod: tol = (2 * double(n) * u + 2 * q) * std::abs(wi); break;
    }
    if (kind != Tol::Exact) tol += 2 * out_denorm(want.dtype());
    if (!(std::abs(gi - wi) <= tol)) FAIL(what << " element " << i << ": cuda " << g[i] << " cpu " << w[i] << " tol " << tol);
  }
}

Tensor randn_in(DType dt, const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return to(randn(shape, {}, &gen), dt);
}

struct Layout {
  std::string name;
  Tensor x;
  std::vector<int64_t> dims;
};

// The layouts of the brief: 1-D, both dims of [33, 4097] and [4097, 33], all dims, transposed,
// sliced, 3-D over two dims.
std::vector<Layout> layouts(DType dt) {
  const Tensor a = randn_in(dt, {33, 4097}, 11), b = randn_in(dt, {4097, 33}, 12), c = randn_in(dt, {9, 65, 129}, 13);
  const Tensor v = randn_in(dt, {4097}, 14);
  return {{"1-D", v, {0}},
          {"rows", a, {1}},
          {"cols", a, {0}},
          {"rows of [4097, 33]", b, {1}},
          {"cols of [4097, 33]", b, {0}},
          {"all", a, {}},
          {"transposed rows", a.t(), {1}},
          {"transposed cols", a.t(), {0}},
          {"sliced rows", a.slice(1, 1, 4097, 2), {1}},
          {"padded rows (vector loads with a tail per row)", randn_in(dt, {33, 4104}, 15).slice(1, 0, 4097), {1}},
          {"3-D {0, 2}", c, {0, 2}},
          {"3-D {1, 2}", c, {1, 2}},
          {"3-D {0, 1} permuted", c.permute({2, 0, 1}), {1, 2}}};
}

}  // namespace

TEST_CASE("CUDA sum, mean, prod, var, std, norm, logsumexp match the CPU within the rule's bound",
          "[cuda][gpu][reduce]") {
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    for (const Layout& l : layouts(dt)) {
      for (bool keepdim : {false, true}) {
        const auto& d = l.dims;
        const std::string n = l.name;
        check_op("sum " + n, l.x, d, keepdim, Tol::Sum, [&](const Tensor& t) { return sum(t, d, keepdim); });
        check_op("mean " + n, l.x, d, keepdim, Tol::Mean, [&](const Tensor& t) { return mean(t, d, keepdim); });
        check_op("var " + n, l.x, d, keepdim, Tol::Var, [&](const Tensor& t) { return var(t, d, 1.0, keepdim); });
        check_op("std " + n, l.x, d, keepdim, Tol::Std, [&](const Tensor& t) { return mg::std(t, d, 0.0, keepdim); },
                 0.0);
        check_op("norm 1 " + n, l.x, d, keepdim, Tol::Sum, [&](const Tensor& t) { return norm(t, 1.0, d, keepdim); });
        check_op("norm 2 " + n, l.x, d, keepdim, Tol::Root, [&](const Tensor& t) { return norm(t, 2.0, d, keepdim); });
        check_op("norm 3 " + n, l.x, d, keepdim, Tol::Root, [&](const Tensor& t) { return norm(t, 3.0, d, keepdim); });
        check_op("norm 0 " + n, l.x, d, keepdim, Tol::Exact, [&](const Tensor& t) { return norm(t, 0.0, d, keepdim); });
        check_op("norm inf " + n, l.x, d, keepdim, Tol::Exact,
                 [&](const Tensor& t) { return norm(t, INFINITY, d, keepdim); });
        check_op("norm -inf " + n, l.x, d, keepdim, Tol::Exact,
                 [&](const Tensor& t) { return norm(t, -INFINITY, d, keepdim); });
        check_op("logsumexp " + n, l.x, d, keepdim, Tol::Lse, [&](const Tensor& t) { return logsumexp(t, d, keepdim); });
        // Factors near 1, so that products of thousands of terms stay finite.
        const Tensor near_one = to(add(mul(to(l.x, DType::F32), full({1}, 1.0 / 64)), full({1}, 1.0)), dt);
        check_op("prod " + n, near_one, d, keepdim, Tol::Prod, [&](const Tensor& t) { return prod(t, d, keepdim); });
      }
    }
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA amax, amin, max/min along a dim and argmax/argmin are exact, first index on ties",
          "[cuda][gpu][reduce]") {
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::I32, DType::U8}) {
    // Few distinct values: many ties, so the first-index rule decides most outputs.
    Generator gen(21);
    const Tensor small = to(randint(0, 4, {33, 4097}, {}, &gen), dt);
    const Tensor wide = to(randint(0, 4, {4097, 33}, {}, &gen), dt);
    for (const Tensor& x : {small, wide, small.t()}) {
      for (int64_t dim : {0, 1}) {
        for (bool keepdim : {false, true}) {
          const std::vector<int64_t> d{dim};
          check_op("amax", x, d, keepdim, Tol::Exact, [&](const Tensor& t) { return amax(t, d, keepdim); });
          check_op("amin", x, d, keepdim, Tol::Exact, [&](const Tensor& t) { return amin(t, d, keepdim); });
          check_op("max values", x, d, keepdim, Tol::Exact, [&](const Tensor& t) { return mg::max(t, dim, keepdim).first; });
          check_op("max indices", x, d, keepdim, Tol::Exact,
                   [&](const Tensor& t) { return mg::max(t, dim, keepdim).second; });
          check_op("min indices", x, d, keepdim, Tol::Exact,
                   [&](const Tensor& t) { return mg::min(t, dim, keepdim).second; });
          check_op("argmax", x, d, keepdim, Tol::Exact, [&](const Tensor& t) { return argmax(t, dim, keepdim); });
          check_op("argmin", x, d, keepdim, Tol::Exact, [&](const Tensor& t) { return argmin(t, dim, keepdim); });
        }
      }
      check_op("amax all", x, {}, false, Tol::Exact, [&](const Tensor& t) { return amax(t); });
    }
    // All equal over a long dim: the first index, through the split second pass.
    const Tensor flat = zeros({1 << 20}, {.dtype = dt});
    const Tensor got = argmax(flat.to(gpu()), 0);
    CHECK(values(got)[0] == 0);
    CHECK(values(mg::min(flat.to(gpu()), 0).second)[0] == 0);
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA integer and bool sums, products and cumsums are exact", "[cuda][gpu][reduce]") {
  for (DType dt : {DType::I64, DType::I32, DType::U8, DType::Bool}) {
    Generator gen(31);
    const Tensor x = to(randint(0, 3, {33, 4097}, {}, &gen), dt);
    for (const std::vector<int64_t>& d : {std::vector<int64_t>{0}, std::vector<int64_t>{1}, std::vector<int64_t>{}}) {
      check_op("sum", x, d, false, Tol::Exact, [&](const Tensor& t) { return sum(t, d); });
      check_op("prod", x, d, false, Tol::Exact, [&](const Tensor& t) { return prod(t, d); });
      check_op("sum transposed", x.t(), d, false, Tol::Exact, [&](const Tensor& t) { return sum(t, d); });
    }
    check_op("cumsum 0", x, {0}, false, Tol::Exact, [&](const Tensor& t) { return cumsum(t, 0); });
    check_op("cumsum 1", x, {1}, false, Tol::Exact, [&](const Tensor& t) { return cumsum(t, 1); });
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA cumsum equals the CPU's bits along every dim and layout", "[cuda][gpu][reduce]") {
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    const Tensor a = randn_in(dt, {33, 4097}, 41), c = randn_in(dt, {5, 300, 7}, 42);
    const std::vector<std::pair<Tensor, int64_t>> cases = {{a, 0}, {a, 1}, {a.t(), 0}, {a.t(), 1},
                                                           {c, 0}, {c, 1}, {c, 2}, {c.permute({1, 2, 0}), 0},
                                                           {randn_in(dt, {100000}, 43), 0}, {zeros({0, 3}, {.dtype = dt}), 0},
                                                           {randn_in(dt, {}, 44), 0}};
    for (const auto& [x, dim] : cases) {
      check_op("cumsum", x, {dim}, false, Tol::Exact, [dim = dim](const Tensor& t) { return cumsum(t, dim); });
    }
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA reductions of nothing behave as on the CPU", "[cuda][gpu][reduce]") {
  for (DType dt : {DType::F32, DType::F16, DType::F64}) {
    const Tensor e = zeros({0, 5}, {.dtype = dt});
    const std::vector<int64_t> d{0};
    check_op("sum", e, d, false, Tol::Exact, [&](const Tensor& t) { return sum(t, d); });        // 0
    check_op("mean", e, d, false, Tol::Exact, [&](const Tensor& t) { return mean(t, d); });      // NaN
    check_op("prod", e, d, false, Tol::Exact, [&](const Tensor& t) { return prod(t, d); });      // 1
    check_op("var", e, d, false, Tol::Exact, [&](const Tensor& t) { return var(t, d, 1.0); });   // NaN
    check_op("norm", e, d, false, Tol::Exact, [&](const Tensor& t) { return norm(t, 2.0, d); }); // 0
    check_op("logsumexp", e, d, false, Tol::Exact, [&](const Tensor& t) { return logsumexp(t, d); });  // -inf
    check_op("sum of [0, 5] over dim 1", e, {1}, false, Tol::Exact, [&](const Tensor& t) { return sum(t, {1}); });
    const Tensor eg = e.to(gpu());
    MG_REQUIRE_ERROR(amax(eg, {0}), "cannot reduce over an empty dim");
    MG_REQUIRE_ERROR(argmax(eg, 0), "cannot reduce over an empty dim");
    MG_REQUIRE_ERROR(mg::max(eg, 0), "cannot reduce over an empty dim");
    MG_REQUIRE_ERROR(norm(eg, INFINITY, {0}), "cannot reduce over an empty dim");
    CHECK(values(sum(eg, {0}))[0] == 0.0);
    CHECK(std::isnan(values(mean(eg, {0}))[0]));
  }
  // A 0-d tensor: every reduction has one term.
  const Tensor s = full({}, 2.5);
  check_op("sum 0-d", s, {}, false, Tol::Exact, [](const Tensor& t) { return sum(t); });
  check_op("argmax 0-d", s, {}, false, Tol::Exact, [](const Tensor& t) { return argmax(t, 0); });
  check_op("var 0-d", s, {}, false, Tol::Exact, [](const Tensor& t) { return var(t, {}, 1.0); });
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA reductions propagate NaN and inf as the CPU", "[cuda][gpu][reduce]") {
  for (DType dt : {DType::F32, DType::BF16, DType::F64}) {
    Tensor x = randn({6, 4097});
    float* p = x.data<float>();
    p[1 * 4097 + 17] = NAN;
    p[1 * 4097 + 3000] = NAN;
    p[2 * 4097 + 4096] = INFINITY;
    p[3 * 4097 + 0] = -INFINITY;
    p[4 * 4097 + 5] = INFINITY;
    p[4 * 4097 + 6] = -INFINITY;
    for (int64_t i = 0; i < 4097; ++i) p[5 * 4097 + i] = -INFINITY;
    const Tensor xd = to(x, dt);
    for (const auto& [t, along] : {std::pair<Tensor, int64_t>{xd, 1}, {xd.t(), 0}}) {
      const int64_t dim = along;  // a plain variable: clang 14 cannot capture a structured binding
      const std::vector<int64_t> d{dim};
      check_op("sum", t, d, false, Tol::Sum, [&](const Tensor& v) { return sum(v, d); });
      check_op("amax", t, d, false, Tol::Exact, [&](const Tensor& v) { return amax(v, d); });
      check_op("amin", t, d, false, Tol::Exact, [&](const Tensor& v) { return amin(v, d); });
      check_op("argmax", t, d, false, Tol::Exact, [&](const Tensor& v) { return argmax(v, dim); });  // first NaN
      check_op("argmin", t, d, false, Tol::Exact, [&](const Tensor& v) { return argmin(v, dim); });
      check_op("logsumexp", t, d, false, Tol::Lse, [&](const Tensor& v) { return logsumexp(v, d); });
      check_op("norm inf", t, d, false, Tol::Exact, [&](const Tensor& v) { return norm(v, INFINITY, d); });
      check_op("var", t, d, false, Tol::Var, [&](const Tensor& v) { return var(v, d, 1.0); });
    }
    const Tensor am = argmax(xd.to(gpu()), 1);
    CHECK(values(am)[1] == 17.0);
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA sum of 10^7 x 0.1f is within the bound - a running f32 total is 1% off", "[cuda][gpu][reduce]") {
  const int64_t n = 10'000'000;
  const Tensor x = full({n}, 0.1, {.device = gpu()});
  const double exact = double(n) * double(0.1f);
  // (d_leaf + ceil(log2 n) + 6) u Σ|x| with d_leaf = 34 (f32 vector leaves), Σ|x| = exact.
  const double bound = (34 + 24 + 6) * 0x1p-24 * exact;
  const double got = values(sum(x))[0];
  CHECK(std::abs(got - exact) <= bound);
  CHECK(std::abs(values(mean(x))[0] - double(0.1f)) <= bound / double(n) + 0x1p-24);
  // Strided: the same terms as a column sum of [10^4, 1000] and as rows of its transpose.
  const Tensor m = full({10000, 1000}, 0.1, {.device = gpu()});
  const std::vector<double> cols = values(sum(m, {0}));
  for (double c : cols) REQUIRE(std::abs(c - 1e4 * double(0.1f)) <= (128 + 14 + 6) * 0x1p-24 * 1e4 * 0.1);
  const std::vector<double> rows = values(sum(m.t(), {1}));
  for (double c : rows) REQUIRE(std::abs(c - 1e4 * double(0.1f)) <= (128 + 14 + 6) * 0x1p-24 * 1e4 * 0.1);
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA reductions repeat bit for bit", "[cuda][gpu][reduce]") {
  Generator gen(51);
  const Tensor big = randn({1 << 24}, {}, &gen).to(gpu());
  const Tensor cols = randn({4097, 33}, {}, &gen).to(gpu());
  const Tensor rows = to(randn({4096, 4096}, {}, &gen), DType::BF16).to(gpu());
  const std::vector<std::function<Tensor()>> calls = {
      [&] { return sum(big); },           [&] { return var(big, {}, 1.0); },   [&] { return norm(big, 2.0, {}); },
      [&] { return logsumexp(big, {}); }, [&] { return sum(cols, {0}); },     [&] { return mean(cols.t(), {1}); },
      [&] { return logsumexp(rows, {1}); }, [&] { return cumsum(cols, 0); }};
  for (std::size_t k = 0; k < calls.size(); ++k) {
    const Tensor a = calls[k]().to(Device::cpu()), b = calls[k]().to(Device::cpu());
    INFO("call " << k);
    REQUIRE(a.numel() == b.numel());
    CHECK(std::memcmp(a.data_ptr(), b.data_ptr(), std::size_t(a.numel()) * a.element_size()) == 0);
  }
  mg::test::require_no_pending_cuda_error();
}
