// Batch norm folded into the convolution or linear layer before it (nn/fusion.h, PyTorch's
// torch.nn.utils.fusion): the fused layer alone equals bn(layer(x)) in eval mode, in f64 to
// rounding, for Conv1d/2d/3d (groups, no bias) and Linear, with and without an affine batch norm;
// then f32 within rounding, and the refusals.
#include <catch2/catch.hpp>

#include <vector>

#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "nn/fusion.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

// Running statistics and affine parameters far from the defaults, so every term of the fold counts.
void randomise(nn::BatchNorm& bn) {
  NoGradGuard no_grad;
  const int64_t c = bn.running_mean.size(0);
  bn.running_mean.copy_(randn({c}).to(bn.running_mean.dtype()));
  bn.running_var.copy_((rand({c}) + 0.5).to(bn.running_var.dtype()));
  if (bn.weight.defined()) bn.weight.copy_(randn({c}).to(bn.weight.dtype()));
  if (bn.bias.defined()) bn.bias.copy_(randn({c}).to(bn.bias.dtype()));
}

void check_close(const Tensor& got, const Tensor& want, double tol) {
  const std::vector<double> g = values(got), w = values(want);
  REQUIRE(g.size() == w.size());
  for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(w[i]).epsilon(tol).margin(tol));
}

template <typename Layer>
void check_fused(Layer& layer, nn::BatchNorm& bn, const Tensor& x, double tol) {
  randomise(bn);
  layer.eval();
  bn.eval();
  const Tensor want = bn(layer(x));
  const Tensor weight_handle = layer.weight;
  nn::fuse_bn_eval_(layer, bn);
  check_close(layer(x), want, tol);
  CHECK(layer.weight.data_ptr() == weight_handle.data_ptr());  // the handle held before sees the new values
  CHECK(layer.bias.defined());
}

}  // namespace

TEST_CASE("fuse_bn_eval_ folds batch norm into Conv1d/2d/3d and Linear: bn(layer(x)) in f64", "[nn][fusion]") {
  manual_seed(21);
  {
    nn::Conv2d conv({.in = 4, .out = 6, .kernel = 3, .padding = 1, .groups = 2, .bias = false});
    nn::BatchNorm2d bn({.features = 6});
    conv.to(DType::F64), bn.to(DType::F64);
    check_fused(conv, bn, randn({2, 4, 5, 5}, {.dtype = DType::F64}), 1e-12);
    CHECK(conv.named_parameters().size() == 2);  // the bias it got is registered (state_dict, to())
  }
  {
    nn::Conv1d conv({.in = 3, .out = 5, .kernel = 2, .stride = 2});
    nn::BatchNorm1d bn({.features = 5, .affine = false});
    conv.to(DType::F64), bn.to(DType::F64);
    check_fused(conv, bn, randn({3, 3, 8}, {.dtype = DType::F64}), 1e-12);
  }
  {
    nn::Conv3d conv({.in = 2, .out = 3, .kernel = 2});
    nn::BatchNorm3d bn({.features = 3, .eps = 1e-3});
    conv.to(DType::F64), bn.to(DType::F64);
    check_fused(conv, bn, randn({1, 2, 3, 4, 4}, {.dtype = DType::F64}), 1e-12);
  }
  {
    nn::Linear lin({.in = 7, .out = 4});
    nn::BatchNorm1d bn({.features = 4});
    lin.to(DType::F64), bn.to(DType::F64);
    check_fused(lin, bn, randn({5, 7}, {.dtype = DType::F64}), 1e-12);
  }
  {  // f32: the fold is computed in f64 and rounded once
    nn::Conv2d conv({.in = 3, .out = 4, .kernel = 3});
    nn::BatchNorm2d bn({.features = 4});
    check_fused(conv, bn, randn({2, 3, 6, 6}), 2e-5);
  }
}

TEST_CASE("fuse_bn_eval_ refuses training mode, batch statistics and a channel mismatch", "[nn][fusion]") {
  nn::Conv2d conv({.in = 2, .out = 3, .kernel = 1});
  nn::BatchNorm2d bn({.features = 3});
  MG_REQUIRE_ERROR(nn::fuse_bn_eval_(conv, bn), "fuse_bn_eval_: Conv2d(");
  MG_REQUIRE_ERROR(nn::fuse_bn_eval_(conv, bn), "must be in eval mode");
  conv.eval();
  nn::BatchNorm2d other({.features = 4});
  other.eval();
  MG_REQUIRE_ERROR(nn::fuse_bn_eval_(conv, other), "fuse_bn_weights: expected [3] for the layer's 3 output channels, got [4] f32 cpu");
  nn::BatchNorm2d batch_stats({.features = 3, .track_running_stats = false});
  batch_stats.eval();
  MG_REQUIRE_ERROR(nn::fuse_bn_eval_(conv, batch_stats), "the batch norm has no running statistics");
  CHECK(values(conv.weight).size() == 6);  // untouched by the refusals
}
