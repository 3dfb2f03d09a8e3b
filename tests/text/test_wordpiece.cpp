// Tests of the WordPiece tokenizer (data/text/wordpiece.h): pre-tokenisation, special ids,
// training on a toy corpus with hand-checked merges, determinism, encode/decode round trip over
// the whole KJV, [UNK] handling, and vocab.txt save/load with its errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "data/text/wordpiece.h"
#include "test_util.h"
#include "text_fixture.h"

using namespace mg::data;
using mg::test::text::kjv;
using mg::test::text::kjv_tokenizer;
using mg::test::text::TempDir;
using mg::test::text::write_bytes;
using Strings = std::vector<std::string>;

namespace {

WordPiece tiny_vocab() {
  Strings v = WordPiece::special_tokens();
  for (const char* t : {"the", "be", "##gin", "##ning", "##n", "b", "e", "g", "i", "n", "##i", "##e", ",", "."}) {
    v.push_back(t);
  }
  return WordPiece(v);
}

}  // namespace

TEST_CASE("wordpiece: BERT pre-tokenisation", "[data]") {
  const WordPiece tok = tiny_vocab();
  CHECK(tok.pre_tokenize("Hello, World!") == Strings{"hello", ",", "world", "!"});
  CHECK(tok.pre_tokenize("  In\tthe\n beginning...  ") == Strings{"in", "the", "beginning", ".", ".", "."});
  CHECK(tok.pre_tokenize("man's (Selah)") == Strings{"man", "'", "s", "(", "selah", ")"});
  CHECK(tok.pre_tokenize(std::string("a\x01" "b\x7f" "c", 6)) == Strings{"abc"});  // control chars dropped
  // Every Cc (\v and \f too) and Cf character is dropped, as BERT's _clean_text (and Hugging
  // Face's BertNormalizer) do: a word joiner, bidi override or isolate inside a word kept it whole.
  for (const char* joiner : {"\v", "\f", "\xe2\x81\xa0", "\xe2\x80\xae", "\xe2\x81\xa6", "\xe2\x81\xa3",
                             "\xd8\x9c", "\xe1\xa0\x8e", "\xef\xbf\xb9", "\xf3\xa0\x80\x81", "\xf0\x9d\x85\xb3",
                             "\xc2\xad", "\xe2\x80\x8b", "\xef\xbb\xbf"}) {
    INFO("between the words: " << joiner);
    CHECK(tok.pre_tokenize(std::string("begin") + joiner + "ning") == Strings{"beginning"});
  }
  CHECK(tok.pre_tokenize("a\u2028b") == Strings{"a", "b"});  // the line separator still separates
  // Uncased BERT lowercases and strips accents (any script); CJK ideographs are words of their own.
  CHECK(tok.pre_tokenize("Caf\xc3\xa9 D\xc3\xa9j\xc3\xa0-vu \xc3\x9c" "BER") == Strings{"cafe", "deja", "-", "vu", "uber"});
  CHECK(tok.pre_tokenize("e\xcc\x81t\xc3\xa9") == Strings{"ete"});  // a combining accent is dropped too
  CHECK(tok.pre_tokenize("\xce\x9f\xce\x94\xce\x9f\xce\xa3") == Strings{"\xce\xbf\xce\xb4\xce\xbf\xcf\x83"});  // ΟΔΟΣ -> οδοσ
  CHECK(tok.pre_tokenize("\xe4\xb8\xad\xe6\x96\x87" "ab") == Strings{"\xe4\xb8\xad", "\xe6\x96\x87", "ab"});  // 中文ab
  CHECK(tok.pre_tokenize("\xea\xb0\x80") == Strings{"\xe1\x84\x80\xe1\x85\xa1"});  // 가 -> its jamo
  CHECK(tok.pre_tokenize("x\xe1\xbf\xafy") == Strings{"x", "`", "y"});  // GREEK VARIA folds to a grave accent
  CHECK(tok.pre_tokenize("a\xc2\xa0" "b\xe2\x80\x94" "c") == Strings{"a", "b", "\xe2\x80\x94", "c"});  // NBSP, em dash
  CHECK(tok.pre_tokenize("x\xff" "y") == Strings{"x\xff" "y"});  // an invalid byte stays a character
  // Invalid bytes never become a valid character once a dropped character between them is gone:
  // a lone lead byte, U+200B (removed), a lone continuation byte ("é" if joined) ...
  CHECK(tok.pre_tokenize("x\xc3\xe2\x80\x8b\xa9y") == Strings{"x\xc3", "\xa9y"});
  CHECK(tok.pre_tokenize("\xe4\xb8" + std::string(1, '\0') + "\xad") == Strings{"\xe4\xb8", "\xad"});  // not 中
  CHECK(tok.pre_tokenize("\xc3\xcc\x81\xa9") == Strings{"\xc3", "\xa9"});  // a stripped accent between
  CHECK(tok.pre_tokenize("\xe2\xe2\x80\x8b\x80\x80z") == Strings{"\xe2", "\x80\x80z"});  // not U+2000
  CHECK(tok.pre_tokenize("\xc3\xe2\x80\x8b" "a\xa9") == Strings{"\xc3" "a\xa9"});  // a kept letter between
  CHECK(tok.pre_tokenize("").empty());
  CHECK(tok.normalize(" And God said,  Let there be light:") == "and god said , let there be light :");
  const WordPiece cased(WordPiece::special_tokens(), {.lowercase = false});
  CHECK(cased.pre_tokenize("LORD God") == Strings{"LORD", "God"});
  CHECK(cased.pre_tokenize("Caf\xc3\xa9 e\xcc\x81") == Strings{"Caf\xc3\xa9", "e\xcc\x81"});  // accents kept
  CHECK(cased.pre_tokenize("X\xc3\xe2\x80\x8b\xa9Y") == Strings{"X\xc3", "\xa9Y"});
  CHECK(cased.pre_tokenize("\xc3\xcc\x81\xa9") == Strings{"\xc3\xcc\x81\xa9"});  // the accent kept between
}

