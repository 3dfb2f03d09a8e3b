// WordPiece against Hugging Face's BertTokenizer (transformers 5.25, tokenizers 0.23): two
// vocab.txt files in bert-base's layout (specials at 0 and 100..103) and, for 112 texts (English,
// accented Latin, Greek, Cyrillic, CJK, Hangul, Arabic, Indic scripts, emoji, controls, zero-width
// and bidi characters, fullwidth forms, special tokens written in the text, over-long words and
// random mixtures of code points), the words, ids and padded [CLS] ... [SEP] sequences transformers
// gives, uncased and cased. Written by tools/reference/gen_hf_wordpiece.py.
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/text/mlm.h"
#include "data/text/wordpiece.h"
#include "test_paths.h"
#include "test_util.h"

using namespace mg::data;

namespace {

std::string reference_path(const std::string& name) { return mg::test::source_dir() + "/tests/data/reference/" + name; }

const nlohmann::json& reference() {
  static const nlohmann::json j = [] {
    std::ifstream f(reference_path("hf_wordpiece.json"), std::ios::binary);
    REQUIRE(f.good());
    return nlohmann::json::parse(f);
  }();
  return j;
}

void check_against_transformers(bool lowercase) {
  const std::string name = lowercase ? "uncased" : "cased";
  const WordPiece tok = WordPiece::load(reference_path("hf_wordpiece_" + name + "_vocab.txt"), {.lowercase = lowercase});
  const SpecialTokenIds sp = tok.specials();
  REQUIRE((sp.pad == 0 && sp.unk == 100 && sp.cls == 101 && sp.sep == 102 && sp.mask == 103));
  const nlohmann::json& j = reference();
  const auto& texts = j.at("texts");
  const auto& expected = j.at(name);
  int64_t word_mismatches = 0, id_mismatches = 0, padded_mismatches = 0, unks = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const std::string text = texts[i].get<std::string>();
    const auto words = expected.at("words")[i].get<std::vector<std::string>>();
    const auto ids = expected.at("ids")[i].get<std::vector<int32_t>>();
    INFO(name << " text " << i << ": " << text);
    // Words compare only for texts without special tokens written in them (transformers cuts
    // those out before its pre-tokeniser, as encode() does).
    if (text.find("[MASK]") == std::string::npos) {
      const bool same = tok.pre_tokenize(text) == words;
      word_mismatches += !same;
      CHECK(same);
    }
    const std::vector<int32_t> got = tok.encode(text);
    id_mismatches += got != ids;
    CHECK(got == ids);
    // Decoding with transformers' cleanup gives its BertTokenizer.decode text.
    CHECK(tok.decode(ids, /*skip_special=*/false, /*clean_up_spaces=*/true) == expected.at("decoded")[i].get<std::string>());
    for (int32_t id : got) unks += id == sp.unk;
    // The padded sequence and its mask (max_length 24, truncation, padding), through the MLM
    // module's sequence builders.
    const Batch b = make_sequence_batch({make_bert_sequence(got, 24, sp)}, sp.pad);
    const int64_t* p = b.at("input_ids").data<int64_t>();
    const int64_t* m = b.at("attention_mask").data<int64_t>();
    const auto want_ids = expected.at("padded_ids")[i].get<std::vector<int64_t>>();
    const auto want_mask = expected.at("padded_mask")[i].get<std::vector<int64_t>>();
    const bool same_padded = std::vector<int64_t>(p, p + 24) == want_ids && std::vector<int64_t>(m, m + 24) == want_mask;
    padded_mismatches += !same_padded;
    CHECK(same_padded);
  }
  WARN(name << ": " << texts.size() << " texts, " << unks << " [UNK]; mismatches: words " << word_mismatches
            << ", ids " << id_mismatches << ", padded " << padded_mismatches);
}

}  // namespace

TEST_CASE("wordpiece: uncased ids equal transformers' BertTokenizer on 112 texts", "[data]") {
  check_against_transformers(true);
}

TEST_CASE("wordpiece: cased ids equal transformers' BertTokenizer on 112 texts", "[data]") {
  check_against_transformers(false);
}

TEST_CASE("wordpiece: sentence pairs equal transformers' (token types, longest-first truncation)", "[data]") {
  for (const bool lowercase : {true, false}) {
    const std::string name = lowercase ? "uncased" : "cased";
    const WordPiece tok = WordPiece::load(reference_path("hf_wordpiece_" + name + "_vocab.txt"), {.lowercase = lowercase});
    const nlohmann::json& j = reference();
    const auto& texts = j.at("texts");
    int64_t mismatches = 0, cut = 0;
    for (const auto& pair : j.at(name).at("pairs")) {
      const std::string a = texts[pair.at("a").get<std::size_t>()].get<std::string>();
      const std::string b = texts[pair.at("b").get<std::size_t>()].get<std::string>();
      const int64_t max_length = pair.at("max_length").get<int64_t>();
      INFO(name << ": a = " << a << "\nb = " << b << "\nmax_length " << max_length);
      const std::vector<int32_t> ea = tok.encode(a), eb = tok.encode(b);
      cut += int64_t(ea.size() + eb.size() + 3) > max_length;
      const BertPair p = make_bert_pair(ea, eb, max_length, tok.specials());
      const bool same = p.ids == pair.at("ids").get<std::vector<int32_t>>() &&
                        p.token_types == pair.at("token_types").get<std::vector<int32_t>>();
      mismatches += !same;
      CHECK(same);
      const Batch batch = make_pair_batch({p}, tok.specials().pad);
      const int64_t* m = batch.at("attention_mask").data<int64_t>();
      CHECK(std::vector<int64_t>(m, m + max_length) == pair.at("mask").get<std::vector<int64_t>>());
    }
    WARN(name << ": 60 pairs, " << cut << " truncated, " << mismatches << " mismatches");
  }
  MG_REQUIRE_ERROR(make_bert_pair({5}, {6}, 2, SpecialTokenIds{}), "seq_len must be >= 3");
  const BertPair tiny = make_bert_pair({5, 6, 7}, {8, 9}, 3, SpecialTokenIds{});  // no room: [CLS] [SEP] [SEP]
  CHECK(tiny.ids == std::vector<int32_t>{2, 3, 3});
  CHECK(tiny.token_types == std::vector<int32_t>{0, 0, 1});
}
