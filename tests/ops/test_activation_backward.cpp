// The fused backward ops of ops/activation_backward_ops.def (tanh, sigmoid, silu, erf, reciprocal,
// rsqrt) against f64 math: every f16 and bf16 input
// pattern within 1 ulp of the exact derivative rounded once, dense and strided; f32 over 2^20
// patterns spread over the whole range; autograd's ordinary backward runs them bit for bit; a
// recorded backward (create_graph) stays differentiable; the in-place forms keep their gradients.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "ops/ops.h"
#include "test_util.h"
#include "ulp_sweep.h"
#include "activation_refs.h"

using namespace mg;
using namespace mg::test;
namespace act = mg::test::act;

namespace {

// The derivatives in f64, written without cancellation (e = e^{-|v|}, r = 1 / (1 + e)).
double sigmoid_grad_ref(double x) {
  const double e = std::exp(-std::fabs(x)), r = 1.0 / (1.0 + e);
  return e * r * r;
}
double tanh_grad_ref(double x) { return 4.0 * sigmoid_grad_ref(2.0 * x); }
// x >= 0: r (1 + x e r); x < 0: e r^2 ((1 + x) + e). ±inf give NaN (inf * 0), as the op.
double silu_grad_ref(double x) {
  const double e = std::exp(-std::fabs(x)), r = 1.0 / (1.0 + e);
  return x >= 0 ? r * (1.0 + x * e * r) : e * r * r * ((1.0 + x) + e);
}
// The size of silu's derivative's terms, for a bound where the sum cancels (x near -1.2785).
double silu_grad_terms(double x) {
  const double e = std::exp(-std::fabs(x)), r = 1.0 / (1.0 + e);
  return x >= 0 ? r * (1.0 + x * e * r) : e * r * r * (std::fabs(1.0 + x) + e);
}
double erf_grad_ref(double x) { return 1.1283791670955125739 * std::exp(-x * x); }
double reciprocal_grad_ref(double x) { return -1.0 / (x * x); }
// -y^3 / 2, y = 1 / sqrt(x): -0 gives +inf (y = -inf), as the op
double rsqrt_grad_ref(double x) {
  const double y = 1.0 / std::sqrt(x);
  return -0.5 * y * y * y;
}

struct Fused {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;   // (grad, x)
  std::function<Tensor(const Tensor&)> forward;
  std::function<double(double)> ref;
  int f32_bound;  // max ulp asserted on the f32 sample (silu, mish: a bound relative to `terms` instead)
  bool positive_domain = false;  // rsqrt: x > 0 (the double-backward points)
  std::function<double(double)> terms = silu_grad_terms;  // the size of f'(x)'s terms, where f32_bound < 0
};

// f32 max ulp measured on the sample when this test was written: tanh 4, sigmoid 4, erf 3,
// reciprocal 2, rsqrt 5 (sqrt, a division and three products; the bounds below add a margin);
// silu within 5.8 u of the size of its terms (bound 8): the chain e, 1 + e, r, and three products
// each round once.
std::vector<Fused> fused_ops() {
  return {
      {"tanh_backward", [](const Tensor& g, const Tensor& x) { return tanh_backward(g, x); },
       [](const Tensor& x) { return tanh(x); }, tanh_grad_ref, 6},
      {"sigmoid_backward", [](const Tensor& g, const Tensor& x) { return sigmoid_backward(g, x); },
       [](const Tensor& x) { return sigmoid(x); }, sigmoid_grad_ref, 6},
      {"silu_backward", [](const Tensor& g, const Tensor& x) { return silu_backward(g, x); },
       [](const Tensor& x) { return silu(x); }, silu_grad_ref, -1},
      {"erf_backward", [](const Tensor& g, const Tensor& x) { return erf_backward(g, x); },
       [](const Tensor& x) { return erf(x); }, erf_grad_ref, 5},
      {"reciprocal_backward", [](const Tensor& g, const Tensor& x) { return reciprocal_backward(g, x); },
       [](const Tensor& x) { return reciprocal(x); }, reciprocal_grad_ref, 3, true},
      {"rsqrt_backward", [](const Tensor& g, const Tensor& x) { return rsqrt_backward(g, x); },
       [](const Tensor& x) { return rsqrt(x); }, rsqrt_grad_ref, 7, true},
      // the piecewise activations (ops/activation.cpp)
      {"leaky_relu_backward", [](const Tensor& g, const Tensor& x) { return leaky_relu_backward(g, x, 0.2); },
       [](const Tensor& x) { return leaky_relu(x, 0.2); }, [](double x) { return act::leaky_relu_grad(x, 0.2); }, 1},
      {"elu_backward", [](const Tensor& g, const Tensor& x) { return elu_backward(g, x, 1.0); },
       [](const Tensor& x) { return elu(x); }, [](double x) { return act::elu_grad(x, 1.0, 1.0, 1.0); }, 3},
      {"elu_backward (selu)", [](const Tensor& g, const Tensor& x) { return elu_backward(g, x, kSeluAlpha, kSeluScale); },
       [](const Tensor& x) { return selu(x); }, [](double x) { return act::elu_grad(x, kSeluAlpha, kSeluScale, 1.0); }, 3},
      {"elu_backward (celu)", [](const Tensor& g, const Tensor& x) { return elu_backward(g, x, 0.5, 1.0, true); },
       [](const Tensor& x) { return celu(x, 0.5); }, [](double x) { return act::elu_grad(x, 0.5, 1.0, 2.0); }, 3},
      {"hardswish_backward", [](const Tensor& g, const Tensor& x) { return hardswish_backward(g, x); },
       [](const Tensor& x) { return hardswish(x); }, act::hardswish_grad, 2},
      {"hardsigmoid_backward", [](const Tensor& g, const Tensor& x) { return hardsigmoid_backward(g, x); },
       [](const Tensor& x) { return hardsigmoid(x); }, act::hardsigmoid_grad, 1},
      {"mish_backward", [](const Tensor& g, const Tensor& x) { return mish_backward(g, x); },
       [](const Tensor& x) { return mish(x); }, act::mish_grad, -1, false, act::mish_grad_terms},
  };
}

}  // namespace

