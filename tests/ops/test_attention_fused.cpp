// Fused attention (ops/attention_fused.h) behind scaled_dot_product_attention on the CPU: equal to
// the composite formula in f64 (values, gradients, double backward, dropout's mask), more accurate
// than the composite in f16/bf16 at a BERT-sized shape, the same under autocast, and independent
// of how the entries are spread over threads.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "amp/autocast.h"
#include "amp/overflow_tracer.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "ops/attention.h"
#include "ops/attention_args.h"
#include "ops/attention_fused.h"
#include "ops/dispatcher.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

Tensor rnd(Shape s, uint64_t seed, DType dt = DType::F64, double scale = 1.0) {
  Generator g(seed);
  return randn(s, {.dtype = DType::F64}, &g).mul(scale).to(dt);
}

// The composite's formula from public ops: softmax(q kᵀ s + mask) v with a dead row 0 (no dropout).
Tensor reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bool_mask, double s) {
  Tensor scores = matmul(q, transpose(k, -1, -2)) * s;
  if (bool_mask.defined()) scores = where(bool_mask, scores, scalar_like(-INFINITY, scores));
  const Tensor m = amax(scores, {-1}, true);
  const Tensor dead = eq(m, scalar_like(-INFINITY, m));
  const Tensor w = softmax(where(dead, scalar_like(0.0, scores), scores), -1);
  return matmul(where(dead, scalar_like(0.0, w), w), v);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = values(a), y = values(b);
  REQUIRE(x.size() == y.size());
  double m = 0;
  for (std::size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}
// ‖a - b‖ / ‖b‖ (root mean square): the error of a whole result, where a maximum only sees the
// final rounding of its largest element.
double rms_error(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = values(a), y = values(b);
  REQUIRE(x.size() == y.size());
  double d = 0, n = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    d += (x[i] - y[i]) * (x[i] - y[i]);
    n += y[i] * y[i];
  }
  return std::sqrt(d / n);
}
double max_abs(const Tensor& a) {
  double m = 0;
  for (double x : values(a)) m = std::max(m, std::fabs(x));
  return m;
}

// The gradients of sum(y * c) and sum(want * c) with respect to `wrt` agree within tol.
void check_same_grads(const Tensor& y, const Tensor& want, const Tensor& c, const Tensors& wrt, double tol) {
  const Tensors g = autograd::grad({sum(y * c)}, wrt);
  const Tensors gw = autograd::grad({sum(want * c)}, wrt);
  for (std::size_t i = 0; i < wrt.size(); ++i) {
    INFO("input " << i);
    CHECK(max_abs_diff(g[i], gw[i]) < tol);
  }
}

// The op that made y (its autograd node's name): "attention_backward" when the fused op ran.
std::string made_by(const Tensor& y) { return y.impl()->autograd.grad_fn ? y.impl()->autograd.grad_fn->name() : ""; }

}  // namespace

TEST_CASE("fused attention equals the composite formula in f64, with its gradients", "[ops][attention][fused]") {
  const Tensor q = rnd({2, 3, 7, 5}, 11).requires_grad_(), k = rnd({2, 3, 9, 5}, 12).requires_grad_();
  const Tensor v = rnd({2, 3, 9, 4}, 13).requires_grad_();
  // Key padding [2, 1, 1, 9]: sample 1 masks its first 4 keys, so with the causal mask its first
  // four query rows are dead.
  std::vector<double> pad(18, 1.0);
  for (int j = 0; j < 4; ++j) pad[9 + j] = 0.0;
  const Tensor mask = from_vector(pad, {2, 1, 1, 9}).to(DType::Bool);
  std::vector<double> lower(63);  // [7, 9]: key j <= query i
  for (int i = 0; i < 7; ++i) {
    for (int j = 0; j < 9; ++j) lower[std::size_t(i * 9 + j)] = j <= i ? 1.0 : 0.0;
  }
  const Tensor both = (from_vector(pad, {2, 1, 1, 9}) * from_vector(lower, {7, 9})).to(DType::Bool);
  const Tensor c = rnd({2, 3, 7, 4}, 14);
  const Tensor y = scaled_dot_product_attention(q, k, v, mask, 0.0, /*is_causal=*/true, 0.4);
  CHECK(made_by(y) == "attention_backward");  // the fused op ran
  const Tensor want = reference(q, k, v, both, 0.4);
  CHECK(max_abs_diff(y, want) < 1e-13);
  const Tensors g = autograd::grad({sum(y * c)}, {q, k, v});
  const Tensors gw = autograd::grad({sum(want * c)}, {q, k, v});
  for (int i = 0; i < 3; ++i) {
    INFO("input " << i);
    CHECK(max_abs_diff(g[i], gw[i]) < 1e-12);
  }
  // Dead rows: zero output, zero gradient.
  CHECK(max_abs(y.select(0, 1).narrow(-2, 0, 4)) == 0.0);
  CHECK(max_abs(g[0].select(0, 1).narrow(-2, 0, 4)) == 0.0);
}

