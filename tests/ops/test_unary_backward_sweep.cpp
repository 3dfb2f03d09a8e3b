// Every differentiable unary op's gradient through autograd (the gradient of a sum: grad = 1)
// against its f64 derivative rounded once, for all 65,536 f16 and bf16 input patterns: the rules
// built from public ops, which round each intermediate in the low dtype, and the fused ones
// (reciprocal, rsqrt here; tanh, sigmoid, silu, erf and gelu in their own tests). Each is asserted
// at the bound measured for it (docs/numerics.md lists them). Last, div's gradient with respect to
// the divisor at points where b^2 would leave the 16-bit range.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/factory.h"
#include "ops/ops.h"
#include "test_util.h"
#include "ulp_sweep.h"

using namespace mg;
using namespace mg::test;

namespace {

struct BackwardCase {
  std::string name;
  std::function<Tensor(const Tensor&)> forward;
  std::function<double(double)> derivative;  // f'(x) in f64, NaN where undefined
  int f16_bound, bf16_bound;                  // asserted max ulp (measured when written, see the table)
};

double sigmoid_f64(double x) { return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x)); }

// Max ulp measured when this test was written, f16 / bf16: 0 / 0 for neg, abs, reciprocal, rsqrt
// (fused), pow 2, 0.5, -1; within 1 for exp, log, log1p, expm1, sqrt, sin, cos, softplus, pow -1.5.
// Above 1: pow 3, 1 / 2 (3 x^2 rounded in bf16's subnormals, then tripled); pow_scalar's rule is a
// composite of public ops (its policy is fp32, so under autocast it runs in f32).
std::vector<BackwardCase> backward_cases() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<BackwardCase> c;
  c.push_back({"neg", [](const Tensor& x) { return neg(x); }, [](double) { return -1.0; }, 0, 0});
  c.push_back({"abs", [](const Tensor& x) { return abs(x); },
               [nan](double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : (x == 0 ? 0.0 : nan)); }, 0, 0});
  c.push_back({"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, 1, 1});
  c.push_back({"log", [](const Tensor& x) { return log(x); }, [](double x) { return 1.0 / x; }, 1, 1});
  c.push_back({"log1p", [](const Tensor& x) { return log1p(x); }, [](double x) { return 1.0 / (1.0 + x); }, 1, 1});
  c.push_back({"expm1", [](const Tensor& x) { return expm1(x); }, [](double x) { return std::exp(x); }, 1, 1});
  c.push_back({"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return 0.5 / std::sqrt(x); }, 1, 1});
  // -y^3 / 2 with y = 1 / sqrt(x) (so -0 gives +inf, as the rule and PyTorch: y = -inf there)
  c.push_back({"rsqrt", [](const Tensor& x) { return rsqrt(x); },
               [](double x) { const double y = 1.0 / std::sqrt(x); return -0.5 * y * y * y; }, 1, 1});
  c.push_back({"reciprocal", [](const Tensor& x) { return reciprocal(x); }, [](double x) { return -1.0 / (x * x); }, 1, 1});
  c.push_back({"sin", [](const Tensor& x) { return sin(x); }, [](double x) { return std::cos(x); }, 1, 1});
  c.push_back({"cos", [](const Tensor& x) { return cos(x); }, [](double x) { return -std::sin(x); }, 1, 1});
  c.push_back({"softplus", [](const Tensor& x) { return softplus(x); },
               [](double x) { return x > 20.0 ? 1.0 : sigmoid_f64(x); }, 1, 1});
  for (double p : {2.0, 3.0, 0.5, -1.0, -1.5}) {
    char name[32];
    std::snprintf(name, sizeof name, "pow_scalar(%g)", p);
    c.push_back({name, [p](const Tensor& x) { return pow(x, p); },
                 [p](double x) { return p * std::pow(x, p - 1.0); }, 1, p == 3.0 ? 2 : 1});
  }
  return c;
}

}  // namespace

TEST_CASE("unary backward rules: every f16 and bf16 input pattern against the f64 derivative", "[ops][numerics]") {
  for (DType dt : {DType::F16, DType::BF16}) {
    const Tensor x = all_patterns(dt);
    const Tensor ones_g = ones({x.numel()}, {.dtype = dt});
    for (const BackwardCase& c : backward_cases()) {
      const Tensor xg = x.clone().requires_grad_();
      c.forward(xg).backward(ones_g);
      const Worst w = sweep16(x, xg.grad(), c.derivative);
      std::printf("backward sweep %-4s %-16s max ulp %lld (worst x = %.9g: got %.9g, want %.9g)\n", dtype_name(dt),
                  c.name.c_str(), (long long)w.ulp, w.x, w.got, w.want);
      INFO(dtype_name(dt) << " " << c.name << ": worst x = " << w.x << " got " << w.got << " want " << w.want);
      CHECK(w.ulp <= (dt == DType::F16 ? c.f16_bound : c.bf16_bound));
    }
  }
}

TEST_CASE("div's gradient with respect to the divisor where b^2 leaves the 16-bit range", "[ops][numerics]") {
  // -g a / b^2 with b^2 overflowing (|b| > 256 in f16, > 1.8e19 in bf16) or underflowing (tiny b)
  // while the gradient itself is representable: it was -0 or -inf.
  struct Point {
    double a, b, g;
  };
  const std::vector<std::pair<DType, std::vector<Point>>> cases = {
      {DType::F16, {{1.0, 300.0, 1.0}, {1e-4, 1e-4, 1.0}, {-3.0, 1000.0, 2.0}, {2e-3, -1e-3, 0.5}}},
      {DType::BF16, {{1e20, 1e20, 1.0}, {1e-20, 1e-20, 1.0}, {-3.0, 1e19, 4.0}}},
  };
  for (const auto& [dt, points] : cases) {
    for (const Point& p : points) {
      const Tensor a = full({1}, p.a, {.dtype = dt}).requires_grad_();
      const Tensor b = full({1}, p.b, {.dtype = dt}).requires_grad_();
      div(a, b).backward(full({1}, p.g, {.dtype = dt}));
      // the reference from the values the dtype holds
      const double av = values(a)[0], bv = values(b)[0], gv = values(full({1}, p.g, {.dtype = dt}))[0];
      const double want = -gv * av / (bv * bv), got = values(b.grad())[0];
      INFO(dtype_name(dt) << " a = " << av << " b = " << bv << " g = " << gv << ": got " << got << " want " << want);
      REQUIRE(std::isfinite(got));
      CHECK(std::fabs(got - want) <= (dt == DType::F16 ? 4e-3 : 3e-2) * std::fabs(want) + (dt == DType::F16 ? 6e-8 : 0.0));
      CHECK(values(a.grad())[0] == Approx(gv / bv).epsilon(dt == DType::F16 ? 2e-3 : 1e-2));
    }
  }
}
