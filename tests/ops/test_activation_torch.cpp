// The piecewise activations against PyTorch 2.15 on the CPU (tests/data/reference/torch_activations.json,
// written by tools/reference/gen_torch_activations.py): forward and backward in f32, bf16 and f16
// on a grid over [-10, 10] that holds every kink, plus ±0, ±inf and NaN. This checks what the ulp
// sweeps cannot: the conventions (which side a kink takes, NaN, SELU's constants, CELU's scale).
// Tolerance: 2 ulp of the dtype (6 for an f32 forward: PyTorch's mish rounds log1p, exp and tanh
// separately), or 8 ulp of the dtype times |g| absolute (PyTorch's hardswish
// backward computes x / 3 + 1/2, which cancels near x = -1.5, and its mish backward 1 - tanh^2,
// which cancels for large x; ours have no cancellation), and f32's smallest normal in the
// subnormal range (where PyTorch's mish rounds e^x more than once).
// Where mixgrad differs on purpose (docs/nn.md): mish at ±inf gives the limits (PyTorch NaN), and
// hardtanh/relu6 pass no gradient to a NaN input (they are clamp, as PyTorch's clamp does).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/engine.h"
#include "core/factory.h"
#include "ops/ops.h"
#include "test_paths.h"
#include "test_util.h"
#include "ulp_sweep.h"

using namespace mg;

namespace {

Tensor from_hex(const nlohmann::json& bits, DType dt) {
  const std::size_t n = bits.size();
  Tensor t = empty({int64_t(n)}, {.dtype = dt});
  for (std::size_t i = 0; i < n; ++i) {
    const uint32_t v = uint32_t(std::stoul(bits[i].get<std::string>(), nullptr, 16));
    if (dt == DType::F32) {
      std::memcpy(static_cast<char*>(t.data_ptr()) + 4 * i, &v, 4);
    } else {
      const uint16_t h = uint16_t(v);
      std::memcpy(static_cast<char*>(t.data_ptr()) + 2 * i, &h, 2);
    }
  }
  return t;
}

uint32_t bits_at(const Tensor& t, int64_t i) {
  uint32_t v = 0;
  std::memcpy(&v, static_cast<const char*>(t.data_ptr()) + i * int64_t(t.element_size()), t.element_size());
  return v;
}

double value_at(const Tensor& t, int64_t i) {
  const uint32_t b = bits_at(t, i);
  if (t.dtype() == DType::F32) return f32_from_bits(b);
  return test::from_bits16(uint16_t(b), t.dtype());
}

// Both NaN, or equal bits, or within `ulps` of each other, or within `abs_tol`.
bool close(const Tensor& got, const Tensor& want, int64_t i, int64_t ulps, double abs_tol) {
  const double a = value_at(got, i), b = value_at(want, i);
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  if (std::fabs(a - b) <= abs_tol) return true;
  const int width = got.dtype() == DType::F32 ? 32 : 16;
  const int64_t d = test::ordered(bits_at(got, i), width) - test::ordered(bits_at(want, i), width);
  return (d < 0 ? -d : d) <= ulps;
}

const std::map<std::string, std::function<Tensor(const Tensor&)>>& activations() {
  static const std::map<std::string, std::function<Tensor(const Tensor&)>> m = {
      {"leaky_relu_0.01", [](const Tensor& x) { return leaky_relu(x); }},
      {"leaky_relu_0.2", [](const Tensor& x) { return leaky_relu(x, 0.2); }},
      {"elu_1", [](const Tensor& x) { return elu(x); }},
      {"elu_0.5", [](const Tensor& x) { return elu(x, 0.5); }},
      {"selu", [](const Tensor& x) { return selu(x); }},
      {"celu_1", [](const Tensor& x) { return celu(x); }},
      {"celu_0.5", [](const Tensor& x) { return celu(x, 0.5); }},
      {"hardswish", [](const Tensor& x) { return hardswish(x); }},
      {"hardsigmoid", [](const Tensor& x) { return hardsigmoid(x); }},
      {"mish", [](const Tensor& x) { return mish(x); }},
      {"hardtanh", [](const Tensor& x) { return hardtanh(x); }},
      {"hardtanh_-2_0.5", [](const Tensor& x) { return hardtanh(x, -2.0, 0.5); }},
      {"relu6", [](const Tensor& x) { return relu6(x); }},
  };
  return m;
}

}  // namespace

TEST_CASE("piecewise activations: forward and backward equal PyTorch's in f32, bf16 and f16", "[ops][activation]") {
  std::ifstream f(test::source_dir() + "/tests/data/reference/torch_activations.json");
  REQUIRE(f.good());
  const nlohmann::json ref = nlohmann::json::parse(f);
  int checked = 0;
  for (const auto& [key, c] : ref["cases"].items()) {
    const std::string name = key.substr(0, key.find('/')), dname = key.substr(key.find('/') + 1);
    INFO(key);
    REQUIRE(activations().count(name));
    const DType dt = dname == "f32" ? DType::F32 : (dname == "bf16" ? DType::BF16 : DType::F16);
    const Tensor x = from_hex(ref["inputs"][dname]["x"], dt);
    const Tensor g = from_hex(ref["inputs"][dname]["g"], dt);
    const Tensor want_y = from_hex(c["y"], dt), want_dx = from_hex(c["dx"], dt);
    const Tensor xr = x.clone().requires_grad_();
    const Tensor y = activations().at(name)(xr);
    const Tensor dx = autograd::grad({y}, {xr}, {g})[0];
    REQUIRE(y.dtype() == dt);
    REQUIRE(dx.dtype() == dt);
    const double eps = dt == DType::F32 ? 1.1920929e-7 : (dt == DType::BF16 ? 0.0078125 : 0.0009765625);
    // f32 (and bf16's f32 compute): PyTorch's mish rounds e^x in the subnormal range several
    // times (mish(-100) is 2% off there); ours rounds once
    const double tiny = dt == DType::F16 ? 0.0 : 1.2e-38;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double xv = value_at(x, i);
      INFO("x = " << xv << ": y " << value_at(y, i) << " (PyTorch " << value_at(want_y, i) << "), dx "
                  << value_at(dx, i) << " (PyTorch " << value_at(want_dx, i) << "), g " << value_at(g, i));
      const bool mish_inf = name == "mish" && std::isinf(xv);
      const bool clamp_nan = (name.rfind("hardtanh", 0) == 0 || name == "relu6") && std::isnan(xv);
      if (mish_inf) {  // the limits, where PyTorch's formula gives NaN
        CHECK(value_at(y, i) == (xv > 0 ? xv : 0.0));
        CHECK(value_at(dx, i) == (xv > 0 ? value_at(g, i) : 0.0));
        continue;
      }
      CHECK(close(y, want_y, i, dt == DType::F32 ? 6 : 2, tiny));
      if (clamp_nan) {
        CHECK(value_at(dx, i) == 0.0);
        continue;
      }
      CHECK(close(dx, want_dx, i, 2, 8 * eps * std::fabs(value_at(g, i)) + tiny * std::fabs(value_at(g, i))));
      ++checked;
    }
  }
  CHECK(checked > 3 * 13 * 150);
}
