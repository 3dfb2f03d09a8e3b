// Layer options a PyTorch user sets, against PyTorch 2.15 in f64
// (tests/data/reference/torch_layer_options.json, written by
// tools/reference/gen_torch_layer_options.py): Embedding's scale_grad_by_freq, Conv3d's
// padding_same and padding_mode, AvgPool3d's divisor_override, LPPool3d — outputs and the gradients of the
// input and every parameter; then the same options in bf16 and their refusals.
#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "core/factory.h"
#include "nn/nn.h"
#include "ops/conv3d.h"
#include "ops/norm.h"
#include "ops/ops.h"
#include "reference/json_reference.h"
#include "test_util.h"

using namespace mg;

namespace {

nn::Size3 size3(const nlohmann::json& v) {
  const auto s = v.get<std::vector<int64_t>>();
  return {s[0], s[1], s[2]};
}

PadMode pad_mode(const std::string& name) {
  if (name == "reflect") return PadMode::Reflect;
  if (name == "replicate") return PadMode::Replicate;
  if (name == "circular") return PadMode::Circular;
  REQUIRE(name == "zeros");
  return PadMode::Constant;
}

std::shared_ptr<nn::UnaryModule> layer_of(const nlohmann::json& c) {
  const std::string kind = c["kind"].get<std::string>();
  const nlohmann::json& o = c["kw"];
  if (kind == "embedding") {
    return nn::make<nn::Embedding>(
        {.num = o["num"].get<int64_t>(),
         .dim = o["dim"].get<int64_t>(),
         .padding_idx = o["padding_idx"].is_null() ? std::nullopt : std::optional<int64_t>(o["padding_idx"].get<int64_t>()),
         .scale_grad_by_freq = true});
  }
  if (kind == "conv3d") {
    const bool same = o["padding"].is_string();
    return nn::make<nn::Conv3d>({.in = o["in"].get<int64_t>(),
                                 .out = o["out"].get<int64_t>(),
                                 .kernel = size3(o["kernel"]),
                                 .padding = same ? nn::Size3(0) : size3(o["padding"]),
                                 .dilation = size3(o["dilation"]),
                                 .groups = o["groups"].get<int64_t>(),
                                 .padding_same = same,
                                 .padding_mode = pad_mode(o["padding_mode"].get<std::string>())});
  }
  if (kind == "lp_pool3d") {
    return nn::make<nn::LPPool3d>({.norm_type = o["norm_type"].get<double>(),
                                   .kernel = size3(o["kernel"]),
                                   .stride = size3(o["stride"]),
                                   .ceil_mode = o["ceil_mode"].get<bool>()});
  }
  REQUIRE(kind == "avg_pool3d");
  return nn::make<nn::AvgPool3d>({.kernel = size3(o["kernel"]),
                                  .stride = size3(o["stride"]),
                                  .padding = size3(o["padding"]),
                                  .count_include_pad = o["count_include_pad"].get<bool>(),
                                  .ceil_mode = o["ceil_mode"].get<bool>(),
                                  .divisor_override = o["divisor"].get<int64_t>()});
}

}  // namespace

TEST_CASE("Embedding scale_grad_by_freq, Conv3d padding_same and padding_mode, AvgPool3d divisor_override, "
          "LPPool3d equal PyTorch's in f64, every gradient included",
          "[nn][conv3d][embedding]") {
  const nlohmann::json ref = test::load_json_reference("torch_layer_options.json");
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    INFO("case " << c["name"].get<std::string>());
    auto layer = layer_of(c);
    layer->to(DType::F64);
    {
      NoGradGuard no_grad;
      for (auto& [name, p] : layer->named_parameters()) p.copy_(test::json_tensor(c["params"][name], nlohmann::json(p.shape())));
    }
    const bool lookup = c["kind"] == "embedding";
    Tensor x = test::json_tensor(c["x"], c["x_shape"]);
    if (lookup) {
      x = x.to(DType::I64);
    } else {
      x.requires_grad_();
    }
    const Tensor y = (*layer)(x);
    REQUIRE(y.shape() == Shape(c["y_shape"].get<std::vector<int64_t>>()));
    test::check_json_close(y, c["y"]);
    Tensors wrt;
    std::vector<std::string> names;
    if (!lookup) {
      wrt.push_back(x);
      names.push_back("input");
    }
    for (auto& [name, p] : layer->named_parameters()) {
      wrt.push_back(p);
      names.push_back(name);
    }
    const Tensors g = autograd::grad({sum(y * test::json_tensor(c["r"], c["y_shape"]))}, wrt);
    for (size_t i = 0; i < g.size(); ++i) {
      INFO("gradient of " << names[i]);
      test::check_json_close(g[i], c["grads"][names[i]]);
    }
    ++checked;
  }
  CHECK(checked == 12);
}

