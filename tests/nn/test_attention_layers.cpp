// MultiheadAttention and TransformerEncoderLayer: PyTorch's parameter names, shapes and inits;
// the output against a hand-written composition of ops in f64 for every mask kind (bool masks use
// PyTorch's convention, true = NOT allowed); central-difference gradients; the encoder layer's
// state-dict order, pre/post norm wiring, dropout in train vs eval; and the error texts.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "core/generator.h"
#include "nn/nn.h"
#include "reference/json_reference.h"
#include "test_paths.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

const double kInf = std::numeric_limits<double>::infinity();

Tensor f64(const std::vector<double>& v, Shape s = {}) { return from_vector<double>(v, s); }

Tensor rnd(const Shape& s, uint64_t seed, DType dt = DType::F64) {
  Generator g(seed);
  return randn(s, {.dtype = dt}, &g);
}

// A bool tensor from 0/1 values.
Tensor bools(const std::vector<uint8_t>& v, Shape s) { return from_vector<uint8_t>(v, s).to(DType::Bool); }

void assign(const Tensor& p, const Tensor& v) {
  NoGradGuard no_grad;
  Tensor(p).copy_(v);
}

void require_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    REQUIRE(std::fabs(got[i] - want[i]) <= tol * (1.0 + std::fabs(want[i])));
  }
}

std::vector<std::string> names(const nn::NamedTensors& list) {
  std::vector<std::string> out;
  for (const auto& [n, t] : list) out.push_back(n);
  return out;
}

// An f64 MHA with random parameters, biases included (they start at zero).
std::shared_ptr<nn::MultiheadAttention> random_mha(int64_t e, int64_t h, uint64_t seed) {
  auto m = nn::make<nn::MultiheadAttention>({.embed_dim = e, .num_heads = h});
  m->to(DType::F64);
  uint64_t s = seed;
  for (const Tensor& p : m->parameters()) assign(p, rnd(p.shape(), ++s) * 0.5);
  return m;
}

// The reference: per head h, softmax(q_h k_h^T / sqrt(d) + mask) v_h, heads concatenated, then
// out_proj. q/k/v from the rows [0, E), [E, 2E), [2E, 3E) of in_proj. `mask`: additive,
// broadcastable to [B, H, L, S], or undefined.
Tensor reference(const nn::MultiheadAttention& m, int64_t h, const Tensor& query, const Tensor& key,
                 const Tensor& value, const Tensor& mask) {
  const int64_t b = query.size(0), l = query.size(1), s = key.size(1), e = query.size(2), d = e / h;
  const Tensor w = m.in_proj_weight, bias = m.in_proj_bias;
  auto heads = [&](const Tensor& x, int64_t i, int64_t len) {
    const Tensor y = linear(x, w.slice(0, i * e, (i + 1) * e), bias.slice(0, i * e, (i + 1) * e));
    return permute(y.reshape({b, len, h, d}), {0, 2, 1, 3});  // [B, H, len, d]
  };
  const Tensor q = heads(query, 0, l), k = heads(key, 1, s), v = heads(value, 2, s);
  Tensor scores = matmul(q, permute(k, {0, 1, 3, 2})) / std::sqrt(double(d));  // [B, H, L, S]
  if (mask.defined()) scores = scores + mask;
  const Tensor o = matmul(softmax(scores, -1), v);                               // [B, H, L, d]
  return linear(permute(o, {0, 2, 1, 3}).reshape({b, l, e}), m.out_proj->weight, m.out_proj->bias);
}

}  // namespace