TEST_CASE("fused activation backwards: every f16 and bf16 input pattern within 1 ulp of f64 math - autograd runs them",
          "[ops][numerics]") {
  for (DType dt : {DType::F16, DType::BF16}) {
    const Tensor x = all_patterns(dt);
    const Tensor ones_g = ones({x.numel()}, {.dtype = dt});
    for (const Fused& f : fused_ops()) {
      Tensor dx;
      {
        NoGradGuard no_grad;
        dx = f.op(ones_g, x);
      }
      const Worst dense = sweep16(x, dx, f.ref);
      const Worst strided = sweep16(strided_copy(x), f.op(strided_copy(ones_g), strided_copy(x)), f.ref);
      std::printf("activation backward sweep %-4s %-16s max ulp dense %lld strided %lld (worst x = %.9g: got %.9g, want %.9g)\n",
                  dtype_name(dt), f.name, (long long)dense.ulp, (long long)strided.ulp, dense.x, dense.got, dense.want);
      INFO(dtype_name(dt) << " " << f.name << ": worst x = " << dense.x << " got " << dense.got << " want " << dense.want);
      CHECK(dense.ulp <= 1);
      CHECK(strided.ulp <= 1);
      // The forward op's ordinary backward is this op: bit for bit the same gradient.
      const Tensor xg = x.clone().requires_grad_();
      f.forward(xg).backward(ones_g);
      const Tensor got = xg.grad();
      REQUIRE(got.dtype() == dt);
      CHECK(std::memcmp(got.data_ptr(), dx.data_ptr(), std::size_t(x.numel()) * 2) == 0);
    }
  }
}

