// interpolate (ops/interpolate.h) and nn::Upsample against PyTorch 2.15's F.interpolate
// (tests/data/reference/torch_interpolate.json, written by tools/reference/gen_torch_interpolate.py):
// modes nearest, nearest-exact, linear ([N, C, L]) and bilinear ([N, C, H, W]); size (one value or
// one per dim) or scale_factor (one or per dim, representable or not, e.g. 1/3, 2.3, 17/6);
// align_corners false / true / unset; recompute_scale_factor; up- and downsampling, output size 1,
// and sizes where the floor of in * scale matters (floor(5 * 1.4) = 7: the double product rounds
// first). In f64: values and the gradient of x for sum(y * r), to 1e-12 relative (margin 1e-13).
// Three 1-D f64 cases where PyTorch's forward and its own backward pick different elements (its
// 1-D forward kernel skips the 2-D kernel's "out == in: copy, out == 2 in: i / 2" shortcuts and
// rounds differently): the forward values only. In f32, from the f64 inputs rounded to f32: PyTorch
// computes nearest source indices with float scales, so the nearest outputs must be exactly equal;
// linear and bilinear to 1e-6 relative. Then nn::Upsample, the dtype contract (a bf16 input: the
// f32 computation rounded once to bf16; under CPU bf16 autocast an f32 input stays f32) and the
// named errors.
#include <catch2/catch.hpp>

#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "core/factory.h"
#include "nn/upsample.h"
#include "ops/interpolate.h"
#include "ops/ops.h"
#include "reference/json_reference.h"
#include "test_paths.h"
#include "test_util.h"

using namespace mg;

namespace {

nlohmann::json load() { return test::load_json_reference("torch_interpolate.json"); }

Tensor tensor(const nlohmann::json& c, const char* values, const char* shape) {
  return from_vector<double>(c[values].get<std::vector<double>>(), c[shape].get<std::vector<int64_t>>());
}

InterpolateMode mode_of(const std::string& m) {
  if (m == "nearest") return InterpolateMode::Nearest;
  if (m == "nearest-exact") return InterpolateMode::NearestExact;
  if (m == "linear") return InterpolateMode::Linear;
  REQUIRE(m == "bilinear");
  return InterpolateMode::Bilinear;
}

// The case's F.interpolate arguments: size or scale_factor (a list; null when not given), the
// mode, align_corners (null: unset) and recompute_scale_factor.
InterpolateOptions options_of(const nlohmann::json& c) {
  InterpolateOptions o;
  if (!c["size"].is_null()) o.size = c["size"].get<std::vector<int64_t>>();
  if (!c["scale_factor"].is_null()) o.scale_factor = c["scale_factor"].get<std::vector<double>>();
  o.mode = mode_of(c["mode"].get<std::string>());
  if (!c["align_corners"].is_null()) o.align_corners = c["align_corners"].get<bool>();
  o.recompute_scale_factor = c["recompute_scale_factor"].get<bool>();
  return o;
}

void check_close(const Tensor& got, const std::vector<double>& want, double tol, double margin) {
  const std::vector<double> g = test::values(got);
  REQUIRE(g.size() == want.size());
  for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(want[i]).epsilon(tol).margin(margin));
}

bool is_nearest(const nlohmann::json& c) { return c["mode"].get<std::string>().rfind("nearest", 0) == 0; }

}  // namespace

TEST_CASE("interpolate equals PyTorch's F.interpolate in f64: values and input gradients", "[ops][interpolate]") {
  const nlohmann::json ref = load();
  int checked = 0;
  for (const auto& c : ref["f64"]) {
    INFO(c["name"].get<std::string>());
    const Tensor x = tensor(c, "x", "x_shape").requires_grad_();
    const Tensor y = interpolate(x, options_of(c));
    CHECK(y.dtype() == DType::F64);
    REQUIRE(y.shape() == Shape(c["y_shape"].get<std::vector<int64_t>>()));
    check_close(y, c["y"].get<std::vector<double>>(), 1e-12, 1e-13);
    const Tensor r = from_vector<double>(c["r"].get<std::vector<double>>(), y.shape());
    check_close(autograd::grad({sum(y * r)}, {x})[0], c["gx"].get<std::vector<double>>(), 1e-12, 1e-13);
    ++checked;
  }
  CHECK(checked == 34);
}