TEST_CASE("MultiheadAttention: PyTorch's parameter names, shapes and init", "[nn][attention]") {
  manual_seed(60);
  nn::MultiheadAttention mha({.embed_dim = 64, .num_heads = 4});
  REQUIRE(names(mha.named_parameters()) ==
          std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"});
  REQUIRE(mha.in_proj_weight.shape() == Shape{192, 64});
  REQUIRE(mha.in_proj_bias.shape() == Shape{192});
  REQUIRE(mha.out_proj->weight.shape() == Shape{64, 64});
  REQUIRE(mha.out_proj->bias.shape() == Shape{64});
  CHECK(values(mha.in_proj_bias) == std::vector<double>(192, 0.0));
  CHECK(values(mha.out_proj->bias) == std::vector<double>(64, 0.0));
  // in_proj_weight: xavier_uniform over [3E, E]: bound sqrt(6 / (64 + 192)); 12288 values reach
  // within 1% of it (P = 0.99^12288)
  const double b = std::sqrt(6.0 / 256.0);
  double m = 0;
  for (double v : values(mha.in_proj_weight)) m = std::max(m, std::fabs(v));
  CHECK(m <= b * (1 + 1e-6));
  CHECK(m > 0.99 * b);
  // out_proj.weight: Linear's default, U(-1/8, 1/8)
  m = 0;
  for (double v : values(mha.out_proj->weight)) m = std::max(m, std::fabs(v));
  CHECK(m <= 0.125 * (1 + 1e-6));
  CHECK(m > 0.98 * 0.125);
  CHECK(mha.num_parameters() == 192 * 64 + 192 + 64 * 64 + 64);
  CHECK(mha.str() ==
        "MultiheadAttention(\n"
        "  embed_dim=64, num_heads=4, dropout=0\n"
        "  (out_proj): Linear(in=64, out=64, bias=true)\n"
        ")");

  nn::MultiheadAttention nobias({.embed_dim = 8, .num_heads = 2, .bias = false});
  CHECK(names(nobias.named_parameters()) == std::vector<std::string>{"in_proj_weight", "out_proj.weight"});
}

TEST_CASE("MultiheadAttention equals the composition of ops for every mask kind", "[nn][attention]") {
  const int64_t b = 2, l = 3, s = 4, e = 6, h = 2;
  auto mha = random_mha(e, h, 100);
  const Tensor q = rnd({b, l, e}, 1), k = rnd({b, s, e}, 2), v = rnd({b, s, e}, 3);

  SECTION("no mask, self- and cross-attention") {
    const Tensor y = mha->forward(q, k, v);
    REQUIRE(y.shape() == Shape{b, l, e});
    require_close(values(y), values(reference(*mha, h, q, k, v, Tensor())), 1e-12);
    require_close(values(mha->forward(q, q, q)), values(reference(*mha, h, q, q, q, Tensor())), 1e-12);
  }
  SECTION("key_padding_mask: true keys are ignored") {
    // batch 0 pads the last key, batch 1 the last two
    const Tensor pad = bools({0, 0, 0, 1, 0, 0, 1, 1}, {b, s});
    const Tensor add = f64({0, 0, 0, -kInf, 0, 0, -kInf, -kInf}, {b, 1, 1, s});
    const Tensor y = mha->forward(q, k, v, pad);
    require_close(values(y), values(reference(*mha, h, q, k, v, add)), 1e-12);
    // changing a padded key or value changes nothing
    Tensor k2 = k.clone(), v2 = v.clone();
    {
      NoGradGuard no_grad;
      k2.select(0, 1).select(0, 2).fill_(100.0);
      v2.select(0, 0).select(0, 3).fill_(-7.0);
    }
    CHECK(values(mha->forward(q, k2, v2, pad)) == values(y));
    CHECK(values(mha->forward(q, k2, v2)) != values(mha->forward(q, k, v)));
  }
  SECTION("bool attn_mask [L, S]: true = not allowed (PyTorch)") {
    const Tensor am = bools({0, 1, 1, 1,  //
                             0, 0, 1, 1,  //
                             0, 0, 0, 1},
                            {l, s});
    const Tensor add = f64({0, -kInf, -kInf, -kInf, 0, 0, -kInf, -kInf, 0, 0, 0, -kInf}, {l, s});
    require_close(values(mha->forward(q, k, v, Tensor(), am)), values(reference(*mha, h, q, k, v, add)), 1e-12);
    // the first query sees only key 0: its attention output is v_0's projection in every head
    const Tensor only0 = reference(*mha, h, q.narrow(1, 0, 1), k.narrow(1, 0, 1), v.narrow(1, 0, 1), Tensor());
    require_close(values(mha->forward(q, k, v, Tensor(), am).narrow(1, 0, 1)), values(only0), 1e-12);
  }
  SECTION("float attn_mask is added to the scores; combined with key_padding_mask") {
    const Tensor am = rnd({l, s}, 4);
    require_close(values(mha->forward(q, k, v, Tensor(), am)), values(reference(*mha, h, q, k, v, am)), 1e-12);
    const Tensor pad = bools({1, 0, 0, 0, 0, 0, 0, 1}, {b, s});
    const Tensor padd = f64({-kInf, 0, 0, 0, 0, 0, 0, -kInf}, {b, 1, 1, s});
    require_close(values(mha->forward(q, k, v, pad, am)), values(reference(*mha, h, q, k, v, am + padd)), 1e-12);
    // an f32 mask next to f64 activations
    require_close(values(mha->forward(q, k, v, Tensor(), to(am, DType::F32))),
                  values(reference(*mha, h, q, k, v, to(to(am, DType::F32), DType::F64))), 1e-12);
  }
  SECTION("3-D masks [B*H, L, S], row b * H + h belongs to batch b, head h") {
    const Tensor am = rnd({b * h, l, s}, 5);
    require_close(values(mha->forward(q, k, v, Tensor(), am)),
                  values(reference(*mha, h, q, k, v, am.reshape({b, h, l, s}))), 1e-12);
    // bool: batch 1 head 0 may only see key 2
    std::vector<uint8_t> bm(b * h * l * s, 0);
    for (int64_t i = 0; i < l; ++i)
      for (int64_t j = 0; j < s; ++j) bm[(2 * l + i) * s + j] = j != 2;
    std::vector<double> addv(bm.size());
    for (std::size_t i = 0; i < bm.size(); ++i) addv[i] = bm[i] ? -kInf : 0.0;
    require_close(values(mha->forward(q, k, v, Tensor(), bools(bm, {b * h, l, s}))),
                  values(reference(*mha, h, q, k, v, f64(addv, {b, h, l, s}))), 1e-12);
  }
}

TEST_CASE("MultiheadAttention forward_with_weights: forward's output and the masked softmax weights", "[nn][attention]") {
  const int64_t b = 2, l = 3, s = 4, e = 6, h = 2, d = e / h;
  auto mha = random_mha(e, h, 300);
  const Tensor q = rnd({b, l, e}, 11), k = rnd({b, s, e}, 12), v = rnd({b, s, e}, 13);
  const Tensor pad = bools({0, 0, 0, 1, 0, 0, 1, 1}, {b, s});
  const auto [y, w_avg] = mha->forward_with_weights(q, k, v, pad);
  const auto [y2, w_heads] = mha->forward_with_weights(q, k, v, pad, Tensor(), /*average_attn_weights=*/false);
  CHECK(values(y) == values(mha->forward(q, k, v, pad)));  // bit for bit: the same ops
  CHECK(values(y2) == values(y));
  REQUIRE(w_avg.shape() == Shape{b, l, s});
  REQUIRE(w_heads.shape() == Shape{b, h, l, s});
  // the weights by hand: per head, softmax over keys of q_h . k_h / sqrt(d), padded keys excluded
  const Tensor wq = mha->in_proj_weight, bq = mha->in_proj_bias;
  const Tensor qp = linear(q, wq.slice(0, 0, e), bq.slice(0, 0, e)), kp = linear(k, wq.slice(0, e, 2 * e), bq.slice(0, e, 2 * e));
  const std::vector<double> qv = values(qp), kv = values(kp), padv = values(pad), wh = values(w_heads), wa = values(w_avg);
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t i = 0; i < l; ++i) {
      std::vector<double> avg(s, 0.0);
      for (int64_t hi = 0; hi < h; ++hi) {
        std::vector<double> sc(s);
        double mx = -kInf, z = 0;
        for (int64_t j = 0; j < s; ++j) {
          double dot = 0;
          for (int64_t t = 0; t < d; ++t) dot += qv[(bi * l + i) * e + hi * d + t] * kv[(bi * s + j) * e + hi * d + t];
          sc[j] = padv[bi * s + j] != 0 ? -kInf : dot / std::sqrt(double(d));
          mx = std::max(mx, sc[j]);
        }
        for (int64_t j = 0; j < s; ++j) z += std::exp(sc[j] - mx);
        for (int64_t j = 0; j < s; ++j) {
          const double want = std::exp(sc[j] - mx) / z;
          CHECK(wh[((bi * h + hi) * l + i) * s + j] == Approx(want).epsilon(1e-12).margin(1e-15));
          avg[j] += want / double(h);
        }
      }
      for (int64_t j = 0; j < s; ++j) CHECK(wa[(bi * l + i) * s + j] == Approx(avg[j]).epsilon(1e-12).margin(1e-15));
    }
  }
  // padded keys get exactly 0; the weights carry gradients (through softmax and the projections)
  CHECK(wa[3] == 0.0);
  CHECK(wa[(1 * l + 0) * s + 2] == 0.0);  // batch 1, query 0, key 2
  const Tensor qg = q.clone().requires_grad_();
  const Tensor wsum = sum(mha->forward_with_weights(qg, k, v, pad).second * rnd({b, l, s}, 14));
  wsum.backward();
  CHECK(qg.grad().defined());
}

