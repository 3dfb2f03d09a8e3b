// Edge shapes and bit patterns a probe against PyTorch 2.15 found mishandled: the backward of
// matmul and linear with a 0 in a contracted or output dim (reshape(-1) beside a 0 was refused),
// attention with a mask and no keys, or no features (NaN weights), and same-dtype copies that
// passed f16/bf16 through f32 and quieted signalling NaNs; and a few shapes PyTorch computes that
// were refused: index_select of a 0-d input, adaptive pooling to size 0, a Linear with in or out 0.
#include <catch2/catch.hpp>

#include <cstring>

#include "autograd/engine.h"
#include "nn/linear.h"
#include "ops/attention.h"
#include "ops/conv.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;
using Catch::Matchers::Approx;

TEST_CASE("matmul and linear differentiate with an empty contracted or output dim", "[ops][linalg][autograd]") {
  SECTION("a batched a times a shared b with k = 0 or m = 0") {
    for (const auto& [ka, kb] : {std::pair<Shape, Shape>{{2, 3, 4}, {4, 0}}, {{2, 3, 0}, {0, 4}}}) {
      Tensor a = randn(ka, {.dtype = DType::F64}).requires_grad_();
      Tensor b = randn(kb, {.dtype = DType::F64}).requires_grad_();
      sum(matmul(a, b)).backward();
      CHECK(b.grad().shape() == b.shape());
      CHECK(a.grad().shape() == a.shape());
      CHECK(sum(abs(a.grad())).item<double>() == 0.0);  // PyTorch: zeros
    }
  }
  SECTION("linear with in = 0, out = 0 or an empty batch") {
    struct Case {
      Shape x, w;
    };
    for (const Case& c : {Case{{3, 0}, {4, 0}}, Case{{2, 3, 0}, {4, 0}}, Case{{3, 5}, {0, 5}}, Case{{0, 5}, {4, 5}}}) {
      Tensor x = randn(c.x, {.dtype = DType::F64}).requires_grad_();
      Tensor w = randn(c.w, {.dtype = DType::F64}).requires_grad_();
      Tensor b = ones({c.w[0]}, {.dtype = DType::F64}).requires_grad_();
      sum(linear(x, w, b)).backward();
      CHECK(w.grad().shape() == w.shape());
      CHECK(x.grad().shape() == x.shape());
      CHECK(b.grad().shape() == b.shape());
    }
  }
}

TEST_CASE("attention with no keys or no features gives PyTorch's values", "[ops][attention]") {
  SECTION("a mask over 0 keys: zeros, as PyTorch") {
    Tensor q = randn({2, 3, 8}).requires_grad_();
    Tensor k = randn({2, 0, 8}), v = randn({2, 0, 8});
    for (const Tensor& mask : {zeros({3, 0}, {.dtype = DType::Bool}), zeros({3, 0})}) {
      const Tensor y = scaled_dot_product_attention(q, k, v, mask);
      CHECK(y.shape() == Shape{2, 3, 8});
      CHECK(sum(abs(y)).item<float>() == 0.0f);
    }
  }
  SECTION("E = 0: uniform weights, the mean of the values (torch 2.15: 1.0625, 1.25 for these)") {
    Tensor q = zeros({1, 1, 0}), k = zeros({1, 4, 0});
    Tensor v = from_vector<float>({0.5f, 1.0f, 1.0f, 1.5f, 1.25f, 1.0f, 1.5f, 1.5f}, {1, 4, 2});
    const Tensor y = scaled_dot_product_attention(q, k, v);
    CHECK_THAT(values(y), Approx(std::vector<double>{1.0625, 1.25}).epsilon(1e-6));
  }
}