TEST_CASE("fused activation backwards: f32 over the whole range", "[ops][numerics]") {
  NoGradGuard no_grad;
  std::vector<float> v(1 << 20);
  for (uint32_t i = 0; i < v.size(); ++i) v[i] = f32_from_bits(i * 4096u + (i % 4096u));  // every exponent, varied low bits
  // and every float within 2048 steps of silu's derivative's zero (x = -1.2785), where its terms cancel
  for (int i = -2048; i < 2048; ++i) v.push_back(f32_from_bits(uint32_t(int32_t(f32_bits(-1.2784645f)) + i)));
  // and mish's (x = -1.1924312)
  for (int i = -2048; i < 2048; ++i) v.push_back(f32_from_bits(uint32_t(int32_t(f32_bits(-1.1924312f)) + i)));
  const Tensor x = from_vector<float>(v);
  const Tensor g = ones({x.numel()});
  for (const Fused& f : fused_ops()) {
    const Tensor y = contiguous(f.op(g, x));
    const float* yp = y.data<float>();
    Worst w;
    double worst_rel_terms = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double r = f.ref(double(v[i]));
      const float got = yp[i];
      if (f.f32_bound >= 0) {
        const float want = float(r);
        const int64_t d = ulp_distance(f32_bits(got), f32_bits(want), std::isnan(got), std::isnan(want),
                                       std::isinf(got), std::isinf(want), want == 0.0f && got == 0.0f, 32);
        if (d > w.ulp) w = {d, double(v[i]), double(got), r};
      } else {
        INFO(f.name << " x = " << v[i] << " got " << got << " want " << r);
        REQUIRE(std::isnan(got) == std::isnan(r));
        if (std::isnan(r)) continue;
        // error in units of 2^-24 times the size of the terms (one subnormal step of slack)
        const double err = std::fabs(double(got) - r) - 1.4012984643e-45;
        const double rel = err <= 0 ? 0 : err / (5.9604644775390625e-8 * f.terms(double(v[i])));
        if (rel > worst_rel_terms) {
          worst_rel_terms = rel;
          w = {0, double(v[i]), double(got), r};
        }
      }
    }
    if (f.f32_bound >= 0) {
      std::printf("activation backward sweep f32  %-16s max ulp %lld (worst x = %.9g: got %.9g, want %.9g)\n", f.name,
                  (long long)w.ulp, w.x, w.got, w.want);
      INFO(f.name << ": worst x = " << w.x << " got " << w.got << " want " << w.want);
      CHECK(w.ulp <= f.f32_bound);
    } else {
      std::printf("activation backward sweep f32  %-16s max error %.2f u of its terms (worst x = %.9g: got %.9g, want %.9g)\n",
                  f.name, worst_rel_terms, w.x, w.got, w.want);
      INFO(f.name << ": worst x = " << w.x << " got " << w.got << " want " << w.want);
      CHECK(worst_rel_terms <= 8.0);
    }
  }
}

TEST_CASE("fused activation backwards: the dense loop gives the strided loop's bits in every dtype, and a random "
          "gradient multiplies in",
          "[ops][numerics]") {
  // an odd length (a vector tail and, in f16/bf16, a partial block of 256); x over [-20, 20]
  manual_seed(17);
  const int64_t n = 100003;
  for (DType dt : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
    const Tensor x = to(rand({n}, {.dtype = DType::F64}) * 40.0 - 20.0, dt);
    const Tensor g = to(randn({n}, {.dtype = DType::F64}), dt);
    const std::vector<double> xv = values(x), gv = values(g);
    for (const Fused& f : fused_ops()) {
      INFO(dtype_name(dt) << " " << f.name);
      const Tensor dense = f.op(g, x);
      const Tensor strided = contiguous(f.op(strided_copy(g), strided_copy(x)));
      REQUIRE(dense.is_contiguous());
      CHECK(std::memcmp(dense.data_ptr(), strided.data_ptr(), std::size_t(n) * dtype_size(dt)) == 0);
      // g * f'(x) in the dtype's precision (relative to |g| times the size of the derivative's terms)
      const double tol = dt == DType::F64 ? 1e-13 : (dt == DType::F32 ? 1e-6 : (dt == DType::BF16 ? 8e-3 : 1e-3));
      // the dtype's smallest subnormal: f'(x) that underflows is rounded to it before g multiplies in
      const double tiny = dt == DType::F64 ? 5e-324 : (dt == DType::F16 ? 5.97e-8 : (dt == DType::BF16 ? 9.2e-41 : 1.41e-45));
      // where the dtype's rounding overflows to inf
      const double max_finite = dt == DType::F64 ? 1.79e308 : (dt == DType::F16 ? 65520.0 : (dt == DType::BF16 ? 3.3961e38 : 3.4028236e38));
      const std::vector<double> got = values(dense);
      for (int64_t i = 0; i < n; i += 97) {
        const double want = gv[i] * f.ref(xv[i]);
        if (std::isnan(want)) {  // rsqrt of a negative x
          CHECK(std::isnan(got[i]));
          continue;
        }
        if (std::fabs(want) > max_finite) {  // g / x^2 beyond f16's range near x = 0
          CHECK(got[i] == std::copysign(std::numeric_limits<double>::infinity(), want));
          continue;
        }
        const double scale = std::fabs(gv[i]) * (f.f32_bound >= 0 ? std::fabs(f.ref(xv[i])) : f.terms(xv[i]));
        INFO("x = " << xv[i] << " g = " << gv[i] << " got " << got[i] << " want " << want);
        REQUIRE(std::fabs(got[i] - want) <= tol * scale + tiny * (2.0 + std::fabs(gv[i])));  // d subnormal, then times g
      }
    }
  }
}

