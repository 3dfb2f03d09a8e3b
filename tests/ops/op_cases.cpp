// The op case table (see op_cases.h). Inputs are chosen away from the points where an op is not
// differentiable (relu/abs at 0, clamp at its bounds, ties of max/min/amax, the softplus
// threshold), inside each op's domain (log/sqrt/rsqrt positive, ...), and small (at most ~60
// elements per input) so the element-by-element central differences stay cheap.
#include "op_cases.h"
#include "activation_refs.h"

#include <cmath>
#include <numbers>
#include <utility>

#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "ops/dispatcher.h"
#include "ops/bitwise.h"
#include "ops/logical.h"
#include "ops/nonzero.h"
#include "ops/sort.h"

namespace mg::optable {

std::vector<double> values(const Tensor& t) {
  NoGradGuard no_grad;
  const Tensor c = contiguous(to(t.detach(), DType::F64));
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

int64_t element_offset(const Tensor& t, int64_t k) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    const int64_t size = t.shape()[d];
    off += (k % size) * t.strides()[d];
    k /= size;
  }
  return off;
}

std::vector<double> randn_values(int64_t n, uint64_t seed) {
  Generator gen(seed);
  return values(randn({n}, {.dtype = DType::F64}, &gen));
}

namespace {

using Ref = std::function<double(const std::vector<double>&)>;

int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

uint64_t next_seed() {
  static uint64_t seed = 1000;
  return ++seed;
}

std::vector<double> uniform_values(int64_t n, uint64_t seed, double lo, double hi) {
  Generator gen(seed);
  std::vector<double> v = values(rand({n}, {.dtype = DType::F64}, &gen));
  for (double& x : v) x = lo + (hi - lo) * x;
  return v;
}

// Pushes every value at least `gap` away from each of `points`.
std::vector<double> away(std::vector<double> v, const std::vector<double>& points, double gap) {
  for (double& x : v) {
    for (int pass = 0; pass < 8; ++pass) {
      bool moved = false;
      for (double p : points) {
        if (std::fabs(x - p) < gap) {
          x = x >= p ? p + gap : p - gap;
          moved = true;
        }
      }
      if (!moved) break;
    }
  }
  return v;
}

// Makes consecutive sorted values at least `gap` apart (no ties for max/min/amax), keeping order.
std::vector<double> distinct(std::vector<double> v, double gap) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    for (int pass = 0; pass < 64; ++pass) {
      bool moved = false;
      for (std::size_t j = 0; j < i; ++j) {
        if (std::fabs(v[i] - v[j]) < gap) {
          v[i] += gap;
          moved = true;
        }
      }
      if (!moved) break;
    }
  }
  return v;
}


// ---- input generators ----
Gen normal(Shape s, double scale = 1.0, double shift = 0.0) {
  std::vector<double> v = randn_values(numel_of(s), next_seed());
  for (double& x : v) x = scale * x + shift;
  return [v, s](DType dt) { return make_input(v, s, dt); };
}
Gen uniform(Shape s, double lo, double hi) {
  const std::vector<double> v = uniform_values(numel_of(s), next_seed(), lo, hi);
  return [v, s](DType dt) { return make_input(v, s, dt); };
}
// Normal values kept `gap` away from `points`.
Gen normal_away(Shape s, std::vector<double> points, double gap, double scale = 1.0) {
  std::vector<double> v = randn_values(numel_of(s), next_seed());
  for (double& x : v) x *= scale;
  v = away(std::move(v), points, gap);
  return [v, s](DType dt) { return make_input(v, s, dt); };
}
// Normal values, pairwise at least `gap` apart.
Gen normal_distinct(Shape s, double gap = 0.05, double scale = 1.0) {
  std::vector<double> v = randn_values(numel_of(s), next_seed());
  for (double& x : v) x *= scale;
  v = distinct(std::move(v), gap);
  return [v, s](DType dt) { return make_input(v, s, dt); };
}
Gen index(std::vector<int64_t> v, Shape s) {
  return [v, s](DType) { return from_vector<int64_t>(v, s); };
}
Gen mask(std::vector<uint8_t> v, Shape s) {
  return [v, s](DType) {
    NoGradGuard no_grad;
    return to(from_vector<uint8_t>(v, s), DType::Bool);
  };
}
// Every `step`-th element along `dim` (a non-contiguous view).
Gen strided(Gen g, int64_t dim, int64_t step) {
  return [g, dim, step](DType dt) {
    const Tensor x = g(dt);
    return slice(x, dim, 0, x.size(dim), step);
  };
}

struct Table {
  std::vector<OpCase> cases;

  OpCase& add(OpId op, std::string name, std::vector<Gen> gens, Run run, std::vector<int> grad_inputs) {
    cases.push_back(make_case(op, std::move(name), std::move(gens), std::move(run), std::move(grad_inputs)));
    return cases.back();
  }
  // A case for a non-differentiable op.
  OpCase& add_nd(OpId op, std::string name, std::vector<Gen> gens, Run run) {
    return add(op, std::move(name), std::move(gens), std::move(run), {});
  }
};

double sgn(double x) { return double((x > 0) - (x < 0)); }
double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double gelu_erf_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
Ref softplus_ref(double beta, double threshold) {
  return [beta, threshold](const std::vector<double>& v) {
    const double bx = beta * v[0];
    return bx > threshold ? v[0] : std::log1p(std::exp(bx)) / beta;
  };
}
Ref unary_ref(double (*f)(double)) {
  return [f](const std::vector<double>& v) { return f(v[0]); };
}