TEST_CASE("MultiheadAttention in f16 and bf16 returns the low dtype and stays close to f64", "[nn][attention][lowp]") {
  const int64_t b = 2, l = 5, e = 8, h = 2;
  const Tensor pad = bools({0, 0, 0, 0, 1, 0, 0, 0, 1, 1}, {b, l});
  const Tensor padd = f64({0, 0, 0, 0, -kInf, 0, 0, 0, -kInf, -kInf}, {b, 1, 1, l});
  // f16: 11 significant bits, bf16: 8; a few roundings along the way
  for (auto [dt, tol] : {std::pair{DType::F16, 4e-3}, std::pair{DType::BF16, 3e-2}}) {
    INFO(dtype_name(dt));
    auto low = random_mha(e, h, 400);
    low->to(dt);
    auto ref = random_mha(e, h, 400);
    ref->load_state_dict(low->state_dict());  // the rounded parameters, in f64
    const Tensor x = to(rnd({b, l, e}, 10), dt);
    const Tensor y = low->forward(x, x, x, pad);
    CHECK(y.dtype() == dt);
    const Tensor xd = to(x, DType::F64);
    require_close(values(y), values(reference(*ref, h, xd, xd, xd, padd)), tol);
  }
}

TEST_CASE("MultiheadAttention gradients match central differences in f64", "[nn][attention][grad]") {
  const int64_t b = 2, l = 3, e = 4, h = 2;
  auto mha = random_mha(e, h, 200);
  Tensor x = rnd({b, l, e}, 6);
  x.requires_grad_();
  const Tensor pad = bools({0, 0, 1, 0, 0, 0}, {b, l});
  const Tensor cot = rnd({b, l, e}, 7);
  auto loss = [&] { return sum(mha->forward(x, x, x, pad) * cot); };
  const std::vector<Tensor> wrt = {x, mha->in_proj_weight, mha->in_proj_bias, mha->out_proj->weight,
                                   mha->out_proj->bias};
  const Tensors grads = autograd::grad({loss()}, wrt);
  for (std::size_t t = 0; t < wrt.size(); ++t) {
    Tensor p = wrt[t];
    const std::vector<double> g = values(grads[t]);
    double* data = p.data<double>();
    // a spread of elements of each tensor
    for (int64_t i = 0; i < p.numel(); i += std::max<int64_t>(1, p.numel() / 7)) {
      const double keep = data[i];
      NoGradGuard no_grad;
      data[i] = keep + 1e-6;
      const double up = loss().item<double>();
      data[i] = keep - 1e-6;
      const double down = loss().item<double>();
      data[i] = keep;
      const double want = (up - down) / 2e-6;
      INFO("tensor " << t << " element " << i << ": autograd " << g[i] << ", numeric " << want);
      CHECK(std::fabs(g[i] - want) <= 1e-6 * (1 + std::fabs(want)));
    }
  }
}