TEST_CASE("scale_grad_by_freq divides each lookup's gradient by its index's count, in every dtype and through "
          "the functional op",
          "[nn][embedding]") {
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    INFO(dtype_name(dt));
    const Tensor w = ones({4, 2}, {.dtype = dt}).requires_grad_();
    // index 1 three times, index 3 once, index 0 (the padding row) twice
    const Tensor idx = from_vector<int64_t>({1, 3, 1, 0, 1, 0}, {2, 3});
    const Tensor y = embedding(w, idx, 0, /*scale_grad_by_freq=*/true);
    sum(y * 3.0).backward();
    // rows: 0 padding -> 0; 1: three lookups of 3/3; 2: none; 3: one lookup of 3/1
    CHECK(test::values(w.grad().to(DType::F64)) == test::V({0, 0, 3, 3, 0, 0, 3, 3}));
  }
  const Tensor w = ones({3, 1}, {.dtype = DType::F64}).requires_grad_();
  sum(embedding(w, from_vector<int64_t>({2, 2, 2}, {3}), std::nullopt, false)).backward();
  CHECK(test::values(w.grad()) == test::V({0, 0, 3}));  // unscaled: the sum of the three lookups
  nn::Embedding emb({.num = 3, .dim = 2, .scale_grad_by_freq = true});
  CHECK(emb.str().find("scale_grad_by_freq=true") != std::string::npos);
}

TEST_CASE("Conv3d padding_same and padding_mode, AvgPool3d divisor_override: bf16 near f64, reprs and refusals",
          "[nn][conv3d]") {
  nn::Conv3d conv({.in = 2, .out = 3, .kernel = {2, 3, 3}, .padding_same = true, .padding_mode = PadMode::Reflect});
  const Tensor x = randn({1, 2, 3, 4, 5});
  const Tensor y = conv(x);
  CHECK(y.shape() == Shape({1, 3, 3, 4, 5}));
  conv.to(DType::BF16);
  const Tensor yb = conv(x.to(DType::BF16));
  CHECK(yb.dtype() == DType::BF16);
  CHECK(test::values(amax(abs(yb.to(DType::F32) - y)))[0] < 0.1);
  CHECK(conv.str().find("padding=same") != std::string::npos);
  CHECK(conv.str().find("padding_mode=reflect") != std::string::npos);
  MG_REQUIRE_ERROR(nn::Conv3d({.in = 1, .out = 1, .kernel = 3, .stride = 2, .padding_same = true}),
                   "Conv3d: padding_same needs stride 1 and padding 0");
  // Reflect needs each amount below the dim's size: a depth of 1 cannot reflect a padding of 1.
  nn::Conv3d reflect({.in = 1, .out = 1, .kernel = 3, .padding = 1, .padding_mode = PadMode::Reflect});
  MG_REQUIRE_ERROR(reflect(randn({1, 1, 1, 4, 4})), "Conv3d");

  nn::AvgPool3d pool({.kernel = 2, .divisor_override = 3});
  const Tensor p = pool(ones({1, 1, 2, 2, 2}, {.dtype = DType::BF16}));
  CHECK(test::values(p.to(DType::F64)) == test::V({double(float(BFloat16(8.0f / 3.0f)))}));
  CHECK(pool.str().find("divisor_override=3") != std::string::npos);
  MG_REQUIRE_ERROR(nn::AvgPool3d({.kernel = 2, .divisor_override = 0}), "AvgPool3d: divisor_override must be > 0");
  MG_REQUIRE_ERROR(avg_pool3d(ones({1, 1, 2, 2, 2}), {2, 2, 2}, {0, 0, 0}, {0, 0, 0}, true, false, -1),
                   "avg_pool3d: divisor_override must be > 0");
}