void unary_cases(Table& t) {
  using O = OpId;
  const Shape s{3, 4};
  t.add(O::neg, "neg", {normal(s)}, [](const Tensors& in) { return neg(in[0]); }, {0})
      .ref = [](const std::vector<double>& v) { return -v[0]; };
  t.add(O::neg, "neg/transposed", {transposed(normal({4, 3}))},
        [](const Tensors& in) { return neg(in[0]); }, {0})
      .ref = [](const std::vector<double>& v) { return -v[0]; };
  // abs: away from the kink at 0
  t.add(O::abs, "abs", {normal_away(s, {0.0}, 0.1)}, [](const Tensors& in) { return abs(in[0]); }, {0})
      .ref = unary_ref(std::fabs);
  t.add_nd(O::sign, "sign", {fixed({-2.5, 0, 1.5, -0.25, 3, 0, -1, 0.5}, {2, 4})},
           [](const Tensors& in) { return sign(in[0]); })
      .ref = unary_ref(sgn);
  // the gradient is 0 (away from the jump at 0, where a finite difference is not)
  t.add(O::sign, "sign/gradient", {normal_away(s, {0.0}, 0.1)}, [](const Tensors& in) { return sign(in[0]); }, {0})
      .ref = unary_ref(sgn);
  t.add(O::exp, "exp", {normal(s)}, [](const Tensors& in) { return exp(in[0]); }, {0})
      .ref = unary_ref(std::exp);
  t.add(O::exp, "exp/strided", {strided(normal({6, 4}), 0, 2)},
        [](const Tensors& in) { return exp(in[0]); }, {0})
      .ref = unary_ref(std::exp);
  t.add(O::log, "log", {uniform(s, 0.2, 3.0)}, [](const Tensors& in) { return log(in[0]); }, {0})
      .ref = unary_ref(std::log);
  t.add(O::log1p, "log1p", {uniform(s, -0.5, 3.0)}, [](const Tensors& in) { return log1p(in[0]); }, {0})
      .ref = unary_ref(std::log1p);
  t.add(O::expm1, "expm1", {normal(s)}, [](const Tensors& in) { return expm1(in[0]); }, {0})
      .ref = unary_ref(std::expm1);
  // the rounding ops: inputs away from their steps (between integers; round's away from the
  // halves too), where the gradient is zero and finite differences see it
  t.add(O::floor, "floor", {uniform(s, -2.95, -2.05)}, [](const Tensors& in) { return floor(in[0]); }, {0}).ref =
      unary_ref([](double v) { return std::floor(v); });
  t.add(O::ceil, "ceil", {uniform(s, -2.95, -2.05)}, [](const Tensors& in) { return ceil(in[0]); }, {0}).ref =
      unary_ref([](double v) { return std::ceil(v); });
  t.add(O::trunc, "trunc", {uniform(s, -2.95, -2.05)}, [](const Tensors& in) { return trunc(in[0]); }, {0}).ref =
      unary_ref([](double v) { return std::trunc(v); });
  t.add(O::round, "round", {uniform(s, 1.55, 1.95)}, [](const Tensors& in) { return round(in[0]); }, {0}).ref =
      unary_ref([](double v) { return std::nearbyint(v); });
  t.add(O::sqrt, "sqrt", {uniform(s, 0.2, 3.0)}, [](const Tensors& in) { return sqrt(in[0]); }, {0})
      .ref = unary_ref(std::sqrt);
  t.add(O::sqrt, "sqrt/transposed", {transposed(uniform({4, 3}, 0.2, 3.0))},
        [](const Tensors& in) { return sqrt(in[0]); }, {0})
      .ref = unary_ref(std::sqrt);
  t.add(O::rsqrt, "rsqrt", {uniform(s, 0.2, 3.0)}, [](const Tensors& in) { return rsqrt(in[0]); }, {0})
      .ref = [](const std::vector<double>& v) { return 1.0 / std::sqrt(v[0]); };
  t.add_nd(O::rsqrt_backward, "rsqrt_backward", {normal(s), uniform(s, 0.2, 3.0)},
           [](const Tensors& in) { return rsqrt_backward(in[0], in[1]); })
      .ref = [](const std::vector<double>& v) { return v[0] * -0.5 * std::pow(v[1], -1.5); };
  t.add(O::reciprocal, "reciprocal", {normal_away(s, {0.0}, 0.3)},
        [](const Tensors& in) { return reciprocal(in[0]); }, {0})
      .ref = [](const std::vector<double>& v) { return 1.0 / v[0]; };
  t.add_nd(O::reciprocal_backward, "reciprocal_backward", {normal(s), normal_away(s, {0.0}, 0.3)},
           [](const Tensors& in) { return reciprocal_backward(in[0], in[1]); })
      .ref = [](const std::vector<double>& v) { return -v[0] / (v[1] * v[1]); };
  t.add(O::sin, "sin", {normal(s, 2.0)}, [](const Tensors& in) { return sin(in[0]); }, {0})
      .ref = unary_ref(std::sin);
  t.add(O::cos, "cos", {normal(s, 2.0)}, [](const Tensors& in) { return cos(in[0]); }, {0})
      .ref = unary_ref(std::cos);
  t.add(O::tanh, "tanh", {normal(s, 1.5)}, [](const Tensors& in) { return tanh(in[0]); }, {0})
      .ref = unary_ref(std::tanh);
  // the activations' fused backward ops (not differentiable): grad * f'(x) from the input x
  t.add_nd(O::tanh_backward, "tanh_backward", {normal(s), normal(s, 3.0)},
           [](const Tensors& in) { return tanh_backward(in[0], in[1]); })
      .ref = [](const std::vector<double>& v) { return v[0] / (std::cosh(v[1]) * std::cosh(v[1])); };
  t.add(O::sigmoid, "sigmoid", {normal(s, 2.0)}, [](const Tensors& in) { return sigmoid(in[0]); }, {0})
      .ref = unary_ref(sigmoid_ref);
  t.add_nd(O::sigmoid_backward, "sigmoid_backward", {normal(s), normal(s, 4.0)},
           [](const Tensors& in) { return sigmoid_backward(in[0], in[1]); })
      .ref = [](const std::vector<double>& v) { return v[0] * sigmoid_ref(v[1]) * sigmoid_ref(-v[1]); };
  // relu: away from the kink at 0
  t.add(O::relu, "relu", {normal_away(s, {0.0}, 0.1)}, [](const Tensors& in) { return relu(in[0]); }, {0})
      .ref = [](const std::vector<double>& v) { return v[0] > 0 ? v[0] : 0.0; };
  // relu_backward (not differentiable): 0 where y <= 0, else grad (PyTorch's threshold_backward)
  t.add_nd(O::relu_backward, "relu_backward", {normal(s), normal(s)},
           [](const Tensors& in) { return relu_backward(in[0], in[1]); })
      .ref = [](const std::vector<double>& v) { return v[1] <= 0 ? 0.0 : v[0]; };
  t.add(O::gelu, "gelu/erf", {normal(s, 2.0)}, [](const Tensors& in) { return gelu(in[0]); }, {0})
      .ref = unary_ref(gelu_erf_ref);
  t.add(O::gelu, "gelu/tanh", {normal(s, 2.0)},
        [](const Tensors& in) { return gelu(in[0], GeluApprox::Tanh); }, {0})
      .ref = unary_ref(gelu_tanh_ref);
  // gelu_backward (not differentiable): grad * gelu'(x); normal(s, 3.0) reaches the negative tail
  t.add_nd(O::gelu_backward, "gelu_backward/erf", {normal(s), normal(s, 3.0)},
           [](const Tensors& in) { return gelu_backward(in[0], in[1]); })
      .ref = [](const std::vector<double>& v) {
        const double x = v[1];
        return v[0] * (0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi));
      };
  t.add_nd(O::gelu_backward, "gelu_backward/tanh", {normal(s), normal(s, 3.0)},
           [](const Tensors& in) { return gelu_backward(in[0], in[1], GeluApprox::Tanh); })
      .ref = [](const std::vector<double>& v) {
        const double x = v[1], k = std::sqrt(2.0 / std::numbers::pi);
        const double t = std::tanh(k * (x + 0.044715 * x * x * x));
        return v[0] * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 0.134145 * x * x));
      };
  t.add(O::silu, "silu", {normal(s, 2.0)}, [](const Tensors& in) { return silu(in[0]); }, {0})
      .ref = [](const std::vector<double>& v) { return v[0] * sigmoid_ref(v[0]); };
  t.add_nd(O::silu_backward, "silu_backward", {normal(s), normal(s, 3.0)},
           [](const Tensors& in) { return silu_backward(in[0], in[1]); })
      .ref = [](const std::vector<double>& v) {
        const double x = v[1];
        return v[0] * sigmoid_ref(x) * (1.0 + x * sigmoid_ref(-x));
      };
  t.add(O::softplus, "softplus", {normal(s, 2.0)}, [](const Tensors& in) { return softplus(in[0]); }, {0})
      .ref = softplus_ref(1.0, 20.0);
  t.add(O::softplus, "softplus/beta2", {normal(s, 2.0)},
        [](const Tensors& in) { return softplus(in[0], 2.0); }, {0})
      .ref = softplus_ref(2.0, 20.0);
  // threshold 1 with beta 1.5: both regimes (linear above x = 2/3), away from the jump there
  t.add(O::softplus, "softplus/threshold", {normal_away(s, {1.0 / 1.5}, 0.1, 2.0)},
        [](const Tensors& in) { return softplus(in[0], 1.5, 1.0); }, {0})
      .ref = softplus_ref(1.5, 1.0);
  // a negative beta (PyTorch accepts it): -log1p(exp(-1.5 x)) / 1.5, and x where -1.5 x > 1
  t.add(O::softplus, "softplus/negative beta", {normal_away(s, {-1.0 / 1.5}, 0.1, 2.0)},
        [](const Tensors& in) { return softplus(in[0], -1.5, 1.0); }, {0})
      .ref = softplus_ref(-1.5, 1.0);
  t.add(O::erf, "erf", {normal(s)}, [](const Tensors& in) { return erf(in[0]); }, {0})
      .ref = unary_ref(std::erf);
  t.add_nd(O::erf_backward, "erf_backward", {normal(s), normal(s, 1.5)},
           [](const Tensors& in) { return erf_backward(in[0], in[1]); })
      .ref = [](const std::vector<double>& v) { return v[0] * 2.0 / std::sqrt(std::numbers::pi) * std::exp(-v[1] * v[1]); };
  t.add(O::pow_scalar, "pow_scalar/2", {normal(s)}, [](const Tensors& in) { return pow(in[0], 2.0); }, {0})
      .ref = [](const std::vector<double>& v) { return v[0] * v[0]; };
  t.add(O::pow_scalar, "pow_scalar/0.5", {uniform(s, 0.2, 3.0)},
        [](const Tensors& in) { return pow(in[0], 0.5); }, {0})
      .ref = [](const std::vector<double>& v) { return std::sqrt(v[0]); };
  t.add(O::pow_scalar, "pow_scalar/-1.5", {uniform(s, 0.3, 3.0)},
        [](const Tensors& in) { return pow(in[0], -1.5); }, {0})
      .ref = [](const std::vector<double>& v) { return std::pow(v[0], -1.5); };
  // an integer exponent on negative bases
  t.add(O::pow_scalar, "pow_scalar/3", {normal(s)}, [](const Tensors& in) { return pow(in[0], 3.0); }, {0})
      .ref = [](const std::vector<double>& v) { return v[0] * v[0] * v[0]; };
  // clamp: away from the bounds
  t.add(O::clamp, "clamp", {normal_away(s, {-0.5, 0.5}, 0.05)},
        [](const Tensors& in) { return clamp(in[0], -0.5, 0.5); }, {0})
      .ref = [](const std::vector<double>& v) { return std::min(std::max(v[0], -0.5), 0.5); };
  t.add(O::clamp, "clamp/min", {normal_away(s, {0.25}, 0.05)},
        [](const Tensors& in) { return clamp_min(in[0], 0.25); }, {0})
      .ref = [](const std::vector<double>& v) { return std::max(v[0], 0.25); };
  t.add(O::clamp, "clamp/max", {transposed(normal_away({4, 3}, {-0.125}, 0.05))},
        [](const Tensors& in) { return clamp_max(in[0], -0.125); }, {0})
      .ref = [](const std::vector<double>& v) { return std::min(v[0], -0.125); };
  t.add_nd(O::fill, "fill", {normal(s)},
           [](const Tensors& in) { return dispatch1(OpId::fill, {in[0]}, {.alpha = 2.5}); })
      .ref = [](const std::vector<double>&) { return 2.5; };
}