TEST_CASE("MultiheadAttention dropout acts on the attention weights in training only", "[nn][attention][train]") {
  Generator gen(3);
  auto mha = nn::make<nn::MultiheadAttention>({.embed_dim = 8, .num_heads = 2, .dropout = 0.5, .generator = &gen});
  const Tensor x = rnd({2, 5, 8}, 8, DType::F32);
  const std::vector<double> a = values(mha->forward(x, x, x));
  CHECK(values(mha->forward(x, x, x)) != a);  // a new mask per call
  mha->eval();
  const std::vector<double> e1 = values(mha->forward(x, x, x));
  CHECK(values(mha->forward(x, x, x)) == e1);
  CHECK(e1 != a);
}

TEST_CASE("TransformerEncoderLayer: PyTorch's state dict names and order, parameter count", "[nn][attention][transformer]") {
  nn::TransformerEncoderLayer layer({.d_model = 8, .nhead = 2, .dim_feedforward = 16});
  CHECK(names(layer.state_dict()) ==
        std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
                                 "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
                                 "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"});
  std::vector<Shape> shapes;
  for (const auto& [n, t] : layer.state_dict()) shapes.push_back(t.shape());
  CHECK(shapes == std::vector<Shape>{{24, 8}, {24}, {8, 8}, {8}, {16, 8}, {16}, {8, 16}, {8}, {8}, {8}, {8}, {8}});
  // 3E^2 + 3E + E^2 + E + F E + F + E F + E + 4E with E = 8, F = 16
  CHECK(layer.num_parameters() == 192 + 24 + 64 + 8 + 128 + 16 + 128 + 8 + 32);
  CHECK(layer.num_parameters() == 600);
  nn::TransformerEncoderLayer nobias({.d_model = 8, .nhead = 2, .dim_feedforward = 16, .bias = false});
  CHECK(names(nobias.state_dict()) ==
        std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.out_proj.weight", "linear1.weight",
                                 "linear2.weight", "norm1.weight", "norm2.weight"});
}

