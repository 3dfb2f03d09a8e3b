#include "mixgrad/nn/init.h"

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

Tensor trunc_normal_(Tensor t, double mean, double std, double low, double high, Generator* gen) {
  check_floating(t, "trunc_normal_");
  MG_CHECK(low < high && std >= 0, Error, "nn::init::trunc_normal_: bounds [", low, ", ", high,
           "] must satisfy low < high and std (", std, ") must be non-negative");
  // Probability mass of N(mean, std^2) inside [low, high].
  const double mass = std > 0 ? 0.5 * (std::erf((high - mean) / (std * std::sqrt(2.0))) -
                                       std::erf((low - mean) / (std * std::sqrt(2.0))))
                              : (low <= mean && mean <= high ? 1.0 : 0.0);
  MG_CHECK(mass >= 1e-3, Error, "nn::init::trunc_normal_: bounds [", low, ", ", high, "] hold only ", mass,
           " of the mass of N(", mean, ", ", std, "^2); rejection sampling needs at least 0.001");
  NoGradGuard no_grad;
  // Rejection sampling in f64 on the host: draw, then redraw the values outside [low, high] until
  // none remain. The bounds hold at least 0.1% of the mass (checked above), so about 1000 draws
  // per value at worst.
  const int64_t n = t.numel();
  Tensor out = empty({n}, {.dtype = DType::F64});
  double* o = out.data<double>();
  std::vector<int64_t> pending(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) pending[static_cast<std::size_t>(i)] = i;
  while (!pending.empty()) {
    Tensor draw = randn({static_cast<int64_t>(pending.size())}, {.dtype = DType::F64}, gen);
    const double* d = draw.data<double>();
    std::vector<int64_t> again;
    for (std::size_t j = 0; j < pending.size(); ++j) {
      const double v = mean + std * d[j];
      if (v >= low && v <= high) o[pending[j]] = v;
      else again.push_back(pending[j]);
    }
    pending.swap(again);
  }
  return assign(t, out.reshape(t.shape()));
}

}  // namespace mg::nn::init