void binary_cases(Table& t) {
  using O = OpId;
  using V = std::vector<double>;
  const Shape s{3, 4};
  const Ref add_ref = [](const V& v) { return v[0] + v[1]; };
  t.add(O::add, "add", {normal(s), normal(s)}, [](const Tensors& in) { return add(in[0], in[1]); }, {0, 1})
      .ref = add_ref;
  t.add(O::add, "add/broadcast", {normal({3, 1}), normal({1, 4})},
        [](const Tensors& in) { return add(in[0], in[1]); }, {0, 1})
      .ref = add_ref;
  t.add(O::add, "add/broadcast_row", {normal({2, 3}), normal({3})},
        [](const Tensors& in) { return in[0] + in[1]; }, {0, 1})
      .ref = add_ref;
  t.add(O::add, "add/scalar0d", {normal({}), normal({2, 3})},
        [](const Tensors& in) { return add(in[0], in[1]); }, {0, 1})
      .ref = add_ref;
  t.add(O::add, "add/alpha", {normal(s), transposed(normal({4, 3}))},
        [](const Tensors& in) { return add(in[0], in[1], -2.5); }, {0, 1})
      .ref = [](const V& v) { return v[0] - 2.5 * v[1]; };
  t.add(O::sub, "sub", {normal(s), normal(s)}, [](const Tensors& in) { return sub(in[0], in[1]); }, {0, 1})
      .ref = [](const V& v) { return v[0] - v[1]; };
  t.add(O::sub, "sub/broadcast_alpha", {normal({2, 3}), normal({3})},
        [](const Tensors& in) { return sub(in[0], in[1], 0.5); }, {0, 1})
      .ref = [](const V& v) { return v[0] - 0.5 * v[1]; };
  const Ref mul_ref = [](const V& v) { return v[0] * v[1]; };
  t.add(O::mul, "mul", {normal(s), normal(s)}, [](const Tensors& in) { return mul(in[0], in[1]); }, {0, 1})
      .ref = mul_ref;
  t.add(O::mul, "mul/broadcast", {normal({3, 1}), normal({1, 4})},
        [](const Tensors& in) { return in[0] * in[1]; }, {0, 1})
      .ref = mul_ref;
  t.add(O::mul, "mul/scalar0d", {normal({2, 3}), normal({})},
        [](const Tensors& in) { return mul(in[0], in[1]); }, {0, 1})
      .ref = mul_ref;
  t.add(O::mul, "mul/strided", {strided(normal({3, 8}), 1, 2), transposed(normal({4, 3}))},
        [](const Tensors& in) { return mul(in[0], in[1]); }, {0, 1})
      .ref = mul_ref;
  const Ref div_ref = [](const V& v) { return v[0] / v[1]; };
  t.add(O::div, "div", {normal(s), normal_away(s, {0.0}, 0.5)},
        [](const Tensors& in) { return div(in[0], in[1]); }, {0, 1})
      .ref = div_ref;
  t.add(O::div, "div/broadcast", {normal({2, 3}), normal_away({3}, {0.0}, 0.5)},
        [](const Tensors& in) { return in[0] / in[1]; }, {0, 1})
      .ref = div_ref;
  t.add(O::div, "div/scalar0d", {normal({}), normal_away({2, 3}, {0.0}, 0.5)},
        [](const Tensors& in) { return div(in[0], in[1]); }, {0, 1})
      .ref = div_ref;
  const Ref pow_ref = [](const V& v) { return std::pow(v[0], v[1]); };
  t.add(O::pow, "pow", {uniform(s, 0.5, 2.0), normal(s)},
        [](const Tensors& in) { return pow(in[0], in[1]); }, {0, 1})
      .ref = pow_ref;
  t.add(O::pow, "pow/broadcast", {uniform(s, 0.5, 2.0), normal({4})},
        [](const Tensors& in) { return pow(in[0], in[1]); }, {0, 1})
      .ref = pow_ref;
  // the rounded divisions and remainders: values exact in f16/bf16, both signs on both sides,
  // a / b at least 0.125 away from an integer (off the steps, where finite differences see the
  // piecewise gradient)
  {
    const Gen na = fixed({5.25, -5.25, 7.5, -7.5, 3.75, -3.75, 1.25, -1.25, 9.5, -9.5, 0.75, -0.75}, s);
    const Gen nb = fixed({2, 2, -2, -2, 1.5, 1.5, -0.5, -0.5, 3, 3, -1, -1}, s);
    const auto floor_ref = [](const V& v) { return std::floor(v[0] / v[1]); };
    t.add(O::div_floor, "div_floor", {na, nb},
          [](const Tensors& in) { return div(in[0], in[1], RoundingMode::Floor); }, {0, 1})
        .ref = floor_ref;
    t.add(O::div_trunc, "div_trunc", {na, nb},
          [](const Tensors& in) { return div(in[0], in[1], RoundingMode::Trunc); }, {0, 1})
        .ref = [](const V& v) { return std::trunc(v[0] / v[1]); };
    t.add(O::remainder, "remainder", {na, nb}, [](const Tensors& in) { return remainder(in[0], in[1]); }, {0, 1})
        .ref = [](const V& v) { return v[0] - v[1] * std::floor(v[0] / v[1]); };
    t.add(O::remainder, "remainder/broadcast", {na, fixed({2.5, -1.5, 3.5, -2}, {4})},
          [](const Tensors& in) { return in[0] % in[1]; }, {0, 1})
        .ref = [](const V& v) { return v[0] - v[1] * std::floor(v[0] / v[1]); };
    t.add(O::fmod, "fmod", {na, nb}, [](const Tensors& in) { return fmod(in[0], in[1]); }, {0, 1})
        .ref = [](const V& v) { return std::fmod(v[0], v[1]); };
  }
  // maximum/minimum: a and b at least 0.1 apart everywhere (no ties)
  {
    const V b = randn_values(4, next_seed());
    std::vector<double> a = randn_values(3, next_seed());
    a = away(a, b, 0.1);
    t.add(O::maximum, "maximum/broadcast", {fixed(a, {3, 1}), fixed(b, {1, 4})},
          [](const Tensors& in) { return maximum(in[0], in[1]); }, {0, 1})
        .ref = [](const V& v) { return std::max(v[0], v[1]); };
    t.add(O::minimum, "minimum/broadcast", {fixed(a, {3, 1}), fixed(b, {1, 4})},
          [](const Tensors& in) { return minimum(in[0], in[1]); }, {0, 1})
        .ref = [](const V& v) { return std::min(v[0], v[1]); };
  }
  {
    const V b = randn_values(12, next_seed());
    std::vector<double> a = randn_values(12, next_seed());
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = away({a[i]}, {b[i]}, 0.1)[0];
    t.add(O::maximum, "maximum", {fixed(a, s), fixed(b, s)},
          [](const Tensors& in) { return maximum(in[0], in[1]); }, {0, 1})
        .ref = [](const V& v) { return std::max(v[0], v[1]); };
    t.add(O::minimum, "minimum", {fixed(a, s), fixed(b, s)},
          [](const Tensors& in) { return minimum(in[0], in[1]); }, {0, 1})
        .ref = [](const V& v) { return std::min(v[0], v[1]); };
  }
  // comparisons: values exact in f16/bf16, with deliberate equal pairs
  const Gen ca = fixed({1, 2, 3, -1, 0.5, -0.25, 4, 0, 2.5, -3, 1.25, 7}, s);
  const Gen cb = fixed({1, 3, 2, -1, 0.25, -0.25, 4.5, 0, 2.5, -2, 1.5, -7}, s);
  const Gen crow = fixed({1, -0.25, 2.5, 0}, {4});
  struct Cmp {
    OpId op;
    const char* name;
    Tensor (*fn)(const Tensor&, const Tensor&);
    bool (*ref)(double, double);
  };
  const Cmp cmps[] = {
      {O::eq, "eq", eq, [](double x, double y) { return x == y; }},
      {O::ne, "ne", ne, [](double x, double y) { return x != y; }},
      {O::lt, "lt", lt, [](double x, double y) { return x < y; }},
      {O::le, "le", le, [](double x, double y) { return x <= y; }},
      {O::gt, "gt", gt, [](double x, double y) { return x > y; }},
      {O::ge, "ge", ge, [](double x, double y) { return x >= y; }},
  };
  for (const Cmp& c : cmps) {
    auto fn = c.fn;
    auto rf = c.ref;
    const Ref ref = [rf](const V& v) { return rf(v[0], v[1]) ? 1.0 : 0.0; };
    OpCase& a = t.add_nd(c.op, c.name, {ca, cb}, [fn](const Tensors& in) { return fn(in[0], in[1]); });
    a.out_dtype = DType::Bool;
    a.ref = ref;
    OpCase& b = t.add_nd(c.op, std::string(c.name) + "/broadcast", {ca, crow},
                         [fn](const Tensors& in) { return fn(in[0], in[1]); });
    b.out_dtype = DType::Bool;
    b.ref = ref;
  }
  const Ref where_ref = [](const V& v) { return v[0] != 0 ? v[1] : v[2]; };
  t.add(O::where, "where",
        {mask({1, 0, 0, 1, 1, 1, 0, 0, 1, 0, 1, 0}, s), normal(s), normal({4})},
        [](const Tensors& in) { return where(in[0], in[1], in[2]); }, {1, 2})
      .ref = where_ref;
  t.add(O::where, "where/broadcast_cond", {mask({1, 0, 1}, {3, 1}), transposed(normal({4, 3})), normal({})},
        [](const Tensors& in) { return where(in[0], in[1], in[2]); }, {1, 2})
      .ref = where_ref;
}