TEST_CASE("TransformerEncoderLayer: post-norm and pre-norm wiring, dropout in train vs eval", "[nn][attention][transformer]") {
  const int64_t d = 8;
  nn::TransformerEncoderLayer post({.d_model = d, .nhead = 2, .dim_feedforward = 16, .dropout = 0.0});
  post.to(DType::F64);
  uint64_t seed = 300;
  for (const Tensor& p : post.parameters()) assign(p, rnd(p.shape(), ++seed) * 0.5);
  nn::TransformerEncoderLayer pre({.d_model = d, .nhead = 2, .dim_feedforward = 16, .dropout = 0.0, .norm_first = true});
  pre.to(DType::F64);
  pre.load_state_dict(post.state_dict());

  const Tensor x = rnd({2, 5, d}, 9);
  const Tensor pad = bools({0, 0, 0, 0, 1, 0, 0, 0, 1, 1}, {2, 5});
  auto sa = [&](nn::TransformerEncoderLayer& m, const Tensor& t) { return m.self_attn->forward(t, t, t, pad); };
  auto ff = [&](nn::TransformerEncoderLayer& m, const Tensor& t) {
    return m.linear2->forward(relu(m.linear1->forward(t)));
  };
  // post-norm: x = norm1(x + sa(x)); x = norm2(x + ff(x))
  const Tensor p1 = post.norm1->forward(x + sa(post, x));
  const Tensor want_post = post.norm2->forward(p1 + ff(post, p1));
  const Tensor got_post = post.forward(x, Tensor(), pad);
  require_close(values(got_post), values(want_post), 1e-12);
  // pre-norm: x = x + sa(norm1(x)); x = x + ff(norm2(x))
  const Tensor q1 = x + sa(pre, pre.norm1->forward(x));
  const Tensor want_pre = q1 + ff(pre, pre.norm2->forward(q1));
  const Tensor got_pre = pre.forward(x, Tensor(), pad);
  require_close(values(got_pre), values(want_pre), 1e-12);
  CHECK(values(got_pre) != values(got_post));
  // the unary forward is the mask-free one
  CHECK(values(post(x)) == values(post.forward(x, Tensor(), Tensor())));

  // dropout 0: training and eval agree
  post.eval();
  CHECK(values(post.forward(x, Tensor(), pad)) == values(got_post));
  // GELU activation changes the feed-forward
  nn::TransformerEncoderLayer gelu_layer({.d_model = d, .nhead = 2, .dim_feedforward = 16, .dropout = 0.0,
                                          .activation = nn::Activation::GELU});
  gelu_layer.to(DType::F64);
  gelu_layer.load_state_dict(post.state_dict());
  const Tensor g1 = gelu_layer.norm1->forward(x + gelu_layer.self_attn->forward(x, x, x));
  const Tensor want_gelu =
      gelu_layer.norm2->forward(g1 + gelu_layer.linear2->forward(gelu(gelu_layer.linear1->forward(g1))));
  require_close(values(gelu_layer(x)), values(want_gelu), 1e-12);

  // dropout 0.1: training is random, eval is deterministic and equals the dropout-free layer
  Generator gen(5);
  nn::TransformerEncoderLayer drop({.d_model = d, .nhead = 2, .dim_feedforward = 16, .dropout = 0.1, .generator = &gen});
  drop.to(DType::F64);
  drop.load_state_dict(post.state_dict());
  CHECK(drop.is_training());
  const std::vector<double> t1 = values(drop.forward(x, Tensor(), pad));
  CHECK(values(drop.forward(x, Tensor(), pad)) != t1);
  drop.eval();
  CHECK(!drop.dropout1->is_training());
  CHECK(!drop.self_attn->is_training());
  require_close(values(drop.forward(x, Tensor(), pad)), values(got_post), 1e-12);
}

