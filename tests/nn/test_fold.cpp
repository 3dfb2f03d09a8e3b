// nn::unfold / nn::fold (nn/fold.h) against PyTorch 2.15's F.unfold / F.fold
// (tests/data/reference/torch_fold.json, written by tools/reference/gen_torch_fold.py): kernels,
// dilations, paddings and strides (overlapping, gapped and padded blocks), batched and unbatched;
// f64 outputs and gradients to 1e-12, f32 outputs and gradients bit for bit (fold adds the taps in
// PyTorch's order). Then fold(unfold(x)) = x times the block count, bf16 (summed in f32, rounded
// once), double backward, the modules, and the refusals.
#include <catch2/catch.hpp>

#include "autograd/engine.h"
#include "core/factory.h"
#include "nn/fold.h"
#include "ops/ops.h"
#include "reference/json_reference.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

nn::Size2 size2(const nlohmann::json& v) { return {v[0].get<int64_t>(), v[1].get<int64_t>()}; }

}  // namespace

TEST_CASE("unfold and fold equal PyTorch's: f64 within 1e-12, f32 bit for bit, with gradients", "[nn][fold]") {
  const nlohmann::json ref = load_json_reference("torch_fold.json");
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    INFO(c["name"].get<std::string>());
    const bool f32 = c["dtype"] == "f32";
    const DType dt = f32 ? DType::F32 : DType::F64;
    const Tensor x = json_tensor(c["x"], c["x_shape"]).to(dt).requires_grad_();
    const nn::Size2 k = size2(c["kernel"]), d = size2(c["dilation"]), p = size2(c["padding"]), s = size2(c["stride"]);
    const auto image = c["image"].get<std::vector<int64_t>>();
    const Tensor y = c["op"] == "unfold"
                         ? nn::unfold(x, {.kernel = k, .dilation = d, .padding = p, .stride = s})
                         : nn::fold(x, {.output_size = {image[image.size() - 2], image.back()},
                                        .kernel = k, .dilation = d, .padding = p, .stride = s});
    REQUIRE(y.shape() == Shape(c["y_shape"].get<std::vector<int64_t>>()));
    REQUIRE(y.dtype() == dt);
    const Tensor gx = autograd::grad({sum(y * json_tensor(c["r"], c["y_shape"]).to(dt))}, {x})[0];
    if (f32) {
      CHECK(values(y) == c["y"].get<std::vector<double>>());
      if (c["op"] == "fold") {
        CHECK(values(gx) == c["grad_x"].get<std::vector<double>>());  // fold's backward moves r's elements
      } else {
        // unfold's backward sums each pixel's taps in the autograd engine's order, not col2im's.
        check_json_close(gx, c["grad_x"], 1e-6, 1e-6);
      }
    } else {
      check_json_close(y, c["y"], 1e-12, 1e-14);
      check_json_close(gx, c["grad_x"], 1e-12, 1e-14);
    }
    ++checked;
  }
  CHECK(checked == 14);
}

TEST_CASE("fold(unfold(x)) is x times the number of blocks covering each pixel", "[nn][fold]") {
  manual_seed(2);
  const Tensor x = randn({2, 3, 7, 6}, {.dtype = DType::F64});
  const nn::UnfoldOptions u{.kernel = {3, 2}, .dilation = {1, 2}, .padding = {1, 1}, .stride = {2, 1}};
  const nn::FoldOptions f{.output_size = {7, 6}, .kernel = u.kernel, .dilation = u.dilation, .padding = u.padding,
                          .stride = u.stride};
  const Tensor cover = nn::fold(nn::unfold(ones_like(x), u), f);
  const Tensor back = nn::fold(nn::unfold(x, u), f);
  CHECK(max(abs(back - x * cover)).item<double>() < 1e-13);
  // Every count is a whole number of blocks, some pixels covered more than once.
  CHECK(max(cover).item<double>() >= 2);
}

TEST_CASE("fold of bf16 blocks sums in f32 and rounds once, unfold moves bits of any dtype", "[nn][fold]") {
  // Three blocks cover the one pixel (padded width 5, kernel 1x3): taps 0, 1 and 2 of blocks 2, 1
  // and 0 add 1, 2^-8 and 2^-8. In f32 that is 1 + 2^-7 exactly; a bf16 sum tap by tap would drop
  // each 2^-8 (1 + 2^-8 rounds to 1 in bf16).
  const float e = 0.00390625f;
  const Tensor cols = from_vector<float>({0, 0, 1, 0, e, 0, e, 0, 0}, {1, 3, 3}).to(DType::BF16);
  const Tensor y = nn::fold(cols, {.output_size = {1, 1}, .kernel = {1, 3}, .padding = {0, 2}});
  REQUIRE(y.dtype() == DType::BF16);
  CHECK(values(y) == std::vector<double>{1.0078125});
  const Tensor ints = arange(0, 12).reshape({1, 1, 3, 4});
  const Tensor u = nn::unfold(ints, {.kernel = 2, .stride = 2});
  CHECK(u.dtype() == DType::I64);
  CHECK(values(u) == std::vector<double>{0, 2, 1, 3, 4, 6, 5, 7});
}

