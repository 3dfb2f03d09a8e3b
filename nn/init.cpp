#include "mixgrad/nn/init.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn::init {
namespace {

// The dtype random values are drawn in before the one rounding into t's dtype.
DType draw_dtype(const Tensor& t) { return t.dtype() == DType::F64 ? DType::F64 : DType::F32; }

void check_floating(const Tensor& t, const char* fn) {
  MG_CHECK(t.defined(), Error, "nn::init::", fn, ": tensor is undefined");
  MG_CHECK(is_floating(t.dtype()), DTypeError, "nn::init::", fn, ": expected a floating tensor, got ",
           describe(t));
}

// Writes `values` (CPU, any dtype) into t without recording history.
Tensor assign(Tensor t, const Tensor& values) {
  NoGradGuard no_grad;
  t.copy_(values);
  return t;
}

double fan(const Tensor& t, FanMode mode, const char* fn) {
  MG_CHECK(t.dim() >= 2, ShapeError, "nn::init::", fn, ": fan in and fan out need a tensor with at least 2 dims, got ",
           describe(t));
  auto [in, out] = fan_in_and_fan_out(t);
  return static_cast<double>(mode == FanMode::FanIn ? in : out);
}

}  // namespace

double calculate_gain(Nonlinearity nonlinearity, double negative_slope) {
  switch (nonlinearity) {
    case Nonlinearity::Linear:
    case Nonlinearity::Conv:
    case Nonlinearity::Sigmoid: return 1.0;
    case Nonlinearity::Tanh: return 5.0 / 3.0;
    case Nonlinearity::ReLU: return std::sqrt(2.0);
    case Nonlinearity::LeakyReLU: return std::sqrt(2.0 / (1.0 + negative_slope * negative_slope));
    case Nonlinearity::SELU: return 3.0 / 4.0;
  }
  return 1.0;
}

std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& weight) {
  MG_CHECK(weight.dim() >= 2, ShapeError,
           "nn::init: fan in and fan out need a tensor with at least 2 dims, got ", describe(weight));
  int64_t receptive = 1;
  for (int64_t d = 2; d < weight.dim(); ++d) receptive *= weight.size(d);
  return {weight.size(1) * receptive, weight.size(0) * receptive};
}

Tensor uniform_(Tensor t, double low, double high, Generator* gen) {
  check_floating(t, "uniform_");
  MG_CHECK(low <= high, Error, "nn::init::uniform_: low (", low, ") must not exceed high (", high, ")");
  NoGradGuard no_grad;
  Tensor u = rand(t.shape(), {.dtype = draw_dtype(t)}, gen);
  return assign(t, u * (high - low) + low);
}

Tensor normal_(Tensor t, double mean, double std, Generator* gen) {
  check_floating(t, "normal_");
  MG_CHECK(std >= 0, Error, "nn::init::normal_: std must be non-negative, got ", std);
  NoGradGuard no_grad;
  Tensor n = randn(t.shape(), {.dtype = draw_dtype(t)}, gen);
  return assign(t, n * std + mean);
}

Tensor constant_(Tensor t, double value) {
  check_floating(t, "constant_");
  NoGradGuard no_grad;
  t.fill_(value);
  return t;
}
Tensor zeros_(Tensor t) { return constant_(std::move(t), 0.0); }
Tensor ones_(Tensor t) { return constant_(std::move(t), 1.0); }

Tensor xavier_uniform_(Tensor t, double gain, Generator* gen) {
  check_floating(t, "xavier_uniform_");
  const double sum = fan(t, FanMode::FanIn, "xavier_uniform_") + fan(t, FanMode::FanOut, "xavier_uniform_");
  const double bound = gain * std::sqrt(6.0 / sum);
  return uniform_(std::move(t), -bound, bound, gen);
}

Tensor xavier_normal_(Tensor t, double gain, Generator* gen) {
  check_floating(t, "xavier_normal_");
  const double sum = fan(t, FanMode::FanIn, "xavier_normal_") + fan(t, FanMode::FanOut, "xavier_normal_");
  return normal_(std::move(t), 0.0, gain * std::sqrt(2.0 / sum), gen);
}

Tensor kaiming_uniform_(Tensor t, const KaimingOptions& o, Generator* gen) {
  check_floating(t, "kaiming_uniform_");
  const double bound = calculate_gain(o.nonlinearity, o.a) * std::sqrt(3.0 / fan(t, o.mode, "kaiming_uniform_"));
  return uniform_(std::move(t), -bound, bound, gen);
}

Tensor kaiming_normal_(Tensor t, const KaimingOptions& o, Generator* gen) {
  check_floating(t, "kaiming_normal_");
  const double std = calculate_gain(o.nonlinearity, o.a) / std::sqrt(fan(t, o.mode, "kaiming_normal_"));
  return normal_(std::move(t), 0.0, std, gen);
}

