// Reading a Hugging Face BERT directory. config.json goes through the io layer's checked JSON
// parser (io/json_parse.h: bounded nesting, duplicate keys refused); each field is read with its
// type and range checked, so a damaged or foreign config is an error naming the key, never a
// model of the wrong shape.
#include "mixgrad/io/hf_bert.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "mixgrad/core/error.h"
#include "mixgrad/data/text/wordpiece.h"
#include "mixgrad/io/json_parse.h"
#include "mixgrad/io/safetensors.h"
#include "mixgrad/nn/models/bert_hf.h"

namespace mg::io {
namespace {

using json = detail::parsed_json;  // everything here is read

constexpr const char* kWho = "load_hf_bert";

// Path tests that never throw: the std::filesystem overloads without an error_code throw
// filesystem_error on a symlink loop, a permission error or a name too long, which is not an
// mg::Error; here such a path is simply not there (the caller's check names it).
bool is_dir(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_directory(p, ec);
}
bool is_file(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec);
}
bool exists_path(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::exists(p, ec);
}

// The most bytes of a configuration or tokenizer file (a 250,000-token tokenizer.json has ~10 MB).
constexpr std::uintmax_t kMaxTextBytes = std::uintmax_t(256) << 20;

// A JSON or text file of the directory, read whole. Only a regular file of at most kMaxTextBytes:
// a FIFO would block the read and /dev/zero never end.
std::string read_text(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  MG_CHECK(fs::is_regular_file(path, ec), Error, kWho, ": cannot open '", path, "': ",
           fs::exists(path, ec) ? "not a regular file" : "no such file");
  const std::uintmax_t size = fs::file_size(path, ec);
  MG_CHECK(!ec && size <= kMaxTextBytes, Error, kWho, ": '", path, "' has ", ec ? 0 : size,
           " bytes; a configuration or tokenizer file has at most ", kMaxTextBytes, " (is it the right file?)");
  std::ifstream f(path, std::ios::binary);
  MG_CHECK(f.good(), Error, kWho, ": cannot open '", path, "'");
  std::ostringstream s;
  s << f.rdbuf();
  // A read error sets failbit on `s`, not on `f`: compare what arrived with the file's size, so a
  // failed read is an error rather than a shorter vocabulary.
  std::string text = s.str();
  MG_CHECK(text.size() == size, Error, kWho, ": reading '", path, "' failed after ", text.size(), " of ", size, " bytes");
  return text;
}

// config[key] as a positive integer below `max` (required unless `fallback` >= 0).
int64_t positive_int(const json& config, const char* key, const std::string& path, int64_t max, int64_t fallback = -1) {
  if (!config.contains(key)) {
    MG_CHECK(fallback >= 0, Error, kWho, ": '", path, "' has no \"", key, "\"");
    return fallback;
  }
  const json& v = config.at(key);
  MG_CHECK(v.is_number_integer(), Error, kWho, ": '", path, "': \"", key, "\" must be an integer, got ",
           detail::excerpt(v));
  const int64_t n = v.get<int64_t>();
  MG_CHECK(n >= 1 && n <= max, Error, kWho, ": '", path, "': \"", key, "\" must be in [1, ", max, "], got ", n);
  return n;
}

double number(const json& config, const char* key, const std::string& path, double fallback, double lo, double hi) {
  if (!config.contains(key) || config.at(key).is_null()) return fallback;
  const json& v = config.at(key);
  MG_CHECK(v.is_number(), Error, kWho, ": '", path, "': \"", key, "\" must be a number, got ", detail::excerpt(v));
  const double x = v.get<double>();
  MG_CHECK(std::isfinite(x) && x >= lo && x <= hi, Error, kWho, ": '", path, "': \"", key, "\" must be in [", lo,
           ", ", hi, "], got ", x);
  return x;
}

std::string text_field(const json& config, const char* key, const std::string& path) {
  if (!config.contains(key) || config.at(key).is_null()) return "";
  const json& v = config.at(key);
  MG_CHECK(v.is_string(), Error, kWho, ": '", path, "': \"", key, "\" must be a string, got ", detail::excerpt(v));
  return v.get<std::string>();
}

nn::models::BertConfig config_from(const json& config, const std::string& path) {
  MG_CHECK(config.is_object(), Error, kWho, ": '", path, "' must hold a JSON object, got ", detail::excerpt(config));
  const std::string model_type = text_field(config, "model_type", path);
  MG_CHECK(model_type.empty() || model_type == "bert", Error, kWho, ": '", path, "' describes a ",
           detail::quoted_excerpt(model_type), " model, not \"bert\"");
  const std::string act = text_field(config, "hidden_act", path);
  MG_CHECK(act.empty() || act == "gelu", Error, kWho, ": '", path, "': hidden_act ", detail::quoted_excerpt(act),
           " is not supported; mixgrad's BERT uses \"gelu\" (the erf form)");
  const std::string positions = text_field(config, "position_embedding_type", path);
  MG_CHECK(positions.empty() || positions == "absolute", Error, kWho, ": '", path, "': position_embedding_type ",
           detail::quoted_excerpt(positions), " is not supported; mixgrad's BERT has absolute position embeddings");
  for (const char* flag : {"is_decoder", "add_cross_attention"}) {
    MG_CHECK(!config.contains(flag) || config.at(flag).is_null() ||
                 (config.at(flag).is_boolean() && !config.at(flag).get<bool>()),
             Error, kWho, ": '", path, "': \"", flag, "\" is ", detail::excerpt(config.at(flag)),
             "; mixgrad's BERT is an encoder (no causal mask, no cross-attention)");
  }
  constexpr int64_t kBig = int64_t(1) << 31;
  nn::models::BertConfig c;
  c.vocab_size = positive_int(config, "vocab_size", path, kBig);
  c.hidden = positive_int(config, "hidden_size", path, 1 << 16);
  c.layers = positive_int(config, "num_hidden_layers", path, 1024);
  c.heads = positive_int(config, "num_attention_heads", path, 1024);
  c.intermediate = positive_int(config, "intermediate_size", path, 1 << 20);
  c.max_position = positive_int(config, "max_position_embeddings", path, 1 << 20);
  c.type_vocab_size = positive_int(config, "type_vocab_size", path, 1 << 16, 2);
  MG_CHECK(c.hidden % c.heads == 0, Error, kWho, ": '", path, "': hidden_size ", c.hidden,
           " is not divisible by num_attention_heads ", c.heads);
  const double hidden_p = number(config, "hidden_dropout_prob", path, 0.1, 0.0, 1.0);
  const double attention_p = number(config, "attention_probs_dropout_prob", path, hidden_p, 0.0, 1.0);
  MG_CHECK(hidden_p == attention_p, Error, kWho, ": '", path, "': hidden_dropout_prob ", hidden_p,
           " and attention_probs_dropout_prob ", attention_p,
           " differ; mixgrad's BERT has one dropout probability for both\n  hint: set both to one value in the file");
  // transformers' BertForSequenceClassification drops out the pooled output with
  // classifier_dropout when it is set (else hidden_dropout_prob); mixgrad's uses the one dropout.
  const double classifier_p = number(config, "classifier_dropout", path, hidden_p, 0.0, 1.0);
  MG_CHECK(classifier_p == hidden_p, Error, kWho, ": '", path, "': classifier_dropout ", classifier_p,
           " differs from hidden_dropout_prob ", hidden_p,
           "; mixgrad's BERT has one dropout probability for both\n  hint: set classifier_dropout to null or to ",
           hidden_p, " in the file");
  c.dropout = hidden_p;
  c.layer_norm_eps = number(config, "layer_norm_eps", path, 1e-12, 0.0, 1.0);
  c.initializer_range = number(config, "initializer_range", path, 0.02, 0.0, 10.0);
  // Absent: BERT's 0; null: no padding row (transformers then builds nn.Embedding without one).
  if (config.contains("pad_token_id") && config.at("pad_token_id").is_null()) c.pad_token_id = std::nullopt;
  if (config.contains("pad_token_id") && !config.at("pad_token_id").is_null()) {
    const json& v = config.at("pad_token_id");
    MG_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < c.vocab_size, Error, kWho, ": '",
             path, "': pad_token_id must be an id of the vocabulary, got ", detail::excerpt(v));
    c.pad_token_id = v.get<int64_t>();
  }
  return c;
}

