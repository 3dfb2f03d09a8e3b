// TransformerDecoderLayer, TransformerEncoder, TransformerDecoder and Transformer
// (nn/transformer_decoder.h, nn/transformer_model.h) against PyTorch 2.15's in f64
// (tests/data/reference/torch_transformer.json, written by tools/reference/gen_torch_transformer.py):
// PyTorch's parameter names, order and shapes, then the output and the gradients of every input and
// parameter (1e-10) with post- and pre-norm, ReLU and GELU, no bias, and every mask kind. Then the
// causal mask helper, independent layer initialisation, bf16 autocast, dropout, and the refusals.
#include <catch2/catch.hpp>

#include <limits>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "core/factory.h"
#include "core/generator.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "reference/json_reference.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

// Checks that the module's named parameters are PyTorch's (names, order, shapes), copies the
// values in and returns the parameters in that order.
Tensors load_parameters(nn::Module& m, const nlohmann::json& params) {
  const nn::NamedTensors named = m.named_parameters();
  std::vector<std::string> names, want_names;
  std::vector<Shape> shapes, want_shapes;
  for (const auto& [n, t] : named) names.push_back(n), shapes.push_back(t.shape());
  for (const auto& p : params) {
    want_names.push_back(p["name"].get<std::string>());
    want_shapes.push_back(p["shape"].get<std::vector<int64_t>>());
  }
  REQUIRE(names == want_names);
  REQUIRE(shapes == want_shapes);
  Tensors out;
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < named.size(); ++i) {
    Tensor t = named[i].second;
    t.copy_(json_tensor(params[i]["values"], params[i]["shape"]));
    out.push_back(t);
  }
  return out;
}

Tensor mask_of(const nlohmann::json& masks, const char* key) {
  if (!masks.contains(key) || masks[key].is_null()) return Tensor();
  const nlohmann::json& m = masks[key];
  std::vector<double> v;  // JSON has no infinities: null stands for -inf
  for (const auto& x : m["values"]) v.push_back(x.is_null() ? -std::numeric_limits<double>::infinity() : x.get<double>());
  const Tensor t = from_vector<double>(v, m["shape"].get<std::vector<int64_t>>());
  return m["bool"].get<bool>() ? ne(t, scalar_like(0, t)) : t;
}

nn::TransformerLayerOptions layer_options(const nlohmann::json& c) {
  return {.d_model = c["d_model"].get<int64_t>(),
          .nhead = c["nhead"].get<int64_t>(),
          .dim_feedforward = c["dim_feedforward"].get<int64_t>(),
          .dropout = 0.0,
          .activation = c["gelu"].get<bool>() ? nn::Activation::GELU : nn::Activation::ReLU,
          .norm_first = c["norm_first"].get<bool>(),
          .bias = c["bias"].get<bool>()};
}

}  // namespace