TEST_CASE("interpolate in 1-D uses the rule of PyTorch's backward where PyTorch's 1-D forward picks other elements", "[ops][interpolate]") {
  // PyTorch's generic 1-D nearest forward computes the scale in the dtype's opmath without the
  // size shortcuts, while its backward (and its 2-D kernels) use a float scale with them; mixgrad
  // uses the latter in both directions, so its gradient is the one of its own forward and equals
  // PyTorch's gradient, and its forward differs from PyTorch's there (docs/nn.md).
  const nlohmann::json ref = load();
  int checked = 0;
  for (const auto& c : ref["f64_forward_only"]) {
    INFO(c["name"].get<std::string>());
    const Tensor x = tensor(c, "x", "x_shape").requires_grad_();
    const Tensor y = interpolate(x, options_of(c));
    REQUIRE(y.shape() == Shape(c["y_shape"].get<std::vector<int64_t>>()));
    CHECK(test::values(y) != c["y"].get<std::vector<double>>());  // PyTorch's forward: the other rule
    const Tensor r = from_vector<double>(c["r"].get<std::vector<double>>(), y.shape());
    CHECK(test::values(autograd::grad({sum(y * r)}, {x})[0]) == c["gx"].get<std::vector<double>>());
    ++checked;
  }
  CHECK(checked == 3);
}

TEST_CASE("interpolate in f32 picks PyTorch's source elements: nearest outputs exact, linear and bilinear to 1e-6", "[ops][interpolate]") {
  const nlohmann::json ref = load();
  int checked = 0;
  for (const auto& c : ref["f32"]) {
    INFO(c["name"].get<std::string>() << " in f32");
    const Tensor x = to(tensor(c, "x", "x_shape"), DType::F32);
    const Tensor y = interpolate(x, options_of(c));
    CHECK(y.dtype() == DType::F32);
    REQUIRE(y.shape() == Shape(c["y_shape"].get<std::vector<int64_t>>()));
    if (is_nearest(c)) CHECK(test::values(y) == c["y"].get<std::vector<double>>());
    else check_close(y, c["y"].get<std::vector<double>>(), 1e-6, 1e-6);
    ++checked;
  }
  CHECK(checked == 10);
}

TEST_CASE("nn::Upsample is interpolate as a layer", "[ops][interpolate][nn]") {
  const nlohmann::json ref = load();
  const nlohmann::json* found = nullptr;
  for (const auto& c : ref["f64"])
    if (c["name"].get<std::string>() == "bilinear scale [0.5, 1/3] align_corners") found = &c;
  REQUIRE(found != nullptr);
  const nlohmann::json& c = *found;
  const Tensor x = tensor(c, "x", "x_shape");
  nn::Upsample up(options_of(c));
  const Tensor y = up(x);
  REQUIRE(y.shape() == Shape(c["y_shape"].get<std::vector<int64_t>>()));
  CHECK(test::values(y) == test::values(interpolate(x, options_of(c))));
  check_close(y, c["y"].get<std::vector<double>>(), 1e-12, 1e-13);
  CHECK(up.str().find("Upsample") != std::string::npos);
  auto shared = nn::make<nn::Upsample>({.scale_factor = {2.0}, .mode = InterpolateMode::Nearest});
  CHECK((*shared)(x).shape() == Shape{2, 2, 12, 14});
  CHECK(shared->parameters().empty());
}

