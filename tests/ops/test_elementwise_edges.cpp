// Elementwise ops at their edges, each against PyTorch 2.15's value: integer arithmetic wraps
// (defined behaviour, checked by the UBSan pass), clamp with min > max, the sign of zero in relu
// and maximum/minimum ties, pow's gradients at base 0, and softplus's backward for f16/bf16 with
// beta != 1.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "autograd/engine.h"
#include "core/factory.h"
#include "ops/layer_composites.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {
std::vector<bool> signbits(const Tensor& t) {
  std::vector<bool> out;
  for (double v : values(t)) out.push_back(std::signbit(v));
  return out;
}
}  // namespace

TEST_CASE("integer add, sub, mul, neg and abs wrap around as PyTorch's", "[ops][elementwise][integer]") {
  constexpr int32_t kMax = std::numeric_limits<int32_t>::max(), kMin = std::numeric_limits<int32_t>::min();
  const Tensor top = from_vector<int32_t>({kMax, kMax}, {2});
  const Tensor one = from_vector<int32_t>({1, 2}, {2});
  CHECK(values(top + one) == std::vector<double>{double(kMin), double(kMin) + 1});
  CHECK(values(from_vector<int32_t>({kMin}, {1}) - from_vector<int32_t>({1}, {1})) == std::vector<double>{double(kMax)});
  CHECK(values(neg(from_vector<int32_t>({kMin}, {1}))) == std::vector<double>{double(kMin)});
  CHECK(values(abs(from_vector<int32_t>({kMin, -5}, {2}))) == std::vector<double>{double(kMin), 5});
  CHECK(values(top * from_vector<int32_t>({2, 3}, {2})) == std::vector<double>{-2, double(kMax - 2)});
  // i64: 2^62 * 4 = 2^64 = 0 (mod 2^64); add with alpha
  const int64_t big = int64_t(1) << 62;
  CHECK(values(from_vector<int64_t>({big}, {1}) * from_vector<int64_t>({4}, {1})) == std::vector<double>{0});
  CHECK(values(add(from_vector<int64_t>({big}, {1}), from_vector<int64_t>({big}, {1}), 2)) ==
        std::vector<double>{-double(big)});  // 2^62 + 2 * 2^62 = 3 * 2^62 = -2^62 (mod 2^64)
  // u8 still wraps modulo 256
  CHECK(values(from_vector<uint8_t>({250}, {1}) + from_vector<uint8_t>({10}, {1})) == std::vector<double>{4});
}

TEST_CASE("clamp with min > max gives max everywhere and a zero gradient, as PyTorch's", "[ops][elementwise]") {
  // PyTorch: tensor([0., 1.5, 3.]).clamp(2, 1) = [1, 1, 1], grad [0, 0, 0]; NaN stays NaN.
  const Tensor x = from_vector<double>({0.0, 1.5, 3.0, NAN}, {4}).requires_grad_();
  const Tensor y = clamp(x, 2.0, 1.0);
  const std::vector<double> v = values(y);
  CHECK(v[0] == 1.0);
  CHECK(v[1] == 1.0);
  CHECK(v[2] == 1.0);
  CHECK(std::isnan(v[3]));
  CHECK(values(autograd::grad({sum(y)}, {x})[0]) == std::vector<double>{0, 0, 0, 0});
  CHECK(values(clamp(from_vector<int32_t>({0, 5}, {2}), 3, 1)) == std::vector<double>{1, 1});
  Tensor z = from_vector<float>({0.f, 5.f}, {2});
  z.clamp_(3, 1);
  CHECK(values(z) == std::vector<double>{1, 1});
}

TEST_CASE("relu keeps -0 and maximum/minimum return their first operand on a tie, as PyTorch's",
          "[ops][elementwise]") {
  // PyTorch: relu(-0.) has its sign bit set; maximum([0, -0], [-0, 0]).signbit() = [F, T], minimum alike.
  CHECK(signbits(relu(from_vector<float>({-0.f, 0.f}, {2}))) == std::vector<bool>{true, false});
  const Tensor a = from_vector<float>({0.f, -0.f}, {2}), b = from_vector<float>({-0.f, 0.f}, {2});
  CHECK(signbits(maximum(a, b)) == std::vector<bool>{false, true});
  CHECK(signbits(minimum(a, b)) == std::vector<bool>{false, true});
  const std::vector<double> r = values(relu(from_vector<float>({NAN, -1.f, 2.f}, {3})));
  CHECK(std::isnan(r[0]));
  CHECK(r[1] == 0.0);
  CHECK(r[2] == 2.0);
}

