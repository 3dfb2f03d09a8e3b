// pad (ops/pad.h) and Conv2d's padding_mode against PyTorch 2.15 in f64
// (tests/data/reference/torch_pad.json, written by tools/reference/gen_torch_pad.py): every mode,
// a constant value and negative amounts (crops), 1 to 3 padded dims, values and input gradients;
// Conv2d with reflect / replicate / circular padding, stride, dilation and padding_same with an
// even kernel, values and the gradients of x, weight and bias. Then dtypes (bf16 kept, integers),
// the nn::Pad layer, and the refusals.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/engine.h"
#include "core/factory.h"
#include "nn/conv.h"
#include "nn/padding.h"
#include "ops/ops.h"
#include "ops/pad.h"
#include "reference/json_reference.h"
#include "test_paths.h"
#include "test_util.h"

using namespace mg;

namespace {

Tensor tensor(const nlohmann::json& c, const char* values, const char* shape) { return test::json_tensor(c[values], c[shape]); }

void check_close(const Tensor& got, const nlohmann::json& want, double tol) { test::check_json_close(got, want, tol); }

PadMode mode_of(const std::string& m) {
  if (m == "reflect") return PadMode::Reflect;
  if (m == "replicate") return PadMode::Replicate;
  if (m == "circular") return PadMode::Circular;
  return PadMode::Constant;
}

nlohmann::json load() { return test::load_json_reference("torch_pad.json"); }

nn::Size2 size2(const nlohmann::json& v) { return nn::Size2(v[0].get<int64_t>(), v[1].get<int64_t>()); }

}  // namespace

TEST_CASE("pad equals PyTorch's F.pad in every mode: values and input gradients", "[ops][pad]") {
  const nlohmann::json ref = load();
  int checked = 0;
  for (const auto& c : ref["pad"]) {
    const Tensor x = tensor(c, "x", "x_shape").requires_grad_();
    const std::vector<int64_t> amounts = c["pad"].get<std::vector<int64_t>>();
    INFO(c["mode"].get<std::string>() << " " << shape_str(x.shape()) << " pad " << c["pad"].dump());
    const Tensor y = pad(x, amounts, mode_of(c["mode"]), c["value"].get<double>());
    REQUIRE(y.shape() == Shape(c["y_shape"].get<std::vector<int64_t>>()));
    check_close(y, c["y"], 1e-15);
    const Tensor r = from_vector<double>(c["r"].get<std::vector<double>>(), y.shape());
    check_close(autograd::grad({sum(y * r)}, {x})[0], c["gx"], 1e-12);
    ++checked;
  }
  CHECK(checked == 10);
}

TEST_CASE("Conv2d padding_mode reflect, replicate and circular equal PyTorch's: values and gradients", "[ops][pad][nn]") {
  const nlohmann::json ref = load();
  int checked = 0;
  for (const auto& c : ref["conv"]) {
    const bool same = c["padding"].is_string();
    nn::Conv2d conv({.in = c["in"].get<int64_t>(), .out = c["out"].get<int64_t>(), .kernel = size2(c["kernel"]),
                     .stride = size2(c["stride"]), .padding = same ? nn::Size2(0) : size2(c["padding"]),
                     .dilation = size2(c["dilation"]),
                     .padding_same = same, .padding_mode = mode_of(c["mode"])});
    conv.to(DType::F64);
    {
      NoGradGuard no_grad;
      conv.weight.copy_(from_vector<double>(c["w"].get<std::vector<double>>(), conv.weight.shape()));
      conv.bias.copy_(from_vector<double>(c["b"].get<std::vector<double>>()));
    }
    const Tensor x = tensor(c, "x", "x_shape").requires_grad_();
    INFO(c["mode"].get<std::string>() << " kernel " << shape_str(conv.weight.shape()) << (same ? " same" : ""));
    const Tensor y = conv(x);
    REQUIRE(y.shape() == Shape(c["y_shape"].get<std::vector<int64_t>>()));
    check_close(y, c["y"], 1e-12);
    const Tensor r = from_vector<double>(c["r"].get<std::vector<double>>(), y.shape());
    const Tensors g = autograd::grad({sum(y * r)}, {x, conv.weight, conv.bias});
    check_close(g[0], c["gx"], 1e-12);
    check_close(g[1], c["gw"], 1e-12);
    check_close(g[2], c["gb"], 1e-12);
    ++checked;
  }
  CHECK(checked == 5);
  nn::Conv2d reflect({.in = 1, .out = 1, .kernel = 3, .padding = 1, .padding_mode = PadMode::Reflect});
  CHECK(reflect.str().find("padding_mode=reflect") != std::string::npos);
}

