// io::load_hf_bert against transformers 5.25 (tools/reference/gen_hf_bert_dir.py wrote the
// directory and the expected values): a tiny BertForMaskedLM directory as save_pretrained writes
// it loads into mixgrad's BertForMaskedLM strictly, WordPiece on its vocab.txt gives the ids
// transformers' tokenizer gave, and the model computes transformers' logits from them. Then
// config.json's bad input.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "autograd/grad_mode.h"
#include "data/text/mlm.h"
#include "data/text/wordpiece.h"
#include "io/hf_bert.h"
#include "io_test_util.h"
#include "io/safetensors.h"
#include "nn/models/bert.h"
#include "nn/models/bert_hf.h"
#include "ops/ops.h"
#include "test_paths.h"
#include "test_util.h"

using namespace mg;

namespace {
std::string reference(const std::string& name) { return test::source_dir() + "/tests/data/reference/" + name; }
}  // namespace

TEST_CASE("load_hf_bert: a transformers directory computes transformers' MLM logits from mixgrad's token ids", "[io][hf]") {
  const io::HfBert hf = io::load_hf_bert(reference("hf_bert_dir"));
  CHECK(hf.architecture == "BertForMaskedLM");
  CHECK(hf.lowercase);
  CHECK((hf.config.vocab_size == 2190 && hf.config.hidden == 16 && hf.config.layers == 2 && hf.config.heads == 2 &&
         hf.config.intermediate == 32 && hf.config.max_position == 64 && hf.config.type_vocab_size == 2));
  CHECK(hf.config.dropout == 0.1);
  CHECK(hf.config.layer_norm_eps == 1e-12);
  nn::models::BertForMaskedLM mlm(hf.config);
  mlm.load_state_dict(hf.state);  // strict: every name and shape
  mlm.eval();

  const io::SafetensorsFile want = io::load_safetensors(reference("hf_bert_dir_expected.safetensors"));
  CHECK(hf.vocab_path == reference("hf_bert_dir") + "/vocab.txt");
  const data::WordPiece tok(hf.vocab, {.lowercase = hf.lowercase, .max_input_chars_per_word = hf.max_input_chars_per_word});
  const std::string& texts = want.metadata.at("texts");
  const std::vector<std::string> lines = {texts.substr(0, texts.find('\n')), texts.substr(texts.find('\n') + 1)};
  std::vector<std::vector<int32_t>> seqs;
  for (const std::string& t : lines) seqs.push_back(data::make_bert_sequence(tok.encode(t), 16, tok.specials()));
  const data::Batch b = data::make_sequence_batch(seqs, tok.specials().pad);
  CHECK(test::values(b.at("input_ids")) == test::values(want.at("input_ids")));
  CHECK(test::values(b.at("attention_mask")) == test::values(want.at("attention_mask")));

  NoGradGuard no_grad;
  const Tensor logits = mlm.forward(b.at("input_ids"), Tensor(), b.at("attention_mask")).slice(2, 0, 256);
  const std::vector<double> got = test::values(logits), ref = test::values(want.at("expected.logits"));
  REQUIRE(got.size() == ref.size());
  double worst = 0, scale = 0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    worst = std::max(worst, std::abs(got[k] - ref[k]));
    scale = std::max(scale, std::abs(ref[k]));
  }
  WARN("MLM logits vs transformers: max |diff| " << worst << " (max |logit| " << scale << ")");
  CHECK(worst < 1e-5 * std::max(1.0, scale));
}

