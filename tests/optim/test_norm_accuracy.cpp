// The summation rule (core/cascade_sum.h) in the optimizers' norms: clip_grad_norm_'s total norm
// and LAMB's weight and update norms over 10^6 elements whose exact result is known (0.1f
// everywhere: a running f32 total drifts by ~1% over 10^6 terms), within a few ulps × log2 n, and
// bit-identical at 1, 2 and 3 threads. Each case prints its measured error.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

#include "core/factory.h"
#include "core/parallel.h"
#include "optim/clip_grad.h"
#include "optim/lamb.h"
#include "optim_test_util.h"

using namespace mg;

namespace {

constexpr double kU = 0x1p-24;  // f32 unit roundoff

// 128-term leaves plus ceil(log2 leaves) pairwise levels, plus 8 for the terms' own roundings.
double rule_ulps(int64_t n) { return 128.0 + std::ceil(std::log2(std::ceil(double(n) / 128.0))) + 8.0; }

Tensors filled_grads(const std::vector<int64_t>& sizes, float value) {
  Tensors ps;
  for (int64_t n : sizes) {
    Tensor p = zeros({n}).requires_grad_();
    p.set_grad(full({n}, value));
    ps.push_back(p);
  }
  return ps;
}

}  // namespace

TEST_CASE("clip_grad_norm_: the total norm of 1.2e6 x 0.1f within the rule's bound", "[optim][numerics]") {
  const std::vector<int64_t> sizes = {400000, 300001, 500000};
  const int64_t n = 1200001;
  const double g = double(0.1f);
  const double bound = rule_ulps(n);
  {
    const double got = optim::clip_grad_norm_(filled_grads(sizes, 0.1f), 1e30, 1.0).item<double>();
    const double e = std::fabs(got - double(n) * g) / (double(n) * g) / kU;
    std::printf("[numerics] %-44s error %10.2f ulps (bound %.0f)\n", "clip_grad_norm_ L1 of 1.2e6 x 0.1f", e, bound);
    CHECK(e <= bound);
  }
  {
    // L2: sqrt(Σ fl(0.1f²)); the sum's relative error halves under the square root
    const double sq = double(0.1f * 0.1f);
    const double got = optim::clip_grad_norm_(filled_grads(sizes, 0.1f), 1e30, 2.0).item<double>();
    const double want = std::sqrt(double(n) * sq);
    const double e = std::fabs(got - want) / want / kU;
    std::printf("[numerics] %-44s error %10.2f ulps (bound %.0f)\n", "clip_grad_norm_ L2 of 1.2e6 x 0.1f", e, bound / 2 + 2);
    CHECK(e <= bound / 2 + 2);
  }
}

TEST_CASE("LAMB: the trust ratio of a 10^6-element tensor within the rule's bound", "[optim][numerics]") {
  // p = 0.1f and g = 1 everywhere, step 1 with bias correction, no weight decay: u = 1 / (1 + eps)
  // for every element, so ratio = ||p|| / ||u|| = 0.1f / u exactly and p - lr·ratio·u = 0.1f (1 - lr).
  const int64_t n = 1000000;
  for (const bool multi : {true, false}) {
    Tensor p = full({n}, 0.1f).requires_grad_();
    p.set_grad(ones({n}));
    optim::LAMB opt({p}, {.lr = 0.5, .weight_decay = 0.0, .multi_tensor = multi});
    opt.step();
    const std::vector<double> v = test::values(p);
    const double want = double(0.1f) * 0.5;
    double worst = 0;
    for (double x : v) worst = std::max(worst, std::fabs(x - want) / want);
    // the norms' errors (each half of its sum's), the ratio, the product and the subtraction
    const double bound = rule_ulps(n) + 8;
    std::printf("[numerics] %-44s error %10.2f ulps (bound %.0f)\n", multi ? "LAMB step, 10^6 x 0.1f (multi-tensor)" : "LAMB step, 10^6 x 0.1f (per tensor)",
                worst / kU, bound);
    CHECK(worst / kU <= bound);
  }
}

TEST_CASE("clip_grad_norm_ and LAMB give bit-identical results at 1, 2 and 3 threads", "[optim][numerics]") {
  const Tensor g0 = randn({300000}), g1 = randn({70001});
  auto run = [&] {
    std::vector<std::vector<double>> r;
    Tensors ps;
    for (const Tensor& g : {g0, g1}) {
      Tensor p = zeros(g.shape()).requires_grad_();
      p.set_grad(clone(g));
      ps.push_back(p);
    }
    r.push_back(test::values(optim::clip_grad_norm_(ps, 1.0)));
    r.push_back(test::values(ps[0].grad()));
    Tensor w = clone(g1).requires_grad_();
    w.set_grad(contiguous(narrow(g0, 0, 0, 70001)));
    optim::LAMB opt({w}, {.lr = 0.01});
    opt.step();
    r.push_back(test::values(w));
    return r;
  };
  test::check_same_at_thread_counts(run);
}