TEST_CASE("fused activation backwards: specials, and operand checks", "[ops][numerics]") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    INFO(dtype_name(dt));
    const Tensor x = to(from_vector<double>({inf, -inf, nan, 0.0, -0.0}), dt);
    const Tensor g = ones({5}, {.dtype = dt});
    const auto v = [&](const Tensor& t) { return values(t); };
    // tanh' and sigmoid' vanish at ±inf and are 1 and 1/4 at 0; erf' vanishes at ±inf and is
    // 2/sqrt(pi) at 0; silu' is NaN at ±inf (inf * 0, as gelu's) and 1/2 at 0.
    const std::vector<double> t = v(tanh_backward(g, x)), s = v(sigmoid_backward(g, x)), si = v(silu_backward(g, x)),
                              e = v(erf_backward(g, x));
    CHECK(t[0] == 0.0);
    CHECK(t[1] == 0.0);
    CHECK(std::isnan(t[2]));
    CHECK(t[3] == 1.0);
    CHECK(t[4] == 1.0);
    CHECK(s[0] == 0.0);
    CHECK(s[1] == 0.0);
    CHECK(std::isnan(s[2]));
    CHECK(s[3] == 0.25);
    CHECK(std::isnan(si[0]));
    CHECK(std::isnan(si[1]));
    CHECK(std::isnan(si[2]));
    CHECK(si[3] == 0.5);
    CHECK(e[0] == 0.0);
    CHECK(e[1] == 0.0);
    CHECK(std::isnan(e[2]));
    CHECK(e[3] == Approx(1.1283791670955126).epsilon(dt == DType::F16 || dt == DType::BF16 ? 4e-3 : 1e-6));
    // reciprocal' = -1/x^2: -0 at ±inf, -inf at ±0; rsqrt' = -x^(-3/2)/2: -0 at +inf, NaN below 0,
    // -inf at +0 and +inf at -0 (y = rsqrt(-0) = -inf, as the output-based rule)
    const std::vector<double> rc = v(reciprocal_backward(g, x)), rs = v(rsqrt_backward(g, x));
    CHECK((rc[0] == 0.0 && std::signbit(rc[0])));
    CHECK((rc[1] == 0.0 && std::signbit(rc[1])));
    CHECK(std::isnan(rc[2]));
    CHECK(rc[3] == -inf);
    CHECK(rc[4] == -inf);
    CHECK((rs[0] == 0.0 && std::signbit(rs[0])));
    CHECK(std::isnan(rs[1]));
    CHECK(std::isnan(rs[2]));
    CHECK(rs[3] == -inf);
    CHECK(rs[4] == inf);
  }
  for (const Fused& f : fused_ops()) {
    const std::string name = std::string(f.name).substr(0, std::string(f.name).find(' '));  // the op's name
    MG_REQUIRE_ERROR(f.op(ones({3}), ones({4})), name + ": expected grad and input of the same shape");
    MG_REQUIRE_ERROR(f.op(ones({4}, {.dtype = DType::F16}), ones({4})), name + ": expected tensors of the same dtype");
    MG_REQUIRE_ERROR(f.op(ones({4}, {.dtype = DType::I64}), ones({4}, {.dtype = DType::I64})), name);
    MG_REQUIRE_ERROR(f.op(Tensor(), ones({4})), name + ": undefined tensor operand");
  }
}

