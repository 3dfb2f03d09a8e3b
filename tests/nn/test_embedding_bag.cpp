// nn::embedding_bag and nn::EmbeddingBag (nn/embedding_bag.h) against PyTorch 2.15's
// F.embedding_bag in f64 (tests/data/reference/torch_embedding_bag.json, written by
// tools/reference/gen_torch_embedding_bag.py): sum, mean and max over 1-D input with offsets (an
// empty bag, include_last_offset) and 2-D input, padding_idx (a bag of padding only), and
// per_sample_weights, scale_grad_by_freq; the output and the gradients of the weight and the
// per-sample weights. Then
// bf16 (one rounding of an f32 sum), max_norm, the module, i32 indices, and the refusals.
#include <catch2/catch.hpp>

#include "autograd/engine.h"
#include "core/factory.h"
#include "nn/dropout.h"
#include "nn/embedding_bag.h"
#include "ops/ops.h"
#include "reference/json_reference.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

nn::BagMode mode_of(const std::string& m) {
  return m == "sum" ? nn::BagMode::Sum : m == "mean" ? nn::BagMode::Mean : nn::BagMode::Max;
}

}  // namespace

TEST_CASE("embedding_bag equals PyTorch's in f64: sum, mean, max, offsets, padding, per-sample weights, scale_grad_by_freq",
          "[nn][embedding]") {
  const nlohmann::json ref = load_json_reference("torch_embedding_bag.json");
  const nlohmann::json wshape = nlohmann::json::array({ref["V"], ref["D"]});
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    INFO(c["name"].get<std::string>());
    const Tensor weight = json_tensor(c["weight"], wshape).requires_grad_();
    const Tensor input = json_tensor(c["input"], c["input_shape"]).to(DType::I64);
    nn::EmbeddingBagArgs args{.mode = mode_of(c["mode"]), .include_last_offset = c["include_last_offset"].get<bool>()};
    if (!c["offsets"].is_null()) {
      const auto o = c["offsets"].get<std::vector<int64_t>>();
      args.offsets = from_vector<int64_t>(o, {int64_t(o.size())});
    }
    if (!c["padding_idx"].is_null()) args.padding_idx = c["padding_idx"].get<int64_t>();
    args.scale_grad_by_freq = c.value("scale_grad_by_freq", false);
    Tensors wrt = {weight};
    if (!c["psw"].is_null()) {
      args.per_sample_weights = json_tensor(c["psw"], c["input_shape"]).requires_grad_();
      wrt.push_back(args.per_sample_weights);
    }
    const Tensor y = nn::embedding_bag(weight, input, args);
    REQUIRE(y.shape() == Shape(c["y_shape"].get<std::vector<int64_t>>()));
    check_json_close(y, c["y"], 1e-12, 1e-14);
    const Tensors g = autograd::grad({sum(y * json_tensor(c["r"], c["y_shape"]))}, wrt);
    check_json_close(g[0], c["grad_weight"], 1e-12, 1e-14);
    if (wrt.size() > 1) check_json_close(g[1], c["grad_psw"], 1e-12, 1e-14);
    ++checked;
  }
  CHECK(checked == 12);
}

TEST_CASE("embedding_bag of bf16 rows sums in f32 and rounds once, i32 indices work", "[nn][embedding]") {
  // One bag of 1, 2^-8, 2^-8: 1 + 2^-7 in f32; tap by tap in bf16 each 2^-8 would be lost.
  const Tensor w = from_vector<float>({1.0f, 0.00390625f}, {2, 1}).to(DType::BF16);
  const Tensor input = from_vector<int32_t>({0, 1, 1}, {1, 3});
  const Tensor y = nn::embedding_bag(w, input, {.mode = nn::BagMode::Sum});
  REQUIRE(y.dtype() == DType::BF16);
  CHECK(values(y) == std::vector<double>{1.0078125});
  CHECK(values(nn::embedding_bag(w, input, {.mode = nn::BagMode::Max})) == std::vector<double>{1.0});
}

