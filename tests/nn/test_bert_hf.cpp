// Hugging Face BERT checkpoints load into mixgrad's BERT through bert_state_dict_from_hf and give
// transformers' outputs. The reference files hold tiny models written by transformers with its own
// names, an input with padding and token types, and transformers' outputs for it
// (tools/reference/gen_hf_bert.py).
#include <catch2/catch.hpp>

#include "io/safetensors.h"
#include "nn/models/bert.h"
#include "nn/models/bert_hf.h"
#include "ops/ops.h"
#include "test_paths.h"
#include "test_util.h"

using namespace mg;
using namespace mg::nn::models;
using mg::nn::NamedTensors;

namespace {

io::SafetensorsFile reference(const std::string& name) {
  return io::load_safetensors(test::source_dir() + "/tests/data/reference/" + name);
}

// The checkpoint's tensors (without the input and expected entries the file also holds).
NamedTensors checkpoint_of(const io::SafetensorsFile& f) {
  NamedTensors out;
  for (const auto& [name, t] : f.tensors) {
    if (name.rfind("input.", 0) != 0 && name.rfind("expected.", 0) != 0) out.emplace_back(name, t);
  }
  return out;
}

BertConfig tiny_config() {  // the generator's BertConfig
  BertConfig c;
  c.vocab_size = 64;
  c.hidden = 16;
  c.layers = 2;
  c.heads = 2;
  c.intermediate = 32;
  c.max_position = 16;
  return c;
}

double max_abs_diff(const Tensor& a, const Tensor& b) { return amax(abs(sub(a, b))).item<double>(); }

}  // namespace

TEST_CASE("a Hugging Face BertModel checkpoint loads strictly and gives transformers' outputs", "[nn][bert][interop]") {
  const io::SafetensorsFile f = reference("hf_bert_model_tiny.safetensors");
  BertModel model(tiny_config());
  model.load_state_dict(bert_state_dict_from_hf(checkpoint_of(f)));  // strict: every name matched
  model.eval();
  const BertOutput out = model.forward(f.at("input.input_ids"), f.at("input.token_type_ids"), f.at("input.attention_mask"));
  // f32 on both sides: rounding-level differences only (measured 1e-6 on these values of order 1).
  CHECK(max_abs_diff(out.sequence, f.at("expected.sequence")) < 2e-5);
  CHECK(max_abs_diff(out.pooled, f.at("expected.pooled")) < 2e-5);
}

TEST_CASE("a Hugging Face BertForMaskedLM checkpoint gives transformers' logits", "[nn][bert][interop]") {
  const io::SafetensorsFile f = reference("hf_bert_mlm_tiny.safetensors");
  BertForMaskedLM mlm(tiny_config());
  mlm.load_state_dict(bert_state_dict_from_hf(checkpoint_of(f)));
  mlm.eval();
  const Tensor logits = mlm.forward(f.at("input.input_ids"), f.at("input.token_type_ids"), f.at("input.attention_mask"));
  CHECK(max_abs_diff(logits, f.at("expected.logits")) < 5e-5);
}

TEST_CASE("bert_state_dict_from_hf: old names, dropped buffers and an incomplete attention", "[nn][bert][interop][errors]") {
  NamedTensors hf = checkpoint_of(reference("hf_bert_model_tiny.safetensors"));
  NamedTensors old;  // a TF-converted file: LayerNorm gamma/beta, and the position_ids buffer
  for (const auto& [name, t] : hf) {
    std::string n = name;
    if (n.find("LayerNorm.weight") != std::string::npos) n.replace(n.size() - 6, 6, "gamma");
    if (n.find("LayerNorm.bias") != std::string::npos) n.replace(n.size() - 4, 4, "beta");
    old.emplace_back(n, t);
  }
  old.emplace_back("embeddings.position_ids", arange(0, 16).unsqueeze(0));
  BertModel model(tiny_config());
  model.load_state_dict(bert_state_dict_from_hf(old));
  const NamedTensors mapped = bert_state_dict_from_hf(hf);
  CHECK(mapped.size() == model.state_dict().size());

  NamedTensors partial;
  for (const auto& [name, t] : hf) {
    if (name != "encoder.layer.1.attention.self.value.bias") partial.emplace_back(name, t);
  }
  MG_REQUIRE_ERROR(bert_state_dict_from_hf(partial), "encoder.1 has no attention.self.value.bias");

  // One tensor under two names (an old and a new spelling) is refused, not resolved by the loader.
  NamedTensors twice = hf;
  for (const auto& [name, t] : hf) {
    if (name == "embeddings.LayerNorm.weight") twice.emplace_back("embeddings.LayerNorm.gamma", t);
  }
  REQUIRE(twice.size() == hf.size() + 1);
  MG_REQUIRE_ERROR(bert_state_dict_from_hf(twice),
                   "embeddings.LayerNorm.gamma and embeddings.LayerNorm.weight are both mixgrad's embeddings.LayerNorm.weight");
}