TEST_CASE("pad keeps the dtype (bf16 exact, integers) and nn::Pad is F.pad", "[ops][pad][nn]") {
  const Tensor x = reshape(arange(0, 12, 1, {.dtype = DType::I64}), {3, 4});
  const Tensor r = pad(x, {1, 2}, PadMode::Reflect);
  CHECK(r.dtype() == DType::I64);
  CHECK(test::values(select(r, 0, 0)) == std::vector<double>{1, 0, 1, 2, 3, 2, 1});
  CHECK(test::values(select(pad(x, {2, 1}, PadMode::Circular), 0, 1)) == std::vector<double>{6, 7, 4, 5, 6, 7, 4});
  CHECK(test::values(select(pad(x, {0, 0, 1, 0}, PadMode::Replicate), 1, 3)) == std::vector<double>{3, 3, 7, 11});
  const Tensor h = to(randn({2, 5}), DType::BF16);
  const Tensor ph = pad(h, {2, 2}, PadMode::Constant, 0.25);
  CHECK(ph.dtype() == DType::BF16);
  CHECK(test::values(slice(ph, 1, 2, 7)) == test::values(h));
  CHECK(test::values(select(ph, 1, 0)) == std::vector<double>{0.25, 0.25});
  nn::Pad layer({.pad = {1, 1, 1, 1}, .mode = PadMode::Replicate});
  CHECK(test::values(layer(to(x, DType::F32))) == test::values(pad(to(x, DType::F32), {1, 1, 1, 1}, PadMode::Replicate)));
  CHECK(layer.str() == "Pad(pad=(1, 1, 1, 1), mode=replicate)");
}

// PyTorch's F.pad always returns new memory; zero amounts or crops alone returned x or a view of
// it, so an in-place op on the result changed the input.
TEST_CASE("pad returns new memory also for zero amounts and crops", "[ops][pad]") {
  for (const PadMode mode : {PadMode::Constant, PadMode::Reflect, PadMode::Replicate, PadMode::Circular}) {
    const Tensor x = ones({2, 3, 4});
    Tensor y = pad(x, {0, 0}, mode);
    y.add_(1.0);
    CHECK(test::values(x) == std::vector<double>(24, 1.0));
  }
  const Tensor x = ones({2, 3}).requires_grad_();
  Tensor cropped = pad(x, {-1, 0});
  CHECK(cropped.shape() == Shape{2, 2});
  CHECK(&cropped.storage() != &x.storage());
  cropped.sum().backward();  // still differentiable through the copy
  CHECK(test::values(x.grad()) == std::vector<double>{0, 1, 1, 0, 1, 1});
}

TEST_CASE("pad: bad amounts and modes are named errors", "[ops][pad]") {
  const Tensor x = zeros({2, 3});
  MG_REQUIRE_ERROR(pad(x, {1, 2, 3}), "pad: expected an even number of amounts");
  MG_REQUIRE_ERROR(pad(x, {1, 1, 1, 1, 1, 1}), "pad: 6 amounts pad 3 dims, but the input is [2, 3] f32 cpu");
  MG_REQUIRE_ERROR(pad(x, {3, 0}, PadMode::Reflect), "pad: reflect padding (3, 0) of dim 1 must be smaller than its size 3");
  MG_REQUIRE_ERROR(pad(x, {0, 4}, PadMode::Circular), "pad: circular padding (0, 4) of dim 1 must be at most its size 3");
  MG_REQUIRE_ERROR(pad(x, {-1, 0}, PadMode::Replicate), "pad: replicate padding needs amounts >= 0, got (-1, 0) for dim 1");
  MG_REQUIRE_ERROR(pad(x, {-2, -2}), "pad: cropping (-2, -2) from dim 1 of size 3 leaves a negative size");
  MG_REQUIRE_ERROR(pad(x, {1, 1}, PadMode::Reflect, 2.0), "pad: a value is for the constant mode only, got 2 with mode reflect");
  MG_REQUIRE_ERROR(pad(zeros({2, 0}), {1, 1}, PadMode::Replicate), "pad: replicate padding of dim 1 needs a non-empty dim");
  MG_REQUIRE_ERROR(nn::Pad({.pad = {1}}), "Pad: expected an even, non-zero number of amounts");
  MG_REQUIRE_ERROR(nn::Pad({.pad = {1, -1}, .mode = PadMode::Circular}), "Pad: circular padding needs amounts >= 0, got -1");
}
