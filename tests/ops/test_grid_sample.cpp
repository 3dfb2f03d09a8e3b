// grid_sample and affine_grid (ops/grid_sample.h) against PyTorch 2.15 in f64
// (tests/data/reference/torch_grid_sample.json, written by tools/reference/gen_torch_grid_sample.py):
// every mode, padding and align_corners, 4-D and 5-D, grids past the border, with the input's and the grid's
// gradients; affine_grid with theta's. Then bf16, CUDA against the CPU, and the refusals.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "core/factory.h"
#include "ops/grid_sample.h"
#include "ops/ops.h"
#include "reference/json_reference.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

GridSampleOptions options_of(const nlohmann::json& c) {
  const std::string mode = c["mode"], padding = c["padding"];
  return {.mode = mode == "nearest"   ? GridSampleMode::Nearest
                 : mode == "bicubic" ? GridSampleMode::Bicubic
                                     : GridSampleMode::Bilinear,
          .padding_mode = padding == "border"       ? GridSamplePadding::Border
                          : padding == "reflection" ? GridSamplePadding::Reflection
                                                    : GridSamplePadding::Zeros,
          .align_corners = c["align_corners"].get<bool>()};
}

}  // namespace

TEST_CASE("grid_sample equals PyTorch's in f64: every mode, padding and align_corners, 4-D and 5-D, with gradients",
          "[ops][grid_sample]") {
  const nlohmann::json ref = test::load_json_reference("torch_grid_sample.json");
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    INFO(c["mode"].get<std::string>() << " " << c["padding"].get<std::string>() << " align_corners "
                                      << c["align_corners"].get<bool>());
    const Tensor x = test::json_tensor(c["x"], c["x_shape"]).requires_grad_();
    const Tensor grid = test::json_tensor(c["grid"], c["grid_shape"]).requires_grad_();
    const Tensor y = grid_sample(x, grid, options_of(c));
    REQUIRE(y.shape() == Shape(c["y_shape"].get<std::vector<int64_t>>()));
    test::check_json_close(y, c["y"]);
    const Tensors g = autograd::grad({sum(y * test::json_tensor(c["r"], c["y_shape"]))}, {x, grid});
    test::check_json_close(g[0], c["grad_x"]);
    test::check_json_close(g[1], c["grad_grid"], 1e-11, 1e-12);
    ++checked;
  }
  CHECK(checked == 30);
}

TEST_CASE("affine_grid equals PyTorch's in f64, 4-D and 5-D sizes, with theta's gradient", "[ops][grid_sample]") {
  const nlohmann::json ref = test::load_json_reference("torch_grid_sample.json");
  int checked = 0;
  for (const auto& c : ref["affine"]) {
    const auto size = c["size"].get<std::vector<int64_t>>();
    const int64_t nd = int64_t(size.size()) - 2;
    const Tensor theta = test::json_tensor(c["theta"], nlohmann::json::array({size[0], nd, nd + 1})).requires_grad_();
    const Tensor grid = affine_grid(theta, Shape(size), c["align_corners"].get<bool>());
    REQUIRE(grid.shape() == Shape(c["grid_shape"].get<std::vector<int64_t>>()));
    test::check_json_close(grid, c["grid"]);
    const Tensors g = autograd::grad({sum(grid * test::json_tensor(c["r"], c["grid_shape"]))}, {theta});
    test::check_json_close(g[0], c["grad_theta"]);
    ++checked;
  }
  CHECK(checked == 5);
}

