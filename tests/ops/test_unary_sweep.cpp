// Every unary op of ops/op_list.def against its f64 math, exhaustively for f16 and bf16: all 65,536
// input bit patterns as one tensor through the public op (the real kernel: the dense loop that
// converts blocks of 256 to f32 and runs the functor vectorised), and again through a strided view
// (the scalar loop). Each result must be the f64 reference rounded once to the dtype, up to 1 ulp;
// NaN exactly where the reference is NaN, infinities and signed zeros exactly where it gives them.
// f32 runs on 2^20 bit patterns spread over the whole range with a bound of a few ulp (the
// measured maximum per op is in the table's comment). gelu's backward (the fused gelu_backward)
// gets the same f16/bf16 sweep.
//
// The one decision a reader must know: "rounded once" means f64 -> f16/bf16 directly. The test
// rounds f64 to f32 by round-to-odd first (exact for a second rounding to any format at least two
// bits narrower), then to f16/bf16 by the library's round-to-nearest-even conversion.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "core/half.h"
#include "ops/ops.h"
#include "test_util.h"
#include "ulp_sweep.h"
#include "activation_refs.h"

using namespace mg;
using namespace mg::test;
namespace act = mg::test::act;

namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;

struct Case {
  std::string name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  int f32_bound;  // asserted max ulp on the f32 sample (the measured one is in the table comment)
  // Inputs below f32_tail_below get f32_tail_bound instead (gelu's tanh form, see cases()).
  double f32_tail_below = -std::numeric_limits<double>::infinity();
  int f32_tail_bound = 0;
};

double sigmoid_ref(double x) { return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x)); }
double gelu_erf_ref(double x) { return 0.5 * x * std::erfc(-x * kInvSqrt2); }
// 0.5 x (1 + tanh u) = x sigmoid(2u), without the cancellation of 1 + tanh u in f64 either.
double gelu_tanh_ref(double x) { return x * sigmoid_ref(2.0 * kSqrt2OverPi * (x + 0.044715 * x * x * x)); }