TEST_CASE("EmbeddingBag scale_grad_by_freq: bf16, the module, refused with max", "[nn][embedding]") {
  // Index 0 occurs once; the 1-D input's bag table has unused slots that read row 0, which must not
  // count as occurrences of it (bags {0, 2, 2} and {2}: the table is [2, 3]).
  const Tensor w = ones({3, 2}).requires_grad_();
  const Tensor input = from_vector<int64_t>({0, 2, 2, 2}, {4}), offsets = from_vector<int64_t>({0, 3}, {2});
  sum(nn::embedding_bag(w, input, {.offsets = offsets, .mode = nn::BagMode::Sum, .scale_grad_by_freq = true}))
      .backward();
  CHECK(values(w.grad()) == std::vector<double>{1, 1, 0, 0, 1, 1});  // row 2: three lookups / 3
  // bf16 weight (the division in f32; each lookup's gradient then rounds to bf16, as without
  // scale_grad_by_freq): index 2 four times, so exact quarters — bag 0 {0, 2, 2} with upstream 1
  // and bag 1 {2, 2} with upstream 2 give row 2 (2 + 4) / 4
  const Tensor wb = ones({3, 2}).to(DType::BF16).requires_grad_();
  const Tensor y = nn::embedding_bag(wb, from_vector<int64_t>({0, 2, 2, 2, 2}, {5}),
                                     {.offsets = offsets, .mode = nn::BagMode::Sum, .scale_grad_by_freq = true});
  sum(y * from_vector<double>({1, 1, 2, 2}, {2, 2}).to(DType::BF16)).backward();
  CHECK(values(wb.grad()) == std::vector<double>{1, 1, 0, 0, 1.5, 1.5});
  nn::EmbeddingBag bag({.num = 4, .dim = 2, .mode = nn::BagMode::Sum, .scale_grad_by_freq = true});
  CHECK(bag.str() == "EmbeddingBag(4, 2, mode=sum, scale_grad_by_freq=true)");
  sum(bag.forward(from_vector<int64_t>({3, 3, 1, 3}, {2, 2}))).backward();
  CHECK(values(bag.weight.grad()) == std::vector<double>{0, 0, 1, 1, 0, 0, 1, 1});
  MG_REQUIRE_ERROR(nn::embedding_bag(w, input, {.offsets = offsets, .mode = nn::BagMode::Max, .scale_grad_by_freq = true}),
                   "embedding_bag: scale_grad_by_freq is not supported with mode max");
}

TEST_CASE("EmbeddingBag module: init, padding row, max_norm, forward forms", "[nn][embedding]") {
  manual_seed(9);
  nn::EmbeddingBag bag({.num = 10, .dim = 3, .mode = nn::BagMode::Sum, .padding_idx = -1, .max_norm = 1.0});
  CHECK(values(bag.weight.select(0, 9)) == std::vector<double>{0, 0, 0});
  CHECK(bag.str().find("EmbeddingBag(10, 3, mode=sum, padding_idx=9, max_norm=1)") != std::string::npos);
  const Tensor input = from_vector<int64_t>({1, 2, 9, 3}, {4});
  const Tensor y = bag.forward(input, from_vector<int64_t>({0, 2}, {2}));
  CHECK(y.shape() == Shape{2, 3});
  // The rows read were renormalised to norm <= 1 before the sum (max_norm), the others left alone.
  for (int64_t r : {1, 2, 3}) CHECK(norm(bag.weight.select(0, r)).item<double>() <= 1.0 + 1e-6);
  const Tensor by_row = bag.forward(from_vector<int64_t>({1, 2, 9, 3}, {2, 2}));
  // (the second lookup may renormalise again by an ulp: the rows' norms are 1 within f32 rounding)
  CHECK(max(abs(by_row - y)).item<double>() < 1e-6);
  // Gradients reach the rows read, not the padding row.
  sum(y).backward();
  CHECK(values(bag.weight.grad().select(0, 9)) == std::vector<double>{0, 0, 0});
  CHECK(values(bag.weight.grad().select(0, 1)) == std::vector<double>{1, 1, 1});
}

TEST_CASE("embedding_bag with every bag empty gives zeros that stay on the graph", "[nn][embedding]") {
  const Tensor w = randn({4, 3}).requires_grad_();
  const Tensor none = zeros({0}, {.dtype = DType::I64});
  for (nn::BagMode mode : {nn::BagMode::Sum, nn::BagMode::Mean, nn::BagMode::Max}) {
    const Tensor y = nn::embedding_bag(w, none, {.offsets = from_vector<int64_t>({0, 0}, {2}), .mode = mode});
    CHECK(y.shape() == Shape{2, 3});
    CHECK(values(y) == std::vector<double>(6, 0.0));
    CHECK(values(autograd::grad({sum(y)}, {w})[0]) == std::vector<double>(12, 0.0));
  }
  const Tensor psw = zeros({2, 0}).requires_grad_();
  const Tensor y = nn::embedding_bag(w, zeros({2, 0}, {.dtype = DType::I64}),
                                     {.per_sample_weights = psw, .mode = nn::BagMode::Sum});
  const Tensors g = autograd::grad({sum(y)}, {w, psw});
  CHECK(g[1].shape() == Shape{2, 0});
}

