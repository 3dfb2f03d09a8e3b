// linear_cross_entropy (ops/linear_cross_entropy.h) against the unfused
// cross_entropy(linear(x, W, b), t) it replaces — itself equal to PyTorch — in f64 for every
// reduction, ignore_index, label smoothing, bias or none, leading dims and chunk sizes from one row
// to more than all: the loss and the gradients of x, W and b, scaled by a non-unit upstream
// gradient. Then bf16 under autocast, and the refusals.
#include <catch2/catch.hpp>

#include <cmath>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "core/factory.h"
#include "nn/linear_cross_entropy.h"
#include "ops/linear_cross_entropy.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

void check_close(const Tensor& got, const Tensor& want, double tol) {
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> g = values(got.to(DType::F64)), w = values(want.to(DType::F64));
  for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(w[i]).epsilon(tol).margin(tol));
}

}  // namespace

TEST_CASE("linear_cross_entropy equals linear + cross_entropy in f64: loss and x, W, b gradients, any chunking",
          "[ops][loss]") {
  manual_seed(3);
  struct Case {
    Reduction reduction;
    int64_t ignore_index;
    double smoothing;
    bool bias;
    int64_t chunk;
  };
  const Case cases[] = {{Reduction::Mean, -100, 0.0, false, 0},  {Reduction::Mean, 2, 0.0, true, 1},
                        {Reduction::Mean, 4, 0.1, true, 3},      {Reduction::Sum, -100, 0.0, true, 5},
                        {Reduction::Sum, 1, 0.25, false, 7},     {Reduction::Mean, -100, 0.0, true, 100},
                        {Reduction::None, 3, 0.05, true, 2}};
  const Tensor t = from_vector<int64_t>({0, 2, 5, 4, 4, 1, 2, 3, 6, 0, 2, 1}, {2, 6});  // 7 classes
  for (const Case& c : cases) {
    INFO("reduction " << reduction_name(c.reduction) << ", ignore " << c.ignore_index << ", smoothing " << c.smoothing
                      << ", bias " << c.bias << ", chunk " << c.chunk);
    const Tensor x = randn({2, 6, 5}, {.dtype = DType::F64}).requires_grad_();
    const Tensor w = randn({7, 5}, {.dtype = DType::F64}).requires_grad_();
    const Tensor b = c.bias ? randn({7}, {.dtype = DType::F64}).requires_grad_() : Tensor();
    const Tensor fused = linear_cross_entropy(x, w, t, {.bias = b, .reduction = c.reduction,
                                                         .ignore_index = c.ignore_index,
                                                         .label_smoothing = c.smoothing, .chunk_rows = c.chunk});
    const Tensor plain = cross_entropy(linear(x, w, b).reshape({12, 7}), t.reshape({12}), c.reduction,
                                       c.ignore_index, c.smoothing);
    check_close(fused, c.reduction == Reduction::None ? plain.reshape({2, 6}) : plain, 1e-12);
    Tensors leaves{x, w};
    if (c.bias) leaves.push_back(b);
    const Tensor r = c.reduction == Reduction::None ? randn({2, 6}, {.dtype = DType::F64}) : full({}, 0.3, {.dtype = DType::F64});
    const Tensors gf = autograd::grad({sum(fused * r)}, leaves);
    const Tensors gp = autograd::grad({sum(plain.reshape(fused.shape()) * r)}, leaves);
    for (std::size_t i = 0; i < gf.size(); ++i) {
      INFO("gradient " << i);
      check_close(gf[i], gp[i], 1e-12);
    }
  }
}