// vocab.txt: one token per line, the id is the line number.
std::vector<std::string> read_vocab_txt(const std::string& path) {
  std::istringstream in(read_text(path));
  std::vector<std::string> vocab;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    MG_CHECK(!line.empty(), Error, kWho, ": '", path, "' line ", vocab.size() + 1, " is empty (one token per line expected)");
    vocab.push_back(line);
  }
  return vocab;
}

// The settings of BERT's normaliser as transformers records them.
struct Normalizer {
  bool lowercase = true;
  std::optional<bool> strip_accents;  // null: follows lowercase
  bool chinese = true;                // handle_chinese_chars / tokenize_chinese_chars
  bool clean = true;                  // clean_text
};

// `key` of `j` as a bool into `out` (absent or null: unchanged).
void read_bool(const json& j, const char* key, const std::string& path, bool& out) {
  if (!j.contains(key) || j.at(key).is_null()) return;
  MG_CHECK(j.at(key).is_boolean(), Error, kWho, ": '", path, "': \"", key, "\" must be true or false, got ",
           detail::excerpt(j.at(key)));
  out = j.at(key).get<bool>();
}
void read_bool(const json& j, const char* key, const std::string& path, std::optional<bool>& out) {
  if (!j.contains(key) || j.at(key).is_null()) return;
  bool v = false;
  read_bool(j, key, path, v);
  out = v;
}