TEST_CASE("MultiheadAttention and TransformerEncoderLayer errors name the layer and the shapes", "[nn][attention][errors]") {
  nn::MultiheadAttention mha({.embed_dim = 4, .num_heads = 2});
  const Tensor q = ones({2, 3, 4}), k = ones({2, 5, 4});
  const std::string name = "MultiheadAttention(embed_dim=4, num_heads=2, dropout=0)";
  REQUIRE_THROWS_AS(mha.forward(q, k, k, Tensor(), zeros({3, 3})), ShapeError);
  MG_REQUIRE_ERROR(mha.forward(q, k, k, Tensor(), zeros({3, 3})),
                   name + ": expected attn_mask [3, 5] or [4, 3, 5] (B*H, L, S), got attn_mask [3, 3] for query "
                          "[2, 3, 4], key [2, 5, 4]");
  MG_REQUIRE_ERROR(mha.forward(q, k, k, Tensor(), zeros({2, 3, 5})), "got attn_mask [2, 3, 5]");
  MG_REQUIRE_ERROR(mha.forward(q, k, k, Tensor(), zeros({1, 3, 5})), "got attn_mask [1, 3, 5]");
  REQUIRE_THROWS_AS(mha.forward(q, k, k, zeros({2, 3}, {.dtype = DType::Bool})), ShapeError);
  MG_REQUIRE_ERROR(mha.forward(q, k, k, zeros({2, 3}, {.dtype = DType::Bool})),
                   name + ": expected key_padding_mask [2, 5] (B, S), got key_padding_mask [2, 3] for key [2, 5, 4]");
  MG_REQUIRE_ERROR(mha.forward(q, k, k, zeros({5}, {.dtype = DType::Bool})), "got key_padding_mask [5]");
  REQUIRE_THROWS_AS(mha.forward(q, k, k, zeros({2, 5})), DTypeError);
  MG_REQUIRE_ERROR(mha.forward(q, k, k, zeros({2, 5})),
                   name + ": key_padding_mask must be bool (true = padding), got [2, 5] f32 cpu");
  MG_REQUIRE_ERROR(mha.forward(q, k, k, Tensor(), zeros({3, 5}, {.dtype = DType::I64})),
                   name + ": attn_mask must be bool (true = not allowed) or floating (added to the scores), got [3, 5] i64 cpu");
  MG_REQUIRE_ERROR(mha.forward(ones({2, 3, 5}), k, k), name + ": expected query [B, L, 4], got query [2, 3, 5]");
  MG_REQUIRE_ERROR(mha.forward(ones({3, 4}), k, k),
                   name + ": an unbatched query [L, 4] takes key [S, 4] and value [S, 4], got query [3, 4], key [2, 5, 4]");
  MG_REQUIRE_ERROR(mha.forward(ones({4}), k, k), name + ": expected query [B, L, 4], got query [4]");
  MG_REQUIRE_ERROR(mha.forward(q, ones({1, 5, 4}), ones({1, 5, 4})),
                   name + ": expected key [2, S, 4] and value [2, S, 4] (batch of the query), got query [2, 3, 4], key [1, 5, 4], "
                          "value [1, 5, 4]");
  MG_REQUIRE_ERROR(mha.forward(q, k, ones({2, 4, 4})), "key [2, 5, 4], value [2, 4, 4]");

  MG_REQUIRE_ERROR(nn::MultiheadAttention({.embed_dim = 8, .num_heads = 3}),
                   "MultiheadAttention: num_heads (3) must be positive and divide embed_dim (8)");
  MG_REQUIRE_ERROR(nn::MultiheadAttention({.embed_dim = 8, .num_heads = 2, .dropout = 1.5}),
                   "MultiheadAttention: dropout must be in [0, 1], got 1.5");
  {  // p = 1 is allowed, as PyTorch's: every attention weight dropped in training, so the output is the bias
    nn::MultiheadAttention all_dropped({.embed_dim = 8, .num_heads = 2, .dropout = 1.0});
    const Tensor x = randn({2, 3, 8});
    const Tensor y = all_dropped.forward(x, x, x);
    Tensor bias;
    for (const auto& [n, t] : all_dropped.named_parameters())
      if (n == "out_proj.bias") bias = t;
    CHECK(values(y) == values(expand(reshape(bias, {1, 1, 8}), {2, 3, 8})));
  }
  MG_REQUIRE_ERROR(nn::TransformerEncoderLayer({.d_model = 8, .nhead = 3}),
                   "MultiheadAttention: num_heads (3) must be positive and divide embed_dim (8)");
  MG_REQUIRE_ERROR(nn::TransformerEncoderLayer({.d_model = 0}), "TransformerEncoderLayer: d_model and dim_feedforward must be positive");

  nn::TransformerEncoderLayer layer({.d_model = 4, .nhead = 2, .dim_feedforward = 8});
  MG_REQUIRE_ERROR(layer(ones({2, 3, 5})), "TransformerEncoderLayer(d_model=4, nhead=2): expected src [B, L, 4] or unbatched [L, 4], got src [2, 3, 5]");
  MG_REQUIRE_ERROR(layer.forward(ones({2, 3, 4}), Tensor(), zeros({2, 4}, {.dtype = DType::Bool})),
                   "expected key_padding_mask [2, 3] (B, S), got key_padding_mask [2, 4]");
}

