// interpolate's bicubic and area modes (ops/interpolate.h) against PyTorch 2.15's F.interpolate in
// f64 (tests/data/reference/torch_interpolate_cubic_area.json, written by
// tools/reference/gen_torch_interpolate_cubic_area.py): bicubic with align_corners off and on,
// size and scale factors (recomputed or not; an output as large as the input with a scale factor
// other than 1; 1 x 1), area in 1-D and 2-D up and down, and on [N, C, D, H, W] trilinear, nearest
// and nearest-exact; the output and the gradient of x for sum(y * r). Then bf16 (rounded once) and
// the refusals.
#include <catch2/catch.hpp>

#include "autograd/engine.h"
#include "core/factory.h"
#include "ops/interpolate.h"
#include "ops/ops.h"
#include "reference/json_reference.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

TEST_CASE("interpolate bicubic, area, trilinear and 3-D nearest equal PyTorch's in f64: values and input gradients",
          "[ops][interpolate]") {
  const nlohmann::json ref = load_json_reference("torch_interpolate_cubic_area.json");
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    INFO(c["name"].get<std::string>());
    InterpolateOptions o;
    if (!c["size"].is_null()) o.size = c["size"].get<std::vector<int64_t>>();
    if (!c["scale_factor"].is_null()) o.scale_factor = c["scale_factor"].get<std::vector<double>>();
    const std::string mode = c["mode"].get<std::string>();
    o.mode = mode == "bicubic"     ? InterpolateMode::Bicubic
             : mode == "area"      ? InterpolateMode::Area
             : mode == "trilinear" ? InterpolateMode::Trilinear
             : mode == "nearest"   ? InterpolateMode::Nearest
                                   : InterpolateMode::NearestExact;
    if (!c["align_corners"].is_null()) o.align_corners = c["align_corners"].get<bool>();
    if (!c["recompute_scale_factor"].is_null()) o.recompute_scale_factor = c["recompute_scale_factor"].get<bool>();
    const Tensor x = json_tensor(c["x"], c["shape"]).requires_grad_();
    const Tensor y = interpolate(x, o);
    REQUIRE(y.shape() == Shape(c["y_shape"].get<std::vector<int64_t>>()));
    check_json_close(y, c["y"], 1e-12, 1e-13);
    const Tensor r = json_tensor(c["r"], c["y_shape"]);
    check_json_close(autograd::grad({sum(y * r)}, {x})[0], c["grad_x"], 1e-12, 1e-13);
    ++checked;
  }
  CHECK(checked == 18);
}

TEST_CASE("interpolate bicubic and area keep bf16 (the f32 result rounded once), and refuse what PyTorch refuses",
          "[ops][interpolate]") {
  manual_seed(5);
  const Tensor x = randn({1, 2, 5, 4});
  for (const InterpolateOptions& o : {InterpolateOptions{.size = {7, 3}, .mode = InterpolateMode::Bicubic},
                                      InterpolateOptions{.size = {3, 3}, .mode = InterpolateMode::Area}}) {
    const Tensor y = interpolate(x.to(DType::BF16), o);
    CHECK(y.dtype() == DType::BF16);
    CHECK(values(y) == values(interpolate(x.to(DType::BF16).to(DType::F32), o).to(DType::BF16)));
  }
  MG_REQUIRE_ERROR(interpolate(zeros({1, 2, 5}), {.size = {7}, .mode = InterpolateMode::Bicubic}),
                   "interpolate: bicubic expects x [N, C, H, W]");
  MG_REQUIRE_ERROR(interpolate(zeros({2, 2}), {.size = {3}, .mode = InterpolateMode::Area}),
                   "area expects x [N, C, L], [N, C, H, W] or [N, C, D, H, W]");
  MG_REQUIRE_ERROR(interpolate(x, {.size = {3}, .mode = InterpolateMode::Trilinear}),
                   "interpolate: trilinear expects x [N, C, D, H, W]");
  MG_REQUIRE_ERROR(interpolate(x, {.size = {3}, .mode = InterpolateMode::Area, .align_corners = true}),
                   "align_corners is for linear, bilinear, bicubic and trilinear, not area");
  CHECK(std::string(interpolate_mode_name(InterpolateMode::Bicubic)) == "bicubic");
}
