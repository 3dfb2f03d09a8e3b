// The activation composites (ops/activation_composites.h) and their layers (nn/activation_more.h)
// against PyTorch 2.15's torch.nn.functional in f64 (tests/data/reference/torch_activations_more.json,
// written by tools/reference/gen_torch_activations_more.py): inputs with the kinks (±lambd, the
// threshold, 0), ±40 and random values; values, the input gradient (and PReLU's weight gradient) of
// sum(y * r), and the forward with a NaN in the input (NaN where PyTorch gives NaN). Then dtypes
// (bf16 kept, rounded once; softmin f32 under autocast), the layers and the refusals.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <map>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "core/factory.h"
#include "nn/activation_more.h"
#include "ops/activation_composites.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "reference/json_reference.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

// Stored values with null for NaN.
std::vector<double> stored(const nlohmann::json& j) {
  std::vector<double> v;
  for (const auto& e : j) v.push_back(e.is_null() ? std::nan("") : e.get<double>());
  return v;
}

using Fn = std::function<Tensor(const Tensor& x, const Tensor& w)>;

const std::map<std::string, Fn>& functions() {
  static const std::map<std::string, Fn> f = {
      {"softmin_dim1", [](const Tensor& x, const Tensor&) { return softmin(x, 1); }},
      {"softmin_dim0", [](const Tensor& x, const Tensor&) { return softmin(x, 0); }},
      {"glu_last", [](const Tensor& x, const Tensor&) { return glu(x, -1); }},
      {"glu_dim0", [](const Tensor& x, const Tensor&) { return glu(x, 0); }},
      {"logsigmoid", [](const Tensor& x, const Tensor&) { return logsigmoid(x); }},
      {"softsign", [](const Tensor& x, const Tensor&) { return softsign(x); }},
      {"tanhshrink", [](const Tensor& x, const Tensor&) { return tanhshrink(x); }},
      {"hardshrink_default", [](const Tensor& x, const Tensor&) { return hardshrink(x); }},
      {"hardshrink_0_25", [](const Tensor& x, const Tensor&) { return hardshrink(x, 0.25); }},
      {"softshrink_default", [](const Tensor& x, const Tensor&) { return softshrink(x); }},
      {"softshrink_1", [](const Tensor& x, const Tensor&) { return softshrink(x, 1.0); }},
      {"threshold_0_5_to_minus_1", [](const Tensor& x, const Tensor&) { return threshold(x, 0.5, -1.0); }},
      {"prelu_shared_4d", [](const Tensor& x, const Tensor& w) { return prelu(x, w); }},
      {"prelu_per_channel_4d", [](const Tensor& x, const Tensor& w) { return prelu(x, w); }},
      {"prelu_per_channel_2d", [](const Tensor& x, const Tensor& w) { return prelu(x, w); }},
      {"prelu_1d", [](const Tensor& x, const Tensor& w) { return prelu(x, w); }},
      {"prelu_per_channel_3d", [](const Tensor& x, const Tensor& w) { return prelu(x, w); }},
  };
  return f;
}

}  // namespace

TEST_CASE("softmin, glu, logsigmoid, softsign, tanhshrink, hardshrink, softshrink, threshold and prelu equal PyTorch's "
          "in f64: values, gradients and NaN",
          "[ops][activation]") {
  const nlohmann::json ref = load_json_reference("torch_activations_more.json");
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    const std::string name = c["name"].get<std::string>();
    INFO(name);
    REQUIRE(functions().count(name));
    const Fn& f = functions().at(name);
    const Tensor x = json_tensor(c["x"], c["shape"]).requires_grad_();
    const Tensor w = c.contains("weight") ? json_tensor(c["weight"], c["weight_shape"]).requires_grad_() : Tensor();
    const Tensor y = f(x, w);
    REQUIRE(y.shape() == Shape(c["y_shape"].get<std::vector<int64_t>>()));
    check_json_close(y, c["y"], 1e-13, 1e-15);
    Tensors wrt = {x};
    if (w.defined()) wrt.push_back(w);
    const Tensors g = autograd::grad({sum(y * json_tensor(c["r"], c["y_shape"]))}, wrt);
    check_json_close(g[0], c["grad_x"], 1e-13, 1e-15);
    if (w.defined()) check_json_close(g[1], c["grad_weight"], 1e-13, 1e-15);
    // A NaN in the input: NaN exactly where PyTorch gives NaN, the other values equal.
    std::vector<double> xn = stored(c["x"]);
    xn[1] = std::nan("");
    const std::vector<double> got = values(f(from_vector<double>(xn, c["shape"].get<std::vector<int64_t>>()), w.defined() ? w.detach() : Tensor()));
    const std::vector<double> want = stored(c["y_nan"]);
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("element " << i);
      CHECK(std::isnan(got[i]) == std::isnan(want[i]));
      if (!std::isnan(want[i])) CHECK(got[i] == Approx(want[i]).epsilon(1e-13).margin(1e-15));
    }
    ++checked;
  }
  CHECK(checked == 17);
}