TEST_CASE("wordpiece: special tokens and greedy longest-match encoding", "[data]") {
  const WordPiece tok = tiny_vocab();
  const SpecialTokenIds sp = tok.specials();  // a vocabulary with the specials first
  CHECK((sp.pad == 0 && sp.unk == 1 && sp.cls == 2 && sp.sep == 3 && sp.mask == 4));
  CHECK(tok.token_to_id("[PAD]") == 0);
  CHECK(tok.token_to_id("[MASK]") == 4);
  CHECK(tok.token_to_id("nothing") == -1);
  // Longest match first: "beginning" = be + ##gin + ##ning (not ##n + ...).
  CHECK(tok.tokenize("The beginning.") == Strings{"the", "be", "##gin", "##ning", "."});
  CHECK(tok.encode("The beginning.") == std::vector<int32_t>{5, 6, 7, 8, 18});
  // A word that cannot be covered is one [UNK]; its neighbours are unaffected.
  CHECK(tok.tokenize("the beg, the") == Strings{"the", "[UNK]", ",", "the"});
  CHECK(tok.tokenize("gin") == Strings{"g", "##i", "##n"});
  CHECK(tok.decode(tok.encode("The beginning, the beg.")) == "the beginning , the [UNK] .");
  // decode: "##" pieces glue, [PAD]/[CLS]/[SEP] are skipped unless asked for.
  const std::vector<int32_t> ids = {sp.cls, 6, 7, 8, sp.mask, sp.sep, sp.pad};
  CHECK(tok.decode(ids) == "beginning [MASK]");
  CHECK(tok.decode(ids, /*skip_special=*/false) == "[CLS] beginning [MASK] [SEP] [PAD]");
  MG_REQUIRE_ERROR(tok.decode({5, 99}), "token id 99 is out of range for a vocabulary of 19");
  // Words longer than max_input_chars_per_word are [UNK], as in BERT.
  const WordPiece short_words(tok.vocab(), {.max_input_chars_per_word = 4});
  CHECK(short_words.tokenize("the beginning") == Strings{"the", "[UNK]"});
  const WordPiece three(tok.vocab(), {.max_input_chars_per_word = 3});  // exactly the limit is not [UNK]
  CHECK(three.tokenize("the") == Strings{"the"});
  CHECK(three.tokenize(std::string(1 << 20, 'x')) == Strings{"[UNK]"});
}