namespace {

// One case of a torch_mha_*.json reference (tools/reference/gen_torch_mha_*.py): PyTorch's
// parameters copied in by name, then the output, the head-averaged weights and the gradients of
// sum(out * r) w.r.t. the inputs and every parameter compared. Optional keys: add_bias_kv,
// add_zero_attn, attn_mask (bool or float, with its shape).
void check_mha_case(const nlohmann::json& c) {
  nn::MultiheadAttention mha({.embed_dim = c["embed_dim"].get<int64_t>(), .num_heads = c["num_heads"].get<int64_t>(),
                              .bias = c["bias"].get<bool>(), .kdim = c["kdim"].get<int64_t>(),
                              .vdim = c["vdim"].get<int64_t>(), .add_bias_kv = c.value("add_bias_kv", false),
                              .add_zero_attn = c.value("add_zero_attn", false)});
  mha.to(DType::F64);
  mha.eval();
  const auto params = mha.named_parameters();
  REQUIRE(params.size() == c["params"].size());
  std::vector<std::string> names;
  for (const auto& [n, p] : params) {
    INFO(n);
    REQUIRE(c["params"].contains(n));
    const auto& want = c["params"][n];
    REQUIRE(p.shape() == Shape(want["shape"].get<std::vector<int64_t>>()));
    NoGradGuard no_grad;
    Tensor(p).copy_(test::json_tensor(want["values"], want["shape"]));
    names.push_back(n);
  }
  const Tensor q = test::json_tensor(c["q"], c["q_shape"]).requires_grad_();
  const Tensor k = test::json_tensor(c["k"], c["k_shape"]).requires_grad_();
  const Tensor v = test::json_tensor(c["v"], c["v_shape"]).requires_grad_();
  Tensor mask, attn;
  if (!c["key_padding_mask"].is_null()) {
    mask = to(from_vector<double>(c["key_padding_mask"].get<std::vector<double>>(), {q.size(0), k.size(1)}), DType::Bool);
  }
  if (c.contains("attn_mask") && !c["attn_mask"].is_null()) {
    attn = test::json_tensor(c["attn_mask"], c["attn_mask_shape"]);
    if (c["attn_mask_bool"].get<bool>()) attn = to(attn, DType::Bool);
  }
  const auto [out, weights] = mha.forward_with_weights(q, k, v, mask, attn);
  test::check_json_close(out, c["out"]);
  REQUIRE(weights.shape() == Shape(c["weights_shape"].get<std::vector<int64_t>>()));
  test::check_json_close(weights, c["weights"]);
  Tensors inputs{q, k, v};
  for (const auto& [n, p] : params) inputs.push_back(p);
  const Tensors g = autograd::grad({sum(out * test::json_tensor(c["r"], c["out_shape"]))}, inputs);
  test::check_json_close(g[0], c["gq"]);
  test::check_json_close(g[1], c["gk"]);
  test::check_json_close(g[2], c["gv"]);
  for (std::size_t i = 0; i < names.size(); ++i) {
    INFO(names[i]);
    test::check_json_close(g[3 + i], c["params"][names[i]]["grad"]);
  }
}

}  // namespace