// config.json against the weights' shapes: the model a caller builds from hf.config is the one
// the file holds (a config.json of another model — or one that asks for 2^47 parameters — is
// refused here, before anything is built from it). Checked: the embeddings' sizes, the number of
// encoder layers and their intermediate size.
void check_config_matches_weights(const HfBert& hf, const std::string& config_path, const std::string& weights_path) {
  std::map<std::string, Shape> shapes;
  for (const auto& [name, t] : hf.state) shapes.emplace(name, t.shape());
  const nn::models::BertConfig& c = hf.config;
  const auto expect = [&](const std::string& name, const Shape& want) {
    const auto it = shapes.find(name);
    MG_CHECK(it != shapes.end(), Error, kWho, ": '", weights_path, "' has no ", name,
             " (a BERT checkpoint has it)");
    MG_CHECK(it->second == want, Error, kWho, ": '", config_path, "' describes ", name, " ", shape_str(want),
             " but '", weights_path, "' holds ", shape_str(it->second),
             "\n  hint: config.json and model.safetensors come from different models");
  };
  expect("bert.embeddings.word_embeddings.weight", {c.vocab_size, c.hidden});
  expect("bert.embeddings.position_embeddings.weight", {c.max_position, c.hidden});
  expect("bert.embeddings.token_type_embeddings.weight", {c.type_vocab_size, c.hidden});
  for (int64_t l = 0; l < c.layers; ++l) {
    expect(str_cat("bert.encoder.", l, ".linear1.weight"), {c.intermediate, c.hidden});
  }
  MG_CHECK(!shapes.contains(str_cat("bert.encoder.", c.layers, ".linear1.weight")), Error, kWho, ": '", config_path,
           "' describes ", c.layers, " encoder layers but '", weights_path, "' holds more",
           "\n  hint: config.json and model.safetensors come from different models");
}

// A JSON value's excerpt for errors: a string token as itself, an added-token object by content.
std::string token_text(const json& v) {
  if (v.is_string()) return detail::quoted_excerpt(v.get<std::string>());
  if (v.is_object() && v.contains("content") && v.at("content").is_string()) {
    return detail::quoted_excerpt(v.at("content").get<std::string>());
  }
  return detail::excerpt(v);
}

bool is_special_token(const std::string& s) {
  const auto& sp = data::WordPiece::special_tokens();
  return std::find(sp.begin(), sp.end(), s) != sp.end();
}

// Tokens added after training (tokenizer.add_tokens, additional special tokens) are split out of
// the text by Hugging Face before WordPiece runs, even when they are also vocabulary entries
// ("cat" added would cut "concatenate" around it). mixgrad's WordPiece splits out only BERT's five
// special tokens, so any other added token is refused: it would encode differently.
void refuse_added_token(const std::string& path, const std::string& shown) {
  MG_THROW(Error, kWho, ": '", path, "' adds the token ", shown,
           "; mixgrad's WordPiece splits only BERT's five special tokens out of the text, so it would "
           "encode text holding this one differently from Hugging Face",
           "\n  hint: train without added tokens, or add them to the vocabulary itself");
}