namespace {

// Standard normal values in [a, b] by rejection from N(0, 1): exact, and fast while [a, b] holds a
// fair share of the mass.
void trunc_normal_by_rejection(double a, double b, double* out, int64_t n, Generator* gen) {
  std::vector<int64_t> pending(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) pending[static_cast<std::size_t>(i)] = i;
  while (!pending.empty()) {
    Tensor draw = randn({static_cast<int64_t>(pending.size())}, {.dtype = DType::F64}, gen);
    const double* d = draw.data<double>();
    std::vector<int64_t> again;
    for (std::size_t j = 0; j < pending.size(); ++j) {
      if (d[j] >= a && d[j] <= b) out[pending[j]] = d[j];
      else again.push_back(pending[j]);
    }
    pending.swap(again);
  }
}

// Standard normal values in [a, b] for an interval holding little mass (Robert 1995, "Simulation
// of truncated normal variables"): exact at any distance from the mean, where rejection from
// N(0, 1) would need ~1/mass draws (1e-16 at 8 sigma). Tail intervals left of 0 are mirrored.
// The proposal is uniform on [a, b] (accepted with probability exp((m^2 - z^2) / 2), m the
// density's peak in [a, b]) when the interval is narrow next to its tail's scale, else a + an
// exponential of rate lambda, the rate Robert shows is optimal (accepted with probability
// exp(-(z - lambda)^2 / 2), and only inside [a, b]). Both accept at least ~1/3 of proposals.
void trunc_normal_by_proposals(double a, double b, double* out, int64_t n, Generator* gen) {
  const bool mirrored = b <= 0;
  if (mirrored) std::swap(a, b), a = -a, b = -b;
  const double peak = a > 0 ? a : 0.0;  // where the density is highest in [a, b]
  const double lambda = (a + std::sqrt(a * a + 4)) / 2;
  const bool uniform = std::isfinite(b) && (a <= 0 || lambda * (b - a) < 1);
  std::vector<int64_t> pending(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) pending[static_cast<std::size_t>(i)] = i;
  while (!pending.empty()) {
    const auto k = static_cast<int64_t>(pending.size());
    Tensor proposal = rand({k}, {.dtype = DType::F64}, gen), accept = rand({k}, {.dtype = DType::F64}, gen);
    const double* u = proposal.data<double>();
    const double* v = accept.data<double>();
    std::vector<int64_t> again;
    for (std::size_t j = 0; j < pending.size(); ++j) {
      double z = 0;
      bool ok = false;
      if (uniform) {
        z = a + (b - a) * u[j];
        ok = v[j] <= std::exp((peak * peak - z * z) / 2);
      } else {
        z = a - std::log1p(-u[j]) / lambda;  // u in [0, 1): 1 - u in (0, 1]
        ok = z <= b && v[j] <= std::exp(-(z - lambda) * (z - lambda) / 2);
      }
      if (ok) out[pending[j]] = mirrored ? -z : z;
      else again.push_back(pending[j]);
    }
    pending.swap(again);
  }
}

}  // namespace

Tensor trunc_normal_(Tensor t, double mean, double std, double low, double high, Generator* gen) {
  check_floating(t, "trunc_normal_");
  MG_CHECK(std::isfinite(mean) && std::isfinite(std) && !std::isnan(low) && !std::isnan(high), Error,
           "nn::init::trunc_normal_: mean (", mean, ") and std (", std, ") must be finite and the bounds not NaN");
  MG_CHECK(low < high && std >= 0, Error, "nn::init::trunc_normal_: bounds [", low, ", ", high,
           "] must satisfy low < high and std (", std, ") must be non-negative");
  MG_CHECK(std > 0 || (low <= mean && mean <= high), Error, "nn::init::trunc_normal_: with std 0 every value is the mean (",
           mean, "), which is outside the bounds [", low, ", ", high, "]");
  NoGradGuard no_grad;
  const int64_t n = t.numel();
  Tensor out = empty({n}, {.dtype = DType::F64});
  double* o = out.data<double>();
  if (std == 0) {
    for (int64_t i = 0; i < n; ++i) o[i] = mean;
    return assign(t, out.reshape(t.shape()));
  }
  // In standard units, sampled in f64 on the host and rounded once into t's dtype.
  const double a = (low - mean) / std, b = (high - mean) / std;
  const double mass = 0.5 * (std::erf(b / std::sqrt(2.0)) - std::erf(a / std::sqrt(2.0)));
  if (mass >= 0.3) trunc_normal_by_rejection(a, b, o, n, gen);
  else trunc_normal_by_proposals(a, b, o, n, gen);
  for (int64_t i = 0; i < n; ++i) o[i] = std::clamp(mean + std * o[i], low, high);  // rounding at the bounds
  return assign(t, out.reshape(t.shape()));
}

}  // namespace mg::nn::init