TEST_CASE("activation composites keep bf16 (rounded once from f32), and softmin runs f32 under autocast", "[ops][activation][amp]") {
  manual_seed(3);
  const Tensor x = randn({4, 6}) * 3.0;
  const Tensor xb = x.to(DType::BF16);
  const Tensor xr = xb.to(DType::F32);  // the bf16 input, exactly
  CHECK(values(glu(xb)) == values(glu(xr).to(DType::BF16)));
  CHECK(glu(xb).dtype() == DType::BF16);
  CHECK(values(softshrink(xb)) == values(softshrink(xr).to(DType::BF16)));
  CHECK(values(prelu(xb, full({6}, 0.25).to(DType::BF16))) == values(prelu(xr, full({6}, 0.25)).to(DType::BF16)));
  {
    amp::Autocast ac({.device = DeviceType::CPU, .dtype = DType::BF16});
    CHECK(softmin(xb, 1).dtype() == DType::F32);
    CHECK(logsigmoid(xb).dtype() == DType::BF16);
    // prelu is a lower op (DESIGN §4; PyTorch 2.15's CPU autocast gives bf16 for f32 and mixed
    // inputs alike): the inputs rounded to bf16, the slope product in f32, rounded once.
    CHECK(prelu(x, full({6}, 0.25)).dtype() == DType::BF16);
    CHECK(prelu(xb, full({6}, 0.25)).dtype() == DType::BF16);
    CHECK(values(prelu(x, full({6}, 0.3))) == values(prelu(xr, full({6}, 0.3).to(DType::BF16).to(DType::F32)).to(DType::BF16)));
  }
}