TEST_CASE("Transformer decoder layer, stacks and model equal PyTorch's in f64: outputs and gradients",
          "[nn][transformer]") {
  const nlohmann::json ref = load_json_reference("torch_transformer.json");
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    INFO(c["name"].get<std::string>());
    const std::string kind = c["kind"];
    const nn::TransformerLayerOptions lo = layer_options(c);
    const int64_t e = lo.d_model, b = c["B"], l = c["L"], s = c["S"];
    const nlohmann::json& mk = c["masks"];
    const Tensor src = json_tensor(c["src"], nlohmann::json::array({b, s, e})).requires_grad_();
    const Tensor tgt = l > 0 ? json_tensor(c["tgt"], nlohmann::json::array({b, l, e})).requires_grad_() : Tensor();
    const nn::DecoderMasks dm{.tgt_mask = mask_of(mk, "tgt_mask"),
                              .memory_mask = mask_of(mk, "memory_mask"),
                              .tgt_key_padding_mask = mask_of(mk, "tgt_pad"),
                              .memory_key_padding_mask = mask_of(mk, "memory_pad")};
    std::shared_ptr<nn::Module> module;
    std::function<Tensor()> run;
    Tensors inputs;
    if (kind == "decoder_layer") {
      auto m = nn::make<nn::TransformerDecoderLayer>(lo);
      module = m, inputs = {tgt, src};
      run = [=] { return m->forward(tgt, src, dm); };
    } else if (kind == "encoder") {
      auto m = nn::make<nn::TransformerEncoder>(
          {.layer = lo, .num_layers = c["encoder_layers"], .norm = c["final_norm"].get<bool>()});
      module = m, inputs = {src};
      run = [=] { return m->forward(src, mask_of(mk, "src_mask"), mask_of(mk, "src_pad")); };
    } else if (kind == "decoder") {
      auto m = nn::make<nn::TransformerDecoder>(
          {.layer = lo, .num_layers = c["decoder_layers"], .norm = c["final_norm"].get<bool>()});
      module = m, inputs = {tgt, src};
      run = [=] { return m->forward(tgt, src, dm); };
    } else {
      REQUIRE(kind == "transformer");
      auto m = nn::make<nn::Transformer>({.d_model = e,
                                          .nhead = lo.nhead,
                                          .num_encoder_layers = c["encoder_layers"],
                                          .num_decoder_layers = c["decoder_layers"],
                                          .dim_feedforward = lo.dim_feedforward,
                                          .dropout = 0.0,
                                          .activation = lo.activation,
                                          .norm_first = lo.norm_first,
                                          .bias = lo.bias});
      module = m, inputs = {src, tgt};
      const nn::TransformerMasks tm{.src_mask = mask_of(mk, "src_mask"),
                                    .tgt_mask = dm.tgt_mask,
                                    .memory_mask = dm.memory_mask,
                                    .src_key_padding_mask = mask_of(mk, "src_pad"),
                                    .tgt_key_padding_mask = dm.tgt_key_padding_mask,
                                    .memory_key_padding_mask = dm.memory_key_padding_mask};
      run = [=] { return m->forward(src, tgt, tm); };
    }
    module->to(DType::F64);
    const Tensors params = load_parameters(*module, c["params"]);
    const Tensor y = run();
    REQUIRE(y.shape() == Shape(c["y_shape"].get<std::vector<int64_t>>()));
    check_json_close(y, c["y"], 1e-10, 1e-12);
    Tensors wrt = inputs;
    wrt.insert(wrt.end(), params.begin(), params.end());
    const Tensors g = autograd::grad({sum(y * json_tensor(c["r"], c["y_shape"]))}, wrt);
    for (std::size_t i = 0; i < inputs.size(); ++i) check_json_close(g[i], c["grad_inputs"][i], 1e-10, 1e-12);
    for (std::size_t i = 0; i < params.size(); ++i) {
      INFO(c["params"][i]["name"].get<std::string>());
      check_json_close(g[inputs.size() + i], c["grad_params"][i], 1e-10, 1e-12);
    }
    ++checked;
  }
  CHECK(checked == 7);
}

TEST_CASE("generate_square_subsequent_mask is -inf above the diagonal and refuses a non-floating dtype",
          "[nn][transformer]") {
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor m = nn::generate_square_subsequent_mask(3);
  CHECK(m.dtype() == DType::F32);
  CHECK(values(m) == std::vector<double>{0, -inf, -inf, 0, 0, -inf, 0, 0, 0});
  CHECK(nn::generate_square_subsequent_mask(2, {.dtype = DType::BF16}).dtype() == DType::BF16);
  CHECK(nn::generate_square_subsequent_mask(0).shape() == Shape{0, 0});
  MG_REQUIRE_ERROR(nn::generate_square_subsequent_mask(3, {.dtype = DType::Bool}), "its dtype must be floating");
  MG_REQUIRE_ERROR(nn::generate_square_subsequent_mask(-1), "size must be >= 0");
}