TEST_CASE("fused attention: double backward (create_graph) through public ops", "[ops][attention][fused][grad]") {
  const Tensor q = rnd({2, 4, 3}, 21).requires_grad_(), k = rnd({2, 5, 3}, 22).requires_grad_();
  const Tensor v = rnd({2, 5, 2}, 23).requires_grad_();
  const Tensor fmask = rnd({4, 5}, 24);
  const Tensor c = rnd({2, 4, 2}, 25);
  auto second = [&](bool fused) {
    const Tensor y = fused ? scaled_dot_product_attention(q, k, v, fmask, 0.0, false, 0.7)
                           : matmul(softmax(matmul(q, transpose(k, -1, -2)) * 0.7 + fmask, -1), v);
    CHECK(made_by(y) == (fused ? "attention_backward" : "matmul_backward"));
    const Tensors g = autograd::grad({sum(y * c)}, {q, k, v}, {}, std::nullopt, /*create_graph=*/true);
    const Tensor s = sum(g[0] * g[0]) + sum(g[1] * g[2].narrow(-1, 0, 1).expand({2, 5, 3})) + sum(g[2]);
    return autograd::grad({s}, {q, k, v});
  };
  const Tensors a = second(true), b = second(false);
  for (int i = 0; i < 3; ++i) {
    INFO("input " << i);
    CHECK(max_abs_diff(a[i], b[i]) < 1e-11);
  }
}

TEST_CASE("fused attention: double backward with a bool mask, causal, dead rows and dropout equals the composite's",
          "[ops][attention][fused][grad]") {
  // Batch 1 masks keys 0 and 1: with the causal mask its queries 0 and 1 see nothing (dead rows).
  const Tensor q = rnd({2, 4, 3}, 41).requires_grad_(), k = rnd({2, 5, 3}, 42).requires_grad_();
  const Tensor v = rnd({2, 5, 2}, 43).requires_grad_();
  const Tensor mask = from_vector<double>({1, 1, 1, 1, 1, 0, 0, 1, 1, 1}, {2, 1, 5}).to(DType::Bool);
  std::vector<double> lower(20);  // [4, 5]: key j <= query i
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 5; ++j) lower[std::size_t(i * 5 + j)] = j <= i ? 1.0 : 0.0;
  }
  const Tensor both = (mask.to(DType::F64) * from_vector(lower, {4, 5})).to(DType::Bool);
  const Tensor c = rnd({2, 4, 2}, 44);
  auto second = [&](bool fused) {
    Generator gen(77);
    Tensor y;
    if (fused) {
      y = scaled_dot_product_attention(q, k, v, mask, 0.3, /*is_causal=*/true, 0.7, &gen);
      CHECK(made_by(y) == "attention_backward");
    } else {
      const Tensor scores = where(both, matmul(q, transpose(k, -1, -2)) * 0.7, scalar_like(-INFINITY, q));
      const Tensor m = amax(scores, {-1}, true);
      const Tensor dead = eq(m, scalar_like(-INFINITY, m));
      const Tensor w = softmax(where(dead, scalar_like(0.0, scores), scores), -1);
      y = matmul(dropout(where(dead, scalar_like(0.0, w), w), 0.3, true, &gen), v);
    }
    const Tensors g = autograd::grad({sum(y * c)}, {q, k, v}, {}, std::nullopt, /*create_graph=*/true);
    const Tensor s = sum(g[0] * g[0]) + sum(g[1] * g[1]) + sum(g[2] * g[2]) + sum(g[1] * g[2].narrow(-1, 0, 1).expand({2, 5, 3}));
    const Tensors gg = autograd::grad({s}, {q, k, v});
    Tensors all = g;
    all.insert(all.end(), gg.begin(), gg.end());
    return all;
  };
  const Tensors a = second(true), b = second(false);
  for (int i = 0; i < 6; ++i) {
    INFO((i < 3 ? "first" : "second") << " derivative of input " << i % 3);
    CHECK(max_abs_diff(a[std::size_t(i)], b[std::size_t(i)]) < 1e-11);
    CHECK(max_abs(a[std::size_t(i)]) > 0.0);
    for (const double x : values(a[std::size_t(i)])) CHECK(std::isfinite(x));
  }
  CHECK(max_abs(a[0].select(0, 1).narrow(0, 0, 2)) == 0.0);  // the dead rows' dq
}