void reduction_cases(Table& t) {
  using O = OpId;
  const Shape s{3, 4}, s3{2, 3, 4};
  t.add(O::sum, "sum/all", {normal(s)}, [](const Tensors& in) { return sum(in[0]); }, {0});
  t.add(O::sum, "sum/dims", {normal(s3)}, [](const Tensors& in) { return sum(in[0], {1}); }, {0});
  t.add(O::sum, "sum/multi_keepdim", {normal(s3)},
        [](const Tensors& in) { return sum(in[0], {0, 2}, true); }, {0});
  t.add(O::sum, "sum/transposed_neg_dim", {transposed(normal({4, 3}))},
        [](const Tensors& in) { return sum(in[0], {-1}); }, {0});
  t.add(O::mean, "mean/all", {normal(s)}, [](const Tensors& in) { return mean(in[0]); }, {0});
  t.add(O::mean, "mean/keepdim", {normal(s)}, [](const Tensors& in) { return mean(in[0], {0}, true); }, {0});
  t.add(O::mean, "mean/multi", {normal(s3)}, [](const Tensors& in) { return mean(in[0], {1, 2}); }, {0});
  // prod: factors in [0.5, 1.5], away from 0
  t.add(O::prod, "prod/all", {uniform({2, 3}, 0.5, 1.5)}, [](const Tensors& in) { return prod(in[0]); }, {0});
  t.add(O::prod, "prod/dim_keepdim", {uniform(s, -1.5, 1.5)},
        [](const Tensors& in) { return prod(in[0], {1}, true); }, {0});
  // amax/amin/max/min: pairwise distinct values (no ties)
  t.add(O::amax, "amax/all", {normal_distinct(s)}, [](const Tensors& in) { return amax(in[0]); }, {0});
  t.add(O::amax, "amax/dim", {normal_distinct(s)}, [](const Tensors& in) { return amax(in[0], {1}); }, {0});
  t.add(O::amax, "amax/multi_keepdim", {normal_distinct(s3)},
        [](const Tensors& in) { return amax(in[0], {0, 2}, true); }, {0});
  t.add(O::amin, "amin/all", {normal_distinct(s)}, [](const Tensors& in) { return amin(in[0]); }, {0});
  t.add(O::amin, "amin/dim", {transposed(normal_distinct({4, 3}))},
        [](const Tensors& in) { return amin(in[0], {0}); }, {0});
  t.add(O::max_dim, "max_dim", {normal_distinct(s)}, [](const Tensors& in) { return max(in[0], 1).first; }, {0});
  t.add(O::max_dim, "max_dim/keepdim", {normal_distinct(s3)},
        [](const Tensors& in) { return max(in[0], 0, true).first; }, {0});
  t.add(O::min_dim, "min_dim", {normal_distinct(s)}, [](const Tensors& in) { return min(in[0], 1).first; }, {0});
  t.add(O::min_dim, "min_dim/neg_dim", {transposed(normal_distinct({4, 3}))},
        [](const Tensors& in) { return min(in[0], -2).first; }, {0});
  // nonzero (masked_select): the coordinates of the nonzero elements, row-major
  {
    OpCase& c = t.add_nd(O::nonzero_from_prefix, "nonzero_from_prefix/nonzero", {fixed({0, 1.5, 0, -2, 0, 0, 3, 0.25}, {2, 4})},
                         [](const Tensors& in) { return nonzero(in[0]); });
    c.out_dtype = DType::I64;
    c.golden = {0, 1, 0, 3, 1, 2, 1, 3};
    c.golden_shape = {4, 2};
  }
  // argsort (sort, topk): indices (i64); ties (some made by rounding to f16/bf16) keep index order
  t.add_nd(O::argsort, "argsort", {normal(s)}, [](const Tensors& in) { return argsort(in[0]); }).out_dtype = DType::I64;
  t.add_nd(O::argsort, "argsort/descending_dim0", {normal(s3)},
           [](const Tensors& in) { return argsort(in[0], 0, true); })
      .out_dtype = DType::I64;
  // argmax/argmin: indices (i64); ties created by rounding resolve the same way in the reference
  t.add_nd(O::argmax, "argmax", {normal(s)}, [](const Tensors& in) { return argmax(in[0], 1); })
      .out_dtype = DType::I64;
  t.add_nd(O::argmax, "argmax/keepdim", {normal(s3)}, [](const Tensors& in) { return argmax(in[0], 0, true); })
      .out_dtype = DType::I64;
  t.add_nd(O::argmin, "argmin", {normal(s)}, [](const Tensors& in) { return argmin(in[0], 1); })
      .out_dtype = DType::I64;
  t.add_nd(O::argmin, "argmin/neg_dim", {transposed(normal({4, 3}))},
           [](const Tensors& in) { return argmin(in[0], -1); })
      .out_dtype = DType::I64;
  t.add(O::var, "var/all", {normal(s)}, [](const Tensors& in) { return var(in[0]); }, {0});
  t.add(O::var, "var/dim_correction0", {normal(s)}, [](const Tensors& in) { return var(in[0], {1}, 0.0); }, {0});
  t.add(O::var, "var/multi_keepdim", {normal(s3)},
        [](const Tensors& in) { return var(in[0], {0, 2}, 1.0, true); }, {0});
  t.add(O::std, "std/all", {normal(s)}, [](const Tensors& in) { return mg::std(in[0]); }, {0});
  t.add(O::std, "std/dim_correction0_keepdim", {transposed(normal({4, 3}))},
        [](const Tensors& in) { return mg::std(in[0], {1}, 0.0, true); }, {0});
  t.add(O::norm, "norm/p2", {normal(s)}, [](const Tensors& in) { return norm(in[0]); }, {0});
  t.add(O::norm, "norm/p1_dim", {normal_away(s, {0.0}, 0.1)},
        [](const Tensors& in) { return norm(in[0], 1.0, {1}); }, {0});
  // inf-norm: |x| pairwise distinct and away from 0
  {
    std::vector<double> v = distinct(randn_values(12, next_seed()), 0.05);
    v = away(v, {0.0}, 0.1);
    std::vector<double> mags;
    for (double x : v) mags.push_back(std::fabs(x));
    mags = distinct(mags, 0.05);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = v[i] < 0 ? -mags[i] : mags[i];
    t.add(O::norm, "norm/inf_dim", {fixed(v, s)},
          [](const Tensors& in) { return norm(in[0], INFINITY, {1}); }, {0});
  }
  t.add(O::norm, "norm/p3", {normal_away(s, {0.0}, 0.1)}, [](const Tensors& in) { return norm(in[0], 3.0); }, {0});
  t.add(O::norm, "norm/p2_keepdim", {normal(s3)},
        [](const Tensors& in) { return norm(in[0], 2.0, {0}, true); }, {0});
  t.add(O::logsumexp, "logsumexp/dim", {normal(s, 3.0)},
        [](const Tensors& in) { return logsumexp(in[0], {1}); }, {0});
  t.add(O::logsumexp, "logsumexp/multi_keepdim", {normal(s3, 3.0)},
        [](const Tensors& in) { return logsumexp(in[0], {0, 1}, true); }, {0});
  t.add(O::cumsum, "cumsum/dim0", {normal(s3)}, [](const Tensors& in) { return cumsum(in[0], 0); }, {0});
  t.add(O::cumsum, "cumsum/dim1", {normal(s3)}, [](const Tensors& in) { return cumsum(in[0], 1); }, {0});
  t.add(O::cumsum, "cumsum/transposed_last", {transposed(normal({4, 3}))},
        [](const Tensors& in) { return cumsum(in[0], -1); }, {0});
  // cumprod: a polynomial, so finite differences hold at zeros too (the gradient's special case)
  t.add(O::cumprod, "cumprod/last", {normal(s3)}, [](const Tensors& in) { return cumprod(in[0], -1); }, {0});
  t.add(O::cumprod, "cumprod/dim0", {normal(s3)}, [](const Tensors& in) { return cumprod(in[0], 0); }, {0});
  t.add(O::cumprod, "cumprod/zeros", {fixed({1.5, 0, -2, 0.5, 0, 2, 0, 3, -1, 0.5, 2, -0.5}, s)},
        [](const Tensors& in) { return cumprod(in[0], 1); }, {0});
}