TEST_CASE("linear_cross_entropy under bf16 autocast: near the unfused path, gradients reach f32 weights",
          "[ops][loss][amp]") {
  manual_seed(4);
  const Tensor x = randn({64, 32}).requires_grad_();
  const Tensor w = (randn({300, 32}) * 0.2).requires_grad_();
  const Tensor b = (randn({300}) * 0.1).requires_grad_();
  Tensor t = randint(0, 300, {64});
  Tensors fused_g, plain_g;
  Tensor fused, plain;
  {
    amp::Autocast ac({.dtype = DType::BF16});
    fused = linear_cross_entropy(x, w, t, {.bias = b, .label_smoothing = 0.1, .chunk_rows = 16});
    plain = cross_entropy(linear(x, w, b), t, Reduction::Mean, -100, 0.1);
  }
  CHECK(fused.dtype() == DType::F32);
  CHECK(fused.item<double>() == Approx(plain.item<double>()).epsilon(1e-5));
  fused_g = autograd::grad({fused}, {x, w, b});
  plain_g = autograd::grad({plain}, {x, w, b});
  for (std::size_t i = 0; i < 3; ++i) {
    INFO("gradient " << i);
    REQUIRE(fused_g[i].dtype() == DType::F32);
    // bf16 GEMMs on both sides; the fused path rounds each chunk's partial weight gradient once more.
    const double scale = values(amax(abs(plain_g[i])))[0];
    CHECK(values(amax(abs(fused_g[i] - plain_g[i])))[0] < 0.02 * scale);
  }
}

TEST_CASE("linear_cross_entropy refuses bad shapes, dtypes and options, naming them", "[ops][loss]") {
  const Tensor x = randn({4, 3}), w = randn({5, 3}), t = from_vector<int64_t>({0, 1, 2, 3}, {4});
  MG_REQUIRE_ERROR(linear_cross_entropy(x, randn({5, 2}), t), "linear_cross_entropy: expected weight [V, 3]");
  MG_REQUIRE_ERROR(linear_cross_entropy(x, w, t, {.bias = randn({4})}), "expected bias [5]");
  MG_REQUIRE_ERROR(linear_cross_entropy(x, w, t.to(DType::F32)), "expected i64 or i32 class indices");
  MG_REQUIRE_ERROR(linear_cross_entropy(x, w, from_vector<int64_t>({0, 1}, {2})), "expected a target [4]");
  MG_REQUIRE_ERROR(linear_cross_entropy(x, w, t, {.chunk_rows = -1}), "chunk_rows must be >= 0");
  MG_REQUIRE_ERROR(linear_cross_entropy(x, w, t, {.reduction = Reduction::BatchMean}), "reduction must be mean, sum or none");
  MG_REQUIRE_ERROR(linear_cross_entropy(x, w, from_vector<int64_t>({0, 1, 9, 3}, {4})), "cross_entropy");
  // Every row ignored: NaN, as cross_entropy's Mean.
  CHECK(std::isnan(linear_cross_entropy(x, w, from_vector<int64_t>({-100, -100, -100, -100}, {4})).item<double>()));
  CHECK(std::isnan(cross_entropy(linear(x, w), from_vector<int64_t>({-100, -100, -100, -100}, {4})).item<double>()));
}

TEST_CASE("nn::LinearCrossEntropyLoss is its Linear and cross_entropy in one: PyTorch's names, same loss and grads",
          "[ops][loss][nn]") {
  manual_seed(8);
  nn::LinearCrossEntropyLoss head({.in = 6, .num_classes = 11, .bias = true, .label_smoothing = 0.05, .chunk_rows = 4});
  head.to(DType::F64);
  const nn::NamedTensors params = head.named_parameters();
  REQUIRE(params.size() == 2);
  CHECK(params[0].first == "linear.weight");
  CHECK(params[1].first == "linear.bias");
  const Tensor x = randn({3, 5, 6}, {.dtype = DType::F64});
  const Tensor t = randint(0, 11, {3, 5});
  const Tensor loss = head(x, t);
  const Tensor plain = cross_entropy((*head.linear)(x).reshape({15, 11}), t.reshape({15}), Reduction::Mean, -100, 0.05);
  CHECK(loss.item<double>() == Approx(plain.item<double>()).epsilon(1e-13));
  const Tensors g = autograd::grad({loss}, {head.linear->weight, head.linear->bias});
  const Tensors gp = autograd::grad({plain}, {head.linear->weight, head.linear->bias});
  for (int i = 0; i < 2; ++i) check_close(g[i], gp[i], 1e-12);
  CHECK(head.str().find("in_features=6, num_classes=11, bias=true") != std::string::npos);
  MG_REQUIRE_ERROR(head(randn({3, 4}, {.dtype = DType::F64}), t), "LinearCrossEntropyLoss");
  MG_REQUIRE_ERROR(nn::LinearCrossEntropyLoss({.in = 0, .num_classes = 3}), "in and num_classes must be positive");
}
