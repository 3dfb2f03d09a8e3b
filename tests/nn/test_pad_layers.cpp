// PyTorch's named padding layers (nn/padding.h: ZeroPad, ConstantPad, ReflectionPad,
// ReplicationPad, CircularPad 1d/2d/3d): Pad under their names, options and input ranks. The
// padding itself is checked against PyTorch in tests/ops/test_pad.cpp.
#include <catch2/catch.hpp>

#include <vector>

#include "core/factory.h"
#include "nn/padding.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;
using V = std::vector<double>;

TEST_CASE("named padding layers pad as PyTorch's 1d layers do", "[nn][pad]") {
  const Tensor x = from_vector<double>({1, 2, 3}, {1, 1, 3});
  CHECK(values(nn::ReflectionPad1d({.padding = {2}})(x)) == V({3, 2, 1, 2, 3, 2, 1}));
  CHECK(values(nn::ReplicationPad1d({.padding = {2, 1}})(x)) == V({1, 1, 1, 2, 3, 3}));
  CHECK(values(nn::CircularPad1d({.padding = {1}})(x)) == V({3, 1, 2, 3, 1}));
  CHECK(values(nn::ZeroPad1d({.padding = {1, 0}})(x)) == V({0, 1, 2, 3}));
  CHECK(values(nn::ConstantPad1d({.padding = {0, 2}, .value = 3.5})(x)) == V({1, 2, 3, 3.5, 3.5}));
  CHECK(values(nn::ConstantPad1d({.padding = {-1, 0}})(x)) == V({2, 3}));  // a negative amount crops
}

TEST_CASE("named padding layers in 2-D and 3-D equal Pad with the expanded amounts", "[nn][pad]") {
  manual_seed(4);
  const Tensor x4 = randn({2, 3, 4, 5}), x5 = randn({1, 2, 3, 4, 5});
  auto same = [](const Tensor& a, const Tensor& b) { CHECK(values(a) == values(b)); };
  same(nn::ReflectionPad2d({.padding = {1, 2, 3, 0}})(x4), pad(x4, {1, 2, 3, 0}, PadMode::Reflect));
  same(nn::ReplicationPad2d({.padding = {2}})(x4), pad(x4, {2, 2, 2, 2}, PadMode::Replicate));
  same(nn::CircularPad2d({.padding = {1}})(x4.select(0, 0)), pad(x4.select(0, 0), {1, 1, 1, 1}, PadMode::Circular));
  same(nn::ZeroPad2d({.padding = {1, 0, 0, 2}})(x4), pad(x4, {1, 0, 0, 2}));
  same(nn::ConstantPad3d({.padding = {1}, .value = -2})(x5), pad(x5, {1, 1, 1, 1, 1, 1}, PadMode::Constant, -2));
  same(nn::ReflectionPad3d({.padding = {1, 1, 2, 0, 0, 2}})(x5), pad(x5, {1, 1, 2, 0, 0, 2}, PadMode::Reflect));
  same(nn::ReplicationPad3d({.padding = {1}})(x5), pad(x5, {1, 1, 1, 1, 1, 1}, PadMode::Replicate));
  same(nn::CircularPad3d({.padding = {1}})(x5), pad(x5, {1, 1, 1, 1, 1, 1}, PadMode::Circular));
  same(nn::ZeroPad3d({.padding = {0, 1, 0, 1, 0, 1}})(x5), pad(x5, {0, 1, 0, 1, 0, 1}));
  CHECK(nn::ReflectionPad2d({.padding = {1}}).str() == "ReflectionPad2d(padding=(1, 1, 1, 1))");
  CHECK(nn::ConstantPad1d({.padding = {1, 2}, .value = 0.5}).str() == "ConstantPad1d(padding=(1, 2), value=0.5)");
}

TEST_CASE("named padding layers refuse the ranks and options PyTorch's refuse", "[nn][pad]") {
  MG_REQUIRE_ERROR(nn::ReflectionPad2d({.padding = {1}})(zeros({2, 2, 3, 3, 3})),
                   "ReflectionPad2d(padding=(1, 1, 1, 1)): expected a 3-D or 4-D input (unbatched or batched), got [2, 2, 3, 3, 3] f32 cpu");
  MG_REQUIRE_ERROR(nn::ReplicationPad1d({.padding = {1}})(zeros({4})), "expected a 2-D or 3-D input");
  MG_REQUIRE_ERROR(nn::ZeroPad3d({.padding = {1}})(zeros({3, 3})), "ZeroPad3d(padding=(1, 1, 1, 1, 1, 1)): expected at least 3 dims");
  MG_REQUIRE_ERROR(nn::ReflectionPad2d({.padding = {1, 2, 3}}),
                   "ReflectionPad2d: padding takes 1 amount (every side) or 4 ((before, after) per dim, last dim first), got 3");
  MG_REQUIRE_ERROR(nn::ReflectionPad1d({.padding = {1}, .value = 2}), "ReflectionPad1d: a value is for ConstantPad only");
  MG_REQUIRE_ERROR(nn::CircularPad1d({.padding = {-1}}), "CircularPad1d: circular padding needs amounts >= 0, got -1");
  // the pad op's own limits keep their text, under the layer's name
  MG_REQUIRE_ERROR(nn::ReflectionPad1d({.padding = {3}})(zeros({1, 3})), "ReflectionPad1d");
}
