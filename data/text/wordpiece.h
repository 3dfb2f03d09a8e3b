// WordPiece tokenizer (BERT): basic pre-tokenisation, training on a corpus, greedy
// longest-match-first encoding, decoding, and BERT's vocab.txt format (one token per line, the
// id is the line number). The decision a reader must know: training is BPE-style pair merging
// with "##" continuation pieces (what Hugging Face's WordPieceTrainer does), most frequent pair
// first, so it is deterministic and fast; encoding is BERT's greedy longest match, which need not
// reproduce the merge segmentation but always covers a word made of known characters. Text is
// split as Hugging Face's BertTokenizer splits it (its normaliser and pre-tokeniser, code point for
// code point: data/text/bert_unicode.h), and a vocabulary may hold its special tokens at any ids,
// so Hugging Face's vocab.txt files load and encode to the ids transformers gives.
//
//   auto tok = mg::data::WordPiece::train(texts, {.vocab_size = 8192});
//   std::vector<int32_t> ids = tok.encode("In the beginning God created");
//   tok.decode(ids) == "in the beginning god created";   tok.save("vocab.txt");
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mixgrad/data/text/bert_unicode.h"

namespace mg::data {

// The ids of BERT's five special tokens in a vocabulary. The defaults are where train() puts them
// (the first five ids); a Hugging Face vocab.txt has them elsewhere ([PAD] 0, [UNK] 100, [CLS] 101,
// [SEP] 102, [MASK] 103), so code that builds sequences takes them from the tokenizer.
struct SpecialTokenIds {
  int32_t pad = 0, unk = 1, cls = 2, sep = 3, mask = 4;
  bool contains(int32_t id) const { return id == pad || id == unk || id == cls || id == sep || id == mask; }
};

struct WordPieceOptions {
  int64_t vocab_size = 8192;              // total, special tokens and alphabet included
  int64_t min_frequency = 2;              // a pair seen fewer times in the corpus is not merged
  bool lowercase = true;                  // BERT "uncased": lowercase, accents stripped (Unicode)
  int64_t max_input_chars_per_word = 100;  // longer words encode to [UNK], as in BERT
};

class WordPiece {
 public:
  using Options = WordPieceOptions;
  // "[PAD]" "[UNK]" "[CLS]" "[SEP]" "[MASK]", in the order of SpecialTokenIds' fields.
  static const std::vector<std::string>& special_tokens();

  // Trains on `texts`: the specials, then every character seen (in both word-initial and "##"
  // forms, so any word made of seen characters is encodable), then merged pieces in merge order
  // until vocab_size tokens or no pair occurs min_frequency times. Ties between equally frequent
  // pairs go to the pair of smaller ids (earlier tokens), so training is deterministic. Cost:
  // O(corpus) to count words, then per merge O(occurrences of the pair) with a lazy max-heap.
  static WordPiece train(const std::vector<std::string>& texts, Options options = {});
  // Reads a vocab.txt (one token per line, the id is the line number), ours or Hugging Face's; the
  // five special tokens must each be on some line.
  static WordPiece load(const std::string& path, Options options = {});

  // A tokenizer over an explicit vocabulary (validated: the five specials present, no duplicates,
  // no empty or whitespace-containing tokens).
  explicit WordPiece(std::vector<std::string> vocab, Options options = {});

  // Writes the vocabulary as vocab.txt.
  void save(const std::string& path) const;

  // BERT's basic tokenisation, as Hugging Face's BertNormalizer + BertPreTokenizer: drops control
  // and format characters, splits on whitespace, makes each punctuation character and CJK
  // ideograph a word of its own and, when options.lowercase, lowercases and strips accents.
  std::vector<std::string> pre_tokenize(std::string_view text) const;
  // The pre-tokens joined by single spaces: what decode(encode(text)) returns when every word
  // is encodable and no special token is written in the text (normalize splits "[MASK]" into
  // "[ mask ]"; decode drops a written [CLS], [SEP] or [PAD]).
  std::string normalize(std::string_view text) const;
  // Token ids of `text` (no [CLS]/[SEP] added); a word that cannot be covered becomes one [UNK].
  // A special token written in the text ("a [MASK] b") is that token, as in transformers.
  std::vector<int32_t> encode(std::string_view text) const;
  // The pieces of `text` as strings ("begin", "##ning").
  std::vector<std::string> tokenize(std::string_view text) const;
  // Joins pieces with spaces, gluing "##" pieces to the previous one (a "##" piece that comes
  // first keeps its "##", as in transformers). skip_special drops [PAD], [CLS] and [SEP]; [UNK] and
  // [MASK] always print as themselves. The text is the normalised one (lowercase, accents stripped
  // when options.lowercase): decode(encode(t)) == normalize(t) for text with no special token
  // written in it (see normalize). clean_up_spaces removes the space
  // before "." "?" "!" "," (and joins "'s", "n't", ... pieces), as transformers' WordPiece decoder
  // does: decode(ids, false, true) equals BertTokenizer.decode(ids).
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = true, bool clean_up_spaces = false) const;