TEST_CASE("load_hf_bert: bad directories and configurations are named errors", "[io][hf][errors]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("mg_hf_bert_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string src = reference("hf_bert_dir");
  MG_REQUIRE_ERROR(io::load_hf_bert((dir / "missing").string()), "is not a directory");
  MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "config.json': no such file");
  // A FIFO blocked the read forever; a directory is no file either.
  REQUIRE(::mkfifo((dir / "config.json").c_str(), 0600) == 0);
  MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "config.json': not a regular file");
  fs::remove(dir / "config.json");
  fs::create_directory(dir / "config.json");
  MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "config.json': not a regular file");
  fs::remove(dir / "config.json");
  fs::copy_file(src + "/config.json", dir / "config.json");
  MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "has no model.safetensors");
  // A symlink loop: std::filesystem's throwing tests raised filesystem_error, not an mg::Error.
  fs::create_symlink("model.safetensors", dir / "model.safetensors");
  MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "has no model.safetensors");
  fs::remove(dir / "model.safetensors");
  std::ofstream(dir / "pytorch_model.bin") << "pickle";
  MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "it has pytorch_model.bin");
  fs::copy_file(src + "/model.safetensors", dir / "model.safetensors");
  MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "has neither vocab.txt nor tokenizer.json");
  fs::copy_file(src + "/vocab.txt", dir / "vocab.txt");
  std::ofstream(dir / "tokenizer_config.json") << "{\"do_lower_case\": \"yes\"}";
  MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "\"do_lower_case\" must be true or false");
  std::ofstream(dir / "tokenizer_config.json") << "{\"do_lower_case\": false}";
  CHECK_FALSE(io::load_hf_bert(dir.string()).lowercase);
  // A config.json of another model than the weights (checked before anything is built from it).
  const std::string config = mg::test::read_bytes(src + "/config.json");
  const auto with_config = [&](const std::string& from, const std::string& to) {
    std::string c = config;
    const std::size_t at = c.find(from);
    REQUIRE(at != std::string::npos);
    std::ofstream(dir / "config.json", std::ios::trunc) << c.replace(at, from.size(), to);
  };
  with_config("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3");
  MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "model.safetensors' has no bert.encoder.2.linear1.weight");
  with_config("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1");
  MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "describes 1 encoder layers but");
  with_config("\"vocab_size\": 2190", "\"vocab_size\": 2147483647");
  MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()),
                   "describes bert.embeddings.word_embeddings.weight [2147483647, 16] but");
  with_config("\"intermediate_size\": 32", "\"intermediate_size\": 64");
  MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "describes bert.encoder.0.linear1.weight [64, 16] but");
  fs::remove_all(dir);

  const std::string ok = R"({"model_type": "bert", "vocab_size": 100, "hidden_size": 16, "num_hidden_layers": 2,
      "num_attention_heads": 4, "intermediate_size": 32, "max_position_embeddings": 64})";
  const nn::models::BertConfig c = io::bert_config_from_hf_json(ok, "c.json");
  CHECK((c.vocab_size == 100 && c.heads == 4 && c.type_vocab_size == 2 && c.dropout == 0.1));
  auto with = [&](const std::string& field) { return "{" + field + ", " + ok.substr(1); };
  MG_REQUIRE_ERROR(io::bert_config_from_hf_json("[1, 2]", "c.json"), "must hold a JSON object");
  MG_REQUIRE_ERROR(io::bert_config_from_hf_json("{\"vocab_size\": 5}", "c.json"), "has no \"hidden_size\"");
  MG_REQUIRE_ERROR(io::bert_config_from_hf_json(R"({"model_type": "roberta"})", "c.json"), "describes a \"roberta\" model");
  MG_REQUIRE_ERROR(io::bert_config_from_hf_json(with(R"("hidden_act": "relu")"), "c.json"), "hidden_act \"relu\" is not supported");
  MG_REQUIRE_ERROR(io::bert_config_from_hf_json(with(R"("position_embedding_type": "relative_key")"), "c.json"),
                   "position_embedding_type \"relative_key\" is not supported");
  MG_REQUIRE_ERROR(io::bert_config_from_hf_json(with(R"("attention_probs_dropout_prob": 0.2)"), "c.json"),
                   "hidden_dropout_prob 0.1 and attention_probs_dropout_prob 0.2 differ");
  MG_REQUIRE_ERROR(io::bert_config_from_hf_json(with(R"("classifier_dropout": 0.3)"), "c.json"),
                   "classifier_dropout 0.3 differs from hidden_dropout_prob 0.1");
  CHECK(io::bert_config_from_hf_json(with(R"("classifier_dropout": null)"), "c.json").dropout == 0.1);
  CHECK(io::bert_config_from_hf_json(with(R"("classifier_dropout": 0.1)"), "c.json").dropout == 0.1);
  MG_REQUIRE_ERROR(io::bert_config_from_hf_json(with(R"("pad_token_id": 100)"), "c.json"), "pad_token_id must be an id");
  // pad_token_id: absent is BERT's 0, null no padding row (transformers' nn.Embedding without one):
  // every row drawn at init and trained.
  CHECK(c.pad_token_id == 0);
  CHECK(io::bert_config_from_hf_json(with(R"("pad_token_id": 3)"), "c.json").pad_token_id == 3);
  nn::models::BertConfig no_pad = io::bert_config_from_hf_json(with(R"("pad_token_id": null)"), "c.json");
  CHECK_FALSE(no_pad.pad_token_id.has_value());
  manual_seed(3);
  const Tensor words = nn::models::BertEmbeddings(no_pad).word_embeddings->weight;
  REQUIRE(words.shape() == Shape{100, 16});
  CHECK(sum(abs(words.select(0, 0))).item<double>() > 0.0);
  CHECK(sum(abs(nn::models::BertEmbeddings(c).word_embeddings->weight.select(0, 0))).item<double>() == 0.0);
  const std::string bad_heads = R"({"vocab_size": 100, "hidden_size": 18, "num_hidden_layers": 2,
      "num_attention_heads": 4, "intermediate_size": 32, "max_position_embeddings": 64})";
  MG_REQUIRE_ERROR(io::bert_config_from_hf_json(bad_heads, "c.json"), "hidden_size 18 is not divisible by num_attention_heads 4");
  const std::string negative = R"({"vocab_size": -3, "hidden_size": 16})";
  MG_REQUIRE_ERROR(io::bert_config_from_hf_json(negative, "c.json"), "\"vocab_size\" must be in [1, ");
  MG_REQUIRE_ERROR(io::bert_config_from_hf_json(R"({"vocab_size": 1.5})", "c.json"), "\"vocab_size\" must be an integer");
  MG_REQUIRE_ERROR(io::bert_config_from_hf_json("{\"vocab_size\": ", "c.json"), "c.json");
}