void linalg_cases(Table& t) {
  using O = OpId;
  // Two roundings (product, then bias) for the composite-looking ops: a looser absolute bound.
  const Tolerance f16_two{1e-2, 5e-3}, bf16_two{2e-2, 3e-2};
  auto mmul = [](const Tensors& in) { return matmul(in[0], in[1]); };
  t.add(O::matmul, "matmul/dot", {normal({4}), normal({4})}, mmul, {0, 1});
  t.add(O::matmul, "matmul/2d", {normal({3, 4}), normal({4, 5})}, mmul, {0, 1});
  t.add(O::matmul, "matmul/vec_mat", {normal({4}), normal({4, 5})}, mmul, {0, 1});
  t.add(O::matmul, "matmul/mat_vec", {normal({3, 4}), normal({4})}, mmul, {0, 1});
  t.add(O::matmul, "matmul/batched", {normal({2, 3, 4}), normal({4, 5})}, mmul, {0, 1});
  t.add(O::matmul, "matmul/batched_broadcast", {normal({2, 1, 3, 4}), normal({3, 4, 2})}, mmul, {0, 1});
  t.add(O::matmul, "matmul/transposed", {transposed(normal({4, 3})), transposed(normal({5, 4}))}, mmul, {0, 1});
  t.add(O::mm, "mm", {normal({3, 4}), normal({4, 2})}, [](const Tensors& in) { return mm(in[0], in[1]); }, {0, 1});
  t.add(O::mm, "mm/transposed", {normal({3, 4}), transposed(normal({2, 4}))},
        [](const Tensors& in) { return mm(in[0], in[1]); }, {0, 1});
  t.add(O::bmm, "bmm", {normal({2, 3, 4}), normal({2, 4, 5})},
        [](const Tensors& in) { return bmm(in[0], in[1]); }, {0, 1});
  OpCase& am = t.add(O::addmm, "addmm", {normal({3, 5}), normal({3, 4}), normal({4, 5})},
                     [](const Tensors& in) { return addmm(in[0], in[1], in[2]); }, {0, 1, 2});
  am.f16 = f16_two;
  am.bf16 = bf16_two;
  OpCase& am2 = t.add(O::addmm, "addmm/broadcast_beta_alpha", {normal({5}), normal({3, 4}), normal({4, 5})},
                      [](const Tensors& in) { return addmm(in[0], in[1], in[2], 0.5, 2.0); }, {0, 1, 2});
  am2.f16 = f16_two;
  am2.bf16 = bf16_two;
  OpCase& bb = t.add(O::baddbmm, "baddbmm", {normal({2, 3, 5}), normal({2, 3, 4}), normal({2, 4, 5})},
                     [](const Tensors& in) { return baddbmm(in[0], in[1], in[2]); }, {0, 1, 2});
  bb.f16 = f16_two;
  bb.bf16 = bf16_two;
  OpCase& bb2 = t.add(O::baddbmm, "baddbmm/beta_alpha", {normal({2, 3, 5}), normal({2, 3, 4}), normal({2, 4, 5})},
                      [](const Tensors& in) { return baddbmm(in[0], in[1], in[2], -1.5, 0.5); }, {0, 1, 2});
  bb2.f16 = f16_two;
  bb2.bf16 = bf16_two;
  OpCase& lb = t.add(O::linear, "linear/bias", {normal({3, 4}), normal({5, 4}), normal({5})},
                     [](const Tensors& in) { return linear(in[0], in[1], in[2]); }, {0, 1, 2});
  lb.f16 = f16_two;
  lb.bf16 = bf16_two;
  t.add(O::linear, "linear/no_bias", {normal({3, 4}), normal({5, 4})},
        [](const Tensors& in) { return linear(in[0], in[1]); }, {0, 1});
  OpCase& l3 = t.add(O::linear, "linear/batched", {normal({2, 3, 4}), normal({2, 4}), normal({2})},
                     [](const Tensors& in) { return linear(in[0], in[1], in[2]); }, {0, 1, 2});
  l3.f16 = f16_two;
  l3.bf16 = bf16_two;
}

void view_copy_cases(Table& t) {
  using O = OpId;
  using V = std::vector<double>;
  const Ref same = [](const V& v) { return v[0]; };
  t.add(O::view, "view", {normal({3, 4})}, [](const Tensors& in) { return view(in[0], {2, 6}); }, {0});
  t.add(O::view, "view/infer", {normal({2, 3, 4})}, [](const Tensors& in) { return view(in[0], {4, -1}); }, {0});
  t.add(O::permute, "permute", {normal({2, 3, 4})},
        [](const Tensors& in) { return permute(in[0], {2, 0, 1}); }, {0});
  t.add(O::permute, "permute/transposed_input", {transposed(normal({4, 3}))},
        [](const Tensors& in) { return permute(in[0], {1, 0}); }, {0});
  t.add(O::expand, "expand", {normal({3, 1})}, [](const Tensors& in) { return expand(in[0], {3, 4}); }, {0})
      .ref = same;
  t.add(O::expand, "expand/new_dims", {normal({4})},
        [](const Tensors& in) { return expand(in[0], {2, 3, 4}); }, {0})
      .ref = same;
  t.add(O::slice, "slice/step", {normal({3, 5})}, [](const Tensors& in) { return slice(in[0], 1, 0, 5, 2); }, {0});
  t.add(O::slice, "slice/rows", {normal({4, 3})}, [](const Tensors& in) { return slice(in[0], 0, 1, 3); }, {0});
  t.add(O::slice, "slice/negative_start_step3", {normal({3, 7})}, [](const Tensors& in) { return slice(in[0], 1, -6, 7, 3); }, {0});
  t.add(O::clone, "clone", {transposed(normal({4, 3}))}, [](const Tensors& in) { return clone(in[0]); }, {0})
      .ref = same;
  // to_dtype: the identity cast through the op, and a cast to f32 (whose gradient check needs a
  // large step: the f32 result is exact only to ~1e-7, and the op is linear so the step costs
  // nothing)
  t.add(O::to_dtype, "to_dtype/same",
        {normal({3, 4})},
        [](const Tensors& in) { return dispatch1(OpId::to_dtype, {in[0]}, {.dtype = in[0].dtype()}); }, {0})
      .ref = same;
  OpCase& tf = t.add(O::to_dtype, "to_dtype/f32", {transposed(normal({4, 3}))},
                     [](const Tensors& in) { return to(in[0], DType::F32); }, {0});
  tf.out_dtype = DType::F32;
  tf.grad_h = 1e-2;
  tf.grad = {1e-4, 1e-4};
  tf.ref = [](const V& v) { return double(float(v[0])); };
  t.add(O::to_device, "to_device/cpu", {normal({3, 4})},
        [](const Tensors& in) { return dispatch1(OpId::to_device, {in[0]}, {.device = Device::cpu()}); }, {0})
      .ref = same;
  // copy(dst, src): src broadcast into dst's shape; the old dst values get no gradient
  t.add(O::copy, "copy/broadcast", {normal({3, 4}), normal({4})},
        [](const Tensors& in) { return dispatch1(OpId::copy, {in[0], in[1]}); }, {1})
      .ref = [](const V& v) { return v[1]; };
}

void indexing_cases(Table& t) {
  using O = OpId;
  t.add(O::cat, "cat/dim0", {normal({2, 3}), normal({1, 3}), normal({3, 3})},
        [](const Tensors& in) { return cat({in[0], in[1], in[2]}, 0); }, {0, 1, 2});
  t.add(O::cat, "cat/dim1_transposed", {normal({2, 1}), transposed(normal({3, 2})), normal({2, 2})},
        [](const Tensors& in) { return cat({in[0], in[1], in[2]}, -1); }, {0, 1, 2});
  t.add(O::cat, "cat/stack", {normal({2, 3}), normal({2, 3}), transposed(normal({3, 2}))},
        [](const Tensors& in) { return stack({in[0], in[1], in[2]}, 1); }, {0, 1, 2});
  // duplicate indices: the backward must accumulate
  t.add(O::index_select, "index_select/dim0", {normal({4, 3}), index({2, 0, 2}, {3})},
        [](const Tensors& in) { return index_select(in[0], 0, in[1]); }, {0});
  t.add(O::index_select, "index_select/dim1", {transposed(normal({3, 4})), index({1, 1, 0, 2}, {4})},
        [](const Tensors& in) { return index_select(in[0], 1, in[1]); }, {0});
  t.add(O::gather, "gather/dim1", {normal({3, 4}), index({0, 3, 1, 1, 2, 0}, {3, 2})},
        [](const Tensors& in) { return gather(in[0], 1, in[1]); }, {0});
  t.add(O::gather, "gather/dim0", {transposed(normal({4, 3})), index({2, 0, 1, 2, 1, 1, 0, 0}, {2, 4})},
        [](const Tensors& in) { return gather(in[0], 0, in[1]); }, {0});
  t.add(O::scatter_add, "scatter_add/dim0", {normal({3, 4}), index({0, 2, 1, 0, 2, 2, 0, 1}, {2, 4}), normal({2, 4})},
        [](const Tensors& in) { return scatter_add(in[0], 0, in[1], in[2]); }, {0, 2});
  t.add(O::scatter_add, "scatter_add/dim1", {normal({2, 5}), index({4, 0, 4, 1, 1, 3}, {2, 3}), normal({2, 3})},
        [](const Tensors& in) { return scatter_add(in[0], -1, in[1], in[2]); }, {0, 2});
  t.add(O::masked_fill, "masked_fill", {normal({3, 4}), mask({1, 0, 0, 1, 0, 1, 1, 0, 0, 0, 1, 1}, {3, 4})},
        [](const Tensors& in) { return masked_fill(in[0], in[1], -1.5); }, {0})
      .ref = [](const std::vector<double>& v) { return v[1] != 0 ? -1.5 : v[0]; };
  t.add(O::masked_fill, "masked_fill/broadcast_mask", {transposed(normal({4, 3})), mask({0, 1, 1, 0}, {4})},
        [](const Tensors& in) { return masked_fill(in[0], in[1], 0.25); }, {0})
      .ref = [](const std::vector<double>& v) { return v[1] != 0 ? 0.25 : v[0]; };
  OpCase& oh = t.add_nd(O::one_hot, "one_hot", {index({0, 2, 1, 3, 2}, {5})},
                        [](const Tensors& in) { return one_hot(in[0], 4); });
  oh.skip_lowp = true;
  oh.out_dtype = DType::I64;
}


