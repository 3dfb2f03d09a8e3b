// Scaled dot-product attention: values against a hand-written composition, masks (bool, float,
// causal), gradients in f64, low precision, and shape errors.
#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/engine.h"
#include "core/factory.h"
#include "ops/attention.h"
#include "ops/interpolate.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

Tensor rnd(Shape s, uint64_t seed) {
  Generator g(seed);
  return randn(s, {.dtype = DType::F64}, &g);
}

void require_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    REQUIRE(std::fabs(got[i] - want[i]) <= tol * (1.0 + std::fabs(want[i])));
  }
}

// Central differences of sum(f(x) * c) with respect to every element of x.
std::vector<double> numeric_grad(const std::function<Tensor()>& f, Tensor& x, const Tensor& c) {
  std::vector<double> out;
  double* p = x.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double keep = p[i];
    p[i] = keep + 1e-6;
    const double up = sum(f() * c).item<double>();
    p[i] = keep - 1e-6;
    const double down = sum(f() * c).item<double>();
    p[i] = keep;
    out.push_back((up - down) / 2e-6);
  }
  return out;
}

}  // namespace

TEST_CASE("attention equals softmax(q k^T / sqrt(E)) v", "[ops][attention]") {
  // One query [1, 0] against keys [1, 0] and [0, 1], E = 2: scores = [1, 0] / sqrt(2);
  // weights = softmax = [1, e^{-1/sqrt2}] / (1 + e^{-1/sqrt2}); out = weights @ [[10], [20]].
  const Tensor q = from_vector<double>({1, 0}, {1, 2});
  const Tensor k = from_vector<double>({1, 0, 0, 1}, {2, 2});
  const Tensor v = from_vector<double>({10, 20}, {2, 1});
  const double a = std::exp(-1.0 / std::sqrt(2.0));
  require_close(values(scaled_dot_product_attention(q, k, v)), {(10.0 + 20.0 * a) / (1.0 + a)}, 1e-12);

  const Tensor qb = rnd({2, 3, 4, 8}, 1), kb = rnd({2, 3, 5, 8}, 2), vb = rnd({2, 3, 5, 6}, 3);
  const Tensor want = matmul(softmax(matmul(qb, transpose(kb, -1, -2)) / std::sqrt(8.0), -1), vb);
  const Tensor got = scaled_dot_product_attention(qb, kb, vb);
  REQUIRE(got.shape() == Shape{2, 3, 4, 6});
  require_close(values(got), values(want), 1e-12);
}

TEST_CASE("attention masks: bool, additive and causal agree", "[ops][attention]") {
  const Tensor q = rnd({2, 4, 8}, 4), k = rnd({2, 4, 8}, 5), v = rnd({2, 4, 3}, 6);
  // causal keeps key j <= query i
  std::vector<uint8_t> keep;
  std::vector<double> add;
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      keep.push_back(j <= i);
      add.push_back(j <= i ? 0.0 : -INFINITY);
    }
  }
  const Tensor bool_mask = from_vector<uint8_t>(keep, {4, 4}).to(DType::Bool);
  const Tensor float_mask = from_vector<double>(add, {4, 4});
  const std::vector<double> causal = values(scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true));
  require_close(values(scaled_dot_product_attention(q, k, v, bool_mask)), causal, 1e-12);
  require_close(values(scaled_dot_product_attention(q, k, v, float_mask)), causal, 1e-12);
  // the first query attends only to the first key: its output is v[:, 0]
  const std::vector<double> first = values(select(scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true), 1, 0));
  require_close(first, values(select(v, 1, 0)), 1e-12);
}