TEST_CASE("pow's gradients at base 0 and for exponent 0 match PyTorch's", "[ops][elementwise][autograd]") {
  // PyTorch: a = 0, b = [-1, -0.5, 2, nan]: a.grad = b.grad = [-inf, -inf, 0, nan].
  const Tensor a = zeros({4}, {.dtype = DType::F64}).requires_grad_();
  const Tensor b = from_vector<double>({-1.0, -0.5, 2.0, NAN}, {4}).requires_grad_();
  const Tensors g = autograd::grad({sum(pow(a, b))}, {a, b});
  for (const Tensor& gi : g) {
    const std::vector<double> v = values(gi);
    CHECK(v[0] == -INFINITY);
    CHECK(v[1] == -INFINITY);
    CHECK(v[2] == 0.0);
    CHECK(std::isnan(v[3]));
  }
  // x^0 is a constant: its gradient is 0 even for an inf or NaN incoming gradient.
  const Tensor x = from_vector<double>({2.0, 3.0}, {2}).requires_grad_();
  const Tensor gx = autograd::grad({pow(x, 0.0)}, {x}, {from_vector<double>({INFINITY, NAN}, {2})})[0];
  CHECK(values(gx) == std::vector<double>{0, 0});
}

TEST_CASE("softplus's backward keeps beta x in f32 for f16 and bf16, as its forward", "[ops][elementwise][autograd]") {
  // PyTorch: f16 x = 1366/4096, softplus(x, beta 3, threshold 1): beta x = 1.00049 > 1 in f32,
  // the linear side, gradient 1.0 (beta x rounded to f16 is 1.0 and took the sigmoid side: 0.731).
  const Tensor h = full({1}, 1366.0 / 4096.0, {.dtype = DType::F16}).requires_grad_();
  CHECK(values(autograd::grad({sum(softplus(h, 3.0, 1.0))}, {h})[0]) == std::vector<double>{1.0});
  // bf16 x = -10.0625, beta 3: sigmoid(-30.1875) rounded once is PyTorch's 7.771561172376096e-14
  // (beta x rounded to bf16 first gave 7.28e-14).
  const Tensor bx = full({1}, -10.0625, {.dtype = DType::BF16}).requires_grad_();
  CHECK(values(autograd::grad({sum(softplus(bx, 3.0))}, {bx})[0]) == std::vector<double>{7.771561172376096e-14});
  // the recorded (double-backward) form agrees with the fused op
  const Tensor r = full({1}, -10.0625, {.dtype = DType::BF16}).requires_grad_();
  const Tensor gr = autograd::grad({sum(softplus(r, 3.0))}, {r}, {}, /*retain_graph=*/true, /*create_graph=*/true)[0];
  CHECK(values(gr) == std::vector<double>{7.771561172376096e-14});
  MG_REQUIRE_ERROR(softplus_backward(ones({1}), ones({1}), 0.0), "softplus_backward: beta must be finite and not 0");
}

TEST_CASE("sign stays in the graph with a zero gradient, as PyTorch's", "[ops][elementwise][autograd]") {
  // PyTorch: torch.sign(x).requires_grad is True and backward gives zeros.
  const Tensor x = from_vector<double>({-2.0, 0.0, 3.0}, {3}).requires_grad_();
  const Tensor s = sign(x);
  CHECK(s.requires_grad());
  sum(s * x).backward();  // d(sign(x) x) = sign(x) through the product, 0 through sign
  CHECK(values(x.grad()) == std::vector<double>{-1, 0, 1});
}

TEST_CASE("binary_cross_entropy_with_logits with pos_weight: the gradient of a confident negative is not 0",
          "[ops][loss][autograd]") {
  // bf16, t = 0 (and t = 1 at x = 4), pos_weight 3, sum: the gradient is sigmoid(x) (resp.
  // -3 sigmoid(-x)) rounded once. For t = 0 these are PyTorch 2.15's values; 1 - sigmoid(-x)
  // rounded to bf16 first gave 0 from x = -7. At t = 1 PyTorch's own 3 sigmoid(4) - 3 in bf16
  // cancels to -0.0625; -3 sigmoid(-4) = -0.0539638... rounds to -0.0539550781.
  const Tensor x = from_vector<double>({-3, -5, -7, -9, 4}, {5}).to(DType::BF16).requires_grad_();
  const Tensor t = from_vector<double>({0, 0, 0, 0, 1}, {5}).to(DType::BF16);
  const Tensor pw = full({5}, 3.0, {.dtype = DType::BF16});
  const Tensor loss = binary_cross_entropy_with_logits(x, t, pw, Reduction::Sum);
  CHECK(values(autograd::grad({loss}, {x})[0]) ==
        std::vector<double>{0.04736328125, 0.006683349609375, 0.000911712646484375, 0.00012302398681640625, -0.053955078125});
}