TEST_CASE("load_hf_bert: a transformers 5 directory (tokenizer.json, no vocab.txt) and tokenizer settings",
          "[io][hf]") {
  // hf_bert_dir_v5: BertTokenizer(...).save_pretrained by transformers 5.25 over hf_bert_dir's
  // vocabulary: tokenizer.json and tokenizer_config.json only.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("mg_hf_bert_v5_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string src = reference("hf_bert_dir"), v5 = reference("hf_bert_dir_v5");
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(src + "/" + f, dir / f);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(v5 + "/" + f, dir / f);
  const io::HfBert hf = io::load_hf_bert(dir.string());
  const io::HfBert classic = io::load_hf_bert(src);
  CHECK(hf.vocab == classic.vocab);  // the same 2,190 tokens at the same ids
  CHECK(hf.vocab_path == (dir / "tokenizer.json").string());
  CHECK(hf.lowercase);
  CHECK(hf.max_input_chars_per_word == 100);

  const std::string v5_json = mg::test::read_bytes(v5 + "/tokenizer.json");
  // v5's tokenizer.json with `from` replaced by `to` (once).
  const auto json_with = [&](const std::string& from, const std::string& to) {
    std::string text = v5_json;
    const std::size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    std::ofstream(dir / "tokenizer.json", std::ios::trunc) << text.replace(at, from.size(), to);
  };
  const auto config_is = [&](const std::string& text) {
    std::ofstream(dir / "tokenizer_config.json", std::ios::trunc) << text;
  };
  const std::string v5_config = mg::test::read_bytes(v5 + "/tokenizer_config.json");

  // Tokens added after training are split out of the text by Hugging Face before WordPiece, even
  // ones that are vocabulary entries too (an added "the" cuts "theme" around it): refused, in each
  // place transformers records them. Only BERT's five special tokens pass.
  {
    // tok.add_tokens(["newtoken"]) writes it only in "added_tokens", id 2190
    json_with("\"added_tokens\": [", R"("added_tokens": [{"id": 2190, "content": "newtoken", "special": false},)");
    MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "adds the token \"newtoken\" (id 2190); mixgrad's WordPiece splits only");
    const int64_t piece = 1566;  // "##x", a vocabulary entry
    REQUIRE(hf.vocab[piece] == "##x");
    json_with("\"added_tokens\": [", str_cat(R"("added_tokens": [{"id": )", piece, R"(, "content": "##x", "special": false},)"));
    MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), str_cat("adds the token \"##x\" (id ", piece, ")"));
    fs::copy_file(v5 + "/tokenizer.json", dir / "tokenizer.json", fs::copy_options::overwrite_existing);
    std::ofstream(dir / "added_tokens.json") << R"({"newtoken": 2190})";
    MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "added_tokens.json' adds the token \"newtoken\"");
    std::ofstream(dir / "added_tokens.json", std::ios::trunc) << "{}";
    CHECK(io::load_hf_bert(dir.string()).vocab.size() == 2190);
    fs::remove(dir / "added_tokens.json");
    // transformers 4.34+'s tokenizer_config.json: added_tokens_decoder and extra special tokens
    config_is(R"({"added_tokens_decoder": {"0": {"content": "[PAD]", "special": true},
                                           "7": {"content": "the", "special": false}}})");
    MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "adds the token \"the\" (id \"7\")");
    config_is(R"({"additional_special_tokens": ["[unused0]"]})");
    MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "adds the token \"[unused0]\"");
    config_is(R"({"extra_special_tokens": [{"content": "<x>"}]})");
    MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "adds the token \"<x>\"");
    config_is(R"({"additional_special_tokens": ["[MASK]"], "unk_token": "[UNK]", "mask_token": {"content": "[MASK]"}})");
    CHECK_NOTHROW(io::load_hf_bert(dir.string()));
    // other special-token names would mark other text as [UNK], [MASK], ...
    config_is(R"({"unk_token": "<unk>"})");
    MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "unk_token is \"<unk>\", not \"[UNK]\"");
    config_is(v5_config);
    // a vocabulary longer than the embedding table is refused at load, not in the first forward
    fs::remove(dir / "tokenizer.json");
    fs::copy_file(src + "/vocab.txt", dir / "vocab.txt");
    std::ofstream(dir / "vocab.txt", std::ios::app) << "extratoken\n";
    MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "holds 2191 tokens but config.json's vocab_size is 2190");
    // beside tokenizer.json, vocab.txt must hold the same vocabulary (transformers' fast and slow
    // tokenizers read different files)
    fs::copy_file(v5 + "/tokenizer.json", dir / "tokenizer.json");
    MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "hold different vocabularies (2191 and 2190 tokens)");
    std::string swapped = mg::test::read_bytes(src + "/vocab.txt");
    const std::size_t line2 = swapped.find('\n') + 1;
    swapped = swapped.substr(line2, swapped.find('\n', line2) + 1 - line2) + swapped.substr(0, line2) +
              swapped.substr(swapped.find('\n', line2) + 1);
    std::ofstream(dir / "vocab.txt", std::ios::trunc) << swapped;
    MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), str_cat("(id 0 is \"", hf.vocab[1], "\" in one and \"", hf.vocab[0]));
    fs::copy_file(src + "/vocab.txt", dir / "vocab.txt", fs::copy_options::overwrite_existing);
    CHECK(io::load_hf_bert(dir.string()).vocab_path == (dir / "tokenizer.json").string());  // it agrees
    fs::remove(dir / "vocab.txt");
  }

  // Whose settings count, as transformers 5.25 decides (tools/reference checked each case): a
  // BertTokenizer (tokenizer_config.json names it or no class) takes lowercasing from
  // tokenizer_config.json — lowercase when do_lower_case is absent — and ignores tokenizer.json's
  // normaliser; with no tokenizer_config.json or another class, tokenizer.json runs as written.
  {
    const std::string cased_json = R"("lowercase": false)", uncased_json = R"("lowercase": true)";
    REQUIRE(v5_json.find(uncased_json) != std::string::npos);
    json_with(uncased_json, cased_json);
    CHECK(io::load_hf_bert(dir.string()).lowercase);  // v5's config: do_lower_case true
    config_is(R"({"tokenizer_class": "BertTokenizer"})");
    CHECK(io::load_hf_bert(dir.string()).lowercase);  // absent: true
    config_is(R"({"do_lower_case": false})");
    fs::copy_file(v5 + "/tokenizer.json", dir / "tokenizer.json", fs::copy_options::overwrite_existing);
    CHECK_FALSE(io::load_hf_bert(dir.string()).lowercase);  // the config's false over tokenizer.json's true
    config_is(R"({"tokenizer_class": "PreTrainedTokenizerFast", "do_lower_case": false})");
    CHECK(io::load_hf_bert(dir.string()).lowercase);  // another class: tokenizer.json's true
    fs::remove(dir / "tokenizer_config.json");
    json_with(uncased_json, cased_json);
    CHECK_FALSE(io::load_hf_bert(dir.string()).lowercase);  // no config: tokenizer.json's false
    // The longest word: tokenizer.json's without a BertTokenizer; ambiguous with one (transformers
    // 5 uses 100, transformers 4 used the file's).
    json_with(R"("max_input_chars_per_word": 100)", R"("max_input_chars_per_word": 200)");
    CHECK(io::load_hf_bert(dir.string()).max_input_chars_per_word == 200);
    config_is(v5_config);
    MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "max_input_chars_per_word is 200; transformers 5's BertTokenizer uses 100");
    // Another pipeline than BERT's: refused (none at all included).
    json_with(R"("type": "BertPreTokenizer")", R"("type": "WhitespaceSplit")");
    MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "the pre_tokenizer is \"WhitespaceSplit\", not BertPreTokenizer");
    const std::size_t n0 = v5_json.find("\"normalizer\": {"), n1 = v5_json.find('}', n0);
    REQUIRE((n0 != std::string::npos && n1 != std::string::npos));
    json_with(v5_json.substr(n0, n1 + 1 - n0), "\"normalizer\": null");
    MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "the normalizer is null, not BertNormalizer");
    fs::copy_file(v5 + "/tokenizer.json", dir / "tokenizer.json", fs::copy_options::overwrite_existing);
  }

  // Settings mixgrad's WordPiece cannot reproduce are refused, not ignored.
  auto with_config = [&](const std::string& text) {
    std::ofstream(dir / "tokenizer_config.json", std::ios::trunc) << text;
    fs::remove(dir / "tokenizer.json");
    fs::copy_file(src + "/vocab.txt", dir / "vocab.txt", fs::copy_options::overwrite_existing);
  };
  with_config(R"({"do_lower_case": true, "strip_accents": false})");
  MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "the tokenizer lowercases but keeps accents");
  with_config(R"({"do_lower_case": false, "strip_accents": true})");
  MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "the tokenizer keeps case but strips accents");
  with_config(R"({"do_lower_case": true, "tokenize_chinese_chars": false})");
  MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "does not split CJK characters");
  with_config(R"({"do_lower_case": false, "strip_accents": null})");
  CHECK_FALSE(io::load_hf_bert(dir.string()).lowercase);  // BERT cased
  fs::remove(dir / "vocab.txt");
  MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "has neither vocab.txt nor tokenizer.json");
  std::ofstream(dir / "tokenizer.json") << R"({"model": {"type": "BPE", "vocab": {}}})";
  MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "the model is \"BPE\", not WordPiece");
  const std::string bert_pipeline =
      R"({"normalizer": {"type": "BertNormalizer"}, "pre_tokenizer": {"type": "BertPreTokenizer"}, )";
  std::ofstream(dir / "tokenizer.json", std::ios::trunc)
      << bert_pipeline << R"("model": {"type": "WordPiece", "vocab": {"a": 0, "b": 0}}})";
  MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "needs the ids 0..1 once each");
  std::ofstream(dir / "tokenizer.json", std::ios::trunc)
      << R"({"normalizer": {"type": "Sequence"}, "model": {"type": "WordPiece", "vocab": {"a": 0}}})";
  MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "not BertNormalizer");
  fs::remove(dir / "tokenizer.json");
  fs::copy_file(src + "/vocab.txt", dir / "vocab.txt");

  // A sharded checkpoint gets its own hint.
  fs::rename(dir / "model.safetensors", dir / "model-00001-of-00002.safetensors");
  std::ofstream(dir / "model.safetensors.index.json") << "{}";
  MG_REQUIRE_ERROR(io::load_hf_bert(dir.string()), "the checkpoint is sharded");
  fs::remove_all(dir);
}

