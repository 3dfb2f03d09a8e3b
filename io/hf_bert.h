// A Hugging Face BERT directory — what transformers' save_pretrained writes, or a model downloaded
// from the Hub (bert-base-uncased, ...): config.json, model.safetensors, and the tokenizer as
// vocab.txt (+ tokenizer_config.json) or as transformers 5 writes it, tokenizer.json. load_hf_bert reads the configuration into an nn::models::BertConfig, the
// weights into mixgrad's names (nn::models::bert_state_dict_from_hf) and says where the vocabulary
// is and whether it is uncased, so a pretrained checkpoint fine-tunes with mixgrad's models,
// tokenizer and mixed precision. Files are untrusted input: every problem is an mg::Error naming
// the file and the key.
//
//   mg::io::HfBert hf = mg::io::load_hf_bert("bert-base-uncased");
//   mg::nn::models::BertForMaskedLM mlm(hf.config);        // (it has no pooler: drop bert.pooler.*)
//   std::erase_if(hf.state, [](const auto& kv) { return kv.first.starts_with("bert.pooler."); });
//   mlm.load_state_dict(hf.state);                         // strict: the MLM head is in the file
//   mg::data::WordPiece tok(hf.vocab, {.lowercase = hf.lowercase,
//                                      .max_input_chars_per_word = hf.max_input_chars_per_word});
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mixgrad/nn/models/bert.h"
#include "mixgrad/nn/module.h"

namespace mg::io {

struct HfBert {
  nn::models::BertConfig config;
  // The weights under mixgrad's names, always with the "bert." prefix of BertForMaskedLM and
  // BertForSequenceClassification (a BertModel checkpoint's encoder names get it), plus the MLM
  // head ("transform.*", "transform_norm.*", "decoder_bias") or the classifier ("classifier.*")
  // when the file has one.
  nn::NamedTensors state;
  // The tokenizer: the token of each id, from tokenizer.json's WordPiece vocabulary or else
  // vocab.txt (one per line; beside tokenizer.json it must agree), and the file it came from.
  std::vector<std::string> vocab;
  std::string vocab_path;
  // BERT uncased or cased, and the longest word encoded, as transformers 5.25 builds the
  // tokenizer: a BertTokenizer (tokenizer_config.json names that class or none) takes
  // do_lower_case from tokenizer_config.json (true when absent) and 100; with no
  // tokenizer_config.json or another class, tokenizer.json's BertNormalizer and WordPiece model
  // count. A tokenizer mixgrad's WordPiece cannot reproduce is refused by load_hf_bert: accents
  // stripped without lowercasing or the reverse, CJK characters not split, no text cleaning,
  // another normalizer, pre-tokenizer or model, special tokens not named as BERT's, and tokens
  // added after training (Hugging Face splits them out of the text first).
  bool lowercase = true;
  int64_t max_input_chars_per_word = 100;
  std::string architecture;  // config.json's "architectures"[0] ("BertForMaskedLM"), or ""
};

// Reads `dir`. config.json must describe a BERT that nn::models::BertConfig can hold: model_type
// "bert" (when given), hidden_act "gelu", absolute position embeddings, one dropout probability for
// hidden states and attention (mixgrad's BERT has one), hidden_size divisible by the heads, an
// encoder (not is_decoder, no cross-attention). An untied MLM decoder is refused too
// (nn::models::bert_state_dict_from_hf). Sharded checkpoints (model.safetensors.index.json) are not
// read.
HfBert load_hf_bert(const std::string& dir);

// The configuration part alone, from config.json's text (`path` names it in errors).
nn::models::BertConfig bert_config_from_hf_json(const std::string& text, const std::string& path);

}  // namespace mg::io