TEST_CASE("embedding_bag names its refusals", "[nn][embedding]") {
  const Tensor w = zeros({5, 2});
  const Tensor flat = from_vector<int64_t>({0, 1, 2}, {3});
  MG_REQUIRE_ERROR(nn::embedding_bag(w, flat), "a 1-D input needs 1-D integer offsets");
  MG_REQUIRE_ERROR(nn::embedding_bag(w, flat.reshape({1, 3}), {.offsets = from_vector<int64_t>({0}, {1})}),
                   "a 2-D input is one bag per row, so offsets must be undefined");
  MG_REQUIRE_ERROR(nn::embedding_bag(w, flat, {.offsets = from_vector<int64_t>({1}, {1})}), "offsets[0] must be 0");
  MG_REQUIRE_ERROR(nn::embedding_bag(w, flat, {.offsets = from_vector<int64_t>({0, 2, 1}, {3})}),
                   "offsets must be non-decreasing");
  MG_REQUIRE_ERROR(nn::embedding_bag(w, flat, {.offsets = from_vector<int64_t>({0, 4}, {2})}),
                   "at most the input's length 3");
  MG_REQUIRE_ERROR(nn::embedding_bag(w, flat, {.offsets = from_vector<int64_t>({0}, {1}), .include_last_offset = true}),
                   "name no bag");
  // PyTorch would add input[2:] to the last bag here.
  MG_REQUIRE_ERROR(nn::embedding_bag(w, flat, {.offsets = from_vector<int64_t>({0, 1, 2}, {3}), .include_last_offset = true}),
                   "the last offset ends the last bag and must equal the input's length 3, got 2");
  MG_REQUIRE_ERROR(nn::embedding_bag(w, flat, {.offsets = from_vector<int64_t>({0}, {1}), .per_sample_weights = zeros({3})}),
                   "per_sample_weights are only supported with mode sum, not mean");
  MG_REQUIRE_ERROR(nn::embedding_bag(w, flat, {.offsets = from_vector<int64_t>({0}, {1}), .per_sample_weights = zeros({2}),
                                               .mode = nn::BagMode::Sum}),
                   "with the input's shape [3]");
  MG_REQUIRE_ERROR(nn::embedding_bag(w, flat, {.offsets = from_vector<int64_t>({0}, {1}), .padding_idx = 5}),
                   "padding_idx 5 is out of range for 5 rows");
  MG_REQUIRE_ERROR(nn::embedding_bag(w, from_vector<int64_t>({0, 7}, {1, 2})), "out of range");
  MG_REQUIRE_ERROR(nn::embedding_bag(w, zeros({3})), "expected integer (i64 or i32) input");
  MG_REQUIRE_ERROR(nn::EmbeddingBag({.num = 0, .dim = 2}), "EmbeddingBag: num and dim must be positive");
  nn::EmbeddingBag layer({.num = 4, .dim = 2});
  MG_REQUIRE_ERROR(layer.forward(from_vector<int64_t>({0, 9}, {1, 2})), "EmbeddingBag");
  MG_REQUIRE_ERROR(layer.forward(from_vector<int64_t>({0, 1}, {2})), "EmbeddingBag(4, 2, mode=mean): embedding_bag: a 1-D input");
}

TEST_CASE("Embedding and EmbeddingBag from_pretrained copy the table and freeze it unless told", "[nn][embedding]") {
  const Tensor table = from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2});
  auto frozen = nn::Embedding::from_pretrained(table);
  CHECK(frozen->weight.dtype() == DType::F64);
  CHECK(!frozen->weight.requires_grad());
  CHECK(values(frozen->forward(from_vector<int64_t>({2, 0}, {2}))) == std::vector<double>{5, 6, 1, 2});
  CHECK(frozen->weight.data_ptr() != table.data_ptr());  // a copy
  auto trained = nn::Embedding::from_pretrained(table, /*freeze=*/false, {.padding_idx = 1});
  CHECK(trained->weight.requires_grad());
  CHECK(values(trained->weight.select(0, 1)) == std::vector<double>{3, 4});  // not zeroed, as PyTorch
  sum(trained->forward(from_vector<int64_t>({1, 2}, {2}))).backward();
  CHECK(values(trained->weight.grad()) == std::vector<double>{0, 0, 0, 0, 1, 1});  // the padding row gets none
  auto bag = nn::EmbeddingBag::from_pretrained(table, true, {.mode = nn::BagMode::Sum});
  CHECK(values(bag->forward(from_vector<int64_t>({0, 1, 2}, {1, 3}))) == std::vector<double>{9, 12});
  MG_REQUIRE_ERROR(nn::Embedding::from_pretrained(zeros({3})), "expected floating embeddings [V, D]");
  MG_REQUIRE_ERROR(nn::EmbeddingBag::from_pretrained(zeros({3, 2}, {.dtype = DType::I64})), "expected floating embeddings");
}