// tokenizer.json as transformers writes it for BERT: its WordPiece vocabulary (ids 0..n-1, each
// once), its normaliser's settings, and the longest word it encodes. Another normaliser, model or
// pre-tokeniser is refused (mixgrad's WordPiece reproduces BERT's pipeline only).
struct TokenizerJson {
  std::vector<std::string> vocab;
  Normalizer norm;
  std::optional<int64_t> max_chars;
};

TokenizerJson read_tokenizer_json(const std::string& path) {
  TokenizerJson out;
  const json t = detail::parse_json(kWho, path, "the tokenizer", read_text(path));
  MG_CHECK(t.is_object() && t.contains("model") && t.at("model").is_object(), Error, kWho, ": '", path,
           "' has no \"model\" object");
  const auto type_of = [](const json& j) {
    return j.is_object() && j.contains("type") && j.at("type").is_string() ? j.at("type").get<std::string>()
                                                                           : std::string();
  };
  const json& m = t.at("model");
  MG_CHECK(m.contains("type") && m.at("type") == "WordPiece", Error, kWho, ": '", path, "': the model is ",
           detail::excerpt(m.contains("type") ? m.at("type") : m), ", not WordPiece");
  MG_CHECK(!m.contains("continuing_subword_prefix") || m.at("continuing_subword_prefix") == "##", Error, kWho, ": '",
           path, "': continuing_subword_prefix ", detail::excerpt(m.at("continuing_subword_prefix")), " is not \"##\"");
  // A null normaliser or pre-tokeniser means none runs: not BERT's pipeline either.
  const json null_value;
  const json& n = t.contains("normalizer") ? t.at("normalizer") : null_value;
  MG_CHECK(type_of(n) == "BertNormalizer", Error, kWho, ": '", path, "': the normalizer is ",
           detail::excerpt(n.is_object() && n.contains("type") ? n.at("type") : n),
           ", not BertNormalizer; mixgrad's WordPiece reproduces BERT's");
  read_bool(n, "lowercase", path, out.norm.lowercase);
  read_bool(n, "strip_accents", path, out.norm.strip_accents);
  read_bool(n, "handle_chinese_chars", path, out.norm.chinese);
  read_bool(n, "clean_text", path, out.norm.clean);
  const json& pre = t.contains("pre_tokenizer") ? t.at("pre_tokenizer") : null_value;
  MG_CHECK(type_of(pre) == "BertPreTokenizer", Error, kWho, ": '", path, "': the pre_tokenizer is ",
           detail::excerpt(pre.is_object() && pre.contains("type") ? pre.at("type") : pre),
           ", not BertPreTokenizer; mixgrad's WordPiece reproduces BERT's");
  if (m.contains("max_input_chars_per_word")) {
    const json& v = m.at("max_input_chars_per_word");
    MG_CHECK(v.is_number_integer() && v.get<int64_t>() >= 1, Error, kWho, ": '", path,
             "': max_input_chars_per_word must be a positive integer, got ", detail::excerpt(v));
    out.max_chars = v.get<int64_t>();
  }
  MG_CHECK(m.contains("vocab") && m.at("vocab").is_object(), Error, kWho, ": '", path, "' has no WordPiece vocab object");
  const json& v = m.at("vocab");
  out.vocab.resize(v.size());
  std::vector<bool> seen(v.size(), false);
  for (auto it = v.begin(); it != v.end(); ++it) {
    MG_CHECK(it.value().is_number_integer(), Error, kWho, ": '", path, "': the id of ", detail::quoted_excerpt(it.key()),
             " is ", detail::excerpt(it.value()));
    const int64_t id = it.value().get<int64_t>();
    MG_CHECK(id >= 0 && id < int64_t(v.size()) && !seen[std::size_t(id)], Error, kWho, ": '", path, "': token ",
             detail::quoted_excerpt(it.key()), " has id ", id, "; a vocabulary of ", v.size(),
             " tokens needs the ids 0..", v.size() - 1, " once each");
    seen[std::size_t(id)] = true;
    out.vocab[std::size_t(id)] = it.key();
  }
  // "added_tokens" lists the special tokens too ([CLS], [PAD], ...: vocabulary entries with the
  // same id, which pass); anything else is refused (refuse_added_token).
  if (t.contains("added_tokens") && t.at("added_tokens").is_array()) {
    for (const json& a : t.at("added_tokens")) {
      const bool has = a.is_object() && a.contains("id") && a.at("id").is_number_integer() && a.contains("content") &&
                       a.at("content").is_string();
      MG_CHECK(has, Error, kWho, ": '", path, "': an added token is not {\"id\": int, \"content\": string}: ",
               detail::excerpt(a));
      const int64_t id = a.at("id").get<int64_t>();
      const std::string content = a.at("content").get<std::string>();
      const bool in_vocab = id >= 0 && id < int64_t(out.vocab.size()) && out.vocab[std::size_t(id)] == content;
      if (!in_vocab || !is_special_token(content)) refuse_added_token(path, str_cat(token_text(a.at("content")), " (id ", id, ")"));
    }
  }
  return out;
}

