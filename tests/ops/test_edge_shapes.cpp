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
  // an empty H or W is refused even for an empty output (PyTorch: "Expected input to have non-zero
  // size for non-batch dimensions")
  MG_REQUIRE_ERROR(adaptive_avg_pool2d(zeros({0, 3, 0, 4}), {0, 0}), "the input's H and W must be positive");
  MG_REQUIRE_ERROR(max_pool2d(zeros({1, 0, 4, 4}), {2, 2}), "max_pool2d: expected at least one channel");
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

TEST_CASE("0-d and 1-D operands mix in gather and scatter_add, as in PyTorch", "[ops][shapes]") {
  // PyTorch 2.15 values: gather(tensor(5.), 0, [0, 0]) = [5, 5]; gather([1, 2, 3], 0, tensor(2)) =
  // tensor(3.); scatter_add(zeros(3), 0, tensor(1), tensor(4.)) = [0, 4, 0];
  // scatter_add(tensor(1.), 0, [0, 0], [2, 3]) = tensor(6.).
  const Tensor five = full({}, 5.0), idx2 = from_vector<int64_t>({0, 0}), two = full({}, 2.0, {.dtype = DType::I64});
  const Tensor g1 = gather(five, 0, idx2);
  CHECK(g1.shape() == Shape{2});
  CHECK(mg::test::values(g1) == std::vector<double>{5, 5});
  const Tensor g2 = gather(from_vector<float>({1, 2, 3}), -1, two);
  CHECK(g2.shape() == Shape{});
  CHECK(g2.item<float>() == 3.0f);
  const Tensor s1 = scatter_add(zeros({3}), 0, full({}, 1.0, {.dtype = DType::I64}), full({}, 4.0));
  CHECK(mg::test::values(s1) == std::vector<double>{0, 4, 0});
  const Tensor s2 = scatter_add(full({}, 1.0), 0, idx2, from_vector<float>({2, 3}));
  CHECK(s2.shape() == Shape{});
  CHECK(s2.item<float>() == 6.0f);
  // Gradients flow through the reshapes.
  const Tensor x = full({}, 5.0).requires_grad_();
  sum(gather(x, 0, idx2)).backward();
  CHECK(x.grad().item<float>() == 2.0f);
  MG_REQUIRE_ERROR(gather(five, 1, idx2), "gather: dim 1 is out of range");
  MG_REQUIRE_ERROR(gather(five, 0, from_vector<int64_t>({1})), "gather: index 1 is out of range for dim 0 of size 1");
}

TEST_CASE("cat skips 1-D empty tensors beside other ranks (PyTorch's legacy rule)", "[ops][shapes]") {
  const Tensor x = ones({2, 3}).requires_grad_();
  const Tensor e = empty({0}, {.dtype = DType::F64});
  const Tensor a = cat({x, e});
  CHECK(a.shape() == Shape{2, 3});
  CHECK(a.dtype() == DType::F64);  // the skipped tensor still takes part in the promotion, as PyTorch's
  CHECK(cat({e, x}, 1).shape() == Shape{2, 3});
  CHECK(cat({e, x, e, x}, -1).shape() == Shape{2, 6});
  sum(cat({e, x, x}, 0)).backward();
  CHECK(x.grad().shape() == Shape{2, 3});
  CHECK(cat({e, empty({0})}).shape() == Shape{0});  // only empties: an ordinary 1-D cat
  CHECK(cat({empty({0}), ones({3})}).shape() == Shape{3});
  MG_REQUIRE_ERROR(cat({e, ones({2, 3}), full({}, 1.0)}), "cat: a 0-d tensor cannot be concatenated; got [] f32 cpu at position 2");
  MG_REQUIRE_ERROR(cat({e, ones({2, 3}), ones({3})}),
                   "cat: expected tensors with the same number of dims; got [2, 3] f32 cpu at position 1 and [3] f32 cpu at position 2");
  MG_REQUIRE_ERROR(cat({e, full({}, 1.0)}), "cat: a 0-d tensor cannot be concatenated");
  MG_REQUIRE_ERROR(cat({empty({0, 3}), ones({2})}), "cat: expected tensors with the same number of dims");  // only [0] is legacy
}

TEST_CASE("masked_fill broadcasts x up to a larger mask out of place, as PyTorch", "[ops][shapes]") {
  // PyTorch 2.15: ones(3).masked_fill([[T, F, T], [F, F, T]], 0) = [[0, 1, 0], [1, 1, 0]].
  const Tensor x = from_vector<float>({1, 2, 3}).requires_grad_();
  const Tensor m = to(from_vector<float>({1, 0, 1, 0, 0, 1}, {2, 3}), DType::Bool);
  const Tensor y = masked_fill(x, m, 0.0);
  CHECK(y.shape() == Shape{2, 3});
  CHECK(mg::test::values(y) == std::vector<double>{0, 2, 0, 1, 2, 0});
  sum(y).backward();  // each x[j] appears twice, filled where m is set
  CHECK(mg::test::values(x.grad()) == std::vector<double>{1, 2, 0});
  const Tensor z = masked_fill(ones({2, 1}), to(from_vector<float>({1, 0, 0}, {1, 3}), DType::Bool), 7.0);
  CHECK(mg::test::values(z) == std::vector<double>{7, 1, 1, 7, 1, 1});
  MG_REQUIRE_ERROR(ones({3}).masked_fill_(m, 0.0), "masked_fill: mask [2, 3] bool cpu cannot be broadcast to the input's shape [3]");
}

TEST_CASE("relu passes the gradient at a NaN output, as PyTorch's threshold_backward", "[ops][numerics]") {
  // PyTorch 2.15: a = [nan, 1, -1]; relu(a).sum().backward() gives a.grad = [1, 1, 0].
  for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
    INFO(dtype_name(dt));
    const Tensor a = to(from_vector<double>({std::numeric_limits<double>::quiet_NaN(), 1.0, -1.0, 0.0}), dt).requires_grad_();
    sum(relu(a)).backward();
    CHECK(mg::test::values(a.grad()) == std::vector<double>{1, 1, 0, 0});
    // the recorded (create_graph) path builds the same select
    const Tensor b = to(from_vector<double>({std::numeric_limits<double>::quiet_NaN(), 1.0, -1.0, 0.0}), dt).requires_grad_();
    const Tensor gb = autograd::grad({sum(relu(b))}, {b}, {}, std::nullopt, /*create_graph=*/true)[0];
    CHECK(mg::test::values(gb) == std::vector<double>{1, 1, 0, 0});
  }
}