TEST_CASE("fused attention: a row whose scores all overflow to -inf without a mask is dead, with or without create_graph",
          "[ops][attention][fused][grad]") {
  // Query 0's scores are 1e200 * -1e200 * s = -inf for every key; query 1's are finite.
  const Tensor q = from_vector<double>({1e200, 1.0}, {1, 2, 1}).requires_grad_();
  const Tensor k = from_vector<double>({-1e200, -2e200, -3e200}, {1, 3, 1}).requires_grad_();
  const Tensor v = rnd({1, 3, 2}, 45).requires_grad_();
  const Tensor y = scaled_dot_product_attention(q, k, v);
  CHECK(made_by(y) == "attention_backward");
  CHECK(max_abs(y.select(1, 0)) == 0.0);
  const Tensor c = rnd({1, 2, 2}, 46);
  const Tensors plain = autograd::grad({sum(y * c)}, {q, k, v});
  const Tensor y2 = scaled_dot_product_attention(q, k, v);
  const Tensors graph = autograd::grad({sum(y2 * c)}, {q, k, v}, {}, std::nullopt, /*create_graph=*/true);
  for (int i = 0; i < 3; ++i) {
    INFO("input " << i);
    for (const double x : values(graph[std::size_t(i)])) CHECK(std::isfinite(x));
    CHECK(values(graph[std::size_t(i)]) == values(plain[std::size_t(i)]));
  }
  // The composite (the weights function, MultiheadAttention's need_weights) zeroes the row too.
  const Tensor weights = scaled_dot_product_attention_weights(q.detach(), k.detach());
  CHECK(max_abs(weights.select(1, 0)) == 0.0);
  CHECK(max_abs_diff(matmul(weights, v.detach()), y.detach()) < 1e-15);
}

TEST_CASE("fused attention draws the composite's dropout mask from the same stream", "[ops][attention][fused]") {
  const Tensor q = rnd({3, 6, 4}, 31).requires_grad_(), k = rnd({3, 7, 4}, 32), v = rnd({3, 7, 5}, 33);
  Generator g1(99), g2(99);
  const Tensor y = scaled_dot_product_attention(q, k, v, Tensor(), 0.4, false, std::nullopt, &g1);
  const Tensor w = dropout(softmax(matmul(q, transpose(k, -1, -2)) * 0.5, -1), 0.4, true, &g2);
  const Tensor want = matmul(w, v);
  CHECK(max_abs_diff(y, want) < 1e-13);
  CHECK(g1.offset() == g2.offset());  // the same stream position afterwards
  const Tensor c = rnd({3, 6, 5}, 34);
  CHECK(max_abs_diff(autograd::grad({sum(y * c)}, {q})[0], autograd::grad({sum(want * c)}, {q})[0]) < 1e-12);
}