TEST_CASE("unfold and fold are differentiable twice", "[nn][fold]") {
  manual_seed(4);
  const Tensor x = randn({1, 2, 5, 5}, {.dtype = DType::F64}).requires_grad_();
  const Tensor y = nn::fold(nn::unfold(x, {.kernel = 2}), {.output_size = {5, 5}, .kernel = 2});
  const Tensor g = autograd::grad({sum(y * y)}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true)[0];
  // y = x * cover, so d/dx sum(y^2) = 2 cover^2 x and its gradient of sum(g) is 2 cover^2.
  const Tensor gg = autograd::grad({sum(g)}, {x})[0];
  const Tensor cover = nn::fold(nn::unfold(ones_like(x), {.kernel = 2}), {.output_size = {5, 5}, .kernel = 2});
  CHECK(max(abs(gg - cover * cover * 2.0)).item<double>() < 1e-12);
}

TEST_CASE("fold returns new memory, also when a 1x1 kernel makes it a reshape", "[nn][fold]") {
  const Tensor x = zeros({1, 3, 4});
  for (const nn::FoldOptions& o : {nn::FoldOptions{.output_size = {2, 2}, .kernel = 1},
                                   nn::FoldOptions{.output_size = {2, 2}, .kernel = 2, .stride = 2}}) {
    const Tensor cols = o.kernel.h == 1 ? x : zeros({1, 12, 1});
    Tensor y = nn::fold(cols, o);
    CHECK(&y.storage() != &cols.storage());
    y.add_(scalar_like(1, y));
    CHECK(max(abs(cols)).item<double>() == 0.0);
  }
}

TEST_CASE("Unfold and Fold modules, and the refusals", "[nn][fold]") {
  nn::Unfold unfold_layer({.kernel = {2, 3}, .padding = 1});
  CHECK(unfold_layer.forward(zeros({2, 3, 4, 4})).shape() == Shape{2, 18, 5 * 4});
  CHECK(unfold_layer.str().find("kernel_size=2x3, dilation=1, padding=1, stride=1") != std::string::npos);
  nn::Fold fold_layer({.output_size = {4, 4}, .kernel = {2, 3}, .padding = 1});
  CHECK(fold_layer.forward(zeros({2, 18, 20})).shape() == Shape{2, 3, 4, 4});

  MG_REQUIRE_ERROR(nn::unfold(zeros({2, 3}), {.kernel = 2}), "unfold: expected x [N, C, H, W] or [C, H, W]");
  MG_REQUIRE_ERROR(nn::unfold(zeros({1, 1, 2, 2}), {.kernel = 3}), "is smaller than the dilated kernel (3x3)");
  MG_REQUIRE_ERROR(nn::unfold(zeros({1, 1, 2, 2}), {.kernel = 0}), "unfold: kernel must be positive");
  MG_REQUIRE_ERROR(nn::unfold(zeros({1, 1, 2, 2}), {.kernel = 1, .padding = -1}), "padding must be >= 0");
  MG_REQUIRE_ERROR(nn::fold(zeros({1, 10, 4}), {.output_size = 3, .kernel = 2}),
                   "must be divisible by the kernel's 4 taps");
  MG_REQUIRE_ERROR(nn::fold(zeros({1, 8, 5}), {.output_size = 3, .kernel = 2}),
                   "has 5 blocks in its last dim, but output_size 3 with kernel_size=2");
  MG_REQUIRE_ERROR(nn::fold(zeros({1, 8, 4}, {.dtype = DType::I32}), {.output_size = 3, .kernel = 2}),
                   "fold: expected a floating tensor");
  MG_REQUIRE_ERROR(nn::fold(zeros({8}), {.output_size = 3, .kernel = 2}), "fold: expected x [N, C·kh·kw, L]");
  MG_REQUIRE_ERROR(nn::Fold({.output_size = 0, .kernel = 2}), "Fold: output_size must be positive");
  MG_REQUIRE_ERROR(nn::Unfold({.kernel = 2, .stride = 0}), "Unfold: stride must be positive");
  MG_REQUIRE_ERROR(nn::unfold(zeros({1, 1, 2, 2}), {.kernel = 3, .dilation = int64_t(1) << 62}),
                   "overflows 64-bit sizes");
}
