// adaptive_max_pool1d/2d/3d (ops/adaptive_max_pool.h) against PyTorch 2.15 in f64
// (tests/data/reference/torch_adaptive_max.json, tools/reference/gen_torch_adaptive_max.py):
// overlapping windows, outputs larger than the input, unbatched input, and integer-valued inputs
// whose ties must send the gradient where PyTorch's does; outputs and input gradients exactly.
// Then bf16, the layers and the refusals.
#include <catch2/catch.hpp>

#include "autograd/engine.h"
#include "core/factory.h"
#include "nn/adaptive_max_pool.h"
#include "ops/adaptive_max_pool.h"
#include "ops/ops.h"
#include "reference/json_reference.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

TEST_CASE("adaptive max pooling equals PyTorch's in f64, tie-breaking gradients included", "[ops][pool]") {
  const nlohmann::json ref = load_json_reference("torch_adaptive_max.json");
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    INFO(c["name"].get<std::string>());
    const Tensor x = json_tensor(c["x"], c["shape"]).requires_grad_();
    const auto out = c["output"].get<std::vector<int64_t>>();
    const std::string op = c["op"];
    const Tensor y = op == "adaptive_max_pool1d"   ? adaptive_max_pool1d(x, out[0])
                     : op == "adaptive_max_pool2d" ? adaptive_max_pool2d(x, {out[0], out[1]})
                                                   : adaptive_max_pool3d(x, {out[0], out[1], out[2]});
    REQUIRE(y.shape() == Shape(c["y_shape"].get<std::vector<int64_t>>()));
    CHECK(values(y) == c["y"].get<std::vector<double>>());
    const Tensor g = autograd::grad({sum(y * json_tensor(c["r"], c["y_shape"]))}, {x})[0];
    check_json_close(g, c["grad_x"], 1e-15, 1e-15);
    ++checked;
  }
  CHECK(checked == 6);
}

TEST_CASE("adaptive max pooling keeps bf16 exact, the layers, and the refusals", "[ops][pool]") {
  manual_seed(2);
  const Tensor x = randn({2, 3, 9, 7});
  CHECK(values(adaptive_max_pool2d(x.to(DType::BF16), {3, 2})) ==
        values(adaptive_max_pool2d(x.to(DType::BF16).to(DType::F32), {3, 2})));
  CHECK(nn::AdaptiveMaxPool2d({.output = {1, 1}}).forward(x).shape() == Shape{2, 3, 1, 1});
  CHECK(nn::AdaptiveMaxPool1d({.output = 2}).forward(randn({3, 5})).shape() == Shape{3, 2});
  CHECK(nn::AdaptiveMaxPool3d({.output = 2}).forward(randn({1, 2, 3, 4, 5})).shape() == Shape{1, 2, 2, 2, 2});
  MG_REQUIRE_ERROR(adaptive_max_pool2d(randn({4}), {2, 2}), "adaptive_max_pool2d: expected x [N, C, H, W] or [C, H, W]");
  MG_REQUIRE_ERROR(adaptive_max_pool1d(randn({1, 2, 3}), 0), "output sizes must be >= 1, got 0");
  MG_REQUIRE_ERROR(adaptive_max_pool2d(randn({1, 2, 0, 3}), {1, 1}), "expected a non-empty input");
  MG_REQUIRE_ERROR(adaptive_max_pool1d(zeros({1, 2, 3}, {.dtype = DType::I32}), 1), "expected a floating input");
  MG_REQUIRE_ERROR(nn::AdaptiveMaxPool2d({.output = {0, 2}}), "AdaptiveMaxPool2d: output sizes must be >= 1");
  MG_REQUIRE_ERROR(nn::AdaptiveMaxPool2d({.output = 2}).forward(randn({5})), "AdaptiveMaxPool2d");
}
