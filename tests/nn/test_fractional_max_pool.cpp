// FractionalMaxPool2d/3d (nn/fractional_max_pool.h, ops/fractional_max_pool.h) against PyTorch 2.15
// with the same random samples (tests/data/reference/torch_fractional_max_pool.json, written by
// tools/reference/gen_torch_fractional_max_pool.py): values, indices and the input's gradient, in
// f64 and f32 (the window starts computed in the dtype: one f32 case has samples whose starts differ
// in f64); then drawn samples, bf16, and refusals.
#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "core/factory.h"
#include "nn/nn.h"
#include "ops/fractional_max_pool.h"
#include "ops/max_unpool.h"
#include "ops/ops.h"
#include "reference/json_reference.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

TEST_CASE("FractionalMaxPool2d/3d with given samples equal PyTorch's: values, indices, gradients",
          "[nn][pooling]") {
  const nlohmann::json ref = test::load_json_reference("torch_fractional_max_pool.json");
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    INFO("case " << checked);
    const DType dt = c["dtype"] == "f64" ? DType::F64 : DType::F32;
    const Tensor x = test::json_tensor(c["x"], c["x_shape"]).to(dt).requires_grad_();
    const Tensor samples = test::json_tensor(c["samples"], c["samples_shape"]).to(dt);
    const auto k = c["kernel"].get<std::vector<int64_t>>();
    Tensor y, i;
    if (c["dims"].get<int>() == 2) {
      nn::FractionalMaxPool2d::Options o{.kernel = {k[0], k[1]}, .random_samples = samples};
      if (!c["output_size"].is_null()) {
        const auto s = c["output_size"].get<std::vector<int64_t>>();
        o.output_size = {s[0], s[1]};
      } else {
        const auto r = c["output_ratio"].get<std::vector<double>>();
        o.output_ratio = {r[0], r[1]};
      }
      std::tie(y, i) = nn::FractionalMaxPool2d(o).forward_with_indices(x);
      CHECK(values(nn::FractionalMaxPool2d(o)(x)) == values(y));
    } else {
      nn::FractionalMaxPool3d::Options o{.kernel = {k[0], k[1], k[2]}, .random_samples = samples};
      if (!c["output_size"].is_null()) {
        const auto s = c["output_size"].get<std::vector<int64_t>>();
        o.output_size = {s[0], s[1], s[2]};
      } else {
        const auto r = c["output_ratio"].get<std::vector<double>>();
        o.output_ratio = {r[0], r[1], r[2]};
      }
      std::tie(y, i) = nn::FractionalMaxPool3d(o).forward_with_indices(x);
      CHECK(values(nn::FractionalMaxPool3d(o)(x)) == values(y));
    }
    REQUIRE(y.shape() == Shape(c["y_shape"].get<std::vector<int64_t>>()));
    CHECK(y.dtype() == dt);
    CHECK(i.dtype() == DType::I64);
    CHECK(values(i) == c["indices"].get<std::vector<double>>());  // the windows are PyTorch's exactly
    test::check_json_close(y, c["y"]);
    const Tensors g = autograd::grad({sum(y * test::json_tensor(c["r"], c["y_shape"]).to(dt))}, {x});
    test::check_json_close(g[0], c["grad"], dt == DType::F64 ? 1e-12 : 1e-6, dt == DType::F64 ? 1e-13 : 1e-6);
    ++checked;
  }
  CHECK(checked == 9);
}