TEST_CASE("matmul's gradient of an operand shared by a batch is one f32 sum, rounded once", "[ops][linalg][autograd]") {
  // PyTorch 2.15: a = [300, -300] f16 [2, 1, 1], v [1]: (a @ v).backward(300) gives v.grad = [0]
  // (the per-batch partials +-90000 were inf and -inf in f16, summed to NaN). Same for w [1, 1] @ a
  // and a 1-D [1] @ a.
  const Tensor a = from_vector<double>({300, -300}, {2, 1, 1}).to(DType::F16);
  const Tensor v = ones({1}, {.dtype = DType::F16}).requires_grad_();
  const Tensor g = full({2, 1}, 300.0, {.dtype = DType::F16});
  CHECK(values(autograd::grad({matmul(a, v)}, {v}, {g})[0]) == std::vector<double>{0});
  const Tensor w = ones({1, 1}, {.dtype = DType::F16}).requires_grad_();
  CHECK(values(autograd::grad({matmul(w, a)}, {w}, {full({2, 1, 1}, 300.0, {.dtype = DType::F16})})[0]) ==
        std::vector<double>{0});
  CHECK(values(autograd::grad({matmul(v, a)}, {v}, {full({2, 1}, 300.0, {.dtype = DType::F16})})[0]) ==
        std::vector<double>{0});
  // and the f64 values of a bigger case agree with the per-batch sum
  const Tensor A = randn({3, 4, 5}, {.dtype = DType::F64});
  const Tensor W = randn({4, 5}, {.dtype = DType::F64}).requires_grad_(), V = randn({5}, {.dtype = DType::F64}).requires_grad_();
  const Tensor G = randn({3, 4, 6}, {.dtype = DType::F64}), C = randn({3, 5, 6}, {.dtype = DType::F64});
  const Tensor gw = autograd::grad({matmul(W, C)}, {W}, {G})[0];
  const Tensor want_w = sum(matmul(G, transpose(C, -1, -2)), {0});
  const std::vector<double> x = values(gw), y = values(want_w);
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(std::abs(x[i] - y[i]) < 1e-12);
  const Tensor gv = autograd::grad({matmul(A, V)}, {V}, {randn({3, 4}, {.dtype = DType::F64})})[0];
  CHECK(gv.shape() == Shape{5});
  const Tensor gv2 = autograd::grad({matmul(V, C)}, {V}, {randn({3, 6}, {.dtype = DType::F64})})[0];
  CHECK(gv2.shape() == Shape{5});
}

TEST_CASE("bilinear with no outputs or no rows returns an empty result, as PyTorch's", "[ops][linalg]") {
  // PyTorch: bilinear(ones(2, 2), ones(2, 3), ones(0, 2, 3)) has shape (2, 0); reshape's -1 could
  // not be inferred beside the 0.
  CHECK(bilinear(ones({2, 2}), ones({2, 3}), ones({0, 2, 3})).shape() == Shape{2, 0});
  CHECK(bilinear(ones({0, 2}), ones({0, 3}), ones({4, 2, 3})).shape() == Shape{0, 4});
  CHECK(values(bilinear(ones({1, 2}), ones({1, 3}), ones({1, 2, 3}))) == std::vector<double>{6});
}

TEST_CASE("floor, ceil, trunc and round as PyTorch's: halves to even, signed zeros, NaN and infinities kept",
          "[ops][elementwise]") {
  // Expected values printed by PyTorch 2.15 for the same input.
  const Tensor x = from_vector<float>({-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f, -1.7f, 1.7f, NAN, INFINITY, -INFINITY, -0.2f});
  const auto same = [](const Tensor& got, std::vector<double> want) {
    const std::vector<double> g = values(got);
    REQUIRE(g.size() == want.size());
    for (std::size_t i = 0; i < g.size(); ++i) {
      INFO("element " << i);
      if (std::isnan(want[i])) {
        CHECK(std::isnan(g[i]));
      } else {
        CHECK(g[i] == want[i]);
        CHECK(std::signbit(g[i]) == std::signbit(want[i]));  // -0 where PyTorch gives -0
      }
    }
  };
  const double inf = INFINITY, nan = NAN;
  same(floor(x), {-3, -2, -1, 0, 1, 2, -2, 1, nan, inf, -inf, -1});
  same(ceil(x), {-2, -1, -0.0, 1, 2, 3, -1, 2, nan, inf, -inf, -0.0});
  same(trunc(x), {-2, -1, -0.0, 0, 1, 2, -1, 1, nan, inf, -inf, -0.0});
  same(round(x), {-2, -2, -0.0, 0, 2, 2, -2, 2, nan, inf, -inf, -0.0});
  same(round(to(from_vector<float>({2.5f, 3.5f}), DType::BF16)), {2, 4});
  CHECK(round(to(x, DType::F16)).dtype() == DType::F16);
  // integers unchanged, in their dtype
  const Tensor i = arange(-2, 3);
  CHECK(floor(i).dtype() == DType::I64);
  CHECK(values(round(i)) == values(i));
  // a zero gradient, as PyTorch's
  Tensor y = from_vector<double>({0.3, -1.2, 2.7}).requires_grad_();
  sum(floor(y) + ceil(y) + trunc(y) + round(y)).backward();
  CHECK(values(y.grad()) == std::vector<double>{0, 0, 0});
}
