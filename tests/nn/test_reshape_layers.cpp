// pixel_shuffle / pixel_unshuffle and their layers, and Unflatten (nn/reshape_layers.h): every
// element where PyTorch's definition puts it (checked element by element), the inverse pair,
// gradients (the permutation's own), batch dims and refusals.
#include <catch2/catch.hpp>

#include "autograd/engine.h"
#include "core/factory.h"
#include "nn/reshape_layers.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

TEST_CASE("pixel_shuffle puts x[c*r*r + i*r + j, h, w] at y[c, h*r + i, w*r + j], and pixel_unshuffle undoes it",
          "[nn][reshape]") {
  const int64_t N = 2, C = 3, r = 2, H = 2, W = 3;
  const Tensor x = arange(0, N * C * r * r * H * W, 1, {.dtype = DType::F32}).reshape({N, C * r * r, H, W});
  const Tensor y = pixel_shuffle(x, r);
  REQUIRE(y.shape() == Shape{N, C, H * r, W * r});
  const std::vector<double> xv = values(x), yv = values(y);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w)
          for (int64_t i = 0; i < r; ++i)
            for (int64_t j = 0; j < r; ++j) {
              const int64_t src = ((n * C * r * r + c * r * r + i * r + j) * H + h) * W + w;
              const int64_t dst = ((n * C + c) * H * r + h * r + i) * W * r + w * r + j;
              CHECK(yv[std::size_t(dst)] == xv[std::size_t(src)]);
            }
  CHECK(values(pixel_unshuffle(y, r)) == xv);
  // 3-D input (no batch) and 5-D (two batch dims); r = 1 is the identity.
  CHECK(pixel_shuffle(zeros({8, 2, 2}), 2).shape() == Shape{2, 4, 4});
  CHECK(pixel_shuffle(zeros({2, 3, 9, 1, 2}), 3).shape() == Shape{2, 3, 1, 3, 6});
  CHECK(values(pixel_shuffle(x, 1)) == xv);
  // The gradient is the inverse permutation of the upstream gradient.
  const Tensor xg = x.clone().requires_grad_();
  const Tensor g = randn({N, C, H * r, W * r});
  CHECK(values(autograd::grad({(pixel_shuffle(xg, r) * g).sum()}, {xg})[0]) == values(pixel_unshuffle(g, r)));
  nn::PixelShuffle layer({.upscale_factor = 2});
  CHECK(values(layer.forward(x)) == yv);
  CHECK(values(nn::PixelUnshuffle({.downscale_factor = 2}).forward(y)) == xv);
  MG_REQUIRE_ERROR(pixel_shuffle(zeros({1, 6, 2, 2}), 2), "are not divisible by upscale_factor^2 = 4");
  MG_REQUIRE_ERROR(pixel_unshuffle(zeros({1, 6, 3, 2}), 2), "are not divisible by downscale_factor = 2");
  MG_REQUIRE_ERROR(pixel_shuffle(zeros({4, 2}), 2), "expected x [*, C * r * r, H, W]");
  MG_REQUIRE_ERROR(nn::PixelShuffle({.upscale_factor = 0}), "PixelShuffle: upscale_factor must be >= 1");
}

TEST_CASE("Unflatten splits one dim into several, one size inferred", "[nn][reshape]") {
  const Tensor x = arange(0, 24, 1, {.dtype = DType::F32}).reshape({2, 12});
  CHECK(nn::Unflatten({.dim = 1, .sizes = {3, 4}}).forward(x).shape() == Shape{2, 3, 4});
  CHECK(nn::Unflatten({.dim = -1, .sizes = {2, -1, 2}}).forward(x).shape() == Shape{2, 2, 3, 2});
  CHECK(values(nn::Unflatten({.dim = 1, .sizes = {3, 4}}).forward(x)) == values(x));
  MG_REQUIRE_ERROR(nn::Unflatten({.dim = 1, .sizes = {5, 3}}).forward(x), "do not fit dim 1");
  MG_REQUIRE_ERROR(nn::Unflatten({.dim = 1, .sizes = {-1, -1}}), "at most one size may be -1");
  MG_REQUIRE_ERROR(nn::Unflatten({.dim = 1, .sizes = {}}), "sizes must not be empty");
  CHECK(nn::Unflatten({.dim = 1, .sizes = {3, 4}}).str().find("unflattened_size=[3, 4]") != std::string::npos);
}
