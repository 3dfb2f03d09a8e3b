// max_pool2d and avg_pool2d with ceil_mode against PyTorch 2.15 in f64
// (tests/data/reference/torch_pool_ceil.json, written by tools/reference/gen_torch_pool_ceil.py):
// output sizes (rounded up, the last window dropped when it would start in the right padding),
// values with PyTorch's divisor for a window hanging over the end, and the input gradient; NCHW
// and channels-last give the same bits; the layers pass the option and print it.
#include <catch2/catch.hpp>

#include <array>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/engine.h"
#include "core/factory.h"
#include "nn/pooling.h"
#include "ops/conv.h"
#include "ops/ops.h"
#include "test_paths.h"
#include "test_util.h"

using namespace mg;

namespace {

std::vector<double> flat(const Tensor& t) {
  const Tensor c = contiguous(to(t.detach(), DType::F64));
  return std::vector<double>(c.data<double>(), c.data<double>() + c.numel());
}
std::array<int64_t, 2> a2(const nlohmann::json& j) { return {j[0].get<int64_t>(), j[1].get<int64_t>()}; }
Shape shape_of(const nlohmann::json& j) { return j.get<std::vector<int64_t>>(); }

}  // namespace

TEST_CASE("max_pool2d and avg_pool2d with ceil_mode equal PyTorch's: sizes, values, gradients", "[ops][pool]") {
  std::ifstream f(test::source_dir() + "/tests/data/reference/torch_pool_ceil.json");
  REQUIRE(f.good());
  const nlohmann::json ref = nlohmann::json::parse(f);
  const Tensor x0 = from_vector<double>(ref["x"].get<std::vector<double>>(), shape_of(ref["x_shape"]));
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    const bool is_max = c["kind"] == "max";
    const auto k = a2(c["kernel"]), s = a2(c["stride"]), p = a2(c["padding"]), d = a2(c["dilation"]);
    const bool inc = c["count_include_pad"].get<bool>();
    const bool ceil_mode = !c.contains("ceil_mode") || c["ceil_mode"].get<bool>();
    const std::optional<int64_t> divisor =
        c.contains("divisor_override") ? std::optional<int64_t>(c["divisor_override"].get<int64_t>()) : std::nullopt;
    INFO(c["kind"] << " kernel " << k[0] << "x" << k[1] << " stride " << s[0] << "x" << s[1] << " padding " << p[0]
                   << "x" << p[1] << " dilation " << d[0] << "x" << d[1] << " include_pad " << inc);
    const auto pool = [&](const Tensor& x, bool ceil) {
      return is_max ? max_pool2d(x, k, s, p, d, ceil) : avg_pool2d(x, k, s, p, inc, ceil, divisor);
    };
    for (bool channels_last : {false, true}) {
      const Tensor x = (channels_last ? contiguous(x0, MemoryFormat::ChannelsLast) : x0.clone()).requires_grad_();
      const Tensor y = pool(x, ceil_mode);
      REQUIRE(y.shape() == shape_of(c["shape"]));
      CHECK(pool(x0, false).shape() == shape_of(c["floor_shape"]));
      const std::vector<double> want = c["y"].get<std::vector<double>>(), got = flat(y);
      for (std::size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-14).margin(1e-15));
      const Tensor r = from_vector<double>(c["r"].get<std::vector<double>>(), y.shape());
      const Tensor g = autograd::grad({sum(y * r)}, {x})[0];
      const std::vector<double> want_g = c["grad"].get<std::vector<double>>(), got_g = flat(g);
      for (std::size_t i = 0; i < want_g.size(); ++i) CHECK(got_g[i] == Approx(want_g[i]).epsilon(1e-13).margin(1e-15));
    }
    ++checked;
  }
  CHECK(checked == 12);
}

TEST_CASE("avg_pool2d divisor_override: the layer passes it, prints it, and refuses 0", "[ops][pool][nn]") {
  nn::AvgPool2d ap({.kernel = 2, .divisor_override = 3});
  CHECK(ap.layer_name().find("divisor_override=3") != std::string::npos);
  const Tensor x = ones({1, 1, 4, 4});
  CHECK(test::values(ap(x)) == std::vector<double>(4, double(4.0f / 3.0f)));  // window sum 4, over 3
  MG_REQUIRE_ERROR(nn::AvgPool2d({.kernel = 2, .divisor_override = 0}), "AvgPool2d: divisor_override must be > 0, got 0");
  MG_REQUIRE_ERROR(avg_pool2d(x, {2, 2}, {0, 0}, {0, 0}, true, false, -1), "avg_pool2d: divisor_override must be > 0, got -1");
}

TEST_CASE("pooling layers pass ceil_mode and print it", "[ops][pool][nn]") {
  const Tensor x = randn({1, 2, 7, 7});
  nn::MaxPool2d mp({.kernel = 2, .ceil_mode = true});
  nn::AvgPool2d ap({.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true});
  CHECK(mp(x).shape() == Shape{1, 2, 4, 4});
  CHECK(test::values(mp(x)) == test::values(max_pool2d(x, {2, 2}, {0, 0}, {0, 0}, {1, 1}, true)));
  CHECK(ap(x).shape() == Shape{1, 2, 4, 4});
  CHECK(mp.layer_name().find("ceil_mode=true") != std::string::npos);
  CHECK(ap.layer_name().find("ceil_mode=true") != std::string::npos);
  CHECK(nn::MaxPool2d({.kernel = 2}).layer_name().find("ceil_mode") == std::string::npos);
}