TEST_CASE("prelu at +inf, the shrinks' lambd in the input's dtype, logsigmoid's +0 (PyTorch 2.15's values)",
          "[ops][activation]") {
  {  // The weight's gradient comes from the non-positive x only: 0 at +inf, not 0 * inf = NaN.
    const Tensor x = from_vector<float>({INFINITY, -1.0f, 2.0f}, {1, 3}).requires_grad_();
    const Tensor w = full({1}, 0.25).requires_grad_();
    prelu(x, w).sum().backward();
    CHECK(values(w.grad()) == std::vector<double>{-1.0});
    CHECK(values(x.grad()) == std::vector<double>{1.0, 0.25, 1.0});
    CHECK(values(prelu(x.detach(), w.detach())) == std::vector<double>{INFINITY, -0.25, 2.0});
  }
  {  // lambd 0.3 is 0.30078125 in bf16 and 0.300048828125 in f16, as PyTorch converts it.
    const Tensor b = from_vector<float>({0.30078125f, 0.5f, -0.30078125f}).to(DType::BF16).requires_grad_();
    const Tensor y = hardshrink(b, 0.3);
    y.sum().backward();
    CHECK(values(y) == std::vector<double>{0.0, 0.5, 0.0});
    CHECK(values(b.grad()) == std::vector<double>{0.0, 1.0, 0.0});
    CHECK(values(softshrink(b.detach(), 0.3)) == std::vector<double>{0.0, 0.19921875, 0.0});
    const Tensor h = from_vector<float>({0.30078125f}).to(DType::F16);
    CHECK(values(softshrink(h, 0.3)) == std::vector<double>{0.000732421875});
    // f32 and f64 keep their own rounding of lambd: 0.3f > 0.3, so 0.3 (f64) is kept in f64.
    CHECK(values(hardshrink(from_vector<double>({0.3}), 0.3)) == std::vector<double>{0.0});
    CHECK(values(softshrink(from_vector<double>({0.5}), 0.25)) == std::vector<double>{0.25});
    MG_REQUIRE_ERROR(softshrink(randn({2}), INFINITY), "softshrink: lambd must be in [0, 3.40282e+38] for a f32 input, got inf");
    MG_REQUIRE_ERROR(softshrink(randn({2}).to(DType::F16), 70000.0), "softshrink: lambd must be in [0, 65504] for a f16 input");
    MG_REQUIRE_ERROR(hardshrink(randn({2}).to(DType::F16), 70000.0),
                     "hardshrink: lambd 70000 cannot be converted to f16 (the input's dtype) without overflow");
    CHECK(values(hardshrink(from_vector<float>({5.0f, -1e30f}), INFINITY)) == std::vector<double>{0.0, 0.0});
  }
  {  // hardtanh of an integer tensor keeps its dtype, the bounds truncated (PyTorch: [2, -1, 0]);
     // it was f32 [2.7, -1.5, 0].
    const Tensor y = hardtanh(from_vector<int32_t>({3, -3, 0}), -1.5, 2.7);
    CHECK(y.dtype() == DType::I32);
    CHECK(values(y) == std::vector<double>{2, -1, 0});
    CHECK(relu6(from_vector<int64_t>({3, -3, 9})).dtype() == DType::I64);
  }
  {  // logsigmoid of a large x is +0 where softplus(-x) underflows, in every dtype.
    for (DType dt : {DType::F32, DType::F64, DType::BF16}) {
      const double big = dt == DType::F64 ? 800.0 : 110.0;  // f64 resolves e^-110: -1.69e-48
      const Tensor y = logsigmoid(from_vector<double>({big, 1000.0, INFINITY}).to(dt));
      for (double v : values(y)) CHECK((v == 0.0 && !std::signbit(v)));
    }
  }
}

TEST_CASE("the activation layers: PyTorch's defaults, PReLU's learned slope, refusals", "[nn][activation]") {
  manual_seed(2);
  const Tensor x = randn({2, 3, 4});
  CHECK(values(nn::Softmax({.dim = 1}).forward(x)) == values(softmax(x, 1)));
  CHECK(values(nn::LogSoftmax({.dim = -1}).forward(x)) == values(log_softmax(x, -1)));
  CHECK(values(nn::Softmin({.dim = 0}).forward(x)) == values(softmin(x, 0)));
  CHECK(values(nn::GLU().forward(x)) == values(glu(x, -1)));
  CHECK(values(nn::Hardshrink().forward(x)) == values(hardshrink(x, 0.5)));
  CHECK(values(nn::Threshold({.threshold = 0.1, .value = 20}).forward(x)) == values(threshold(x, 0.1, 20)));
  nn::PReLU prelu_layer({.num_parameters = 3});
  CHECK(prelu_layer.weight.shape() == Shape{3});
  CHECK(values(prelu_layer.weight) == std::vector<double>{0.25, 0.25, 0.25});
  CHECK(prelu_layer.named_parameters().at(0).first == "weight");
  prelu_layer.forward(x).sum().backward();
  CHECK(prelu_layer.weight.grad().defined());
  CHECK(prelu_layer.str().find("num_parameters=3") != std::string::npos);
  MG_REQUIRE_ERROR(nn::PReLU({.num_parameters = 0}), "PReLU: num_parameters must be >= 1");
  MG_REQUIRE_ERROR(nn::PReLU({.num_parameters = 4}).forward(x), "must have 1 or 3 elements");
  MG_REQUIRE_ERROR(glu(zeros({2, 3})), "glu: dim 1 of");
  MG_REQUIRE_ERROR(nn::Softshrink({.lambd = -1}), "Softshrink: lambd must be >= 0");
  MG_REQUIRE_ERROR(nn::Hardshrink({.lambd = NAN}), "Hardshrink: lambd must be a number");
  {  // PyTorch 2.15: hardshrink with a negative lambd keeps every x; rrelu takes a negative lower
    const Tensor v = from_vector<double>({-1.0, -0.2, 0.0, 0.3, 2.0});
    CHECK(test::values(nn::Hardshrink({.lambd = -0.5})(v)) == test::values(v));
    const std::vector<double> r = test::values(rrelu(v, -0.5, 0.3, false));  // slope (-0.5 + 0.3) / 2 = -0.1
    CHECK(r[0] == Approx(0.1));
    CHECK(r[1] == Approx(0.02));
    CHECK(r[4] == 2.0);
    MG_REQUIRE_ERROR(rrelu(v, 0.5, 0.3, false), "rrelu: expected finite lower <= upper");
    MG_REQUIRE_ERROR(rrelu(v, -INFINITY, 0.3, false), "rrelu: expected finite lower <= upper");
  }
  MG_REQUIRE_ERROR(softshrink(x, -0.5), "softshrink: lambd must be >= 0");
  MG_REQUIRE_ERROR(prelu(x, zeros({3, 1})), "prelu: expected weight [1] or [C]");
  // As PyTorch: an input of fewer than 2 dims has one channel, and a 0-dim input stays 0-dim.
  MG_REQUIRE_ERROR(prelu(randn({5}), full({5}, 0.25)),
                   "prelu: weight [5] f32 cpu must have 1 element (x [5] f32 cpu has fewer than 2 dims, so one channel)");
  CHECK(prelu(scalar_tensor(-2.0), full({1}, 0.25)).dim() == 0);
  CHECK(prelu(scalar_tensor(-2.0), full({1}, 0.25)).item<double>() == -0.5);
}