TEST_CASE("fractional_max_pool draws its samples from the generator: reproducible, maxima of kernel windows",
          "[nn][pooling]") {
  manual_seed(3);
  const Tensor x = randn({2, 3, 13, 11});
  manual_seed(5);
  const auto [y1, i1] = fractional_max_pool2d_with_indices(x, {2, 2}, {9, 7});
  manual_seed(5);
  const auto [y2, i2] = fractional_max_pool2d_with_indices(x, {2, 2}, {9, 7});
  CHECK(values(i1) == values(i2));                        // same seed, same windows
  const auto [y3, i3] = fractional_max_pool2d_with_indices(x, {2, 2}, {9, 7});
  CHECK(values(i3) != values(i1));                        // a new draw, new windows
  // the values are the input's elements at the indices, the largest of their 2x2 window
  CHECK(values(y1) == values(gather(x.reshape({2, 3, 143}), 2, i1.reshape({2, 3, 63})).reshape({2, 3, 9, 7})));
  const std::vector<double> xv = values(x), yv = values(y1), iv = values(i1);
  for (std::size_t e = 0; e < yv.size(); ++e) {
    const int64_t plane = int64_t(e / 63), pos = int64_t(iv[e]);
    REQUIRE(pos >= 0);
    REQUIRE(pos < 143);
    CHECK(xv[std::size_t(plane * 143 + pos)] == yv[e]);
  }
  // rows and columns of the windows reach the input's last row and column (the last window)
  CHECK(amax(i1).item<double>() >= 11 * 11);
  // bf16 keeps its dtype and picks elements of x; the windows are those of the f32 arithmetic
  manual_seed(5);
  const auto [yb, ib] = fractional_max_pool2d_with_indices(x.to(DType::BF16), {2, 2}, {9, 7});
  CHECK(yb.dtype() == DType::BF16);
  CHECK(values(ib) == values(i1));
  // unpooling with the indices puts every maximum back where it was
  const Tensor up = max_unpool2d(y1, i1, {13, 11});
  CHECK(values(gather(up.reshape({2, 3, 143}), 2, i1.reshape({2, 3, 63}))) == values(y1.reshape({2, 3, 63})));
  // 3-D, unbatched
  const Tensor v = randn({2, 6, 7, 8});
  const auto [yv3, iv3] = fractional_max_pool3d_with_indices(v, {2, 2, 2}, {4, 5, 3});
  CHECK(yv3.shape() == Shape{2, 4, 5, 3});
  CHECK(values(yv3) == values(gather(v.reshape({2, 336}), 1, iv3.reshape({2, 60})).reshape({2, 4, 5, 3})));
  // output_ratio: int(input size * ratio)
  nn::FractionalMaxPool2d pool({.kernel = 3, .output_ratio = {0.5, 0.75}});
  CHECK(pool(x).shape() == Shape{2, 3, 6, 8});
  CHECK(pool.str() == "FractionalMaxPool2d(kernel_size=3, output_ratio=(0.5, 0.75))");
  CHECK(nn::FractionalMaxPool3d({.kernel = {1, 2, 2}, .output_size = {3, 4, 4}}).str() ==
        "FractionalMaxPool3d(kernel_size=1x2x2, output_size=3x4x4)");
}

TEST_CASE("fractional_max_pool refuses what PyTorch refuses, with the layer's name", "[nn][pooling]") {
  const Tensor x = randn({1, 2, 6, 5});
  MG_REQUIRE_ERROR(fractional_max_pool2d(x, {2, 2}, {6, 4}),
                   "fractional_max_pool2d: an output size of 6 with kernel 2 needs at least 7 input elements along H, got x [1, 2, 6, 5] f32 cpu");
  MG_REQUIRE_ERROR(fractional_max_pool2d(x, {2, 2}, {3, 3}, full({1, 2, 2}, 1.0)),
                   "fractional_max_pool2d: random_samples must lie in [0, 1), got values in [1, 1]");
  MG_REQUIRE_ERROR(fractional_max_pool2d(x, {2, 2}, {3, 3}, rand({2, 2, 2})),
                   "fractional_max_pool2d: expected floating random_samples [1, 2, 2] for x [1, 2, 6, 5] f32 cpu, got [2, 2, 2] f32 cpu");
  MG_REQUIRE_ERROR(fractional_max_pool2d(x.to(DType::I64), {2, 2}, {3, 3}),
                   "fractional_max_pool2d: expected a floating-point x");
  MG_REQUIRE_ERROR(fractional_max_pool3d(x.select(0, 0), {2, 2, 2}, {2, 2, 2}),
                   "fractional_max_pool3d: expected x [N, C, D, H, W] or [C, D, H, W], got [2, 6, 5] f32 cpu");
  MG_REQUIRE_ERROR(fractional_max_pool2d(x, {0, 2}, {3, 3}), "kernel and output size must be >= 1");
  MG_REQUIRE_ERROR(nn::FractionalMaxPool2d({.kernel = 2}), "FractionalMaxPool2d: give either output_size or output_ratio, got neither");
  MG_REQUIRE_ERROR(nn::FractionalMaxPool2d({.kernel = 2, .output_size = 3, .output_ratio = {0.5, 0.5}}),
                   "got both");
  MG_REQUIRE_ERROR(nn::FractionalMaxPool2d({.kernel = 2, .output_ratio = {0.5, 1.0}}),
                   "FractionalMaxPool2d: output_ratio must be in (0, 1), got 1");
  nn::FractionalMaxPool2d pool({.kernel = 2, .output_size = {6, 4}});
  MG_REQUIRE_ERROR(pool(x), "FractionalMaxPool2d(kernel_size=2, output_size=6x4): fractional_max_pool2d: an output size of 6");
}