TEST_CASE("MultiheadAttention with kdim and vdim equals PyTorch's: separate projections, weights and gradients",
          "[nn][attention]") {
  // tests/data/reference/torch_mha_kvdim.json, written by tools/reference/gen_torch_mha_kvdim.py
  // (PyTorch 2.15, f64): kdim and vdim other than embed_dim, with and without bias and padding mask.
  const nlohmann::json ref = test::load_json_reference("torch_mha_kvdim.json");
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    INFO("case " << checked);
    check_mha_case(c);
    ++checked;
  }
  CHECK(checked == 3);
  nn::MultiheadAttention mha({.embed_dim = 8, .num_heads = 2, .kdim = 5});
  CHECK(mha.str().find("kdim=5") != std::string::npos);
  CHECK(mha.k_proj_weight.shape() == Shape{8, 5});
  CHECK(mha.v_proj_weight.shape() == Shape{8, 8});
  MG_REQUIRE_ERROR(mha.forward(ones({2, 3, 8}), ones({2, 4, 8}), ones({2, 4, 8})),
                   "kdim=5): expected key [2, S, 5] and value [2, S, 8]");
  MG_REQUIRE_ERROR(nn::MultiheadAttention({.embed_dim = 8, .num_heads = 2, .vdim = -1}),
                   "MultiheadAttention: kdim and vdim must be >= 0 (0: embed_dim), got 0 and -1");
}

TEST_CASE("MultiheadAttention with add_bias_kv and add_zero_attn equals PyTorch's: the added keys, masks and gradients",
          "[nn][attention]") {
  // tests/data/reference/torch_mha_bias_kv.json, written by tools/reference/gen_torch_mha_bias_kv.py
  // (PyTorch 2.15, f64): each option alone and both, with padding masks (one masking every key of
  // a batch row, which the added keys keep finite), bool and per-head float attention masks, kdim
  // and vdim other than embed_dim.
  const nlohmann::json ref = test::load_json_reference("torch_mha_bias_kv.json");
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    INFO("case " << checked);
    check_mha_case(c);
    ++checked;
  }
  CHECK(checked == 4);
  nn::MultiheadAttention mha({.embed_dim = 8, .num_heads = 2, .add_bias_kv = true, .add_zero_attn = true});
  CHECK(mha.bias_k.shape() == Shape{1, 1, 8});
  CHECK(mha.bias_v.shape() == Shape{1, 1, 8});
  CHECK(mha.str().find("add_bias_kv=True, add_zero_attn=True") != std::string::npos);
  // xavier_normal on [1, 1, 8]: fan_in = fan_out = 8, std 0.25; not zeros
  CHECK(values(mha.bias_k) != std::vector<double>(8, 0.0));
  // S + 2 keys in the weights
  const auto [y, w] = mha.forward_with_weights(rnd({2, 3, 8}, 1, DType::F32), rnd({2, 5, 8}, 2, DType::F32),
                                               rnd({2, 5, 8}, 3, DType::F32));
  CHECK(w.shape() == Shape{2, 3, 7});
  CHECK(y.shape() == Shape{2, 3, 8});
  // under autocast the f32 biases meet bf16 keys (cat promotes) and the attention runs in bf16
  const Tensor xb = rnd({2, 3, 8}, 4, DType::F32);
  const Tensor y32 = mha.forward(xb, xb, xb);
  {
    amp::Autocast autocast({.dtype = DType::BF16});
    const Tensor yb = mha.forward(xb, xb, xb);
    CHECK(yb.dtype() == DType::BF16);
    require_close(values(yb), values(y32), 3e-2);
  }
}