// Golden cases: small exact inputs (representable in f16 and bf16) with the expected f64 output
// worked out by hand; they also run through the gradient and low-precision checks.
void golden_cases(Table& t) {
  using O = OpId;
  // g = [[1, -2, 3],
  //      [4, 0.5, -1]]       sum 5.5, sum of squares 31.25
  const Gen g = fixed({1, -2, 3, 4, 0.5, -1}, {2, 3});
  auto gold = [&t](OpId op, std::string name, std::vector<Gen> gens, Run run, std::vector<int> grads,
                   std::vector<double> want, Shape shape) -> OpCase& {
    OpCase& c = t.add(op, std::move(name), std::move(gens), std::move(run), std::move(grads));
    c.golden = std::move(want);
    c.golden_shape = std::move(shape);
    return c;
  };
  // 1 - 2 + 3 + 4 + 0.5 - 1 = 5.5
  gold(O::sum, "sum/golden", {g}, [](const Tensors& in) { return sum(in[0]); }, {0}, {5.5}, {});
  // column sums: [1 + 4, -2 + 0.5, 3 - 1]
  gold(O::sum, "sum/golden_dim0", {g}, [](const Tensors& in) { return sum(in[0], {0}); }, {0}, {5, -1.5, 2}, {3});
  // row means: [2 / 3, 3.5 / 3]
  gold(O::mean, "mean/golden", {g}, [](const Tensors& in) { return mean(in[0], {1}, true); }, {0},
       {2.0 / 3, 3.5 / 3}, {2, 1});
  // 1 * -2 * 3 * 4 * 0.5 * -1 = 12
  gold(O::prod, "prod/golden", {g}, [](const Tensors& in) { return prod(in[0]); }, {0}, {12}, {});
  // row maxima [3, 4]; column minima [1, -2, -1]
  gold(O::amax, "amax/golden", {g}, [](const Tensors& in) { return amax(in[0], {1}); }, {0}, {3, 4}, {2});
  gold(O::amin, "amin/golden", {g}, [](const Tensors& in) { return amin(in[0], {0}); }, {0}, {1, -2, -1}, {3});
  gold(O::max_dim, "max_dim/golden", {g}, [](const Tensors& in) { return max(in[0], 1).first; }, {0}, {3, 4}, {2});
  gold(O::min_dim, "min_dim/golden", {g}, [](const Tensors& in) { return min(in[0], 0, true).first; }, {0},
       {1, -2, -1}, {1, 3});
  // the indices that go with them: row argmax [2, 0], column argmin [0, 0, 1]
  gold(O::argmax, "argmax/golden", {g}, [](const Tensors& in) { return argmax(in[0], 1); }, {}, {2, 0}, {2})
      .out_dtype = DType::I64;
  gold(O::argmin, "argmin/golden", {g}, [](const Tensors& in) { return argmin(in[0], 0); }, {}, {0, 0, 1}, {3})
      .out_dtype = DType::I64;
  // max_dim's second output: the indices (first wins ties; here none)
  gold(O::max_dim, "max_dim/golden_indices", {g}, [](const Tensors& in) { return max(in[0], 0).second; }, {},
       {1, 1, 0}, {3})
      .out_dtype = DType::I64;
  // row 0: mean 2/3, squared deviations (1/9 + 64/9 + 49/9) = 114/9, / (3 - 1)
  // row 1: mean 7/6, squared deviations (289 + 16 + 169) / 36 = 474/36, / (3 - 1)
  gold(O::var, "var/golden", {g}, [](const Tensors& in) { return var(in[0], {1}); }, {0},
       {114.0 / 9 / 2, 474.0 / 36 / 2}, {2});
  // population variance of all six: (31.25 - 5.5^2 / 6) / 6
  gold(O::var, "var/golden_all_correction0", {g}, [](const Tensors& in) { return var(in[0], {}, 0.0); }, {0},
       {(31.25 - 5.5 * 5.5 / 6) / 6}, {});
  gold(O::std, "std/golden", {g}, [](const Tensors& in) { return mg::std(in[0], {1}); }, {0},
       {std::sqrt(114.0 / 9 / 2), std::sqrt(474.0 / 36 / 2)}, {2});
  // |x| sums to 11.5; sqrt(31.25); max |x| = 4; row 3-norms: (1 + 8 + 27)^(1/3), (64 + 0.125 + 1)^(1/3)
  gold(O::norm, "norm/golden_p1", {g}, [](const Tensors& in) { return norm(in[0], 1.0); }, {0}, {11.5}, {});
  gold(O::norm, "norm/golden_p2", {g}, [](const Tensors& in) { return norm(in[0]); }, {0}, {std::sqrt(31.25)}, {});
  gold(O::norm, "norm/golden_inf", {g}, [](const Tensors& in) { return norm(in[0], INFINITY); }, {0}, {4}, {});
  gold(O::norm, "norm/golden_p3", {g}, [](const Tensors& in) { return norm(in[0], 3.0, {1}); }, {0},
       {std::cbrt(36.0), std::cbrt(65.125)}, {2});
  // log(e^1 + e^-2 + e^3), log(e^4 + e^0.5 + e^-1)
  gold(O::logsumexp, "logsumexp/golden", {g}, [](const Tensors& in) { return logsumexp(in[0], {1}); }, {0},
       {std::log(std::exp(1.0) + std::exp(-2.0) + std::exp(3.0)),
        std::log(std::exp(4.0) + std::exp(0.5) + std::exp(-1.0))},
       {2});
  // running sums along rows: [1, -1, 2], [4, 4.5, 3.5]
  gold(O::cumsum, "cumsum/golden", {g}, [](const Tensors& in) { return cumsum(in[0], 1); }, {0},
       {1, -1, 2, 4, 4.5, 3.5}, {2, 3});
  // [[1, 2], [3, 4]] @ [[5, 6], [7, 8]] = [[1*5 + 2*7, 1*6 + 2*8], [3*5 + 4*7, 3*6 + 4*8]]
  const Gen a22 = fixed({1, 2, 3, 4}, {2, 2}), b22 = fixed({5, 6, 7, 8}, {2, 2});
  gold(O::matmul, "matmul/golden", {a22, b22}, [](const Tensors& in) { return matmul(in[0], in[1]); }, {0, 1},
       {19, 22, 43, 50}, {2, 2});
  // [1, 2, 3] . [4, 5, 6] = 4 + 10 + 18
  gold(O::matmul, "matmul/golden_dot", {fixed({1, 2, 3}, {3}), fixed({4, 5, 6}, {3})},
       [](const Tensors& in) { return matmul(in[0], in[1]); }, {0, 1}, {32}, {});
  gold(O::mm, "mm/golden", {a22, b22}, [](const Tensors& in) { return mm(in[0], in[1]); }, {0, 1},
       {19, 22, 43, 50}, {2, 2});
  // batch 0: [1, 2] . [5, 6] = 17; batch 1: [3, 4] . [7, 8] = 53
  const Gen ab = fixed({1, 2, 3, 4}, {2, 1, 2}), bb = fixed({5, 6, 7, 8}, {2, 2, 1});
  gold(O::bmm, "bmm/golden", {ab, bb}, [](const Tensors& in) { return bmm(in[0], in[1]); }, {0, 1}, {17, 53},
       {2, 1, 1});
  // c + a @ b with c = [1, 2]: [18, 55]
  gold(O::baddbmm, "baddbmm/golden", {fixed({1, 2}, {2, 1, 1}), ab, bb},
       [](const Tensors& in) { return baddbmm(in[0], in[1], in[2]); }, {0, 1, 2}, {18, 55}, {2, 1, 1});
  // 0.5 * 1 + 2 * [[19, 22], [43, 50]]
  gold(O::addmm, "addmm/golden", {fixed({1, 1, 1, 1}, {2, 2}), a22, b22},
       [](const Tensors& in) { return addmm(in[0], in[1], in[2], 0.5, 2.0); }, {0, 1, 2},
       {38.5, 44.5, 86.5, 100.5}, {2, 2});
  // [1, 2] @ [[1, 0], [0, 1], [1, 1]]^T + [0.5, -0.5, 1] = [1 + 0.5, 2 - 0.5, 3 + 1]
  gold(O::linear, "linear/golden", {fixed({1, 2}, {1, 2}), fixed({1, 0, 0, 1, 1, 1}, {3, 2}), fixed({0.5, -0.5, 1}, {3})},
       [](const Tensors& in) { return linear(in[0], in[1], in[2]); }, {0, 1, 2}, {1.5, 1.5, 4}, {1, 3});
  // [[1], [2]] | [[3, 4], [5, 6]] | [[7], [8]] along dim 1
  gold(O::cat, "cat/golden", {fixed({1, 2}, {2, 1}), fixed({3, 4, 5, 6}, {2, 2}), fixed({7, 8}, {2, 1})},
       [](const Tensors& in) { return cat({in[0], in[1], in[2]}, 1); }, {0, 1, 2}, {1, 3, 4, 7, 2, 5, 6, 8}, {2, 4});
  // stack along a new dim 1: [[1, 3, 5], [2, 4, 6]]
  gold(O::cat, "cat/golden_stack", {fixed({1, 2}, {2}), fixed({3, 4}, {2}), fixed({5, 6}, {2})},
       [](const Tensors& in) { return stack({in[0], in[1], in[2]}, 1); }, {0, 1, 2}, {1, 3, 5, 2, 4, 6}, {2, 3});
  // rows [1, 1, 0] of g
  gold(O::index_select, "index_select/golden", {g, index({1, 1, 0}, {3})},
       [](const Tensors& in) { return index_select(in[0], 0, in[1]); }, {0}, {4, 0.5, -1, 4, 0.5, -1, 1, -2, 3},
       {3, 3});
  // out[i][j] = g[i][idx[i][j]]: [[g02, g00], [g11, g11]]
  gold(O::gather, "gather/golden", {g, index({2, 0, 1, 1}, {2, 2})},
       [](const Tensors& in) { return gather(in[0], 1, in[1]); }, {0}, {3, 1, 0.5, 0.5}, {2, 2});
  // ones + src scattered along dim 1: row 0 gets 1+2 at col 0 and 3 at col 2; row 1 gets 4+6 at
  // col 1 and 5 at col 2
  gold(O::scatter_add, "scatter_add/golden",
       {fixed({1, 1, 1, 1, 1, 1}, {2, 3}), index({0, 0, 2, 1, 2, 1}, {2, 3}), fixed({1, 2, 3, 4, 5, 6}, {2, 3})},
       [](const Tensors& in) { return scatter_add(in[0], 1, in[1], in[2]); }, {0, 2}, {4, 1, 4, 1, 11, 6}, {2, 3});
  gold(O::masked_fill, "masked_fill/golden", {g, mask({0, 1, 0, 1, 0, 0}, {2, 3})},
       [](const Tensors& in) { return masked_fill(in[0], in[1], 9.0); }, {0}, {1, 9, 3, 9, 0.5, -1}, {2, 3});
  OpCase& oh = gold(O::one_hot, "one_hot/golden", {index({0, 2, 1}, {3})},
                    [](const Tensors& in) { return one_hot(in[0], 3); }, {}, {1, 0, 0, 0, 0, 1, 0, 1, 0}, {3, 3});
  oh.skip_lowp = true;
  oh.out_dtype = DType::I64;
  gold(O::permute, "permute/golden", {g}, [](const Tensors& in) { return permute(in[0], {1, 0}); }, {0},
       {1, 4, -2, 0.5, 3, -1}, {3, 2});
  gold(O::slice, "slice/golden", {g}, [](const Tensors& in) { return slice(in[0], 1, 0, 3, 2); }, {0},
       {1, 3, 4, -1}, {2, 2});
  // integer and bool inputs (no gradients, no low-precision variant)
  auto int_case = [&gold](OpId op, std::string name, std::vector<Gen> gens, Run run, std::vector<double> want,
                          Shape shape, DType out) {
    OpCase& c = gold(op, std::move(name), std::move(gens), std::move(run), {}, std::move(want), std::move(shape));
    c.skip_lowp = true;
    c.out_dtype = out;
  };
  // three true values counted in i64
  int_case(O::sum, "sum/golden_bool", {mask({1, 0, 1, 1}, {4})}, [](const Tensors& in) { return sum(in[0]); },
           {3}, {}, DType::I64);
  int_case(O::eq, "eq/golden_i64", {index({0, 2, 1}, {3}), index({0, 1, 1}, {3})},
           [](const Tensors& in) { return eq(in[0], in[1]); }, {1, 0, 1}, {3}, DType::Bool);
  int_case(O::neg, "neg/golden_i64", {index({3, -2}, {2})}, [](const Tensors& in) { return neg(in[0]); },
           {-3, 2}, {2}, DType::I64);
  int_case(O::clamp, "clamp/golden_i64", {index({-5, 0, 7}, {3})},
           [](const Tensors& in) { return clamp(in[0], -1, 4); }, {-1, 0, 4}, {3}, DType::I64);
  int_case(O::add, "add/golden_i64", {index({1, 2}, {2}), index({10, 20}, {2})},
           [](const Tensors& in) { return add(in[0], in[1]); }, {11, 22}, {2}, DType::I64);
  // the bitwise ops (two's complement: -7 & 3 = 1, -7 | 3 = -5, -7 ^ 3 = -6, ~-7 = 6); shifts
  // outside [0, 64) give 0 (left) and the sign fill (right), as PyTorch's
  const Gen bit_a = index({12, -7, 5}, {3}), bit_b = index({10, 3, -1}, {3});
  int_case(O::bitwise_and, "bitwise_and/golden_i64", {bit_a, bit_b}, [](const Tensors& in) { return bitwise_and(in[0], in[1]); },
           {8, 1, 5}, {3}, DType::I64);
  int_case(O::bitwise_and, "bitwise_and/golden_bool", {mask({1, 0, 1, 0}, {4}), mask({1, 1, 0, 0}, {4})},
           [](const Tensors& in) { return in[0] & in[1]; }, {1, 0, 0, 0}, {4}, DType::Bool);
  int_case(O::bitwise_or, "bitwise_or/golden_i64", {bit_a, bit_b}, [](const Tensors& in) { return bitwise_or(in[0], in[1]); },
           {14, -5, -1}, {3}, DType::I64);
  int_case(O::bitwise_xor, "bitwise_xor/golden_i64", {bit_a, bit_b}, [](const Tensors& in) { return in[0] ^ in[1]; },
           {6, -6, -6}, {3}, DType::I64);
  int_case(O::bitwise_not, "bitwise_not/golden_i64", {bit_a}, [](const Tensors& in) { return bitwise_not(in[0]); },
           {-13, 6, -6}, {3}, DType::I64);
  int_case(O::bitwise_left_shift, "bitwise_left_shift/golden_i64", {index({5, -5, 1, 3}, {4}), index({1, 1, 63, 64}, {4})},
           [](const Tensors& in) { return in[0] << in[1]; }, {10, -10, -9223372036854775808.0, 0}, {4}, DType::I64);
  int_case(O::bitwise_right_shift, "bitwise_right_shift/golden_i64",
           {index({5, -5, -1, 7}, {4}), index({1, 1, 64, -1}, {4})}, [](const Tensors& in) { return in[0] >> in[1]; },
           {2, -3, -1, 0}, {4}, DType::I64);
  gold(O::view, "view/golden", {g}, [](const Tensors& in) { return view(in[0], {3, 2}); }, {0},
       {1, -2, 3, 4, 0.5, -1}, {3, 2});
}

