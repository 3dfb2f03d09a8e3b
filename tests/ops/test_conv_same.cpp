// conv2d_same (PyTorch's padding="same") against PyTorch 2.15 in f64
// (tests/data/reference/torch_conv_same.json, written by tools/reference/gen_torch_conv_same.py):
// odd and even kernels (the odd padding at the bottom/right), dilation, groups; values and the
// gradients of x, w and b; the Conv2d layer's option and its refusals.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/engine.h"
#include "core/factory.h"
#include "nn/conv.h"
#include "ops/conv.h"
#include "ops/ops.h"
#include "reference/json_reference.h"
#include "test_paths.h"
#include "test_util.h"

using namespace mg;

namespace {

Tensor tensor(const nlohmann::json& c, const char* values, const char* shape) { return test::json_tensor(c[values], c[shape]); }

void check_close(const Tensor& got, const nlohmann::json& want, double tol) { test::check_json_close(got, want, tol); }

}  // namespace

TEST_CASE("conv2d_same equals PyTorch's padding=\"same\": values and gradients", "[ops][conv]") {
  const nlohmann::json ref = test::load_json_reference("torch_conv_same.json");
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    const Tensor x = tensor(c, "x", "x_shape").requires_grad_();
    const Tensor w = tensor(c, "w", "w_shape").requires_grad_();
    const Tensor b = from_vector<double>(c["b"].get<std::vector<double>>()).requires_grad_();
    const std::array<int64_t, 2> d{c["dilation"][0].get<int64_t>(), c["dilation"][1].get<int64_t>()};
    INFO("weight " << shape_str(w.shape()) << " dilation " << d[0] << "x" << d[1] << " groups " << c["groups"]);
    const Tensor y = conv2d_same(x, w, b, d, c["groups"].get<int64_t>());
    REQUIRE(y.shape() == Shape(c["y_shape"].get<std::vector<int64_t>>()));
    CHECK(y.size(2) == x.size(2));
    CHECK(y.size(3) == x.size(3));
    check_close(y, c["y"], 1e-12);
    const Tensor r = from_vector<double>(c["r"].get<std::vector<double>>(), y.shape());
    const Tensors g = autograd::grad({sum(y * r)}, {x, w, b});
    check_close(g[0], c["gx"], 1e-12);
    check_close(g[1], c["gw"], 1e-12);
    check_close(g[2], c["gb"], 1e-12);
    ++checked;
  }
  CHECK(checked == 4);
}

TEST_CASE("Conv2d padding_same keeps H and W, prints it, and refuses a stride or padding", "[ops][conv][nn]") {
  nn::Conv2d conv({.in = 2, .out = 3, .kernel = nn::Size2(2, 3), .padding_same = true});
  const Tensor x = randn({1, 2, 5, 6});
  CHECK(conv(x).shape() == Shape{1, 3, 5, 6});
  CHECK(test::values(conv(x)) == test::values(conv2d_same(x, conv.weight, conv.bias)));
  CHECK(conv.layer_name().find("padding=same") != std::string::npos);
  MG_REQUIRE_ERROR(nn::Conv2d({.in = 2, .out = 3, .kernel = 3, .stride = 2, .padding_same = true}),
                   "Conv2d: padding_same needs stride 1 and padding 0, got stride=2, padding=0");
  MG_REQUIRE_ERROR(conv2d_same(x, randn({3, 2, 3})), "conv2d_same: expected a weight [O, C/groups, kH, kW]");
}