TEST_CASE("same-dtype copies keep every bit, signalling NaNs included", "[ops][copy]") {
  // bf16 0x7F81 / 0xFF81 and f16 0x7C01 are signalling NaNs: through f32 they came back quiet
  // (0x7FC1, 0x7E01), so a loaded state dict differed from its file (PyTorch keeps them).
  for (const auto& [dtype, bits] : {std::pair<DType, std::vector<uint16_t>>{DType::BF16, {0x7F81, 0xFF81, 0x0001, 0x8000}},
                                    {DType::F16, {0x7C01, 0xFC01, 0x0001, 0x8000}}}) {
    const Tensor src = from_buffer(bits.data(), {4}, {.dtype = dtype});
    auto bits_of = [](const Tensor& t) {
      const Tensor c = t.contiguous();
      std::vector<uint16_t> out(std::size_t(c.numel()));
      std::memcpy(out.data(), c.data_ptr(), out.size() * 2);
      return out;
    };
    CHECK(bits_of(clone(src)) == bits);
    Tensor dst = zeros({4}, {.dtype = dtype});
    dst.copy_(src);
    CHECK(bits_of(dst) == bits);
    Tensor strided = zeros({8}, {.dtype = dtype});
    strided.slice(0, 0, 8, 2).copy_(src);  // a strided destination takes the element loop
    CHECK(bits_of(strided.slice(0, 0, 8, 2)) == bits);
    auto layer = nn::make<nn::Linear>({.in = 2, .out = 2, .bias = false});
    layer->to(dtype);
    layer->load_state_dict({{"weight", reshape(src, {2, 2})}});
    CHECK(bits_of(layer->weight) == bits);
  }
}

TEST_CASE("index_select of a 0-d input and adaptive pooling to an empty size, as PyTorch", "[ops][indexing][pool]") {
  Tensor x = scalar_tensor(2.0, {.dtype = DType::F64}).requires_grad_();
  for (const Tensor& i : {scalar_tensor(0.0, {.dtype = DType::I64}), zeros({1}, {.dtype = DType::I64})}) {
    const Tensor y = index_select(x, 0, i);
    CHECK(y.dim() == 0);
    CHECK(y.item<double>() == 2.0);
  }
  sum(index_select(x, -1, zeros({1}, {.dtype = DType::I64}))).backward();
  CHECK(x.grad().item<double>() == 1.0);
  MG_REQUIRE_ERROR(index_select(x, 0, zeros({2}, {.dtype = DType::I64})), "must have one element");
  MG_REQUIRE_ERROR(index_select(x, 1, zeros({1}, {.dtype = DType::I64})), "index_select");

  Tensor p = ones({2, 3, 4, 4}).requires_grad_();
  const Tensor q = adaptive_avg_pool2d(p, {0, 2});
  CHECK(q.shape() == Shape{2, 3, 0, 2});  // torch: [2, 3, 0, 2]
  sum(q).backward();
  CHECK(sum(abs(p.grad())).item<float>() == 0.0f);
  CHECK(adaptive_avg_pool2d(zeros({0, 3, 0, 4}), {0, 0}).shape() == Shape{0, 3, 0, 0});
  MG_REQUIRE_ERROR(adaptive_avg_pool2d(zeros({2, 3, 0, 4}), {1, 1}), "the input's H and W must be positive");
}

TEST_CASE("nn::Linear with no inputs or no outputs, as PyTorch", "[nn][linear]") {
  auto none_in = nn::make<nn::Linear>({.in = 0, .out = 4});
  CHECK(sum(abs(none_in->bias)).item<float>() == 0.0f);  // PyTorch's bound 1/sqrt(0) -> 0
  const Tensor y = (*none_in)(ones({3, 0}));
  CHECK(y.shape() == Shape{3, 4});
  CHECK(sum(abs(y)).item<float>() == 0.0f);
  auto none_out = nn::make<nn::Linear>({.in = 5, .out = 0});
  Tensor x = ones({3, 5}).requires_grad_();
  const Tensor z = (*none_out)(x);
  CHECK(z.shape() == Shape{3, 0});
  sum(z).backward();
  CHECK(x.grad().shape() == Shape{3, 5});
  MG_REQUIRE_ERROR(nn::make<nn::Linear>({.in = -1, .out = 2}), "must not be negative");
}