TEST_CASE("attention gradients match central differences in f64", "[ops][attention][grad]") {
  Tensor q = rnd({2, 3, 4}, 7), k = rnd({2, 5, 4}, 8), v = rnd({2, 5, 2}, 9);
  const Tensor mask = from_vector<uint8_t>({1, 1, 0, 1, 1, 1, 1, 1, 0, 0, 1, 0, 1, 1, 1}, {3, 5}).to(DType::Bool);
  const Tensor c = rnd({2, 3, 2}, 10);
  auto f = [&] { return scaled_dot_product_attention(q, k, v, mask); };
  q.requires_grad_();
  k.requires_grad_();
  v.requires_grad_();
  const Tensors g = autograd::grad({sum(f() * c)}, {q, k, v});
  q.requires_grad_(false);
  k.requires_grad_(false);
  v.requires_grad_(false);
  require_close(values(g[0]), numeric_grad(f, q, c), 1e-6);
  require_close(values(g[1]), numeric_grad(f, k, c), 1e-6);
  require_close(values(g[2]), numeric_grad(f, v, c), 1e-6);
}

TEST_CASE("attention in f16 and bf16 stays close to f64", "[ops][attention]") {
  const Tensor q = rnd({2, 4, 16}, 11), k = rnd({2, 6, 16}, 12), v = rnd({2, 6, 8}, 13);
  const std::vector<double> ref = values(scaled_dot_product_attention(q, k, v));
  for (DType t : {DType::F16, DType::BF16}) {
    const Tensor out = scaled_dot_product_attention(q.to(t), k.to(t), v.to(t));
    REQUIRE(out.dtype() == t);
    require_close(values(out), ref, t == DType::F16 ? 1e-2 : 5e-2);
  }
}

TEST_CASE("attention dropout is reproducible and p = 0 is exact", "[ops][attention]") {
  const Tensor q = rnd({4, 8}, 14), k = rnd({4, 8}, 15), v = rnd({4, 8}, 16);
  require_close(values(scaled_dot_product_attention(q, k, v, Tensor(), 0.0)),
                values(scaled_dot_product_attention(q, k, v)), 0.0);
  Generator g1(3), g2(3);
  const std::vector<double> a = values(scaled_dot_product_attention(q, k, v, Tensor(), 0.5, false, std::nullopt, &g1));
  const std::vector<double> b = values(scaled_dot_product_attention(q, k, v, Tensor(), 0.5, false, std::nullopt, &g2));
  REQUIRE(a == b);
  REQUIRE(a != values(scaled_dot_product_attention(q, k, v)));
}

TEST_CASE("attention: a query row with every key masked gives 0 and zero gradients, as PyTorch",
          "[ops][attention][grad]") {
  // A causal mask over a left-padded sequence: query 1 may see keys 0-1 only, and both are padding.
  Tensor q = from_vector(std::vector<double>{0.3, -0.2, 0.5, 0.1, -0.4, 0.2, 0.7, -0.1}, {1, 4, 2}).requires_grad_();
  Tensor k = from_vector(std::vector<double>{0.2, 0.4, -0.3, 0.1, 0.6, -0.5, 0.1, 0.3}, {1, 4, 2}).requires_grad_();
  Tensor v = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}, {1, 4, 2}).requires_grad_();
  const Tensor pad = from_vector(std::vector<double>{0, 0, 1, 1}, {1, 1, 4}).to(DType::Bool);  // true = attend
  const Tensor y = scaled_dot_product_attention(q, k, v, pad, 0.0, /*is_causal=*/true);
  const std::vector<double> out = values(y);
  CHECK(out[0] == 0.0);  // rows 0 and 1: every allowed key is padding
  CHECK(out[2] == 0.0);
  CHECK(out[4] == Approx(5.0));  // row 2 sees key 2 only
  sum(y.narrow(1, 2, 2)).backward();  // the loss reads the real rows only
  for (const Tensor& t : {q, k, v}) {
    for (const double g : values(t.grad())) CHECK(std::isfinite(g));
  }
  CHECK(values(q.grad())[0] == 0.0);  // dead rows: no gradient
  // The same through a float mask of -inf.
  const Tensor add = from_vector(std::vector<double>{-INFINITY, -INFINITY, 0, 0}, {1, 1, 4});
  CHECK(values(scaled_dot_product_attention(q, k, v, add, 0.0, true))[0] == 0.0);
  // Rows with an allowed key are unchanged: equal to the plain formula.
  const Tensor all = from_vector(std::vector<double>{1, 1, 1, 1}, {1, 1, 4}).to(DType::Bool);
  const Tensor plain = scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true);
  CHECK(values(scaled_dot_product_attention(q, k, v, all, 0.0, true)) == values(plain));
}