TEST_CASE("Transformer stacks build each layer on its own and Transformer re-draws matrices with xavier_uniform",
          "[nn][transformer]") {
  manual_seed(3);
  nn::TransformerEncoder enc({.layer = {.d_model = 8, .nhead = 2, .dim_feedforward = 16}, .num_layers = 2});
  CHECK(values(enc.layer(0).linear1->weight) != values(enc.layer(1).linear1->weight));
  CHECK(enc.norm == nullptr);
  CHECK(enc.named_parameters().front().first == "layers.0.self_attn.in_proj_weight");

  nn::Transformer t({.d_model = 8, .nhead = 2, .num_encoder_layers = 1, .num_decoder_layers = 1,
                     .dim_feedforward = 16});
  const auto named = t.named_parameters();
  CHECK(named.back().first == "decoder.norm.bias");
  for (const auto& [name, p] : named) {
    INFO(name);
    if (p.dim() < 2) continue;
    // xavier_uniform: |w| <= sqrt(6 / (fan_in + fan_out))
    const double bound = std::sqrt(6.0 / double(p.size(0) + p.size(1)));
    CHECK(p.abs().max().item<double>() <= bound);
    CHECK(p.abs().max().item<double>() > 0.5 * bound);
  }
}

TEST_CASE("Transformer under bf16 autocast stays close to f32 and returns the layer norm's dtype",
          "[nn][transformer]") {
  manual_seed(5);
  nn::Transformer t({.d_model = 16, .nhead = 4, .num_encoder_layers = 2, .num_decoder_layers = 2,
                     .dim_feedforward = 32, .dropout = 0.0});
  const Tensor src = randn({2, 6, 16}), tgt = randn({2, 5, 16});
  const nn::TransformerMasks masks{.tgt_mask = nn::generate_square_subsequent_mask(5)};
  const Tensor want = t.forward(src, tgt, masks);
  Tensor got;
  {
    amp::Autocast autocast({.dtype = DType::BF16});
    got = t.forward(src, tgt, masks);
  }
  CHECK(got.dtype() == DType::F32);  // the final layer norm is an fp32 op
  CHECK((got - want).abs().max().item<double>() < 0.1);
  // Gradients reach every parameter in f32.
  sum(got * got).backward();
  for (const auto& [name, p] : t.named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().dtype() == DType::F32);
  }
}

TEST_CASE("Transformer dropout: train differs from eval, a seeded generator repeats", "[nn][transformer]") {
  manual_seed(6);
  Generator g(11);
  nn::TransformerDecoderLayer layer({.d_model = 8, .nhead = 2, .dim_feedforward = 16, .dropout = 0.3,
                                     .generator = &g});
  const Tensor tgt = randn({2, 4, 8}), mem = randn({2, 3, 8});
  g.set_state(1, 0);
  const Tensor a = layer.forward(tgt, mem);
  g.set_state(1, 0);
  const Tensor b = layer.forward(tgt, mem);
  CHECK(values(a) == values(b));
  layer.eval();
  const Tensor c = layer.forward(tgt, mem);
  CHECK(values(a) != values(c));
  CHECK(values(c) == values(layer.forward(tgt, mem)));
}

TEST_CASE("Transformer layers and stacks name their refusals", "[nn][transformer]") {
  nn::Transformer t({.d_model = 8, .nhead = 2, .num_encoder_layers = 1, .num_decoder_layers = 1,
                     .dim_feedforward = 16});
  MG_REQUIRE_ERROR(t.forward(zeros({2, 3, 8}), zeros({3, 3, 8})), "the batch sizes of src and tgt must be equal");
  MG_REQUIRE_ERROR(t.forward(zeros({2, 3, 8}), zeros({2, 3, 4})), "must equal d_model (8)");
  MG_REQUIRE_ERROR(t.forward(zeros({3, 8}), zeros({2, 3, 8})), "or both unbatched, src [S, 8] and tgt [L, 8]");
  MG_REQUIRE_ERROR(t.forward(zeros({2, 3, 8}), zeros({2, 4, 8}), {.tgt_mask = zeros({3, 3})}),
                   "expected attn_mask [4, 4]");
  nn::TransformerDecoderLayer layer({.d_model = 8, .nhead = 2, .dim_feedforward = 16});
  MG_REQUIRE_ERROR(layer.forward(zeros({2, 3, 8}), zeros({1, 3, 8})), "expected tgt [B, L, 8] and memory [B, S, 8]");
  MG_REQUIRE_ERROR(layer.forward(zeros({2, 3, 8}), Tensor()), "memory undefined");
  MG_REQUIRE_ERROR(nn::TransformerEncoder({.layer = {.d_model = 8, .nhead = 2}, .num_layers = 0}),
                   "TransformerEncoder: num_layers must be >= 1");
  MG_REQUIRE_ERROR(nn::TransformerDecoderLayer({.d_model = 0}), "TransformerDecoderLayer: d_model and dim_feedforward");
  MG_REQUIRE_ERROR(nn::TransformerDecoderLayer({.d_model = 8, .nhead = 3}), "must be positive and divide embed_dim");
}