// Elements [1, n] of g's 1-D tensor of n + 1: a contiguous view whose data starts one element
// past the storage's (16-byte) alignment, so vectorised device loops take their unaligned path.
Gen offset_by_one(Gen g) {
  return [g](DType dt) {
    const Tensor x = g(dt);
    return slice(x, 0, 1, x.size(0));
  };
}

// The shapes the device launchers treat specially, for the elementwise family: an odd size
// (4097 = 4 · 1024 + 1: a scalar tail after 16-byte vectors), a misaligned start, a strided
// broadcast, and empty tensors (whose broadcast gradients are sums over nothing). Appended last
// so that the seeded inputs of every earlier case stay what they were.
void device_coverage_cases(Table& t) {
  using O = OpId;
  using V = std::vector<double>;
  t.add(O::exp, "exp/odd_4097", {normal({4097})}, [](const Tensors& in) { return exp(in[0]); }, {0})
      .ref = unary_ref(std::exp);
  t.add(O::tanh, "tanh/offset_4097", {offset_by_one(normal({4098}, 1.5))},
        [](const Tensors& in) { return tanh(in[0]); }, {0})
      .ref = unary_ref(std::tanh);
  t.add(O::mul, "mul/odd_4097", {normal({4097}), normal({4097})},
        [](const Tensors& in) { return mul(in[0], in[1]); }, {0, 1})
      .ref = [](const V& v) { return v[0] * v[1]; };
  t.add(O::sub, "sub/strided_broadcast", {strided(normal({3, 8}), 1, 2), transposed(normal({1, 3}))},
        [](const Tensors& in) { return sub(in[0], in[1]); }, {0, 1})
      .ref = [](const V& v) { return v[0] - v[1]; };
  t.add(O::relu, "relu/empty", {normal({0, 4})}, [](const Tensors& in) { return relu(in[0]); }, {0})
      .ref = [](const V& v) { return v[0] > 0 ? v[0] : 0.0; };
  t.add(O::add, "add/empty_broadcast", {normal({0, 3}), normal({3})},
        [](const Tensors& in) { return add(in[0], in[1]); }, {0, 1})
      .ref = [](const V& v) { return v[0] + v[1]; };
  t.add(O::where, "where/empty", {mask({}, {0, 3}), normal({0, 3}), normal({3})},
        [](const Tensors& in) { return where(in[0], in[1], in[2]); }, {1, 2})
      .ref = [](const V& v) { return v[0] != 0 ? v[1] : v[2]; };
}

}  // namespace