TEST_CASE("the ELU family's recorded backward: finite second derivatives for large x, the fused op's NaN side",
          "[ops][numerics]") {
  // e^{s x} of a large positive x is inf in f32 (x > 88.7 for ELU/SELU, x > 8.9 for CELU with
  // alpha 0.1); the rule must not let the second derivative multiply where()'s 0 by it.
  struct Family {
    const char* name;
    std::function<Tensor(const Tensor&)> f;
    double big, scale;
  };
  for (const Family& fam : {Family{"elu", [](const Tensor& x) { return elu(x); }, 100.0, 1.0},
                            Family{"selu", [](const Tensor& x) { return selu(x); }, 100.0, kSeluScale},
                            Family{"celu(0.1)", [](const Tensor& x) { return celu(x, 0.1); }, 10.0, 1.0}}) {
    INFO(fam.name);
    const Tensor x = from_vector<float>({-1.0f, 0.5f, float(fam.big)}).requires_grad_();
    const Tensor gx = autograd::grad({sum(fam.f(x))}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
    const Tensor ggx = autograd::grad({sum(gx * gx)}, {x})[0];
    const std::vector<double> second = values(ggx);
    CHECK(std::isfinite(second[0]));
    CHECK(second[1] == 0.0);
    CHECK(second[2] == 0.0);
    // a NaN input: the recorded rule passes g * scale, as the fused op and PyTorch
    const Tensor xn = from_vector<float>({std::numeric_limits<float>::quiet_NaN()}).requires_grad_();
    const Tensor gn = autograd::grad({sum(fam.f(xn))}, {xn}, {}, std::nullopt, /*create_graph=*/true)[0];
    CHECK(values(gn)[0] == Approx(fam.scale).epsilon(1e-6));
    NoGradGuard no_grad;
    CHECK(values(elu_backward(ones({1}), from_vector<float>({std::numeric_limits<float>::quiet_NaN()}), 1.0))[0] == 1.0);
  }
}

TEST_CASE("fused activation backwards: create_graph builds the derivative from public ops (double backward)",
          "[ops][numerics]") {
  // d/dx f'(x) against f64 formulas: tanh'' = -2 t (1 - t^2), sigmoid'' = s (1 - s) (1 - 2 s),
  // silu'' = s (1 - s) (2 + x (1 - 2 s)), erf'' = -2x erf'(x), (1/x)'' = 2 / x^3,
  // (x^-1/2)'' = 3/4 x^-5/2.
  const std::vector<double> all_x = {-3.0, -1.2, -0.3, 0.0, 0.4, 1.7, 4.0}, positive_x = {0.3, 0.8, 1.7, 4.0, 9.5};
  const auto sig = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  const std::vector<std::function<double(double)>> second = {
      [](double x) { const double t = std::tanh(x); return -2.0 * t * (1.0 - t * t); },
      [&](double x) { const double s = sig(x); return s * (1.0 - s) * (1.0 - 2.0 * s); },
      [&](double x) { const double s = sig(x); return s * (1.0 - s) * (2.0 + x * (1.0 - 2.0 * s)); },
      [](double x) { return -2.0 * x * erf_grad_ref(x); },
      [](double x) { return 2.0 / (x * x * x); },
      [](double x) { return 0.75 * std::pow(x, -2.5); },
  };
  const std::vector<Fused> ops = fused_ops();
  // The piecewise activations after them: the op table's double-backward check (differences).
  for (std::size_t k = 0; k < second.size(); ++k) {
    INFO(ops[k].name);
    const std::vector<double>& xs = ops[k].positive_domain ? positive_x : all_x;
    const Tensor x = from_vector<double>(xs).requires_grad_();
    const Tensor gx = autograd::grad({sum(ops[k].forward(x))}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
    REQUIRE(gx.requires_grad());
    const std::vector<double> first = values(gx);
    const Tensor ggx = autograd::grad({sum(gx)}, {x})[0];
    const std::vector<double> got = values(ggx);
    for (std::size_t i = 0; i < xs.size(); ++i) {
      CHECK(first[i] == Approx(ops[k].ref(xs[i])).epsilon(1e-12));
      CHECK(got[i] == Approx(second[k](xs[i])).epsilon(1e-10).margin(1e-14));
    }
  }
}

TEST_CASE("in-place tanh_, sigmoid_, erf_ and sin_ on recorded tensors: the gradient of the out-of-place op", "[ops][grad]") {
  // Their backward reads the input, which the in-place op overwrites: the recording reads a clone.
  for (DType dt : {DType::F64, DType::F16}) {
    INFO(dtype_name(dt));
    const Tensor x0 = to(randn({3, 5}, {.dtype = DType::F64}) * 2.0, dt);
    const std::vector<std::pair<const char*, std::function<void(Tensor&)>>> inplace = {
        {"tanh_", [](Tensor& t) { t.tanh_(); }}, {"sigmoid_", [](Tensor& t) { t.sigmoid_(); }},
        {"erf_", [](Tensor& t) { t.erf_(); }}, {"sin_", [](Tensor& t) { t.sin_(); }}};
    const std::vector<std::function<Tensor(const Tensor&)>> outplace = {
        [](const Tensor& t) { return tanh(t); }, [](const Tensor& t) { return sigmoid(t); },
        [](const Tensor& t) { return erf(t); }, [](const Tensor& t) { return sin(t); }};
    for (std::size_t k = 0; k < inplace.size(); ++k) {
      INFO(inplace[k].first);
      Tensor xa = x0.clone().requires_grad_();
      Tensor h = xa * 3.0;
      inplace[k].second(h);
      h.mul_(2.0);
      h.sum().backward();
      Tensor xb = x0.clone().requires_grad_();
      (outplace[k](xb * 3.0) * 2.0).sum().backward();
      REQUIRE(xa.grad().defined());
      CHECK(std::memcmp(xa.grad().data_ptr(), xb.grad().data_ptr(), std::size_t(x0.numel()) * dtype_size(dt)) == 0);
      CHECK(sum(abs(xa.grad())).item<double>() > 0);
    }
  }
}