namespace {

// The largest |a - b| over two tensors of one shape.
double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  return values(amax(abs(sub(to(a, DType::F64), to(b, DType::F64))))).at(0);
}

}  // namespace

TEST_CASE("batch_first = false: attention, layers, stacks and the model give the batch-first results on transposed inputs",
          "[nn][transformer]") {
  // PyTorch's default layout is sequence first; the same parameters must give the same output
  // (transposed) and the same gradients, masks included.
  const int64_t b = 2, l = 3, s = 4, e = 8;
  Generator gen(5);
  const Tensor src = randn({b, s, e}, {.dtype = DType::F64}, &gen);
  const Tensor tgt = randn({b, l, e}, {.dtype = DType::F64}, &gen);
  const Tensor pad = from_vector<double>({0, 0, 1, 0, 0, 1, 1, 0}, {b, s}).to(DType::Bool);
  const Tensor causal = nn::generate_square_subsequent_mask(l, {.dtype = DType::F64});
  auto seq_first = [](const Tensor& t) { return t.transpose(0, 1).clone().requires_grad_(); };

  SECTION("MultiheadAttention with kdim, add_bias_kv and add_zero_attn") {
    nn::MultiheadAttention bf({.embed_dim = e, .num_heads = 2, .kdim = 5, .add_bias_kv = true, .add_zero_attn = true});
    nn::MultiheadAttention sf({.embed_dim = e, .num_heads = 2, .kdim = 5, .add_bias_kv = true, .add_zero_attn = true,
                               .batch_first = false});
    bf.to(DType::F64);
    sf.to(DType::F64);
    sf.load_state_dict(bf.state_dict());
    CHECK(sf.str().find("batch_first=False") != std::string::npos);
    const Tensor k = randn({b, s, 5}, {.dtype = DType::F64}, &gen);
    const Tensor q1 = tgt.clone().requires_grad_(), k1 = k.clone().requires_grad_();
    const Tensor q2 = seq_first(tgt), k2 = seq_first(k);
    const auto [y1, w1] = bf.forward_with_weights(q1, k1, src, pad);
    const auto [y2, w2] = sf.forward_with_weights(q2, k2, src.transpose(0, 1), pad);
    CHECK(y2.shape() == Shape{l, b, e});
    CHECK(max_diff(y2.transpose(0, 1), y1) < 1e-13);
    CHECK(max_diff(w2, w1) < 1e-13);
    sum(y1 * y1).backward();
    sum(y2 * y2).backward();
    CHECK(max_diff(q2.grad().transpose(0, 1), q1.grad()) < 1e-12);
    CHECK(max_diff(k2.grad().transpose(0, 1), k1.grad()) < 1e-12);
    CHECK(max_diff(sf.bias_k.grad(), bf.bias_k.grad()) < 1e-12);
    MG_REQUIRE_ERROR(sf.forward(zeros({l, b, e}), zeros({s, b + 1, 5}), zeros({s, b + 1, e})),
                     "expected key [S, 2, 5] and value [S, 2, 8] (batch of the query)");
    MG_REQUIRE_ERROR(sf.forward(zeros({l, b, 4}), zeros({s, b, 5}), zeros({s, b, e})), "expected query [L, B, 8]");
  }
  SECTION("Transformer: encoder and decoder stacks with every mask") {
    const nn::TransformerOptions o{.d_model = e, .nhead = 2, .num_encoder_layers = 2, .num_decoder_layers = 2,
                                   .dim_feedforward = 16, .dropout = 0.0, .activation = nn::Activation::GELU};
    nn::TransformerOptions o_sf = o;
    o_sf.batch_first = false;
    nn::Transformer bf(o), sf(o_sf);
    bf.to(DType::F64);
    sf.to(DType::F64);
    sf.load_state_dict(bf.state_dict());
    const nn::TransformerMasks masks{.tgt_mask = causal, .src_key_padding_mask = pad, .memory_key_padding_mask = pad};
    const Tensor s1 = src.clone().requires_grad_(), s2 = seq_first(src);
    const Tensor y1 = bf.forward(s1, tgt, masks);
    const Tensor y2 = sf.forward(s2, tgt.transpose(0, 1), masks);
    CHECK(y2.shape() == Shape{l, b, e});
    CHECK(max_diff(y2.transpose(0, 1), y1) < 1e-12);
    sum(y1 * y1).backward();
    sum(y2 * y2).backward();
    CHECK(max_diff(s2.grad().transpose(0, 1), s1.grad()) < 1e-11);
    const auto p1 = bf.named_parameters(), p2 = sf.named_parameters();
    for (std::size_t i = 0; i < p1.size(); ++i) {
      INFO(p1[i].first);
      CHECK(max_diff(p2[i].second.grad(), p1[i].second.grad()) < 1e-11);
    }
    MG_REQUIRE_ERROR(sf.forward(zeros({s, b, e}), zeros({l, b + 1, e})), "the batch sizes of src and tgt must be equal");
    MG_REQUIRE_ERROR(sf.decoder->layer(0).forward(zeros({l, b, e}), zeros({s, b + 1, e})),
                     "expected tgt [L, B, 8] and memory [S, B, 8]");
    MG_REQUIRE_ERROR(sf.encoder->layer(0).forward(zeros({s, b, 4})), "expected src [L, B, 8]");
  }
}