TEST_CASE("fused attention in f16 and bf16 is more accurate than the composite at BERT's shape",
          "[ops][attention][fused][lowp]") {
  // BERT-mini's attention: 4 heads of 64, 128 positions; scores with a standard deviation of 2.25 (peaked
  // rows, as a trained model's), where rounding a score to f16/bf16 moves its weight most.
  const Tensor q64 = rnd({2, 4, 128, 64}, 41, DType::F64, 1.5), k64 = rnd({2, 4, 128, 64}, 42, DType::F64, 1.5);
  const Tensor v64 = rnd({2, 4, 128, 64}, 43);
  const Tensor c64 = rnd({2, 4, 128, 64}, 44);
  for (DType t : {DType::F16, DType::BF16}) {
    INFO(dtype_name(t));
    // Both against f64 on the same rounded inputs.
    const Tensor qt = q64.to(t).requires_grad_(), kt = k64.to(t).requires_grad_(), vt = v64.to(t).requires_grad_();
    const Tensor q = qt.to(DType::F64).detach().requires_grad_(), k = kt.to(DType::F64).detach().requires_grad_();
    const Tensor v = vt.to(DType::F64).detach().requires_grad_();
    const Tensor exact = scaled_dot_product_attention(q, k, v);
    const Tensors gexact = autograd::grad({sum(exact * c64)}, {q, k, v});
    const Tensor fused = scaled_dot_product_attention(qt, kt, vt);
    const Tensors gfused = autograd::grad({sum(fused * c64.to(t))}, {qt, kt, vt});
    const Tensor comp = matmul(softmax(matmul(qt, transpose(kt, -1, -2)) * 0.125, -1), vt);
    const Tensors gcomp = autograd::grad({sum(comp * c64.to(t))}, {qt, kt, vt});
    const double ulp = t == DType::F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    // The output rounded once to t, the floor both can reach.
    const double floor = rms_error(exact.to(t), exact);
    const double ef = rms_error(fused, exact), ec = rms_error(comp, exact);
    INFO("output rms error: fused " << ef << ", composite " << ec << ", rounding alone " << floor);
    CHECK(ef <= 1.5 * floor);  // measured 1.39 (f16) and 1.41 (bf16); the composite 3.85 and 3.99
    CHECK(ef < ec);
    CHECK(max_abs_diff(fused, exact) <= ulp * max_abs(exact));
    for (int i = 0; i < 3; ++i) {
      const double gf = rms_error(gfused[i], gexact[i]), gc = rms_error(gcomp[i], gexact[i]);
      INFO("gradient " << i << " rms error: fused " << gf << ", composite " << gc);
      CHECK(gf <= ulp);  // measured 0.73-0.75 ulp; the composite 1.7-1.8
      CHECK(gf < gc);
    }
  }
}

TEST_CASE("fused attention under bf16 autocast runs in bf16 and returns f32 leaves' gradients in f32",
          "[ops][attention][fused][amp]") {
  const Tensor q = rnd({2, 2, 8, 4}, 51, DType::F32).requires_grad_(), k = rnd({2, 2, 8, 4}, 52, DType::F32);
  const Tensor v = rnd({2, 2, 8, 4}, 53, DType::F32).requires_grad_();
  const Tensor fmask = rnd({8, 8}, 54, DType::F32);  // cast with the operands
  Tensor y;
  {
    amp::Autocast ac({.dtype = DType::BF16});
    y = scaled_dot_product_attention(q, k, v, fmask);
  }
  CHECK(y.dtype() == DType::BF16);
  // The same as the op on bf16 operands outside autocast.
  const Tensor want = scaled_dot_product_attention(q.to(DType::BF16), k.to(DType::BF16), v.to(DType::BF16),
                                                   fmask.to(DType::BF16));
  CHECK(max_abs_diff(y, want) == 0.0);
  sum(y.to(DType::F32)).backward();
  CHECK(q.grad().dtype() == DType::F32);
  CHECK(v.grad().dtype() == DType::F32);
}

TEST_CASE("fused attention gives the same result whatever the thread count", "[ops][attention][fused]") {
  // 3 entries: one per thread at 3+ threads, one after another (threaded products) below.
  const Tensor q = rnd({3, 40, 16}, 61, DType::F32), k = rnd({3, 50, 16}, 62, DType::F32);
  const Tensor v = rnd({3, 50, 8}, 63, DType::F32);
  const int before = num_threads();
  set_num_threads(1);
  const Tensor one = scaled_dot_product_attention(q, k, v);
  set_num_threads(4);
  const Tensor four = scaled_dot_product_attention(q, k, v);
  set_num_threads(before);
  CHECK(max_abs_diff(one, four) <= 1e-6 * max_abs(one));
}