TEST_CASE("load_hf_bert: decoders and untied MLM heads are refused (they would compute something else)", "[io][hf][errors]") {
  const std::string ok = R"({"model_type": "bert", "vocab_size": 100, "hidden_size": 16, "num_hidden_layers": 2,
      "num_attention_heads": 4, "intermediate_size": 32, "max_position_embeddings": 64)";
  MG_REQUIRE_ERROR(io::bert_config_from_hf_json(ok + R"(, "is_decoder": true})", "c.json"),
                   "\"is_decoder\" is true; mixgrad's BERT is an encoder");
  MG_REQUIRE_ERROR(io::bert_config_from_hf_json(ok + R"(, "add_cross_attention": true})", "c.json"),
                   "\"add_cross_attention\" is true");
  CHECK(io::bert_config_from_hf_json(ok + R"(, "is_decoder": false, "add_cross_attention": false})", "c.json").hidden == 16);
  // cls.predictions.decoder.weight present and unlike the word embeddings: an untied decoder.
  const Tensor words = randn({10, 4});
  nn::NamedTensors hf = {{"bert.embeddings.word_embeddings.weight", words},
                         {"cls.predictions.bias", zeros({10})},
                         {"cls.predictions.decoder.weight", words.clone()}};
  CHECK_NOTHROW(nn::models::bert_state_dict_from_hf(hf));  // tied: the same values, dropped
  hf[2].second = randn({10, 4});
  MG_REQUIRE_ERROR(nn::models::bert_state_dict_from_hf(hf), "differs from the word embeddings (an untied MLM decoder");
  hf[2].second = words.clone();
  hf.emplace_back("cls.predictions.decoder.bias", ones({10}));
  MG_REQUIRE_ERROR(nn::models::bert_state_dict_from_hf(hf), "cls.predictions.decoder.bias differs from cls.predictions.bias");
}