TEST_CASE("attention shape errors name both operands", "[ops][attention][errors]") {
  const Tensor q = zeros({2, 4, 8}), k = zeros({2, 5, 4}), v = zeros({2, 6, 3});
  MG_REQUIRE_ERROR(scaled_dot_product_attention(q, k, v),
                   "scaled_dot_product_attention: query has 8 features but key has 4; got query [2, 4, 8] f32 cpu, key [2, 5, 4] f32 cpu");
  MG_REQUIRE_ERROR(scaled_dot_product_attention(q, zeros({2, 5, 8}), v),
                   "scaled_dot_product_attention: key has 5 positions but value has 6");
  MG_REQUIRE_ERROR(scaled_dot_product_attention(q, zeros({2, 5, 8}), zeros({2, 5, 3}), zeros({3, 5}).to(DType::Bool)),
                   "cannot be broadcast");
  MG_REQUIRE_ERROR(scaled_dot_product_attention(zeros({8}), k, v), "expected query, key and value with at least 2 dims");
}

TEST_CASE("interpolate refuses recompute_scale_factor with an explicit size", "[ops]") {
  // PyTorch 2.15: "recompute_scale_factor is not meaningful with an explicit size".
  MG_REQUIRE_ERROR(interpolate(zeros({1, 1, 4}), {.size = {8}, .recompute_scale_factor = true}),
                   "recompute_scale_factor is meaningful only with scale_factor");
}

TEST_CASE("f16 attention on the composite path scales before the scores' rounding, as PyTorch", "[ops][attention]") {
  // Raw q.k = 69696 and 67584 overflow f16; scaled by 1/8 they are 8712 and 8448. The composite
  // path (here: k and v shared by two heads, so the leading dims differ) multiplied by the scale
  // after the f16 product: +inf scores gave NaN rows, -inf ones dead (zero) rows. PyTorch 2.15
  // (F.scaled_dot_product_attention, f16 CPU) gives rows [0, 1, 2, ...] and [64, 65, 66, ...].
  const TensorOptions f16{.dtype = DType::F16};
  const Tensor q = full({1, 2, 1, 64}, 33.0, f16);
  const Tensor k = cat({full({1, 1, 1, 64}, 33.0, f16), full({1, 1, 1, 64}, 32.0, f16)}, 2);  // [1, 1, 2, 64]
  const Tensor v = arange(0, 128, 1, f16).reshape({1, 1, 2, 64});
  const std::vector<double> y = test::values(scaled_dot_product_attention(q, k, v));
  const std::vector<double> y2 = test::values(scaled_dot_product_attention(neg(q), k, v));
  REQUIRE(y.size() == 128);
  for (int h = 0; h < 2; ++h) {
    for (int e = 0; e < 64; ++e) {
      CHECK(y[std::size_t(h * 64 + e)] == double(e));        // all weight on key 0 (e^-264 rounds away)
      CHECK(y2[std::size_t(h * 64 + e)] == double(64 + e));  // all weight on key 1
    }
  }
  // The weights alone (MultiheadAttention's need_weights path): [1, 0].
  CHECK(test::values(scaled_dot_product_attention_weights(q.narrow(1, 0, 1), k)) == std::vector<double>{1.0, 0.0});
}