TEST_CASE("fused attention ops refuse inconsistent operands with named errors", "[ops][attention][fused][errors]") {
  const Tensor q = zeros({2, 3, 4}), k = zeros({2, 5, 4}), v = zeros({2, 5, 6});
  AttentionArgs a;
  a.scale = 0.5;
  MG_REQUIRE_ERROR(dispatch(OpId::attention, {q, k.to(DType::F64), v}, a.attrs()),
                   "attention: query, key and value must have one dtype");
  MG_REQUIRE_ERROR(dispatch(OpId::attention, {q, zeros({3, 5, 4}), zeros({3, 5, 6})}, a.attrs()),
                   "attention: query, key and value must have the same leading dims");
  a.mask = true;
  MG_REQUIRE_ERROR(dispatch(OpId::attention, {q, k, v}, a.attrs()), "attention: expected (q, k, v, mask)");
  MG_REQUIRE_ERROR(dispatch(OpId::attention, {q, k, v, zeros({3, 5}, {.dtype = DType::F64})}, a.attrs()),
                   "attention: expected a f32 mask");
  MG_REQUIRE_ERROR(dispatch(OpId::attention, {q, k, v, zeros({4, 5})}, a.attrs()), "cannot be broadcast together");
  a.mask = false;
  a.dropout_p = 1.0;
  MG_REQUIRE_ERROR(dispatch(OpId::attention, {q, k, v}, a.attrs()), "dropout p must be in [0, 1)");
  OpAttrs no_stream = a.attrs();  // dropout without the Philox stream fused_attention reserves
  no_stream.beta = 0.3;
  no_stream.ints.clear();
  MG_REQUIRE_ERROR(dispatch(OpId::attention, {q, k, v}, no_stream), "attention: dropout p = 0.3 needs its Philox stream");
  a.dropout_p = 0.0;
  const Tensors fwd = dispatch(OpId::attention, {q, k, v}, a.attrs());
  MG_REQUIRE_ERROR(dispatch(OpId::attention_backward, {zeros({2, 3, 5}), q, k, v, fwd[1]}, a.attrs()),
                   "attention_backward: expected grad [2, 3, 6] f32");
  MG_REQUIRE_ERROR(dispatch(OpId::attention_backward, {fwd[0], q, k, v, zeros({2, 3, 2}, {.dtype = DType::F64})},
                            a.attrs()),
                   "attention_backward: expected stats [2, 3, 2] f32 (the forward's second output)");
}

TEST_CASE("fused attention: a dead row passes no inf or NaN gradient to q and k, as the composite",
          "[ops][attention][fused][grad]") {
  // Query 0 of batch 1 sees only padding; the loss's gradient at that (zero) output row is inf,
  // as a derivative singular at 0 gives (sqrt, x / |x|).
  const Tensor q = rnd({2, 3, 4}, 71).requires_grad_(), k = rnd({2, 5, 4}, 72).requires_grad_();
  const Tensor v = rnd({2, 5, 2}, 73);
  const Tensor mask = from_vector<double>({1, 1, 1, 1, 1, 0, 0, 1, 1, 1}, {2, 1, 5}).to(DType::Bool);
  std::vector<double> cv(12, 1.0);
  cv[6] = cv[7] = INFINITY;  // batch 1, query 0
  const Tensor c = from_vector(cv, {2, 3, 2});
  for (const bool fused : {true, false}) {
    INFO((fused ? "fused" : "composite"));
    const Tensor y = fused ? scaled_dot_product_attention(q, k, v, mask, 0.0, /*is_causal=*/true)
                           : reference(q, k, v,
                                       (mask.to(DType::F64) * from_vector<double>({1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0},
                                                                                   {3, 5})).to(DType::Bool),
                                       0.5);
    const Tensors g = autograd::grad({sum(y * c)}, {q, k});
    for (const Tensor& t : g) {
      for (const double x : values(t)) CHECK(std::isfinite(x));
    }
    CHECK(max_abs(g[0].select(0, 1).select(0, 0)) == 0.0);
  }
}

TEST_CASE("fused attention: dead rows leave finite statistics, so the overflow tracer stays quiet",
          "[ops][attention][fused][amp]") {
  const Tensor q = rnd({1, 3, 4}, 81, DType::F16), k = rnd({1, 5, 4}, 82, DType::F16), v = rnd({1, 5, 2}, 83, DType::F16);
  const Tensor mask = from_vector<double>({0, 0, 1, 1, 1}, {1, 1, 5}).to(DType::Bool);  // queries 0, 1 dead
  amp::OverflowTracer tracer;
  const Tensor y = scaled_dot_product_attention(q, k, v, mask, 0.0, /*is_causal=*/true);
  INFO(tracer.report());
  CHECK_FALSE(tracer.found());
  CHECK(max_abs(y.narrow(-2, 0, 2)) == 0.0);
}

TEST_CASE("fused attention: a mask that does not broadcast is refused before dropout draws",
          "[ops][attention][fused][errors]") {
  const Tensor q = zeros({2, 3, 4}), k = zeros({2, 5, 4}), v = zeros({2, 5, 6});
  Generator g(5);
  const uint64_t before = g.offset();
  MG_REQUIRE_ERROR(scaled_dot_product_attention(q, k, v, zeros({4, 5}), 0.5, false, std::nullopt, &g),
                   "scaled_dot_product_attention: shapes [4, 5] and [2, 3, 5] cannot be broadcast together");
  CHECK(g.offset() == before);
}

