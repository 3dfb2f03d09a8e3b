// interpolate with antialias (ops/interpolate.h: bilinear, bicubic and lanczos on [N, C, H, W])
// against PyTorch 2.15's F.interpolate(antialias=True) (tests/data/reference/
// torch_interpolate_antialias.json, written by tools/reference/gen_torch_interpolate_antialias.py):
// shrinking by whole and fractional factors, enlarging, a kept dim, align_corners, scale factors,
// heavy shrinking; f64 values and input gradients, f32 values. Then what antialiasing is for
// (a constant stays constant, an alternating pattern averages out), bf16 and the refusals.
#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/engine.h"
#include "core/factory.h"
#include "nn/upsample.h"
#include "ops/interpolate.h"
#include "ops/ops.h"
#include "reference/json_reference.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

TEST_CASE("interpolate antialias (bilinear, bicubic, lanczos) equals PyTorch's: f64 with gradients, f32",
          "[ops][interpolate]") {
  const nlohmann::json ref = load_json_reference("torch_interpolate_antialias.json");
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    INFO(c["name"].get<std::string>());
    InterpolateOptions o{.antialias = true};
    if (!c["size"].is_null()) o.size = c["size"].get<std::vector<int64_t>>();
    if (!c["scale_factor"].is_null()) o.scale_factor = c["scale_factor"].get<std::vector<double>>();
    const std::string mode = c["mode"].get<std::string>();
    o.mode = mode == "bilinear" ? InterpolateMode::Bilinear
             : mode == "bicubic" ? InterpolateMode::Bicubic
                                 : InterpolateMode::Lanczos;
    if (c["align_corners"].get<bool>()) o.align_corners = true;
    if (!c["recompute_scale_factor"].is_null()) o.recompute_scale_factor = c["recompute_scale_factor"].get<bool>();
    const bool f64 = c["dtype"] == "f64";
    const Tensor x = json_tensor(c["x"], c["shape"]).to(f64 ? DType::F64 : DType::F32).requires_grad_();
    const Tensor y = interpolate(x, o);
    REQUIRE(y.shape() == Shape(c["y_shape"].get<std::vector<int64_t>>()));
    REQUIRE(y.dtype() == x.dtype());
    if (f64) {
      check_json_close(y, c["y"], 1e-12, 1e-13);
      const Tensor r = json_tensor(c["r"], c["y_shape"]);
      check_json_close(autograd::grad({sum(y * r)}, {x})[0], c["grad_x"], 1e-12, 1e-13);
    } else {
      check_json_close(y, c["y"], 1e-5, 1e-6);  // f32 weights and sums in another order
    }
    ++checked;
  }
  CHECK(checked == 17);
}

TEST_CASE("interpolate antialias: constants stay, stripes average out, bf16 rounds once, refusals", "[ops][interpolate]") {
  for (InterpolateMode mode : {InterpolateMode::Bilinear, InterpolateMode::Bicubic, InterpolateMode::Lanczos}) {
    INFO(interpolate_mode_name(mode));
    // The weights of every output sum to one: a constant image stays that constant.
    const Tensor c = full({1, 1, 20, 16}, 0.75, {.dtype = DType::F64});
    for (double v : values(interpolate(c, {.size = {6, 5}, .mode = mode, .antialias = true})))
      CHECK(v == Approx(0.75).epsilon(1e-14));
    // One-pixel stripes shrunk 4x: antialiased, they average to about 0.5 (nearest samples the
    // stripes and aliases to a constant 1).
    const Tensor stripes = from_vector<double>({1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0}, {1, 1, 1, 16});
    for (double v : values(interpolate(stripes, {.size = {1, 4}, .mode = mode, .antialias = true})))
      CHECK(std::abs(v - 0.5) < 0.1);
  }
  const Tensor stripes = from_vector<double>({1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0}, {1, 1, 1, 16});
  CHECK(values(interpolate(stripes, {.size = {1, 4}, .mode = InterpolateMode::Nearest})) == V({1, 1, 1, 1}));
  manual_seed(9);
  const Tensor x = randn({1, 2, 13, 11});
  for (InterpolateMode mode : {InterpolateMode::Bilinear, InterpolateMode::Bicubic, InterpolateMode::Lanczos}) {
    const InterpolateOptions o{.size = {5, 4}, .mode = mode, .antialias = true};
    const Tensor y = interpolate(x.to(DType::BF16), o);
    CHECK(y.dtype() == DType::BF16);
    CHECK(values(y) == values(interpolate(x.to(DType::BF16).to(DType::F32), o).to(DType::BF16)));
  }
  nn::Upsample down({.size = {5, 4}, .mode = InterpolateMode::Lanczos, .antialias = true});
  CHECK(values(down(x)) == values(interpolate(x, {.size = {5, 4}, .mode = InterpolateMode::Lanczos, .antialias = true})));
  CHECK(down.str().find("mode=lanczos, antialias=true") != std::string::npos);
  MG_REQUIRE_ERROR(interpolate(x, {.size = {5, 4}, .mode = InterpolateMode::Nearest, .antialias = true}),
                   "interpolate: antialias is for bilinear, bicubic and lanczos over x [N, C, H, W], not nearest");
  MG_REQUIRE_ERROR(interpolate(zeros({1, 1, 8}), {.size = {4}, .mode = InterpolateMode::Linear, .antialias = true}),
                   "antialias is for bilinear, bicubic and lanczos");
  MG_REQUIRE_ERROR(interpolate(x, {.size = {5, 4}, .mode = InterpolateMode::Lanczos}),
                   "interpolate: lanczos needs antialias = true");
  MG_REQUIRE_ERROR(interpolate(x, {.size = {5, 4}, .mode = InterpolateMode::Lanczos, .align_corners = true,
                                   .antialias = true}),
                   "lanczos does not take align_corners = true");
  MG_REQUIRE_ERROR(interpolate(zeros({1, 8, 8}), {.size = {4, 4}, .mode = InterpolateMode::Lanczos, .antialias = true}),
                   "interpolate: lanczos expects x [N, C, H, W]");
}

TEST_CASE("UpsamplingNearest2d and UpsamplingBilinear2d are Upsample's nearest and align_corners bilinear",
          "[ops][interpolate][nn]") {
  manual_seed(10);
  const Tensor x = randn({1, 2, 3, 4});
  nn::UpsamplingNearest2d near({.scale_factor = {2.0}});
  nn::UpsamplingBilinear2d bil({.size = {5, 7}});
  CHECK(values(near(x)) == values(interpolate(x, {.scale_factor = {2.0}, .mode = InterpolateMode::Nearest})));
  CHECK(values(bil(x)) ==
        values(interpolate(x, {.size = {5, 7}, .mode = InterpolateMode::Bilinear, .align_corners = true})));
  CHECK(bil.str().find("UpsamplingBilinear2d(size=(5, 7), mode=bilinear, align_corners=true)") != std::string::npos);
  MG_REQUIRE_ERROR(nn::UpsamplingNearest2d({}), "UpsamplingNearest2d: give size or scale_factor");
}