// What tokenizer_config.json says: the normaliser settings, whether transformers builds a
// BertTokenizer from it (tokenizer_class absent or BertTokenizer[Fast]), and no added tokens or
// special tokens other than BERT's five.
struct TokenizerConfig {
  bool present = false;
  bool bert_class = false;
  Normalizer norm;  // do_lower_case, strip_accents, tokenize_chinese_chars; defaults where absent
};

TokenizerConfig read_tokenizer_config(const std::string& path) {
  TokenizerConfig out;
  out.present = true;
  const json t = detail::parse_json(kWho, path, "the tokenizer configuration", read_text(path));
  MG_CHECK(t.is_object(), Error, kWho, ": '", path, "' is not a JSON object");
  read_bool(t, "do_lower_case", path, out.norm.lowercase);
  read_bool(t, "strip_accents", path, out.norm.strip_accents);
  read_bool(t, "tokenize_chinese_chars", path, out.norm.chinese);
  std::string cls;
  if (t.contains("tokenizer_class") && !t.at("tokenizer_class").is_null()) {
    MG_CHECK(t.at("tokenizer_class").is_string(), Error, kWho, ": '", path, "': \"tokenizer_class\" must be a string, got ",
             detail::excerpt(t.at("tokenizer_class")));
    cls = t.at("tokenizer_class").get<std::string>();
  }
  out.bert_class = cls.empty() || cls == "BertTokenizer" || cls == "BertTokenizerFast";
  // The special tokens' names: BERT's, or the tokenizer marks other text as [UNK], [MASK], ...
  const std::vector<std::pair<const char*, const char*>> named = {
      {"pad_token", "[PAD]"}, {"unk_token", "[UNK]"}, {"cls_token", "[CLS]"}, {"sep_token", "[SEP]"}, {"mask_token", "[MASK]"}};
  for (const auto& [key, want] : named) {
    if (!t.contains(key) || t.at(key).is_null()) continue;
    const json& v = t.at(key);
    const bool ok = (v.is_string() && v.get<std::string>() == want) ||
                    (v.is_object() && v.contains("content") && v.at("content") == want);
    MG_CHECK(ok, Error, kWho, ": '", path, "': ", key, " is ", token_text(v), ", not \"", want,
             "\"; mixgrad's WordPiece uses BERT's special tokens");
  }
  // transformers 4.34+ records added tokens here (added_tokens_decoder: id -> token) and extra
  // special tokens in lists.
  if (t.contains("added_tokens_decoder") && t.at("added_tokens_decoder").is_object()) {
    for (auto it = t.at("added_tokens_decoder").begin(); it != t.at("added_tokens_decoder").end(); ++it) {
      const json& a = it.value();
      const bool special = a.is_object() && a.contains("content") && a.at("content").is_string() &&
                           is_special_token(a.at("content").get<std::string>());
      if (!special) refuse_added_token(path, str_cat(token_text(a), " (id ", detail::quoted_excerpt(it.key()), ")"));
    }
  }
  for (const char* key : {"additional_special_tokens", "extra_special_tokens"}) {
    if (!t.contains(key) || t.at(key).is_null()) continue;
    const json& list = t.at(key);
    MG_CHECK(list.is_array() || list.is_object(), Error, kWho, ": '", path, "': \"", key,
             "\" must be a list, got ", detail::excerpt(list));
    for (const json& a : list) {
      const bool special = (a.is_string() && is_special_token(a.get<std::string>())) ||
                           (a.is_object() && a.contains("content") && a.at("content").is_string() &&
                            is_special_token(a.at("content").get<std::string>()));
      if (!special) refuse_added_token(path, token_text(a));
    }
  }
  return out;
}

