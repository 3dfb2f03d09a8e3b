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
  MG_REQUIRE_ERROR(t.forward(zeros({3, 8}), zeros({3, 8})), "unsqueeze(0) a single sequence");
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