TEST_CASE("interpolate keeps bf16 (the f32 result rounded once) and keeps f32 under CPU bf16 autocast", "[ops][interpolate][amp]") {
  const Tensor x4 = randn({2, 2, 4, 5}), x3 = randn({2, 3, 6});
  const std::vector<std::pair<Tensor, InterpolateOptions>> cases = {
      {x4, {.scale_factor = {1.5}, .mode = InterpolateMode::Nearest}},
      {x4, {.size = {7, 3}, .mode = InterpolateMode::NearestExact}},
      {x4, {.scale_factor = {2.3, 0.7}, .mode = InterpolateMode::Bilinear}},
      {x4, {.size = {3, 8}, .mode = InterpolateMode::Bilinear, .align_corners = true}},
      {x3, {.scale_factor = {1.7}, .mode = InterpolateMode::Linear, .recompute_scale_factor = true}},
  };
  for (const auto& [x, o] : cases) {
    INFO(interpolate_mode_name(o.mode) << " " << shape_str(x.shape()));
    const Tensor xb = to(x, DType::BF16);  // bf16-exact values
    const Tensor yb = interpolate(xb, o);
    CHECK(yb.dtype() == DType::BF16);
    CHECK(test::values(yb) == test::values(to(interpolate(to(xb, DType::F32), o), DType::BF16)));
    const Tensor want = interpolate(x, o);
    amp::Autocast autocast({.device = DeviceType::CPU, .dtype = DType::BF16});
    const Tensor y = interpolate(x, o);
    CHECK(y.dtype() == DType::F32);
    CHECK(test::values(y) == test::values(want));
  }
}

TEST_CASE("interpolate: missing or doubled sizes, bad lengths, ranks and options are named errors", "[ops][interpolate]") {
  const Tensor x3 = zeros({1, 2, 5}), x4 = zeros({1, 2, 3, 5});
  MG_REQUIRE_ERROR(interpolate(x3, {}), "interpolate: give size or scale_factor");
  MG_REQUIRE_ERROR(interpolate(x4, {.mode = InterpolateMode::Bilinear}), "interpolate: give size or scale_factor");
  MG_REQUIRE_ERROR(interpolate(x3, {.size = {7}, .scale_factor = {2.0}}), "interpolate: give size or scale_factor, not both");
  MG_REQUIRE_ERROR(interpolate(x3, {.size = {7}, .mode = InterpolateMode::Bilinear}), "interpolate: bilinear expects x [N, C, H, W]");
  MG_REQUIRE_ERROR(interpolate(x4, {.scale_factor = {2.0}, .mode = InterpolateMode::Linear}), "interpolate: linear expects x [N, C, L]");
  MG_REQUIRE_ERROR(interpolate(x3, {.size = {7}, .mode = InterpolateMode::Nearest, .align_corners = false}),
                   "interpolate: align_corners is for linear, bilinear, bicubic and trilinear");
  MG_REQUIRE_ERROR(interpolate(x4, {.scale_factor = {2.0}, .mode = InterpolateMode::NearestExact, .align_corners = true}),
                   "interpolate: align_corners is for linear, bilinear, bicubic and trilinear");
  MG_REQUIRE_ERROR(interpolate(x3, {.size = {0}}), "interpolate: the output size must be positive");
  MG_REQUIRE_ERROR(interpolate(x4, {.size = {4, 0}, .mode = InterpolateMode::Bilinear}), "interpolate: the output size must be positive");
  MG_REQUIRE_ERROR(interpolate(x3, {.scale_factor = {0.1}}), "interpolate: the output size must be positive");  // floor(5 * 0.1) = 0
  MG_REQUIRE_ERROR(interpolate(x4, {.scale_factor = {2.0, 2.0, 2.0}}), "interpolate: expected 1 or 2 scale factors");
  MG_REQUIRE_ERROR(interpolate(x4, {.size = {4, 4, 4}, .mode = InterpolateMode::Bilinear}), "interpolate: expected 1 or 2 sizes");
}
