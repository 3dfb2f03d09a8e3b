// Dropout1d / Dropout2d (channel_dropout, nn/dropout.h): whole channels zeroed, the rest scaled by
// 1/(1-p); the kept fraction near 1-p over many channels; a seeded Generator repeats the mask; eval,
// p = 0 and p = 1; the gradient follows the mask; unbatched input; refusals.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>

#include "autograd/engine.h"
#include "core/factory.h"
#include "core/generator.h"
#include "nn/dropout.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

TEST_CASE("Dropout2d zeroes whole channels and scales the others by 1/(1-p)", "[nn][dropout]") {
  Generator gen(21);
  nn::Dropout2d drop({.p = 0.3, .generator = &gen});
  const Tensor x = full({40, 50, 3, 2}, 2.0).requires_grad_();
  const Tensor y = drop.forward(x);
  const std::vector<double> v = values(y);
  int64_t kept = 0;
  for (int64_t ch = 0; ch < 40 * 50; ++ch) {
    const double first = v[std::size_t(ch * 6)];
    CHECK((first == 0.0 || std::abs(first - 2.0 / 0.7) < 1e-6));
    for (int64_t k = 1; k < 6; ++k) CHECK(v[std::size_t(ch * 6 + k)] == first);  // the whole channel alike
    kept += first != 0.0 ? 1 : 0;
  }
  // 2000 channels kept with probability 0.7: 1400 ± 4.5 sigma (sigma = 20.5).
  CHECK(std::abs(double(kept) - 1400.0) < 92.0);
  // The gradient is the mask times the scale.
  const Tensor g = autograd::grad({y.sum()}, {x})[0];
  CHECK(values(g * 2.0) == v);
  // The same seed gives the same channels.
  Generator again(21);
  CHECK(values(nn::Dropout2d({.p = 0.3, .generator = &again}).forward(x)) == v);
  drop.eval();
  CHECK(values(drop.forward(x)) == values(x));
}

TEST_CASE("Dropout1d on batched and unbatched input, p = 0 and p = 1, and refusals", "[nn][dropout]") {
  const Tensor x = randn({4, 6, 5});
  CHECK(values(nn::Dropout1d({.p = 0.0}).forward(x)) == values(x));
  CHECK(values(nn::Dropout1d({.p = 1.0}).forward(x)) == std::vector<double>(120, 0.0));
  CHECK(nn::Dropout1d({.p = 0.5}).forward(randn({6, 5})).shape() == Shape{6, 5});
  MG_REQUIRE_ERROR(nn::Dropout2d({.p = 0.5}).forward(randn({6, 5})), "Dropout2d");
  MG_REQUIRE_ERROR(nn::Dropout1d({.p = 1.5}), "Dropout1d: p must be in [0, 1]");
}

TEST_CASE("Dropout3d zeroes whole channels of [N, C, D, H, W] and of unbatched [C, D, H, W]", "[nn][dropout]") {
  Generator gen(5);
  nn::Dropout3d drop({.p = 0.5, .generator = &gen});
  const Tensor x = full({3, 8, 2, 2, 2}, 1.0);
  const std::vector<double> v = values(drop.forward(x));
  int64_t zeros_seen = 0;
  for (int64_t ch = 0; ch < 24; ++ch) {
    const double first = v[std::size_t(ch * 8)];
    CHECK((first == 0.0 || first == 2.0));
    for (int64_t k = 1; k < 8; ++k) CHECK(v[std::size_t(ch * 8 + k)] == first);
    zeros_seen += first == 0.0 ? 1 : 0;
  }
  CHECK(zeros_seen > 0);  // 24 channels at p = 0.5: all kept has probability 6e-8
  CHECK(zeros_seen < 24);
  CHECK(drop.forward(full({8, 2, 2, 2}, 1.0)).shape() == Shape{8, 2, 2, 2});
  MG_REQUIRE_ERROR(drop.forward(randn({8, 2, 2})), "Dropout3d");
  CHECK(drop.layer_name() == "Dropout3d(p=0.5)");
}

TEST_CASE("dropout1d/2d/3d and feature_alpha_dropout are the modules' functions under PyTorch's names",
          "[nn][dropout]") {
  const Tensor x4 = randn({2, 6, 3, 3}), x3 = randn({2, 6, 5}), x5 = randn({2, 6, 2, 2, 2});
  auto same = [](const std::function<Tensor(Generator*)>& a, const std::function<Tensor(Generator*)>& b) {
    Generator g1(7), g2(7);
    CHECK(values(a(&g1)) == values(b(&g2)));
  };
  same([&](Generator* g) { return nn::dropout2d(x4, 0.4, true, g); },
       [&](Generator* g) { return nn::channel_dropout(x4, 2, 0.4, true, g); });
  same([&](Generator* g) { return nn::dropout1d(x3, 0.4, true, g); },
       [&](Generator* g) { return nn::channel_dropout(x3, 1, 0.4, true, g); });
  same([&](Generator* g) { return nn::dropout3d(x5, 0.4, true, g); },
       [&](Generator* g) { return nn::channel_dropout(x5, 3, 0.4, true, g); });
  same([&](Generator* g) { return nn::feature_alpha_dropout(x4, 0.3, true, g); },
       [&](Generator* g) { return nn::alpha_dropout(x4, 0.3, true, /*feature=*/true, g); });
  CHECK(values(nn::feature_alpha_dropout(x4)) == values(x4));  // training = false by default, as PyTorch's
  MG_REQUIRE_ERROR(nn::dropout2d(x3.select(0, 0)), "channel_dropout: expected x [N, C, 2 spatial dims]");
}