  int64_t vocab_size() const { return int64_t(vocab_.size()); }
  // Where this vocabulary holds its special tokens.
  const SpecialTokenIds& specials() const { return specials_; }
  const std::vector<std::string>& vocab() const { return vocab_; }
  const std::string& id_to_token(int32_t id) const;
  // -1 when `token` is not in the vocabulary.
  int32_t token_to_id(std::string_view token) const;
  const Options& options() const { return options_; }

 private:
  // Appends the ids of one pre-token to `out`.
  void encode_word(std::string_view word, std::vector<int32_t>& out, std::string& scratch) const;
  // Appends the ids of text without special tokens written in it.
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;

  Options options_;
  SpecialTokenIds specials_;
  std::vector<std::string> vocab_;
  std::unordered_map<std::string, int32_t> ids_;
  std::size_t max_token_bytes_ = 0;  // longest token without its "##" (bounds the match loop)
};

// Calls fn(word) for each pre-token of `text` (the allocation-free core of pre_tokenize);
// `buffer` is scratch space reused between calls.
template <typename Fn>
void for_each_pre_token(std::string_view text, bool lowercase, std::string& buffer, Fn&& fn);

namespace detail {
// Decodes the UTF-8 sequence at text[i] (an invalid byte is taken as a one-byte character of
// its own, the code point 0xDC00 + byte, as Python's surrogateescape) and returns its length.
std::size_t wp_decode_utf8(std::string_view text, std::size_t i, uint32_t* cp);
}  // namespace detail

template <typename Fn>
void for_each_pre_token(std::string_view text, bool lowercase, std::string& buffer, Fn&& fn) {
  using detail::BertCharClass;
  buffer.clear();
  // Uncased: the kept non-starters of the current run, waiting for its end (a starter, a mark of
  // class 0, a word boundary) to be written in canonical order (stable by combining class).
  std::vector<std::pair<int, uint32_t>> run;
  const auto settle = [&] {
    if (run.empty()) return;
    std::stable_sort(run.begin(), run.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [ccc, cp] : run) detail::append_utf8(cp, buffer);
    run.clear();
  };
  // An invalid byte is a character of its own (wp_decode_utf8), written to the buffer as that
  // byte. Two such bytes that were never adjacent in the text meet there once a removed character
  // or a stripped mark between them is dropped, and a lone lead byte would then re-decode with the
  // continuation bytes after it into a valid character ("\xc3", U+200B, "\xa9" into "é"). So a
  // continuation byte that would follow an invalid byte across a dropped character starts a new
  // word instead.
  bool after_invalid = false;  // the buffer ends with an invalid byte
  bool dropped = false;        // a character was dropped since the buffer's last one
  const auto flush = [&] {
    settle();
    if (!buffer.empty()) fn(std::string_view(buffer));
    buffer.clear();
    after_invalid = dropped = false;
  };
  std::size_t i = 0;
  while (i < text.size()) {
    uint32_t cp = 0;
    const std::size_t n = detail::wp_decode_utf8(text, i, &cp);
    const std::string_view ch = text.substr(i, n);
    i += n;
    const bool invalid = cp >= 0xDC80 && cp <= 0xDCFF;
    if (invalid && cp <= 0xDCBF && after_invalid && dropped) flush();
    const BertCharClass cls = detail::bert_char_class(cp);
    if (cls == BertCharClass::kRemoved || (lowercase && (cls == BertCharClass::kMark ||
                                                         cls == BertCharClass::kMarkNonStarter))) {
      dropped = true;
    } else {
      after_invalid = invalid;
      dropped = false;
    }
    if (cls == BertCharClass::kWhitespace) {
      flush();
    } else if (cls == BertCharClass::kRemoved) {
      continue;  // removed before NFD: not even a run boundary
    } else if (!lowercase) {
      if (cls == BertCharClass::kIsolated) flush();
      buffer.append(ch);
      if (cls == BertCharClass::kIsolated) flush();
    } else if (cls == BertCharClass::kMark || cls == BertCharClass::kMarkNonStarter) {
      if (cls == BertCharClass::kMark) settle();  // stripped, but its class 0 ended the run
    } else if (cp < 128 && cls == BertCharClass::kOther) {  // the common case
      settle();
      buffer.push_back(cp >= 'A' && cp <= 'Z' ? char(cp - 'A' + 'a') : char(cp));
    } else {
      uint32_t folded[3];
      const int count = detail::bert_uncased(cp, folded);
      if (cls == BertCharClass::kIsolated) {
        flush();
        for (int k = 0; k < count; ++k) detail::append_utf8(folded[k], buffer);
        flush();
        continue;
      }
      for (int k = 0; k < count; ++k) {
        const bool isolated = detail::bert_char_class(folded[k]) == BertCharClass::kIsolated;
        if (isolated) flush();
        if (const int ccc = detail::bert_combining_class(folded[k]); ccc != 0) {
          run.emplace_back(ccc, folded[k]);
          continue;
        }
        settle();
        detail::append_utf8(folded[k], buffer);
        if (isolated) flush();
      }
    }
  }
  flush();
}

}  // namespace mg::data