Tensor make_input(const std::vector<double>& v, const Shape& shape, DType dt) {
  NoGradGuard no_grad;
  Tensor x = from_vector<double>(v, shape.empty() ? Shape{int64_t(v.size())} : shape);
  if (shape.empty()) x = reshape(x, {});
  return dt == DType::F64 ? x : to(x, dt);
}

Gen fixed(std::vector<double> v, Shape s) {
  return [v = std::move(v), s = std::move(s)](DType dt) { return make_input(v, s, dt); };
}

Gen transposed(Gen g) {
  return [g = std::move(g)](DType dt) { return transpose(g(dt), -1, -2); };
}

OpCase make_case(OpId op, std::string name, std::vector<Gen> gens, Run run, std::vector<int> grad_inputs) {
  OpCase c;
  c.op = op;
  c.name = std::move(name);
  c.make_inputs = [gens = std::move(gens)](DType dt) {
    Tensors in;
    for (const Gen& g : gens) in.push_back(g(dt));
    return in;
  };
  c.run = std::move(run);
  c.grad_inputs = std::move(grad_inputs);
  c.not_differentiable = c.grad_inputs.empty();
  return c;
}

// The piecewise activations (ops/activation.cpp): inputs away from their kinks. Added last, so the
// seeds of the cases before them did not move.
void activation_cases(Table& t) {
  using O = OpId;
  const Shape s{3, 4};
  // the piecewise activations (ops/activation.cpp): inputs away from their kinks
  t.add(O::leaky_relu, "leaky_relu", {normal_away(s, {0.0}, 0.1, 2.0)},
        [](const Tensors& in) { return leaky_relu(in[0], 0.2); }, {0})
      .ref = [](const std::vector<double>& v) { return test::act::leaky_relu(v[0], 0.2); };
  t.add(O::leaky_relu, "leaky_relu/slope above 1", {normal_away(s, {0.0}, 0.1, 2.0)},
        [](const Tensors& in) { return leaky_relu(in[0], -1.5); }, {0})
      .ref = [](const std::vector<double>& v) { return test::act::leaky_relu(v[0], -1.5); };
  t.add_nd(O::leaky_relu_backward, "leaky_relu_backward", {normal(s), normal_away(s, {0.0}, 0.1)},
           [](const Tensors& in) { return leaky_relu_backward(in[0], in[1], 0.2); })
      .ref = [](const std::vector<double>& v) { return v[0] * test::act::leaky_relu_grad(v[1], 0.2); };
  t.add(O::elu, "elu", {normal_away(s, {0.0}, 0.1, 2.0)}, [](const Tensors& in) { return elu(in[0], 0.7); }, {0})
      .ref = [](const std::vector<double>& v) { return test::act::elu(v[0], 0.7, 1.0, 1.0); };
  t.add(O::elu, "elu/selu", {normal_away(s, {0.0}, 0.1, 2.0)}, [](const Tensors& in) { return selu(in[0]); }, {0})
      .ref = [](const std::vector<double>& v) { return test::act::elu(v[0], kSeluAlpha, kSeluScale, 1.0); };
  t.add(O::elu, "elu/celu", {normal_away(s, {0.0}, 0.1, 2.0)}, [](const Tensors& in) { return celu(in[0], 0.5); }, {0})
      .ref = [](const std::vector<double>& v) { return test::act::elu(v[0], 0.5, 1.0, 2.0); };
  t.add_nd(O::elu_backward, "elu_backward", {normal(s), normal_away(s, {0.0}, 0.1, 2.0)},
           [](const Tensors& in) { return elu_backward(in[0], in[1], 0.7); })
      .ref = [](const std::vector<double>& v) { return v[0] * test::act::elu_grad(v[1], 0.7, 1.0, 1.0); };
  t.add_nd(O::elu_backward, "elu_backward/celu", {normal(s), normal_away(s, {0.0}, 0.1, 2.0)},
           [](const Tensors& in) { return elu_backward(in[0], in[1], 0.5, 1.0, /*celu_input_scale=*/true); })
      .ref = [](const std::vector<double>& v) { return v[0] * test::act::elu_grad(v[1], 0.5, 1.0, 2.0); };
  // softplus_backward (not differentiable): grad * sigmoid(beta x), or grad where beta x > threshold
  t.add_nd(O::softplus_backward, "softplus_backward/beta2 threshold1", {normal(s), normal_away(s, {0.5}, 0.1, 2.0)},
           [](const Tensors& in) { return softplus_backward(in[0], in[1], 2.0, 1.0); })
      .ref = [](const std::vector<double>& v) { return 2.0 * v[1] > 1.0 ? v[0] : v[0] * sigmoid_ref(2.0 * v[1]); };
  t.add(O::hardswish, "hardswish", {normal_away(s, {-3.0, 3.0}, 0.1, 3.0)},
        [](const Tensors& in) { return hardswish(in[0]); }, {0})
      .ref = unary_ref(test::act::hardswish);
  t.add_nd(O::hardswish_backward, "hardswish_backward", {normal(s), normal_away(s, {-3.0, 3.0}, 0.1, 3.0)},
           [](const Tensors& in) { return hardswish_backward(in[0], in[1]); })
      .ref = [](const std::vector<double>& v) { return v[0] * test::act::hardswish_grad(v[1]); };
  t.add(O::hardsigmoid, "hardsigmoid", {normal_away(s, {-3.0, 3.0}, 0.1, 3.0)},
        [](const Tensors& in) { return hardsigmoid(in[0]); }, {0})
      .ref = unary_ref(test::act::hardsigmoid);
  t.add_nd(O::hardsigmoid_backward, "hardsigmoid_backward", {normal(s), normal_away(s, {-3.0, 3.0}, 0.1, 3.0)},
           [](const Tensors& in) { return hardsigmoid_backward(in[0], in[1]); })
      .ref = [](const std::vector<double>& v) { return v[0] * test::act::hardsigmoid_grad(v[1]); };
  t.add(O::mish, "mish", {normal(s, 3.0)}, [](const Tensors& in) { return mish(in[0]); }, {0})
      .ref = unary_ref(test::act::mish);
  t.add_nd(O::mish_backward, "mish_backward", {normal(s), normal(s, 3.0)},
           [](const Tensors& in) { return mish_backward(in[0], in[1]); })
      .ref = [](const std::vector<double>& v) { return v[0] * test::act::mish_grad(v[1]); };
}

// Tensor-scalar products and quotients with the scalar in opmath (added last: the seeds before stay).
void scalar_arith_cases(Table& t) {
  using O = OpId;
  const Shape s{3, 4};
  t.add(O::mul_scalar, "mul_scalar", {normal(s)}, [](const Tensors& in) { return in[0] * 0.3; }, {0})
      .ref = [](const std::vector<double>& v) { return v[0] * 0.3; };
  t.add(O::mul_scalar, "mul_scalar/left_transposed", {transposed(normal({4, 3}))},
        [](const Tensors& in) { return -2.5 * in[0]; }, {0})
      .ref = [](const std::vector<double>& v) { return -2.5 * v[0]; };
  t.add(O::div_scalar, "div_scalar", {normal(s)}, [](const Tensors& in) { return in[0] / 7.0; }, {0})
      .ref = [](const std::vector<double>& v) { return v[0] / 7.0; };
}

const std::vector<OpCase>& all_op_cases() {
  static const std::vector<OpCase> cases = [] {
    Table t;
    unary_cases(t);
    binary_cases(t);
    reduction_cases(t);
    linalg_cases(t);
    view_copy_cases(t);
    indexing_cases(t);
    golden_cases(t);
    add_loss_cases(t.cases);
    add_conv_cases(t.cases);
    add_norm_cases(t.cases);
    device_coverage_cases(t);
    activation_cases(t);
    add_late_loss_cases(t.cases);
    add_late_pool_cases(t.cases);
    scalar_arith_cases(t);
    add_attention_cases(t.cases);
    return std::move(t.cases);
  }();
  return cases;
}

}  // namespace mg::optable