TEST_CASE("prelu refuses mixed dtypes outside autocast, threshold keeps integers, softsign and tanhshrink give f32",
          "[ops][activation]") {
  // PyTorch 2.15: prelu(f64 x, f32 w) -> "prelu: Type promoting not supported. Got Double and Float".
  MG_REQUIRE_ERROR(prelu(ones({2}, {.dtype = DType::F64}), full({1}, 0.25)),
                   "prelu: expected the input and the weight in one dtype");
  MG_REQUIRE_ERROR(prelu(ones({2}), full({1}, 0.25).to(DType::F16)), "prelu: expected the input and the weight in one dtype");
  {  // Under autocast the lower policy casts both; f64 stays f64 and is still refused beside f32.
    amp::Autocast ac({.device = DeviceType::CPU, .dtype = DType::BF16});
    CHECK(prelu(ones({2}), full({1}, 0.25).to(DType::F16)).dtype() == DType::BF16);
    MG_REQUIRE_ERROR(prelu(ones({2}, {.dtype = DType::F64}), full({1}, 0.25)), "prelu: expected the input");
  }
  // threshold(int [-1, 2, -2], -1.5, 7.9) is [7, 2, 7] in PyTorch 2.15: both numbers truncated.
  const Tensor i = from_vector<int64_t>({-1, 2, -2});
  const Tensor t = threshold(i, -1.5, 7.9);
  CHECK(t.dtype() == DType::I64);
  CHECK(values(t) == std::vector<double>{7, 2, 7});
  CHECK(threshold(i.to(DType::I32), -1.5, -7.9).dtype() == DType::I32);
  CHECK(values(threshold(i, 0.0, -0.5)) == std::vector<double>{0, 2, 0});  // -0.5 truncates to 0, an integer
  MG_REQUIRE_ERROR(threshold(i.to(DType::U8), 0.0, 300.0), "threshold: 0 or 300 cannot be converted to u8 without overflow");
  // softsign and tanhshrink of integers: f32, as PyTorch's promotion ([0.5, 0.6667]; [0.2384, 1.0360]).
  const Tensor s = softsign(from_vector<int64_t>({1, 2}));
  CHECK(s.dtype() == DType::F32);
  CHECK(values(s)[1] == Approx(2.0 / 3.0));
  CHECK(values(tanhshrink(from_vector<int32_t>({1, 2})))[0] == Approx(1.0 - std::tanh(1.0)));
}