// f32 bounds: the max ulp measured on the sample of 2^20 patterns when this test was written, in
// the comment, with a small margin. f16/bf16 are all <= 1 ulp. Measured (f32): neg, abs, sign,
// sqrt, reciprocal, relu, pow(2), pow(0.5), pow(-1.5), clamp 0; exp, log, log1p, expm1, rsqrt,
// sin, cos, tanh, softplus, pow(3), pow(-1) 1; sigmoid 2; silu 3; erf 5 (near |x| = 0.54, the
// Abramowitz-Stegun branch); gelu 6 (near x = 1e-4, the Numerical Recipes erfc's 1.2e-7 relative
// error). gelu's tanh form: 141 at x = -8.98 (result 1.9e-28): the f32 rounding of
// u = sqrt(2/pi) (x + 0.044715 x^3) (about 4 roundings, 2^-24 each) is multiplied by |2u| in
// e^{2u}, so the tail error grows like |2u| ulp (|2u| <= 87 before the result underflows);
// above x = -3 (|2u| <= 6.7) it is 12. The piecewise activations: leaky_relu 1 (a subnormal
// times the slope), elu 1, selu 2, celu 1, hardswish 2 (x (x + 3) / 6 near 0), hardsigmoid 1, mish 4 (x e^x (2 + e) / q
// in the negative range: the exp and four roundings).
std::vector<Case> cases() {
  std::vector<Case> c;
  c.push_back({"neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }, 0});
  c.push_back({"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::fabs(x); }, 0});
  c.push_back({"sign", [](const Tensor& x) { return sign(x); },
               [](double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : (x == 0 ? 0.0 : x)); }, 0});
  c.push_back({"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, 1});
  c.push_back({"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, 1});
  c.push_back({"log1p", [](const Tensor& x) { return log1p(x); }, [](double x) { return std::log1p(x); }, 1});
  c.push_back({"expm1", [](const Tensor& x) { return expm1(x); }, [](double x) { return std::expm1(x); }, 1});
  c.push_back({"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 0});
  c.push_back({"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double x) { return 1.0 / std::sqrt(x); }, 1});
  c.push_back({"reciprocal", [](const Tensor& x) { return reciprocal(x); }, [](double x) { return 1.0 / x; }, 0});
  c.push_back({"sin", [](const Tensor& x) { return sin(x); }, [](double x) { return std::sin(x); }, 1});
  c.push_back({"cos", [](const Tensor& x) { return cos(x); }, [](double x) { return std::cos(x); }, 1});
  c.push_back({"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, 1});
  c.push_back({"sigmoid", [](const Tensor& x) { return sigmoid(x); }, sigmoid_ref, 2});
  c.push_back({"relu", [](const Tensor& x) { return relu(x); },
               [](double x) { return x < 0 ? 0.0 : x; }, 0});  // -0 and NaN pass through, as PyTorch's
  c.push_back({"gelu", [](const Tensor& x) { return gelu(x); }, gelu_erf_ref, 7});
  c.push_back({"gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApprox::Tanh); }, gelu_tanh_ref, 14, -3.0, 160});
  c.push_back({"silu", [](const Tensor& x) { return silu(x); }, [](double x) { return x * sigmoid_ref(x); }, 4});
  c.push_back({"softplus", [](const Tensor& x) { return softplus(x); },
               [](double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }, 1});
  c.push_back({"erf", [](const Tensor& x) { return erf(x); }, [](double x) { return std::erf(x); }, 6});
  for (double p : {2.0, 3.0, 0.5, -1.0, -1.5}) {
    char name[32];
    std::snprintf(name, sizeof name, "pow_scalar(%g)", p);
    c.push_back({name, [p](const Tensor& x) { return pow(x, p); },
                 [p](double x) { return std::pow(x, p); }, 1});
  }
  c.push_back({"clamp(-1, 1)", [](const Tensor& x) { return clamp(x, -1.0, 1.0); },
               [](double x) { return x != x ? x : (x < -1 ? -1.0 : (x > 1 ? 1.0 : x)); }, 0});
  // the piecewise activations (ops/activation.cpp)
  c.push_back({"leaky_relu(0.01)", [](const Tensor& x) { return leaky_relu(x); },
               [](double x) { return act::leaky_relu(x, 0.01); }, 1});
  c.push_back({"elu", [](const Tensor& x) { return elu(x); }, [](double x) { return act::elu(x, 1.0, 1.0, 1.0); }, 2});
  c.push_back({"selu", [](const Tensor& x) { return selu(x); },
               [](double x) { return act::elu(x, kSeluAlpha, kSeluScale, 1.0); }, 3});
  c.push_back({"celu(0.5)", [](const Tensor& x) { return celu(x, 0.5); },
               [](double x) { return act::elu(x, 0.5, 1.0, 2.0); }, 2});
  c.push_back({"hardswish", [](const Tensor& x) { return hardswish(x); }, act::hardswish, 3});
  c.push_back({"hardsigmoid", [](const Tensor& x) { return hardsigmoid(x); }, act::hardsigmoid, 2});
  c.push_back({"mish", [](const Tensor& x) { return mish(x); }, act::mish, 5});
  c.push_back({"relu6", [](const Tensor& x) { return relu6(x); },
               [](double x) { return x != x ? x : (x < 0 ? 0.0 : (x > 6 ? 6.0 : x)); }, 0});
  return c;
}

}  // namespace

TEST_CASE("unary ops: every f16 and bf16 input pattern within 1 ulp of f64 math rounded once", "[ops][numerics]") {
  NoGradGuard no_grad;
  for (DType dt : {DType::F16, DType::BF16}) {
    const Tensor x = all_patterns(dt);
    const Tensor xs = strided_copy(x);
    REQUIRE(!xs.is_contiguous());
    for (const Case& c : cases()) {
      const Worst dense = sweep16(x, c.op(x), c.ref);
      const Worst strided = sweep16(xs, c.op(xs), c.ref);
      std::printf("unary sweep %-4s %-18s max ulp dense %lld strided %lld (worst x = %.9g: got %.9g, want %.9g)\n",
                  dtype_name(dt), c.name.c_str(), (long long)dense.ulp, (long long)strided.ulp, dense.x, dense.got,
                  dense.want);
      INFO(dtype_name(dt) << " " << c.name << ": dense worst x = " << dense.x << " got " << dense.got << " want "
                          << dense.want << "; strided worst x = " << strided.x << " got " << strided.got << " want "
                          << strided.want);
      CHECK(dense.ulp <= 1);
      CHECK(strided.ulp <= 1);
    }
  }
}

TEST_CASE("unary ops: f32 on 2^20 patterns over the whole range within a few ulp", "[ops][numerics]") {
  NoGradGuard no_grad;
  std::vector<float> v(1 << 20);
  for (uint32_t i = 0; i < v.size(); ++i) v[i] = f32_from_bits(i * 4096u + (i % 4096u));  // every exponent, varied low bits
  const Tensor x = from_vector<float>(v);
  for (const Case& c : cases()) {
    const Tensor y = contiguous(c.op(x));
    const float* yp = y.data<float>();
    Worst w, tail;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double r = c.ref(double(v[i]));
      const float want = float(r);
      const float got = yp[i];
      const int64_t d = ulp_distance(f32_bits(got), f32_bits(want), std::isnan(got), std::isnan(want), std::isinf(got),
                                     std::isinf(want), want == 0.0f && got == 0.0f, 32);  // zeros: the sign must match
      Worst& into = double(v[i]) < c.f32_tail_below ? tail : w;
      if (d > into.ulp) into = {d, double(v[i]), double(got), r};
    }
    std::printf("unary sweep f32  %-18s max ulp %lld (worst x = %.9g: got %.9g, want %.9g)", c.name.c_str(),
                (long long)w.ulp, w.x, w.got, w.want);
    if (std::isfinite(c.f32_tail_below)) {
      std::printf("; below x = %g: %lld (worst x = %.9g)", c.f32_tail_below, (long long)tail.ulp, tail.x);
    }
    std::printf("\n");
    INFO(c.name << ": worst x = " << w.x << " got " << w.got << " want " << w.want << "; tail worst x = " << tail.x
                << " got " << tail.got << " want " << tail.want);
    CHECK(w.ulp <= c.f32_bound);
    CHECK(tail.ulp <= c.f32_tail_bound);
  }
}

namespace {

// gelu'(x) in f64 without cancellation: Phi(x) + x phi(x), and the tanh form's
// s + 2 sqrt(2/pi) x e r^2 (1 + 3 * 0.044715 x^2) with e = e^{-2|u|}, r = 1 / (1 + e), s = sigmoid(2u).
// Below x = -38.6 both terms underflow f64 and the sum is +0; the true derivative is negative
// there (x phi(x) dominates), so the reference is -0.
double negative_tail_zero(double d, double x) { return d == 0.0 && x < -1.0 ? -0.0 : d; }
double gelu_erf_grad_ref(double x) {
  return negative_tail_zero(0.5 * std::erfc(-x * kInvSqrt2) + x * std::exp(-0.5 * x * x) * 0.39894228040143267794, x);
}
double gelu_tanh_grad_ref(double x) {
  const double u = kSqrt2OverPi * (x + 0.044715 * x * x * x);
  const double e = std::exp(-2.0 * std::fabs(u)), r = 1.0 / (1.0 + e);
  const double s = u >= 0 ? r : e * r;
  return negative_tail_zero(s + 2.0 * kSqrt2OverPi * x * e * r * r * (1.0 + 0.134145 * x * x), x);
}

}  // namespace

TEST_CASE("gelu_backward: every f16 and bf16 input pattern within 1 ulp of f64 math - autograd runs it",
          "[ops][numerics]") {
  for (DType dt : {DType::F16, DType::BF16}) {
    const Tensor x = all_patterns(dt);
    const Tensor ones_g = ones({x.numel()}, {.dtype = dt});
    for (GeluApprox mode : {GeluApprox::None, GeluApprox::Tanh}) {
      const char* name = mode == GeluApprox::None ? "gelu_backward" : "gelu_backward_tanh";
      const auto ref = mode == GeluApprox::None ? gelu_erf_grad_ref : gelu_tanh_grad_ref;
      Tensor dx;
      {
        NoGradGuard no_grad;
        dx = gelu_backward(ones_g, x, mode);
      }
      const Worst dense = sweep16(x, dx, ref);
      const Worst strided = sweep16(strided_copy(x), gelu_backward(strided_copy(ones_g), strided_copy(x), mode), ref);
      std::printf("unary sweep %-4s %-18s max ulp dense %lld strided %lld (worst x = %.9g: got %.9g, want %.9g)\n",
                  dtype_name(dt), name, (long long)dense.ulp, (long long)strided.ulp, dense.x, dense.got, dense.want);
      INFO(dtype_name(dt) << " " << name << ": worst x = " << dense.x << " got " << dense.got << " want " << dense.want);
      CHECK(dense.ulp <= 1);
      CHECK(strided.ulp <= 1);
      // The ordinary backward of gelu is this op: bit for bit the same gradient.
      const Tensor xg = x.clone().requires_grad_();
      gelu(xg, mode).backward(ones_g);
      const Tensor got = xg.grad();
      REQUIRE(got.dtype() == dt);
      CHECK(std::memcmp(got.data_ptr(), dx.data_ptr(), std::size_t(x.numel()) * 2) == 0);
    }
  }
}

TEST_CASE("gelu_backward: the dense loop gives the strided loop's bits in every dtype", "[ops][numerics]") {
  // The dense kernel (one functor call site, vectorized) against the general strided loop on the
  // same values: an odd length (a vector tail and, in f16/bf16, a partial block of 256), x over
  // [-20, 20] (both clamps and tails) and a random gradient.
  const int64_t n = 100003;
  for (DType dt : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
    const Tensor x = to(rand({n}, {.dtype = DType::F64}) * 40.0 - 20.0, dt);
    const Tensor g = to(randn({n}, {.dtype = DType::F64}), dt);
    for (GeluApprox mode : {GeluApprox::None, GeluApprox::Tanh}) {
      INFO(dtype_name(dt) << (mode == GeluApprox::None ? " erf" : " tanh"));
      const Tensor dense = gelu_backward(g, x, mode);
      const Tensor strided = contiguous(gelu_backward(strided_copy(g), strided_copy(x), mode));
      REQUIRE(dense.is_contiguous());
      CHECK(std::memcmp(dense.data_ptr(), strided.data_ptr(), std::size_t(n) * dtype_size(dt)) == 0);
    }
  }
}

TEST_CASE("gelu_backward checks its operands", "[ops][numerics]") {
  const Tensor x = ones({4});
  MG_REQUIRE_ERROR(gelu_backward(ones({3}), x), "gelu_backward: expected grad and input of the same shape");
  MG_REQUIRE_ERROR(gelu_backward(ones({4}, {.dtype = DType::F16}), x), "gelu_backward: expected tensors of the same dtype");
  MG_REQUIRE_ERROR(gelu_backward(ones({4}, {.dtype = DType::I64}), ones({4}, {.dtype = DType::I64})), "gelu_backward");
}

TEST_CASE("relu_backward: every f16 and bf16 pattern and f32 specials give where(y <= 0, 0, g)'s bits - autograd runs it",
          "[ops][numerics]") {
  // y runs over every 16-bit pattern (both zeros, subnormals, infinities, NaNs); g is a random
  // gradient with NaN and -0 entries, which the select passes through or drops like where().
  for (DType dt : {DType::F16, DType::BF16, DType::F32, DType::F64}) {
    INFO(dtype_name(dt));
    Tensor y = dt == DType::F16 || dt == DType::BF16 ? all_patterns(dt) : to(all_patterns(DType::F16), dt);
    const int64_t n = y.numel();
    Tensor g = to(randn({n}, {.dtype = DType::F64}), dt);
    g.narrow(0, 0, 7).fill_(std::numeric_limits<double>::quiet_NaN());
    g.narrow(0, n - 5, 5).fill_(-0.0);
    const Tensor want = where(le(y, scalar_like(0.0, y)), scalar_like(0.0, g), g);  // PyTorch's threshold_backward
    const std::size_t bytes = std::size_t(n) * dtype_size(dt);
    const Tensor dense = relu_backward(g, y);
    CHECK(std::memcmp(dense.data_ptr(), want.data_ptr(), bytes) == 0);
    const Tensor strided = contiguous(relu_backward(strided_copy(g), strided_copy(y)));
    CHECK(std::memcmp(strided.data_ptr(), want.data_ptr(), bytes) == 0);
    // relu's ordinary backward is this op, from relu's output.
    const Tensor x = y.clone().requires_grad_();
    relu(x).backward(g);
    const Tensor from_relu = where(le(relu(y), scalar_like(0.0, y)), scalar_like(0.0, g), g);
    CHECK(std::memcmp(x.grad().data_ptr(), from_relu.data_ptr(), bytes) == 0);
    // A NaN output passes its gradient (PyTorch 2.15: relu'(NaN) = 1); -0 and +0 do not.
    const Tensor specials = to(from_vector<double>({std::numeric_limits<double>::quiet_NaN(), -0.0, 0.0, 2.0}), dt);
    const Tensor ones4 = to(ones({4}), dt);
    CHECK(mg::test::values(relu_backward(ones4, relu(specials))) == std::vector<double>{1.0, 0.0, 0.0, 1.0});
  }
}

TEST_CASE("relu's backward with create_graph stays differentiable, and relu_backward checks its operands",
          "[ops][numerics]") {
  // d/dx of sum(relu(x)^2) = 2 relu(x) [x > 0]; its gradient with respect to x again is 2 [x > 0].
  const Tensor x = from_vector<double>({-1.5, 0.0, 2.0, 3.0}).requires_grad_();
  const Tensor y = relu(x);
  const Tensor gx = autograd::grad({sum(y * y)}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
  REQUIRE(gx.requires_grad());
  CHECK(mg::test::values(gx) == std::vector<double>{0.0, 0.0, 4.0, 6.0});
  const Tensor ggx = autograd::grad({sum(gx)}, {x})[0];
  CHECK(mg::test::values(ggx) == std::vector<double>{0.0, 0.0, 2.0, 2.0});
  MG_REQUIRE_ERROR(relu_backward(ones({3}), ones({4})), "relu_backward: expected grad and input of the same shape");
  MG_REQUIRE_ERROR(relu_backward(ones({4}, {.dtype = DType::F16}), ones({4})), "relu_backward: expected tensors of the same dtype");
  MG_REQUIRE_ERROR(relu_backward(ones({4}, {.dtype = DType::I64}), ones({4}, {.dtype = DType::I64})), "relu_backward");
  MG_REQUIRE_ERROR(relu_backward(Tensor(), ones({4})), "relu_backward: undefined tensor operand");
}

TEST_CASE("relu_backward on channels-last operands: where(y <= 0, 0, g)'s bits, channels-last out", "[ops][numerics]") {
  for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::F64}) {
    INFO(dtype_name(dt));
    const Tensor y = relu(to(randn({3, 5, 4, 6}, {.dtype = DType::F64}), dt)).contiguous(MemoryFormat::ChannelsLast);
    const Tensor g = to(randn({3, 5, 4, 6}, {.dtype = DType::F64}), dt).contiguous(MemoryFormat::ChannelsLast);
    const Tensor got = relu_backward(g, y);
    CHECK(got.is_contiguous(MemoryFormat::ChannelsLast));
    const Tensor want = where(le(y, scalar_like(0.0, y)), scalar_like(0.0, g), g);
    CHECK(std::memcmp(contiguous(got).data_ptr(), contiguous(want).data_ptr(), std::size_t(got.numel()) * dtype_size(dt)) == 0);
    // mixed layouts take the strided loop: the same values
    const Tensor mixed = relu_backward(contiguous(g), y);
    CHECK(std::memcmp(contiguous(mixed).data_ptr(), contiguous(want).data_ptr(), std::size_t(got.numel()) * dtype_size(dt)) == 0);
  }
}
