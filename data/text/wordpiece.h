// WordPiece tokenizer (BERT): basic pre-tokenisation, training on a corpus, greedy
// longest-match-first encoding, decoding, and BERT's vocab.txt format (one token per line, the
// id is the line number). The decision a reader must know: training is BPE-style pair merging
// with "##" continuation pieces (what Hugging Face's WordPieceTrainer does), most frequent pair
// first, so it is deterministic and fast; encoding is BERT's greedy longest match, which need not
// reproduce the merge segmentation but always covers a word made of known characters.
//
//   auto tok = mg::data::WordPiece::train(texts, {.vocab_size = 8192});
//   std::vector<int32_t> ids = tok.encode("In the beginning God created");
//   tok.decode(ids) == "in the beginning god created";   tok.save("vocab.txt");
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mg::data {

struct WordPieceOptions {
  int64_t vocab_size = 8192;              // total, special tokens and alphabet included
  int64_t min_frequency = 2;              // a pair seen fewer times in the corpus is not merged
  bool lowercase = true;                  // ASCII A-Z -> a-z (BERT "uncased")
  int64_t max_input_chars_per_word = 100;  // longer words encode to [UNK], as in BERT
};

class WordPiece {
 public:
  using Options = WordPieceOptions;
  // The special tokens occupy the first five ids of every vocabulary.
  static constexpr int32_t kPad = 0, kUnk = 1, kCls = 2, kSep = 3, kMask = 4;
  static constexpr int32_t kNumSpecial = 5;
  static const std::vector<std::string>& special_tokens();  // "[PAD]" "[UNK]" "[CLS]" "[SEP]" "[MASK]"

  // Trains on `texts`: the specials, then every character seen (in both word-initial and "##"
  // forms, so any word made of seen characters is encodable), then merged pieces in merge order
  // until vocab_size tokens or no pair occurs min_frequency times. Ties between equally frequent
  // pairs go to the pair of smaller ids (earlier tokens), so training is deterministic. Cost:
  // O(corpus) to count words, then per merge O(occurrences of the pair) with a lazy max-heap.
  static WordPiece train(const std::vector<std::string>& texts, Options options = {});
  // Reads a vocab.txt (one token per line); the first five lines must be the special tokens.
  static WordPiece load(const std::string& path, Options options = {});

  // A tokenizer over an explicit vocabulary (validated: specials first, no duplicates, no empty
  // or whitespace-containing tokens).
  explicit WordPiece(std::vector<std::string> vocab, Options options = {});

  // Writes the vocabulary as vocab.txt.
  void save(const std::string& path) const;

  // BERT's BasicTokenizer: drops control characters, splits on whitespace, makes each
  // punctuation character a word of its own, lowercases ASCII when options.lowercase.
  std::vector<std::string> pre_tokenize(std::string_view text) const;
  // The pre-tokens joined by single spaces: what decode(encode(text)) returns when every word
  // is encodable.
  std::string normalize(std::string_view text) const;
  // Token ids of `text` (no [CLS]/[SEP]); a word that cannot be covered becomes one [UNK].
  std::vector<int32_t> encode(std::string_view text) const;
  // The pieces of `text` as strings ("begin", "##ning").
  std::vector<std::string> tokenize(std::string_view text) const;
  // Joins pieces with spaces, gluing "##" pieces to the previous one. skip_special drops [PAD],
  // [CLS] and [SEP]; [UNK] and [MASK] always print as themselves.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = true) const;

  int64_t vocab_size() const { return int64_t(vocab_.size()); }
  const std::vector<std::string>& vocab() const { return vocab_; }
  const std::string& id_to_token(int32_t id) const;
  // -1 when `token` is not in the vocabulary.
  int32_t token_to_id(std::string_view token) const;
  const Options& options() const { return options_; }

 private:
  // Appends the ids of one pre-token to `out`.
  void encode_word(std::string_view word, std::vector<int32_t>& out, std::string& scratch) const;

  Options options_;
  std::vector<std::string> vocab_;
  std::unordered_map<std::string, int32_t> ids_;
  std::size_t max_token_bytes_ = 0;  // longest token without its "##" (bounds the match loop)
};

// Calls fn(word) for each pre-token of `text` (the allocation-free core of pre_tokenize);
// `buffer` is scratch space reused between calls.
template <typename Fn>
void for_each_pre_token(std::string_view text, bool lowercase, std::string& buffer, Fn&& fn);

namespace detail {
// Character classes of the pre-tokeniser on one Unicode code point.
bool wp_is_whitespace(uint32_t cp);
bool wp_is_control(uint32_t cp);
bool wp_is_punctuation(uint32_t cp);
// Decodes the UTF-8 sequence at text[i] (an invalid byte is taken as a one-byte character of
// its own value) and returns its length in bytes.
std::size_t wp_decode_utf8(std::string_view text, std::size_t i, uint32_t* cp);
}  // namespace detail

template <typename Fn>
void for_each_pre_token(std::string_view text, bool lowercase, std::string& buffer, Fn&& fn) {
  buffer.clear();
  std::size_t i = 0;
  while (i < text.size()) {
    uint32_t cp = 0;
    const std::size_t n = detail::wp_decode_utf8(text, i, &cp);
    const std::string_view ch = text.substr(i, n);
    i += n;
    if (detail::wp_is_whitespace(cp)) {
      if (!buffer.empty()) fn(std::string_view(buffer));
      buffer.clear();
    } else if (detail::wp_is_control(cp)) {
      continue;
    } else if (detail::wp_is_punctuation(cp)) {
      if (!buffer.empty()) fn(std::string_view(buffer));
      buffer.assign(ch);
      fn(std::string_view(buffer));
      buffer.clear();
    } else if (lowercase && cp >= 'A' && cp <= 'Z') {
      buffer.push_back(char(cp - 'A' + 'a'));
    } else {
      buffer.append(ch);
    }
  }
  if (!buffer.empty()) fn(std::string_view(buffer));
  buffer.clear();
}

}  // namespace mg::data
