// WordPiece against Hugging Face's BertTokenizer (transformers 5.25, tokenizers 0.23): two
// vocab.txt files in bert-base's layout (specials at 0 and 100..103) and, for 111 texts (English,
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

TEST_CASE("wordpiece: uncased ids equal transformers' BertTokenizer on 111 texts", "[data]") {
  check_against_transformers(true);
}

TEST_CASE("wordpiece: cased ids equal transformers' BertTokenizer on 111 texts", "[data]") {
  check_against_transformers(false);
}