TEST_CASE("fused attention over several blocks of query rows equals the composite, with gradients and dropout",
          "[ops][attention][fused]") {
  // Lq x Lk = 1100 x 1000 is past one block (2^20 scores): the kernels run 1048 rows, then 52, and
  // the backward sums dk and dv over the two. Causal with key padding (dead rows in the first
  // block), then dropout against the composite on the same stream.
  const Tensor q = rnd({1, 2, 1100, 4}, 41).requires_grad_(), k = rnd({1, 2, 1000, 4}, 42).requires_grad_();
  const Tensor v = rnd({1, 2, 1000, 3}, 43).requires_grad_();
  std::vector<double> pad(1000, 1.0);
  for (int j = 0; j < 5; ++j) pad[std::size_t(j)] = 0.0;  // rows 0-4 see only padding: dead
  const Tensor mask = from_vector(pad, {1, 1, 1, 1000}).to(DType::Bool);
  const Tensor c = rnd({1, 2, 1100, 3}, 44);
  const Tensor y = scaled_dot_product_attention(q, k, v, mask, 0.0, /*is_causal=*/true, 0.6);
  CHECK(made_by(y) == "attention_backward");
  const Tensor lower = le(arange(0, 1000, 1, {.dtype = DType::I64}).unsqueeze(0),
                          arange(0, 1100, 1, {.dtype = DType::I64}).unsqueeze(1));  // key j <= query i
  const Tensor both = (mask.to(DType::F64) * lower.to(DType::F64)).to(DType::Bool);
  const Tensor want = reference(q, k, v, both, 0.6);
  CHECK(max_abs_diff(y, want) < 1e-13);
  check_same_grads(y, want, c, {q, k, v}, 1e-12);
  CHECK(max_abs(y.select(1, 1).narrow(-2, 0, 5)) == 0.0);

  Generator g1(7), g2(7);
  const Tensor yd = scaled_dot_product_attention(q, k, v, Tensor(), 0.3, false, std::nullopt, &g1);
  const Tensor wd = matmul(dropout(softmax(matmul(q, transpose(k, -1, -2)) * 0.5, -1), 0.3, true, &g2), v);
  CHECK(max_abs_diff(yd, wd) < 1e-13);
  check_same_grads(yd, wd, c, {q, k, v}, 1e-12);

  // bf16: the blocked sums of dk and dv stay as accurate as one block's (f32 sums, one rounding).
  const Tensor qb = q.detach().to(DType::BF16).requires_grad_(), kb = k.detach().to(DType::BF16).requires_grad_();
  const Tensor vb = v.detach().to(DType::BF16).requires_grad_();
  const Tensor cb = c.to(DType::BF16);
  const Tensors gb = autograd::grad({sum(scaled_dot_product_attention(qb, kb, vb, mask, 0.0, true, 0.6) * cb)}, {qb, kb, vb});
  const Tensor q64 = qb.detach().to(DType::F64).requires_grad_(), k64 = kb.detach().to(DType::F64).requires_grad_();
  const Tensor v64 = vb.detach().to(DType::F64).requires_grad_();
  const Tensors g64 = autograd::grad({sum(reference(q64, k64, v64, both, 0.6) * cb.to(DType::F64))}, {q64, k64, v64});
  for (int i = 0; i < 3; ++i) {
    INFO("bf16, input " << i);
    CHECK(rms_error(gb[i], g64[i]) < 1e-2);
  }
}

TEST_CASE("fused attention with no query rows gives zero key and value gradients", "[ops][attention][fused]") {
  // Lq = 0 runs no block of rows; dk and dv must still be written (zeros), not left as allocated.
  for (int trial = 0; trial < 3; ++trial) {
    const Tensor big = randn({64, 64}) * 1e30;  // dirty the allocator's free blocks first
    (void)big;
    const Tensor q = rnd({1, 2, 0, 4}, 51).requires_grad_(), k = rnd({1, 2, 5, 4}, 52).requires_grad_();
    const Tensor v = rnd({1, 2, 5, 3}, 53).requires_grad_();
    const Tensor y = fused_attention(q, k, v, Tensor(), 0.0, false, 0.5, nullptr);
    CHECK(made_by(y) == "attention_backward");
    const Tensors g = autograd::grad({sum(y)}, {k, v});
    CHECK(max_abs(g[0]) == 0.0);
    CHECK(max_abs(g[1]) == 0.0);
  }
}