TEST_CASE("grouped-query attention repeats each key/value head over its group of query heads",
          "[ops][attention][grad]") {
  // Hq = 4 query heads over Hkv = 2 key/value heads: key head h serves query heads 2h and 2h + 1,
  // as PyTorch's enable_gqa (repeat_interleave); checked against index_select of the heads
  // [0, 0, 1, 1], values and every gradient.
  Tensor q = rnd({2, 4, 3, 8}, 11).requires_grad_();
  Tensor k = rnd({2, 2, 5, 8}, 12).requires_grad_();
  Tensor v = rnd({2, 2, 5, 6}, 13).requires_grad_();
  const Tensor mask = rnd({3, 5}, 14);
  const Tensor c = rnd({2, 4, 3, 6}, 15);
  const Tensor y = scaled_dot_product_attention(q, k, v, mask, 0.0, /*is_causal=*/true, 0.3, nullptr,
                                                /*enable_gqa=*/true);
  sum(y * c).backward();
  const std::vector<double> gq = values(q.grad()), gk = values(k.grad()), gv = values(v.grad());
  for (const Tensor& t : {q, k, v}) t.set_grad(Tensor());
  const Tensor heads = from_vector<int64_t>({0, 0, 1, 1}, {4});
  const Tensor want = scaled_dot_product_attention(q, index_select(k, 1, heads), index_select(v, 1, heads), mask,
                                                   0.0, true, 0.3);
  sum(want * c).backward();
  require_close(values(y), values(want), 1e-12);
  require_close(gq, values(q.grad()), 1e-12);
  require_close(gk, values(k.grad()), 1e-12);
  require_close(gv, values(v.grad()), 1e-12);
  // Equal head counts: plain attention.
  const Tensor k4 = rnd({2, 4, 5, 8}, 16), v4 = rnd({2, 4, 5, 6}, 17);
  CHECK(values(scaled_dot_product_attention(q, k4, v4, Tensor(), 0.0, false, std::nullopt, nullptr, true)) ==
        values(scaled_dot_product_attention(q, k4, v4)));
}

TEST_CASE("grouped-query attention repeats key and value heads by their own groups", "[ops][attention]") {
  // PyTorch 2.15 accepts a key of 2 heads beside a value of 1 under 4 query heads: each repeated
  // to 4 by its own factor.
  const Tensor q = rnd({1, 4, 3, 4}, 21), k = rnd({1, 2, 5, 4}, 22), v = rnd({1, 1, 5, 3}, 23);
  const Tensor got = scaled_dot_product_attention(q, k, v, Tensor(), 0.0, false, std::nullopt, nullptr, true);
  const Tensor want = scaled_dot_product_attention(q, index_select(k, 1, from_vector<int64_t>({0, 0, 1, 1}, {4})),
                                                   expand(v, {1, 4, 5, 3}));
  require_close(values(got), values(want), 1e-12);
}

TEST_CASE("grouped-query attention refuses head counts that do not divide", "[ops][attention][errors]") {
  const Tensor q = zeros({1, 3, 2, 4}), k = zeros({1, 2, 2, 4}), v = zeros({1, 2, 2, 4});
  MG_REQUIRE_ERROR(scaled_dot_product_attention(q, k, v, Tensor(), 0.0, false, std::nullopt, nullptr, true),
                   "enable_gqa needs the key's and the value's heads to divide the query's; got query [1, 3, 2, 4] f32 "
                   "cpu (3 heads), key [1, 2, 2, 4] f32 cpu (2), value [1, 2, 2, 4] f32 cpu (2)");
  MG_REQUIRE_ERROR(scaled_dot_product_attention(zeros({2, 4}), zeros({2, 4}), zeros({2, 4}), Tensor(), 0.0, false,
                                                std::nullopt, nullptr, true),
                   "enable_gqa needs query, key and value with a head dim");
  // Without enable_gqa the heads must broadcast (the matmul's error).
  CHECK_THROWS(scaled_dot_product_attention(zeros({1, 4, 2, 4}), k, v));
}