TEST_CASE("Unbatched inputs, as PyTorch: attention, layers and the model give the batch-of-one results",
          "[nn][transformer]") {
  const int64_t l = 3, s = 4, e = 8, h = 2;
  Generator gen(6);
  const Tensor src = randn({s, e}, {.dtype = DType::F64}, &gen);
  const Tensor tgt = randn({l, e}, {.dtype = DType::F64}, &gen);
  const Tensor pad = from_vector<double>({0, 1, 0, 0}, {s}).to(DType::Bool);
  const Tensor head_mask = randn({h, l, s}, {.dtype = DType::F64}, &gen);  // [H, L, S]: per head
  for (const bool batch_first : {true, false}) {
    INFO("batch_first " << batch_first);
    nn::MultiheadAttention mha({.embed_dim = e, .num_heads = h, .batch_first = batch_first});
    mha.to(DType::F64);
    const int64_t bd = batch_first ? 0 : 1;
    const auto [y, w] = mha.forward_with_weights(tgt, src, src, pad, head_mask, /*average_attn_weights=*/false);
    const auto [yb, wb] = mha.forward_with_weights(tgt.unsqueeze(bd), src.unsqueeze(bd), src.unsqueeze(bd),
                                                   pad.unsqueeze(0), head_mask, false);
    CHECK(y.shape() == Shape{l, e});
    CHECK(w.shape() == Shape{h, l, s});
    CHECK(max_diff(y, yb.squeeze(bd)) == 0.0);
    CHECK(max_diff(w, wb.squeeze(0)) == 0.0);
    CHECK(mha.forward_with_weights(tgt, src, src).second.shape() == Shape{l, s});
    MG_REQUIRE_ERROR(mha.forward(tgt, src, src, pad.unsqueeze(0)), "an unbatched query takes key_padding_mask [S]");

    nn::Transformer t({.d_model = e, .nhead = h, .num_encoder_layers = 1, .num_decoder_layers = 1,
                       .dim_feedforward = 16, .dropout = 0.0, .batch_first = batch_first});
    t.to(DType::F64);
    const nn::TransformerMasks masks{.tgt_mask = nn::generate_square_subsequent_mask(l, {.dtype = DType::F64}),
                                     .src_key_padding_mask = pad, .memory_key_padding_mask = pad};
    const nn::TransformerMasks masks_b{.tgt_mask = masks.tgt_mask, .src_key_padding_mask = pad.unsqueeze(0),
                                       .memory_key_padding_mask = pad.unsqueeze(0)};
    const Tensor out = t.forward(src, tgt, masks);
    CHECK(out.shape() == Shape{l, e});
    CHECK(max_diff(out, t.forward(src.unsqueeze(bd), tgt.unsqueeze(bd), masks_b).squeeze(bd)) == 0.0);
  }
}
