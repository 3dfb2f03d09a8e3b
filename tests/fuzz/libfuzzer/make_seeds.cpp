// Writes the fuzzers' seed inputs with mixgrad's own writers: make_seeds <dir> creates
// <dir>/<harness>/seed_* (small safetensors files of every dtype, a checkpoint with model,
// optimizer-like and train states, plain and gzip'ed IDX files, a trained vocab.txt). scripts/fuzz
// runs it before fuzzing; the committed tests/fuzz/corpus/*/seed_* files were written by it.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>

#include "core/factory.h"
#include "core/state_dict.h"
#include "data/idx.h"
#include "data/text/wordpiece.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "nn/linear.h"
#include "ops/ops.h"

namespace fs = std::filesystem;
using namespace mg;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_seeds <dir>\n";
    return 2;
  }
  const fs::path root = argv[1];
  for (const char* h : {"safetensors", "checkpoint", "idx", "vocab", "hf_bert"}) fs::create_directories(root / h);
  const auto at = [&](const char* h, const char* name) { return (root / h / name).string(); };

  // safetensors: every dtype, an empty tensor, a scalar, metadata; and an empty file list.
  io::save_safetensors(at("safetensors", "seed_dtypes.safetensors"),
                       {{"f64", arange(0, 3, 1, {.dtype = DType::F64})},
                        {"f32", full({2, 2}, 1.5, {.dtype = DType::F32})},
                        {"f16", full({3}, -2.0, {.dtype = DType::F16})},
                        {"bf16", full({1, 2}, 0.25, {.dtype = DType::BF16})},
                        {"i64", arange(0, 2)},
                        {"i32", arange(5, 8, 1, {.dtype = DType::I32})},
                        {"u8", full({4}, 7, {.dtype = DType::U8})},
                        {"bool", full({2}, 1, {.dtype = DType::Bool})},
                        {"empty", zeros({0, 3})},
                        {"scalar", full({}, 3.0)}},
                       {{"format", "pt"}, {"epoch", "3"}});
  io::save_safetensors(at("safetensors", "seed_none.safetensors"), {});

  // checkpoint: a small model and states of every kind of value.
  auto model = std::make_shared<nn::Linear>(nn::LinearOptions{.in = 3, .out = 2});
  StateDict opt;
  opt.tensors = {{"0.exp_avg", zeros({2, 3})}, {"1.exp_avg", zeros({2})}};
  opt.ints = {{"step", 10}, {"big", std::numeric_limits<int64_t>::max()}};
  opt.floats = {{"lr", 0.001}, {"inf", std::numeric_limits<double>::infinity()},
                {"nan", std::numeric_limits<double>::quiet_NaN()}};
  opt.strings = {{"kind", "adam"}};
  StateDict train;
  train.ints = {{"epoch", 2}};
  io::save_checkpoint(at("checkpoint", "seed_model_states.safetensors"), *model,
                      {{"optimizer", opt}, {"train", train}});
  io::save_checkpoint(at("checkpoint", "seed_model_only.safetensors"), *model);

  // IDX: labels (1-D) and images (3-D), plain and gzip'ed.
  data::write_idx(at("idx", "seed_labels"), {5}, {0, 1, 2, 3, 9}, false);
  data::write_idx(at("idx", "seed_labels.gz"), {5}, {0, 1, 2, 3, 9}, true);
  std::vector<uint8_t> pixels(2 * 3 * 4);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = uint8_t(i * 11);
  data::write_idx(at("idx", "seed_images"), {2, 3, 4}, pixels, false);
  data::write_idx(at("idx", "seed_images.gz"), {2, 3, 4}, pixels, true);

  // vocab.txt: trained on a few lines.
  const data::WordPiece tok = data::WordPiece::train(
      {"In the beginning God created the heaven and the earth.", "And the earth was without form, and void;"},
      {.vocab_size = 60, .min_frequency = 1});
  tok.save(at("vocab", "seed_vocab.txt"));

  // A Hugging Face BERT directory's three JSON files, split by the harness's separator
  // (tests/fuzz/fuzz_harness.h), as transformers writes them for a tiny model.
  std::ofstream(at("hf_bert", "seed_dir"), std::ios::binary)
      << R"({"model_type": "bert", "architectures": ["BertForMaskedLM"], "vocab_size": 8, "hidden_size": 4, )"
      << R"("num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 8, "max_position_embeddings": 16, )"
      << R"("type_vocab_size": 2, "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, )"
      << R"("layer_norm_eps": 1e-12, "pad_token_id": 0, "is_decoder": false})" << "\n--\n"
      << R"({"normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, )"
      << R"("strip_accents": null, "lowercase": true}, "pre_tokenizer": {"type": "BertPreTokenizer"}, "model": )"
      << R"({"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": )"
      << R"(100, "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "in": 5, "the": 6, "##s": 7}}})"
      << "\n--\n" << R"({"do_lower_case": true, "tokenizer_class": "BertTokenizer"})";
  std::cout << "make_seeds: wrote seeds under " << root.string() << "\n";
  return 0;
}
