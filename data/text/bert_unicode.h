// What BERT's text normalisation does with one Unicode code point, as Hugging Face's tokenizers
// library does it (BertNormalizer + BertPreTokenizer, the tokenizer behind transformers'
// BertTokenizer): the tables in bert_unicode_tables.cpp are measured from that library, code point
// by code point, by tools/reference/gen_bert_unicode.py, which also checks this rule against it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace mg::data::detail {

enum class BertCharClass : uint8_t {
  kOther,       // part of a word
  kWhitespace,  // separates words
  kRemoved,     // dropped (control and format characters, U+FFFD)
  kIsolated,    // a word of its own (punctuation, CJK ideographs)
  kMark,        // a combining mark: part of a word when cased, dropped when uncased (accent stripping)
  kMarkNonStarter,  // the same with a nonzero canonical combining class: dropped uncased without
                    // ending the run of non-starters that NFD's canonical reordering sorts
};

// The class of `cp`. Code points past U+10FFFF and the surrogates (which the UTF-8 decoder uses
// for invalid bytes) are kOther.
BertCharClass bert_char_class(uint32_t cp);

// The uncased form of a kOther or kIsolated code point, written to out as 1 to 3 code points (the
// count is returned): lowercase, then NFD with the combining marks removed ("É" -> "e", a Hangul
// syllable -> its jamo), per code point as the tokenizers library does (no final-sigma rule). A
// folded code point may itself be kIsolated (U+1FEF GREEK VARIA folds to the grave accent).
int bert_uncased(uint32_t cp, uint32_t out[3]);

// The canonical combining class NFD sorts by, for a code point the uncased form keeps (kOther or a
// folded code point); 0 for a starter, which ends a run. Uncased, each run of kept non-starters is
// stably sorted by it (marks are dropped after NFD, so only the kept ones' order shows): as the
// library does, whose Unicode tables are older for marks than for normalization (Arabic U+08D4..
// U+08E1 are kept, with class 230).
int bert_combining_class(uint32_t cp);

// Appends `cp` to `out` as UTF-8 (a surrogate from an invalid byte as that byte).
void append_utf8(uint32_t cp, std::string& out);

// The generated tables (sorted by code point).
struct BertClassRange {
  uint32_t first;  // the range runs to the next entry's first - 1
  BertCharClass cls;
};
struct BertFold1 {
  uint32_t from, to;
};
struct BertFoldN {
  uint32_t from;
  uint32_t to[3];  // 0-terminated when shorter
};
struct BertCombiningClass {
  uint32_t cp;
  uint8_t ccc;
};
extern const BertClassRange kBertClassRanges[];
extern const std::size_t kBertClassRangeCount;
extern const BertFold1 kBertFold1[];
extern const std::size_t kBertFold1Count;
extern const BertFoldN kBertFoldN[];
extern const std::size_t kBertFoldNCount;
extern const BertCombiningClass kBertCombiningClasses[];
extern const std::size_t kBertCombiningClassCount;

}  // namespace mg::data::detail
