// Helpers shared by the optim tests: an optimizer built from its kind code (as stored in
// tests/data/reference/optim.txt), bitwise tensor equality, the error of a tensor against stored
// values relative to their magnitude, and a report of the measured errors (MG_REFERENCE_REPORT=1).
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "ops/ops.h"
#include "optim/optim.h"
#include "reference/reference_file.h"
#include "test_util.h"

namespace mg::test {

enum OptimizerKind : int64_t {
  kSGD = 0, kAdam = 1, kAdamW = 2, kLAMB = 3, kRMSprop = 4, kAdagrad = 5,
  kAdamax = 6, kNAdam = 7, kRAdam = 8, kAdadelta = 9, kRprop = 10, kASGD = 11, kAdafactor = 12
};
inline constexpr int64_t kNumOptimizerKinds = 13;

inline std::unique_ptr<optim::Optimizer> make_optimizer(int64_t kind, const std::vector<optim::ParamGroupSpec>& groups) {
  switch (kind) {
    case kSGD: return std::make_unique<optim::SGD>(groups);
    case kAdam: return std::make_unique<optim::Adam>(groups);
    case kAdamW: return std::make_unique<optim::AdamW>(groups);
    case kLAMB: return std::make_unique<optim::LAMB>(groups);
    case kRMSprop: return std::make_unique<optim::RMSprop>(groups);
    case kAdagrad: return std::make_unique<optim::Adagrad>(groups);
    case kAdamax: return std::make_unique<optim::Adamax>(groups);
    case kNAdam: return std::make_unique<optim::NAdam>(groups);
    case kRAdam: return std::make_unique<optim::RAdam>(groups);
    case kAdadelta: return std::make_unique<optim::Adadelta>(groups);
    case kRprop: return std::make_unique<optim::Rprop>(groups);
    case kASGD: return std::make_unique<optim::ASGD>(groups);
    case kAdafactor: return std::make_unique<optim::Adafactor>(groups);
  }
  FAIL("unknown optimizer kind " << kind);
  return nullptr;
}

// The stored f64 scalars named "<prefix><option>" as an option map.
inline optim::OptionMap options_with_prefix(const ReferenceFile& f, const std::string& prefix) {
  optim::OptionMap m;
  for (const std::string& n : f.names()) {
    if (n.rfind(prefix, 0) == 0) m[n.substr(prefix.size())] = f.f64_value(n);
  }
  return m;
}

// Same dtype, shape and bytes.
inline bool bits_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ca = contiguous(a), cb = contiguous(b);
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), std::size_t(ca.numel()) * ca.element_size()) == 0;
}

// bits_equal, except that any NaN matches any NaN: CUDA's arithmetic returns its one canonical NaN
// (0x7fffffff in f32, 0x7fff once narrowed to f16/bf16) where the CPU's keeps the input's payload
// and sign, so a NaN that went through a multiply has other bits on each device.
inline bool bits_equal_any_nan(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ca = contiguous(a), cb = contiguous(b);
  const std::vector<double> va = values(ca), vb = values(cb);
  const std::size_t size = ca.element_size();
  const auto* pa = static_cast<const unsigned char*>(ca.data_ptr());
  const auto* pb = static_cast<const unsigned char*>(cb.data_ptr());
  for (std::size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) && std::isnan(vb[i])) continue;
    if (std::memcmp(pa + i * size, pb + i * size, size) != 0) return false;
  }
  return true;
}

// max |got - want| / max |want| (want's magnitude; 1e-300 at least).
inline double rel_error(const Tensor& got, const std::vector<double>& want) {
  const std::vector<double> g = values(got);
  REQUIRE(g.size() == want.size());
  double scale = 1e-300, err = 0.0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double d = std::fabs(g[i] - want[i]);
    err = std::max(err, std::isnan(d) ? INFINITY : d);
  }
  return err / scale;
}

// Row `row` of a stored tensor [n, ...] as doubles.
inline std::vector<double> stored_row(const ReferenceFile& f, const std::string& name, int64_t row) {
  return values(f.tensor(name).select(0, row));
}

// Prints "<what>: rel <e>" when MG_REFERENCE_REPORT is set.
inline void report(const std::string& what, double rel) {
  if (std::getenv("MG_REFERENCE_REPORT")) std::printf("reference optim.txt %-60s rel %.3g\n", what.c_str(), rel);
}

// a * (w - c): the gradient of sum(a (w - c)^2) / 2, as the generator computes it.
inline Tensor quadratic_grad(const Tensor& w, const Tensor& a, const Tensor& c) {
  NoGradGuard no_grad;
  return mul(a, sub(w.detach(), c));
}

}  // namespace mg::test
