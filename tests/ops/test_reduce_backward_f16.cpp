// Reduction gradients in f16/bf16 where the order of operations decides whether an intermediate
// leaves the format's range: a tie count of 65520 is inf in f16, std * (N - 1) and g * (x - mean)
// overflow before a scale-down brings them back. Each value is PyTorch 2.15's (CPU), which
// computes these in the order used here.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "autograd/engine.h"
#include "core/factory.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {
Tensor grad_of(const Tensor& y, const Tensor& x, const Tensor& g = Tensor()) {
  return autograd::grad({y}, {x}, g.defined() ? Tensors{g} : Tensors{})[0];
}
}  // namespace

TEST_CASE("amax/max/inf-norm split their gradient among ties with the count in f32", "[ops][reduce][autograd]") {
  // PyTorch: 70000 f16 zeros, amax: 1/70000 rounded once = 1.430511474609375e-05 each (the count
  // in f16 was inf: every share 0). 257 bf16 ties: 1/257 rounded once = 0.0038909912109375.
  const Tensor h = zeros({70000}, {.dtype = DType::F16}).requires_grad_();
  for (const Tensor& y : {amax(h), max(h)}) CHECK(values(grad_of(y, h))[0] == 1.430511474609375e-05);
  const Tensor b = zeros({257}, {.dtype = DType::BF16}).requires_grad_();
  CHECK(values(grad_of(amax(b), b))[0] == 0.0038909912109375);
  CHECK(values(grad_of(amin(b), b))[0] == 0.0038909912109375);
  // inf-norm: 70000 f16 ones
  const Tensor o = ones({70000}, {.dtype = DType::F16}).requires_grad_();
  CHECK(values(grad_of(norm(o, INFINITY), o))[0] == 1.430511474609375e-05);
}

TEST_CASE("std, var and the 2-norm backward do not overflow f16 before scaling down", "[ops][reduce][autograd]") {
  // std of 1000 f16 values of spread ~100: std * 999 > 65504 made the whole gradient 0.
  std::vector<double> v(1000);
  for (int i = 0; i < 1000; ++i) v[std::size_t(i)] = 100.0 * std::sin(0.37 * i);
  const Tensor ref = from_vector<double>(v, {1000}).requires_grad_();
  const Tensor h = to(ref.detach(), DType::F16).requires_grad_();
  const std::vector<double> gh = values(grad_of(mg::std(h), h)), gr = values(grad_of(mg::std(ref), ref));
  double worst = 0;
  for (std::size_t i = 0; i < gh.size(); ++i) worst = std::max(worst, std::abs(gh[i] - gr[i]));
  CHECK(worst < 2e-5);  // the gradient is ~1e-3: f16's rounding, not zeros
  // var of [300, -300, ...] (1000 values) with an upstream gradient 300: PyTorch gives 180.125
  // (g * (x - mean) = 90000 overflowed f16 first: inf).
  std::vector<double> alt(1000);
  for (int i = 0; i < 1000; ++i) alt[std::size_t(i)] = i % 2 ? -300.0 : 300.0;
  const Tensor a = from_vector<double>(alt, {1000}).to(DType::F16).requires_grad_();
  const Tensor g300 = full({}, 300.0, {.dtype = DType::F16});
  const std::vector<double> gv = values(grad_of(var(a), a, g300));
  CHECK(gv[0] == 180.125);
  CHECK(gv[1] == -180.125);
  // 2-norm of [300, 300] with upstream 300: PyTorch 212.125 each (g * x = 90000 was inf).
  const Tensor n = full({2}, 300.0, {.dtype = DType::F16}).requires_grad_();
  CHECK(values(grad_of(norm(n), n, g300)) == std::vector<double>{212.125, 212.125});
}

TEST_CASE("norm p=0 has a zero gradient even for an inf upstream gradient", "[ops][reduce][autograd]") {
  const Tensor x = from_vector<double>({1.0, 0.0, 2.0}, {3}).requires_grad_();
  CHECK(values(grad_of(norm(x, 0.0), x, full({}, INFINITY, {.dtype = DType::F64}))) == std::vector<double>{0, 0, 0});
}