TEST_CASE("wordpiece: training merges the most frequent pairs", "[data]") {
  // Words: "low" x5, "lower" x2, "newest" x6, "widest" x3 (Sennrich et al.'s BPE example).
  Strings corpus;
  for (int i = 0; i < 5; ++i) corpus.push_back("low");
  for (int i = 0; i < 2; ++i) corpus.push_back("lower");
  for (int i = 0; i < 6; ++i) corpus.push_back("newest");
  for (int i = 0; i < 3; ++i) corpus.push_back("widest");
  const std::size_t alphabet = 10;  // d e i l n o r s t w
  const std::size_t base = 5 + 2 * alphabet;
  const WordPiece tok = WordPiece::train(corpus, {.vocab_size = int64_t(base + 4)});
  REQUIRE(tok.vocab_size() == int64_t(base + 4));
  // Specials, then the characters in byte order, then their "##" forms.
  CHECK(tok.id_to_token(5) == "d");
  CHECK(tok.id_to_token(14) == "w");
  CHECK(tok.id_to_token(15) == "##d");
  // Pair counts: (##e,##s) 9, (##s,##t) 9, (l,##o) 7, (##o,##w) 7, (n,##e) 6, ... The two 9s tie
  // and go to the pair of smaller ids: ##e(16) < ##s(22), so "##es" first; then "##est" (9),
  // then (l,##o) 7 beats (##o,##w) 7 by id; then "low" (7).
  CHECK(tok.id_to_token(int32_t(base)) == "##es");
  CHECK(tok.id_to_token(int32_t(base + 1)) == "##est");
  CHECK(tok.id_to_token(int32_t(base + 2)) == "lo");
  CHECK(tok.id_to_token(int32_t(base + 3)) == "low");
  CHECK(tok.tokenize("lowest newer") == Strings{"low", "##est", "n", "##e", "##w", "##e", "##r"});
  // min_frequency stops merging: no pair occurs 10 times.
  CHECK(WordPiece::train(corpus, {.vocab_size = 100, .min_frequency = 10}).vocab_size() == int64_t(base));
  // Unbounded: training ends when every word is a single token.
  const WordPiece full = WordPiece::train(corpus, {.vocab_size = 1000, .min_frequency = 1});
  for (const char* w : {"low", "lower", "newest", "widest"}) CHECK(full.tokenize(w) == Strings{w});
  MG_REQUIRE_ERROR(WordPiece::train(corpus, {.vocab_size = 20}),
                   "is smaller than the 5 special tokens plus the alphabet");
}

TEST_CASE("wordpiece: training is deterministic and independent of corpus order", "[data]") {
  Strings corpus = {"And God said, Let there be light: and there was light.",
                    "And God saw the light, that it was good: and God divided the light from the darkness.",
                    "And God called the light Day, and the darkness he called Night."};
  const WordPiece a = WordPiece::train(corpus, {.vocab_size = 120, .min_frequency = 1});
  const WordPiece b = WordPiece::train(corpus, {.vocab_size = 120, .min_frequency = 1});
  std::reverse(corpus.begin(), corpus.end());
  const WordPiece c = WordPiece::train(corpus, {.vocab_size = 120, .min_frequency = 1});
  CHECK(a.vocab() == b.vocab());
  CHECK(a.vocab() == c.vocab());
  for (const std::string& s : corpus) CHECK(a.decode(a.encode(s)) == a.normalize(s));
}