// The tokenizer as transformers builds it from the directory (checked against transformers 5.25,
// whose AutoTokenizer makes a BertTokenizer when tokenizer_config.json names that class or none,
// and else runs tokenizer.json as written):
// - the vocabulary: tokenizer.json's when it exists (a vocab.txt beside it must agree: transformers'
//   fast and slow tokenizers read different files), else vocab.txt;
// - lowercasing, accents and CJK: a BertTokenizer takes them from tokenizer_config.json (lowercase
//   when do_lower_case is absent) and ignores tokenizer.json's normaliser; otherwise they are
//   tokenizer.json's;
// - the longest word: 100 for a BertTokenizer, else tokenizer.json's. transformers 4 used
//   tokenizer.json's in both cases, so a BertTokenizer whose tokenizer.json says otherwise is
//   refused as ambiguous.
void read_tokenizer(const std::filesystem::path& root, HfBert& hf) {
  const std::filesystem::path config = root / "tokenizer_config.json", vocab_txt = root / "vocab.txt",
                              tokenizer_json = root / "tokenizer.json", added_json = root / "added_tokens.json";
  TokenizerConfig cfg;
  if (is_file(config)) cfg = read_tokenizer_config(config.string());
  // The older layout of tokens added after training: refused alike.
  if (is_file(added_json)) {
    const json a = detail::parse_json(kWho, added_json.string(), "the added tokens", read_text(added_json.string()));
    MG_CHECK(a.is_object(), Error, kWho, ": '", added_json.string(), "' is not a JSON object");
    if (!a.empty()) refuse_added_token(added_json.string(), detail::quoted_excerpt(a.begin().key()));
  }
  Normalizer norm = cfg.norm;
  if (is_file(tokenizer_json)) {
    TokenizerJson tj = read_tokenizer_json(tokenizer_json.string());
    if (is_file(vocab_txt)) {
      const std::vector<std::string> txt = read_vocab_txt(vocab_txt.string());
      std::size_t i = 0;
      while (i < txt.size() && i < tj.vocab.size() && txt[i] == tj.vocab[i]) ++i;
      MG_CHECK(i == txt.size() && i == tj.vocab.size(), Error, kWho, ": '", vocab_txt.string(), "' and '",
               tokenizer_json.string(), "' hold different vocabularies (",
               i < txt.size() && i < tj.vocab.size()
                   ? str_cat("id ", i, " is ", detail::quoted_excerpt(txt[i]), " in one and ",
                             detail::quoted_excerpt(tj.vocab[i]), " in the other")
                   : str_cat(txt.size(), " and ", tj.vocab.size(), " tokens"),
               "); transformers' fast tokenizer reads tokenizer.json and its slow one vocab.txt",
               "\n  hint: save the tokenizer again with save_pretrained, or remove the stale file");
    }
    hf.vocab = std::move(tj.vocab);
    hf.vocab_path = tokenizer_json.string();
    if (cfg.present && cfg.bert_class) {
      MG_CHECK(!tj.max_chars || *tj.max_chars == 100, Error, kWho, ": '", tokenizer_json.string(),
               "': max_input_chars_per_word is ", *tj.max_chars, "; transformers 5's BertTokenizer uses 100 and "
               "transformers 4's used this file's value, so the directory encodes differently by version");
      norm.clean = tj.norm.clean;
    } else {
      norm = tj.norm;
      hf.max_input_chars_per_word = tj.max_chars.value_or(100);
    }
  } else {
    MG_CHECK(is_file(vocab_txt), Error, kWho, ": '", root.string(), "' has neither vocab.txt nor tokenizer.json",
             "\n  hint: save the tokenizer beside the model: AutoTokenizer.from_pretrained(...).save_pretrained(dir)");
    hf.vocab = read_vocab_txt(vocab_txt.string());
    hf.vocab_path = vocab_txt.string();
  }
  const std::string dir = root.string();
  const bool strip = norm.strip_accents.value_or(norm.lowercase);
  MG_CHECK(strip == norm.lowercase, Error, kWho, ": '", dir, "': the tokenizer ", norm.lowercase ? "lowercases" : "keeps case",
           " but ", strip ? "strips" : "keeps", " accents; mixgrad's WordPiece strips accents exactly when it lowercases "
           "(BERT uncased / cased)");
  MG_CHECK(norm.chinese && norm.clean, Error, kWho, ": '", dir, "': the tokenizer ",
           !norm.chinese ? "does not split CJK characters (tokenize_chinese_chars = false)" : "does not clean the text (clean_text = false)",
           "; mixgrad's WordPiece always does, as BERT's default");
  hf.lowercase = norm.lowercase;
}

}  // namespace