TEST_CASE("grid_sample: the identity transform, bf16, and refusals", "[ops][grid_sample]") {
  manual_seed(8);
  const Tensor x = randn({2, 3, 5, 7});
  const Tensor identity = from_vector<double>({1, 0, 0, 0, 1, 0}, {1, 2, 3}).expand({2, 2, 3}).to(DType::F32);
  for (const bool align : {false, true}) {
    // the identity affine grid samples every pixel at its centre: the input back
    const Tensor y = grid_sample(x, affine_grid(identity, {2, 3, 5, 7}, align), {.align_corners = align});
    const std::vector<double> a = values(y), b = values(x);
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).margin(1e-5));
  }
  // bf16: computed in f32, rounded once — the f32 result rounded to bf16
  const Tensor grid = rand({2, 4, 4, 2}) * 2.0 - 1.0;
  const Tensor yb = grid_sample(x.to(DType::BF16), grid.to(DType::BF16));
  CHECK(yb.dtype() == DType::BF16);
  CHECK(values(yb) == values(grid_sample(x.to(DType::BF16).to(DType::F32), grid.to(DType::BF16).to(DType::F32))
                                 .to(DType::BF16)));
  // a non-finite coordinate reads 0, the others are unaffected
  const Tensor odd = from_vector<float>({INFINITY, 0.0f, NAN, 0.0f, 0.0f, 0.0f}, {1, 1, 3, 2});
  for (const GridSampleMode mode : {GridSampleMode::Bilinear, GridSampleMode::Nearest, GridSampleMode::Bicubic}) {
    const std::vector<double> v = values(grid_sample(ones({1, 1, 4, 4}), odd, {.mode = mode, .align_corners = true}));
    CHECK(v == std::vector<double>({0, 0, 1}));
  }
  CHECK(grid_sample(x, grid.to(DType::F64)).dtype() == DType::F64);  // the dtypes promote
  {
    amp::Autocast ac({.dtype = DType::BF16});  // the fp32 policy, as PyTorch's grid_sampler
    CHECK(grid_sample(x.to(DType::BF16), grid).dtype() == DType::F32);
  }
  MG_REQUIRE_ERROR(grid_sample(x, grid.slice(3, 0, 1)), "grid_sample: expected a grid [2, Ho, Wo, 2]");
  MG_REQUIRE_ERROR(grid_sample(x.unsqueeze(2), grid), "grid_sample: expected a grid [2, Do, Ho, Wo, 3]");
  MG_REQUIRE_ERROR(grid_sample(x.unsqueeze(2), rand({2, 1, 2, 2, 3}), {.mode = GridSampleMode::Bicubic}),
                   "grid_sample: bicubic takes 4-D input only");
  MG_REQUIRE_ERROR(affine_grid(zeros({2, 3, 3}), {2, 3, 4, 4}), "affine_grid: expected a floating theta [N, 2, 3]");
  MG_REQUIRE_ERROR(affine_grid(zeros({2, 2, 3}), {3, 3, 4, 4}), "affine_grid: expected size {2, C, H, W} or {2, C, D, H, W}");
  MG_REQUIRE_ERROR(affine_grid(zeros({2, 2, 3}), {2, 3, 4, 4, 4}), "affine_grid: expected a floating theta [N, 3, 4] for a 5-D size");
}

TEST_CASE("grid_sample and affine_grid on CUDA give the CPU's values and gradients", "[ops][grid_sample][cuda][gpu]") {
  manual_seed(9);
  const Device g = Device::cuda(0);
  const Tensor x = randn({2, 3, 6, 5}), grid = rand({2, 4, 3, 2}) * 3.0 - 1.5;
  for (const GridSampleOptions o : {GridSampleOptions{.padding_mode = GridSamplePadding::Zeros},
                                    GridSampleOptions{.padding_mode = GridSamplePadding::Reflection},
                                    GridSampleOptions{.mode = GridSampleMode::Bicubic, .padding_mode = GridSamplePadding::Border}}) {
    const Tensor xa = x.clone().requires_grad_(), xb = x.to(g).requires_grad_();
    const Tensor ga = grid.clone().requires_grad_(), gb = grid.to(g).requires_grad_();
    const Tensor ya = grid_sample(xa, ga, o), yb = grid_sample(xb, gb, o);
    CHECK(yb.device() == g);
    const std::vector<double> va = values(ya), vb = values(yb);
    for (std::size_t i = 0; i < va.size(); ++i) CHECK(vb[i] == Approx(va[i]).margin(1e-5));
    const Tensor r = randn(ya.shape());
    sum(ya * r).backward();
    sum(yb * r.to(g)).backward();
    const std::vector<double> dxa = values(xa.grad()), dxb = values(xb.grad());
    for (std::size_t i = 0; i < dxa.size(); ++i) CHECK(dxb[i] == Approx(dxa[i]).margin(1e-5));
    const std::vector<double> dga = values(ga.grad()), dgb = values(gb.grad());
    for (std::size_t i = 0; i < dga.size(); ++i) CHECK(dgb[i] == Approx(dga[i]).margin(1e-4));
  }
  // 5-D, trilinear
  const Tensor v = randn({1, 2, 3, 4, 5}), vg = rand({1, 2, 2, 3, 3}) * 2.4 - 1.2;
  const std::vector<double> va = values(grid_sample(v, vg)), vb = values(grid_sample(v.to(g), vg.to(g)));
  for (std::size_t i = 0; i < va.size(); ++i) CHECK(vb[i] == Approx(va[i]).margin(1e-5));
  const Tensor theta = randn({2, 2, 3});
  const std::vector<double> ta = values(affine_grid(theta, {2, 1, 3, 4})), tb = values(affine_grid(theta.to(g), {2, 1, 3, 4}));
  for (std::size_t i = 0; i < ta.size(); ++i) CHECK(tb[i] == Approx(ta[i]).margin(1e-6));
}