TEST_CASE("wordpiece: KJV vocabulary, round trip of every verse", "[data]") {
  MG_REQUIRE_KJV();
  const WordPiece& tok = kjv_tokenizer();
  REQUIRE(tok.vocab_size() == 8192);
  CHECK(tok.vocab()[0] == "[PAD]");
  CHECK(tok.token_to_id("the") >= 5);
  CHECK(tok.token_to_id("lord") >= 5);
  CHECK(tok.tokenize("In the beginning God created the heaven and the earth.") ==
        Strings{"in", "the", "beginning", "god", "created", "the", "heaven", "and", "the", "earth", "."});
  const auto t0 = std::chrono::steady_clock::now();
  int64_t tokens = 0, words = 0, mismatches = 0;
  for (const Verse& v : kjv()) {
    const std::vector<int32_t> ids = tok.encode(v.text);
    tokens += int64_t(ids.size());
    words += int64_t(tok.pre_tokenize(v.text).size());
    REQUIRE(std::find(ids.begin(), ids.end(), tok.specials().unk) == ids.end());
    mismatches += tok.decode(ids) != tok.normalize(v.text);
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  WARN("encode+decode of 31,102 verses: " << tokens << " tokens (" << double(tokens) / double(words)
                                           << " per word) in " << ms << " ms");
  CHECK(mismatches == 0);
  CHECK(double(tokens) / double(words) < 1.1);  // 8192 pieces cover nearly every KJV word whole
  // Text outside the corpus: seen characters still encode; unseen ones give [UNK].
  CHECK(tok.decode(tok.encode("Zyzzyva quixotically jazzed")) == "zyzzyva quixotically jazzed");
  CHECK(tok.tokenize("the \xc3\xbc" "ber lord") == Strings{"the", "u", "##ber", "lord"});  // accent stripped
  CHECK(tok.tokenize("the \xe4\xb8\xad lord") == Strings{"the", "[UNK]", "lord"});
}

TEST_CASE("wordpiece: vocab.txt save and load", "[data]") {
  TempDir dir;
  const WordPiece tok = tiny_vocab();
  tok.save(dir.file("vocab.txt"));
  const WordPiece back = WordPiece::load(dir.file("vocab.txt"));
  CHECK(back.vocab() == tok.vocab());
  CHECK(back.encode("the beginning") == tok.encode("the beginning"));
  CHECK(mg::test::text::read_bytes(dir.file("vocab.txt")).substr(0, 34) == "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe");
  // CRLF files load too.
  write_bytes(dir.file("crlf.txt"), "[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\n[MASK]\r\nab\r\n##c\r\n");
  CHECK(WordPiece::load(dir.file("crlf.txt")).tokenize("abc") == Strings{"ab", "##c"});
  write_bytes(dir.file("bad1.txt"), "[PAD]\n[CLS]\n[UNK]\n[SEP]\nab\n");
  MG_REQUIRE_ERROR(WordPiece::load(dir.file("bad1.txt")), "the vocabulary (5 tokens) has no [MASK] token");
  write_bytes(dir.file("bad2.txt"), "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nab\nab\n");
  MG_REQUIRE_ERROR(WordPiece::load(dir.file("bad2.txt")), "token 'ab' appears twice (ids 5 and 6)");
  write_bytes(dir.file("bad3.txt"), "[PAD]\n[UNK]\n\n[SEP]\n[MASK]\n");
  MG_REQUIRE_ERROR(WordPiece::load(dir.file("bad3.txt")), "line 3 is empty");
  write_bytes(dir.file("bad4.txt"), "[PAD]\n[UNK]\n");
  MG_REQUIRE_ERROR(WordPiece::load(dir.file("bad4.txt")), "has no [CLS] token");
  MG_REQUIRE_ERROR(WordPiece::load(dir.file("missing.txt")), "cannot open");
  MG_REQUIRE_ERROR(tok.save("/nonexistent/dir/vocab.txt"), "cannot open");

  MG_REQUIRE_KJV();
  const WordPiece& kt = kjv_tokenizer();
  kt.save(dir.file("kjv_vocab.txt"));
  const WordPiece kb = WordPiece::load(dir.file("kjv_vocab.txt"));
  CHECK(kb.vocab() == kt.vocab());
  for (std::size_t i = 0; i < kjv().size(); i += 97) CHECK(kb.encode(kjv()[i].text) == kt.encode(kjv()[i].text));
}

TEST_CASE("wordpiece: malformed vocab.txt files are named errors (bad-input sweep)", "[data][errors]") {
  TempDir dir;
  const std::string specials = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  const std::string path = dir.file("vocab.txt");
  auto load_error = [&](const std::string& bytes) {
    write_bytes(path, bytes);
    const std::string msg = mg::test::error_of([&] { WordPiece::load(path); });
    INFO("message: " << msg);
    CHECK_THAT(msg, Catch::Matchers::StartsWith("WordPiece::load: '" + path + "'"));
    return msg;
  };
  CHECK_THAT(load_error(""), Catch::Matchers::Contains("the vocabulary (0 tokens) has no [PAD] token"));
  CHECK_THAT(load_error("\r\n"), Catch::Matchers::Contains("line 1 is empty"));
  CHECK_THAT(load_error(specials + "a\tb\n"), Catch::Matchers::Contains("token 5 'a\tb'"));
  write_bytes(path, specials + "##\nab\n");  // "##" alone is a token like any other (Hugging Face loads it)
  CHECK(WordPiece::load(path).token_to_id("##") == 5);
  // Decoded, "##" glues on as every "##" piece (transformers 5.25: decode([ab, ##, ab]) == "ab ab").
  CHECK(WordPiece::load(path).decode({6, 5, 6}) == "ab ab");
  CHECK_THAT(load_error(specials + "x\n" + "x\r\n"), Catch::Matchers::Contains("token 'x' appears twice (ids 5 and 6)"));
  CHECK_THAT(load_error("[UNK]\n[PAD]\n[CLS]\n[SEP]\n[mask]\n"), Catch::Matchers::Contains("has no [MASK] token"));
  // Bytes that are not UTF-8, a NUL and a 100,000-byte token are tokens like any other.
  write_bytes(path, specials + "\xff\xfe\n" + std::string("a\0b", 3) + "\n" + std::string(100000, 'z') + "\n");
  const WordPiece tok = WordPiece::load(path);
  CHECK(tok.vocab_size() == 8);
  CHECK(tok.token_to_id(std::string(100000, 'z')) == 7);
}

TEST_CASE("wordpiece: specials at any ids, as in Hugging Face's vocab.txt", "[data]") {
  // bert-base-uncased's layout: [PAD] 0, [unused0..98] 1..99, [UNK] 100, [CLS] 101, [SEP] 102,
  // [MASK] 103, then the rest.
  Strings v = {"[PAD]"};
  for (int i = 0; i < 99; ++i) v.push_back("[unused" + std::to_string(i) + "]");
  for (const char* t : {"[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "be", "##gin", "##ning", ",", "."}) v.push_back(t);
  const WordPiece tok(v);
  const SpecialTokenIds sp = tok.specials();
  CHECK((sp.pad == 0 && sp.unk == 100 && sp.cls == 101 && sp.sep == 102 && sp.mask == 103));
  CHECK(tok.encode("The beginning, zz.") == std::vector<int32_t>{104, 105, 106, 107, 108, 100, 109});
  // Special tokens written in the text are those tokens, exactly as written.
  CHECK(tok.encode("the [MASK], [CLS]the[SEP] [mask]") ==
        std::vector<int32_t>{104, 103, 108, 101, 104, 102, 100, 100, 100});  // "[mask]" is text: [ mask ]
  CHECK(tok.encode("[MASK][UNK][PAD") == std::vector<int32_t>{103, 100, 100, 100});
  CHECK(tok.decode({101, 104, 103, 102, 0}) == "the [MASK]");
  CHECK(tok.decode({101, 105, 106, 107, 102}, false) == "[CLS] beginning [SEP]");
  CHECK(tok.decode({106, 104}) == "##gin the");  // a "##" piece that comes first keeps it, as transformers
  CHECK(tok.decode({104, 108, 104, 109}) == "the , the .");
  CHECK(tok.decode({104, 108, 104, 109}, true, /*clean_up_spaces=*/true) == "the, the.");
  TempDir dir;
  tok.save(dir.file("hf_vocab.txt"));
  CHECK(WordPiece::load(dir.file("hf_vocab.txt")).specials().mask == 103);
}