nn::models::BertConfig bert_config_from_hf_json(const std::string& text, const std::string& path) {
  return config_from(detail::parse_json(kWho, path, "the configuration", text), path);
}

HfBert load_hf_bert(const std::string& dir) {
  namespace fs = std::filesystem;
  MG_CHECK(is_dir(dir), Error, kWho, ": '", dir, "' is not a directory",
           "\n  hint: pass the directory transformers' save_pretrained wrote (config.json, model.safetensors, vocab.txt)");
  const fs::path root(dir);
  HfBert hf;
  const std::string config_path = (root / "config.json").string();
  const json config = detail::parse_json(kWho, config_path, "the configuration", read_text(config_path));
  hf.config = config_from(config, config_path);
  if (config.contains("architectures") && config.at("architectures").is_array() &&
      !config.at("architectures").empty() && config.at("architectures")[0].is_string()) {
    hf.architecture = config.at("architectures")[0].get<std::string>();
  }
  const fs::path weights = root / "model.safetensors";
  MG_CHECK(is_file(weights), Error, kWho, ": '", dir, "' has no model.safetensors",
           exists_path(root / "model.safetensors.index.json")
               ? "\n  hint: the checkpoint is sharded (model.safetensors.index.json); save it as one file with "
                 "transformers: model.save_pretrained(dir, max_shard_size=\"100GB\")"
           : exists_path(root / "pytorch_model.bin")
               ? "\n  hint: it has pytorch_model.bin (a Python pickle, which mixgrad does not read); convert it with "
                 "transformers: AutoModel.from_pretrained(dir).save_pretrained(dir, safe_serialization=True)"
               : "");
  const SafetensorsFile file = detail::load_safetensors_as(kWho, weights.string());
  nn::NamedTensors mapped = nn::models::bert_state_dict_from_hf(file.tensors);
  // A BertModel checkpoint names its encoder without "bert."; the task models put it under it.
  bool prefixed = false;
  for (const auto& [name, t] : mapped) prefixed = prefixed || name.starts_with("bert.");
  for (auto& [name, t] : mapped) {
    const bool head = name.starts_with("transform.") || name.starts_with("transform_norm.") ||
                      name == "decoder_bias" || name.starts_with("classifier.");
    if (!prefixed && !head) name = "bert." + name;
  }
  hf.state = std::move(mapped);

  read_tokenizer(root, hf);
  // An id past the embedding's rows would fail only inside the first forward.
  MG_CHECK(int64_t(hf.vocab.size()) <= hf.config.vocab_size, Error, kWho, ": '", hf.vocab_path, "' holds ",
           hf.vocab.size(), " tokens but config.json's vocab_size is ", hf.config.vocab_size,
           "\n  hint: the tokenizer and the model come from different checkpoints");
  // Last, so the tokenizer's own errors come first (and the fuzzer, whose model.safetensors holds
  // no tensors, still reaches them).
  check_config_matches_weights(hf, config_path, weights.string());
  return hf;
}

}  // namespace mg::io
