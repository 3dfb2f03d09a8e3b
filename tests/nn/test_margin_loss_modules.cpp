// The loss modules of nn/margin_loss.h: each calls its function with its options (the values are
// checked against PyTorch in tests/ops/test_margin_losses.cpp), class weights are buffers, and a
// three-tensor loss called with two tensors is a clear error.
#include <catch2/catch.hpp>

#include "core/factory.h"
#include "nn/margin_loss.h"
#include "ops/distance.h"
#include "test_util.h"

using namespace mg;

namespace {

Tensor t(const std::vector<double>& v, const Shape& shape) { return reshape(from_vector(v), shape); }

}  // namespace

TEST_CASE("margin loss modules equal their functions with the module's options", "[nn][loss]") {
  const Tensor a = t({0.5, -1.0, 2.0, 0.1, 0.3, -0.7}, {2, 3});
  const Tensor b = t({1.5, 0.0, -2.0, 0.3, -0.4, 0.2}, {2, 3});
  const Tensor c = t({-0.5, 0.8, 1.0, -1.3, 0.9, 0.6}, {2, 3});
  const Tensor pm = t({1, -1, -1, 1, 1, -1}, {2, 3});
  const Tensor rows = t({1, -1}, {2});
  const auto same = [](const Tensor& x, const Tensor& y) { return test::values(x) == test::values(y); };

  CHECK(same(nn::MarginRankingLoss({.margin = 0.2})(a, b, pm), margin_ranking_loss(a, b, pm, 0.2)));
  CHECK(same(nn::HingeEmbeddingLoss({.margin = 0.5, .reduction = Reduction::Sum})(a, pm),
             hinge_embedding_loss(a, pm, 0.5, Reduction::Sum)));
  CHECK(same(nn::SoftMarginLoss({.reduction = Reduction::None})(a, pm), soft_margin_loss(a, pm, Reduction::None)));
  CHECK(same(nn::CosineEmbeddingLoss({.margin = 0.1})(a, b, rows), cosine_embedding_loss(a, b, rows, 0.1)));
  CHECK(same(nn::TripletMarginLoss({.margin = 0.5, .p = 1.0, .swap = true})(a, b, c),
             triplet_margin_loss(a, b, c, 0.5, 1.0, 1e-6, true)));
  const Tensor labels = to(from_vector(std::vector<double>{2, 0}), DType::I64);
  CHECK(same(nn::MultiMarginLoss({.p = 2, .margin = 0.7})(a, labels), multi_margin_loss(a, labels, 2, 0.7)));
  const Tensor zero_one = t({1, 0, 0, 1, 1, 0}, {2, 3});
  CHECK(same(nn::MultiLabelSoftMarginLoss()(a, zero_one), multilabel_soft_margin_loss(a, zero_one)));
  CHECK(same(nn::PoissonNLLLoss({.log_input = false, .full = true})(abs(a), abs(b)),
             poisson_nll_loss(abs(a), abs(b), false, true)));
  CHECK(same(nn::GaussianNLLLoss({.full = true})(a, b, abs(c)), gaussian_nll_loss(a, b, abs(c), true)));
}

TEST_CASE("margin loss modules: class weights are buffers, and three-tensor losses refuse two", "[nn][loss]") {
  const Tensor w = from_vector(std::vector<double>{1.0, 2.0, 0.5});
  nn::MultiMarginLoss svm({.weight = w});
  REQUIRE(svm.named_buffers().size() == 1);
  CHECK(svm.named_buffers()[0].first == "weight");
  nn::MultiLabelSoftMarginLoss multi({.weight = w});
  CHECK(multi.state_dict().size() == 1);
  MG_REQUIRE_ERROR(nn::MultiMarginLoss({.weight = clone(w).requires_grad_()}),
                   "MultiMarginLoss: weight [3] f64 cpu requires grad, but the module keeps it as a buffer");
  nn::TripletMarginLoss triplet;
  nn::Loss& as_two = triplet;
  MG_REQUIRE_ERROR(as_two(ones({2, 3}), ones({2, 3})), "TripletMarginLoss takes three tensors; call it as loss(a, b, c)");
}
