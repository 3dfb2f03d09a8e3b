// WordPiece training, encoding and vocab.txt I/O. Training keeps each distinct word once with its
// corpus count as a list of symbol ids, the count of every adjacent symbol pair (weighted by word
// counts), the words each pair occurs in, and a max-heap of (count, pair) that is refreshed
// lazily: an entry whose count is stale is re-pushed with the current count when popped.
#include "mixgrad/data/text/wordpiece.h"

#include <algorithm>
#include <limits>
#include <fstream>
#include <map>
#include <queue>
#include <set>
#include <sstream>

#include "mixgrad/core/error.h"
#include "mixgrad/core/regular_file.h"

namespace mg::data {

namespace detail {

std::size_t wp_decode_utf8(std::string_view s, std::size_t i, uint32_t* cp) {
  const auto b = [&](std::size_t k) { return uint32_t(static_cast<unsigned char>(s[k])); };
  const uint32_t c0 = b(i);
  std::size_t n = 0;
  uint32_t v = 0;
  if (c0 < 0x80) {
    *cp = c0;
    return 1;
  } else if ((c0 & 0xE0) == 0xC0) {
    n = 2;
    v = c0 & 0x1F;
  } else if ((c0 & 0xF0) == 0xE0) {
    n = 3;
    v = c0 & 0x0F;
  } else if ((c0 & 0xF8) == 0xF0) {
    n = 4;
    v = c0 & 0x07;
  }
  bool ok = n != 0 && i + n <= s.size();
  for (std::size_t k = 1; ok && k < n; ++k) {
    ok = (b(i + k) & 0xC0) == 0x80;
    v = v << 6 | (b(i + k) & 0x3F);
  }
  // Overlong forms, surrogates and values beyond U+10FFFF are invalid too.
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  ok = ok && v >= kMin[n] && v <= 0x10FFFF && !(v >= 0xD800 && v <= 0xDFFF);
  if (!ok) {
    *cp = 0xDC00 + c0;  // an invalid byte is a character of its own (Python's surrogateescape)
    return 1;
  }
  *cp = v;
  return n;
}

}  // namespace detail

namespace {

constexpr std::string_view kContinuation = "##";

bool is_continuation(std::string_view t) { return t.size() > 2 && t.substr(0, 2) == kContinuation; }

// Byte offsets of the characters of `word` plus its end; false (out unspecified) when the word
// has more than max_chars characters, found without listing them all (a 200 MB line without
// spaces would otherwise fill 1.6 GB of offsets that a thread_local vector keeps).
bool char_boundaries(std::string_view word, std::vector<std::size_t>& out,
                     std::size_t max_chars = std::numeric_limits<std::size_t>::max()) {
  out.clear();
  std::size_t i = 0;
  while (i < word.size()) {
    if (out.size() == max_chars) return false;
    out.push_back(i);
    uint32_t cp;
    i += detail::wp_decode_utf8(word, i, &cp);
  }
  out.push_back(word.size());
  return true;
}

struct HeapEntry {
  int64_t count;
  int32_t a, b;
  // Max-heap on count; among equal counts the pair of smaller ids comes first.
  bool operator<(const HeapEntry& o) const {
    if (count != o.count) return count < o.count;
    if (a != o.a) return a > o.a;
    return b > o.b;
  }
};

uint64_t pair_key(int32_t a, int32_t b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); }

}  // namespace

const std::vector<std::string>& WordPiece::special_tokens() {
  static const std::vector<std::string> s = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  return s;
}

WordPiece::WordPiece(std::vector<std::string> vocab, Options options)
    : options_(options), vocab_(std::move(vocab)) {
  MG_CHECK(options_.max_input_chars_per_word >= 1, Error,
           "WordPiece: max_input_chars_per_word must be positive, got ", options_.max_input_chars_per_word);
  MG_CHECK(vocab_.size() <= std::size_t(INT32_MAX), Error, "WordPiece: vocabulary too large");
  ids_.reserve(vocab_.size());
  for (std::size_t i = 0; i < vocab_.size(); ++i) {
    const std::string& t = vocab_[i];
    MG_CHECK(!t.empty(), Error, "WordPiece: token ", i, " is empty");
    MG_CHECK(t.find_first_of(" \t\n\r") == std::string::npos, Error, "WordPiece: token ", i, " '", t,
             "' contains whitespace");
    const auto [it, fresh] = ids_.emplace(t, int32_t(i));
    MG_CHECK(fresh, Error, "WordPiece: token '", t, "' appears twice (ids ", it->second, " and ", i, ")");
  }
  const auto& names = special_tokens();
  int32_t* const slots[] = {&specials_.pad, &specials_.unk, &specials_.cls, &specials_.sep, &specials_.mask};
  for (std::size_t k = 0; k < names.size(); ++k) {
    const auto it = ids_.find(names[k]);
    MG_CHECK(it != ids_.end(), Error, "WordPiece: the vocabulary (", vocab_.size(), " tokens) has no ", names[k],
             " token\n  hint: BERT vocabularies hold [PAD] [UNK] [CLS] [SEP] [MASK], each on a line of its own");
    *slots[k] = it->second;
  }
  for (std::size_t i = 0; i < vocab_.size(); ++i) {
    if (specials_.contains(int32_t(i))) continue;
    const std::string& t = vocab_[i];
    max_token_bytes_ = std::max(max_token_bytes_, is_continuation(t) ? t.size() - 2 : t.size());
  }
}

const std::string& WordPiece::id_to_token(int32_t id) const {
  MG_CHECK(id >= 0 && id < int32_t(vocab_.size()), IndexError, "WordPiece: token id ", id,
           " is out of range for a vocabulary of ", vocab_.size());
  return vocab_[std::size_t(id)];
}

int32_t WordPiece::token_to_id(std::string_view token) const {
  const auto it = ids_.find(std::string(token));
  return it == ids_.end() ? -1 : it->second;
}

std::vector<std::string> WordPiece::pre_tokenize(std::string_view text) const {
  std::vector<std::string> words;
  std::string buf;
  for_each_pre_token(text, options_.lowercase, buf, [&](std::string_view w) { words.emplace_back(w); });
  return words;
}

std::string WordPiece::normalize(std::string_view text) const {
  std::string out, buf;
  for_each_pre_token(text, options_.lowercase, buf, [&](std::string_view w) {
    if (!out.empty()) out.push_back(' ');
    out.append(w);
  });
  return out;
}

void WordPiece::encode_word(std::string_view word, std::vector<int32_t>& out, std::string& key) const {
  // Greedy longest-match-first (BERT's WordpieceTokenizer): at each position take the longest
  // vocabulary piece ("##"-prefixed after the first); no match anywhere -> the word is [UNK].
  thread_local std::vector<std::size_t> bounds;
  if (!char_boundaries(word, bounds, std::size_t(options_.max_input_chars_per_word))) {
    out.push_back(specials_.unk);  // longer than max_input_chars_per_word
    return;
  }
  const std::size_t n_chars = bounds.size() - 1;
  const std::size_t first_piece = out.size();
  std::size_t start = 0;
  while (start < n_chars) {
    std::size_t end = n_chars;
    while (bounds[end] - bounds[start] > max_token_bytes_) --end;  // no token is longer
    int32_t found = -1;
    for (; end > start; --end) {
      key.clear();
      if (start > 0) key.append(kContinuation);
      key.append(word.substr(bounds[start], bounds[end] - bounds[start]));
      const auto it = ids_.find(key);
      if (it != ids_.end() && !specials_.contains(it->second)) {
        found = it->second;
        break;
      }
    }
    if (found < 0) {
      out.resize(first_piece);
      out.push_back(specials_.unk);
      return;
    }
    out.push_back(found);
    start = end;
  }
}

void WordPiece::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  std::string buf, key;
  for_each_pre_token(text, options_.lowercase, buf, [&](std::string_view w) { encode_word(w, out, key); });
}

std::vector<int32_t> WordPiece::encode(std::string_view text) const {
  // Special tokens written in the text are cut out first, exactly as written (transformers' added
  // tokens: not normalised, so "[mask]" is plain text).
  std::vector<int32_t> ids;
  const auto& names = special_tokens();
  const int32_t special_ids[] = {specials_.pad, specials_.unk, specials_.cls, specials_.sep, specials_.mask};
  std::size_t plain = 0, at = text.find('[');
  while (at != std::string_view::npos) {
    std::size_t matched = 0;
    for (std::size_t k = 0; k < names.size() && matched == 0; ++k) {
      if (text.substr(at, names[k].size()) == names[k]) {
        encode_plain(text.substr(plain, at - plain), ids);
        ids.push_back(special_ids[k]);
        matched = names[k].size();
      }
    }
    if (matched != 0) plain = at + matched;
    at = text.find('[', at + std::max<std::size_t>(matched, 1));
  }
  encode_plain(text.substr(plain), ids);
  return ids;
}

std::vector<std::string> WordPiece::tokenize(std::string_view text) const {
  std::vector<std::string> pieces;
  for (int32_t id : encode(text)) pieces.push_back(vocab_[std::size_t(id)]);
  return pieces;
}

namespace {
// transformers' (the tokenizers library's) WordPiece decoder cleanup, applied to each piece as it
// is appended (with its leading space).
std::string cleaned(std::string s) {
  static const std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},   {" ?", "?"},     {" !", "!"},         {" ,", ","},     {" ' ", "'"},    {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) {
    for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
      s.replace(at, from.size(), to);
    }
  }
  return s;
}
}  // namespace

std::string WordPiece::decode(const std::vector<int32_t>& ids, bool skip_special, bool clean_up_spaces) const {
  std::string out, piece;
  bool first = true;
  for (int32_t id : ids) {
    const std::string& t = id_to_token(id);
    if (skip_special && (id == specials_.pad || id == specials_.cls || id == specials_.sep)) continue;
    // Any "##"-prefixed token glues on, "##" itself too (transformers' " ##" removal).
    if (!first && !specials_.contains(id) && t.starts_with(kContinuation)) {
      piece.assign(t, 2);
    } else {
      piece.assign(first ? "" : " ");
      piece.append(t);
    }
    out.append(clean_up_spaces ? cleaned(piece) : piece);
    first = false;
  }
  return out;
}

void WordPiece::save(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  MG_CHECK(f.good(), Error, "WordPiece::save: cannot open '", path, "' for writing");
  for (const std::string& t : vocab_) f << t << '\n';
  f.flush();
  MG_CHECK(f.good(), Error, "WordPiece::save: write to '", path, "' failed");
}

WordPiece WordPiece::load(const std::string& path, Options options) {
  refuse_non_regular_file("WordPiece::load", path);  // before the open: a FIFO would block it
  std::ifstream f(path, std::ios::binary);
  MG_CHECK(f.good(), Error, "WordPiece::load: cannot open '", path, "'");
  std::vector<std::string> vocab;
  std::string line;
  while (std::getline(f, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    MG_CHECK(!line.empty(), Error, "WordPiece::load: '", path, "' line ", vocab.size() + 1,
             " is empty (one token per line expected)");
    vocab.push_back(line);
  }
  // An I/O error ends getline as the end of the file does: without this a read that failed
  // half-way would be a silently shorter vocabulary.
  MG_CHECK(!f.bad(), Error, "WordPiece::load: reading '", path, "' failed after ", vocab.size(), " tokens");
  try {
    options.vocab_size = int64_t(vocab.size());
    return WordPiece(std::move(vocab), options);
  } catch (const Error& e) {
    MG_THROW(Error, "WordPiece::load: '", path, "': ", e.what());
  }
}

WordPiece WordPiece::train(const std::vector<std::string>& texts, Options options) {
  MG_CHECK(options.min_frequency >= 1, Error, "WordPiece::train: min_frequency must be >= 1, got ",
           options.min_frequency);
  // 1. Distinct words with their counts, in byte order (the order fixes ids, hence tie-breaks).
  std::unordered_map<std::string, int64_t> counts;
  std::string buf;
  for (const std::string& text : texts) {
    for_each_pre_token(text, options.lowercase, buf, [&](std::string_view w) { ++counts[std::string(w)]; });
  }
  std::vector<std::pair<std::string, int64_t>> words(counts.begin(), counts.end());
  counts.clear();
  std::sort(words.begin(), words.end());

  // 2. The alphabet: every character in its word-initial and "##" forms, in byte order.
  std::set<std::string> chars;
  std::vector<std::size_t> bounds;
  for (const auto& [w, c] : words) {
    char_boundaries(w, bounds);
    for (std::size_t k = 0; k + 1 < bounds.size(); ++k) chars.insert(w.substr(bounds[k], bounds[k + 1] - bounds[k]));
  }
  std::vector<std::string> vocab = special_tokens();
  std::unordered_map<std::string, int32_t> ids;
  auto add_token = [&](const std::string& t) {
    const auto [it, fresh] = ids.emplace(t, int32_t(vocab.size()));
    if (fresh) vocab.push_back(t);
    return it->second;
  };
  for (const std::string& c : chars) add_token(c);
  for (const std::string& c : chars) add_token(std::string(kContinuation) + c);
  MG_CHECK(int64_t(vocab.size()) <= options.vocab_size, Error, "WordPiece::train: vocab_size ", options.vocab_size,
           " is smaller than the ", special_tokens().size(), " special tokens plus the alphabet (", chars.size(),
           " characters, twice: word-initial and ##), ", vocab.size(), " in all");

  // 3. Words as symbol lists; pair counts and where each pair occurs.
  std::vector<std::vector<int32_t>> syms(words.size());
  std::vector<int64_t> freq(words.size());
  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<int32_t>> pair_words;
  for (std::size_t wi = 0; wi < words.size(); ++wi) {
    const std::string& w = words[wi].first;
    freq[wi] = words[wi].second;
    char_boundaries(w, bounds);
    for (std::size_t k = 0; k + 1 < bounds.size(); ++k) {
      const std::string ch = w.substr(bounds[k], bounds[k + 1] - bounds[k]);
      syms[wi].push_back(ids.at(k == 0 ? ch : std::string(kContinuation) + ch));
    }
    for (std::size_t k = 0; k + 1 < syms[wi].size(); ++k) {
      const uint64_t key = pair_key(syms[wi][k], syms[wi][k + 1]);
      pair_count[key] += freq[wi];
      auto& where = pair_words[key];
      if (where.empty() || where.back() != int32_t(wi)) where.push_back(int32_t(wi));
    }
  }
  std::priority_queue<HeapEntry> heap;
  for (const auto& [key, c] : pair_count) heap.push({c, int32_t(key >> 32), int32_t(uint32_t(key))});

  // 4. Merge the most frequent pair until the vocabulary is full.
  std::vector<int64_t> visited(words.size(), -1);
  std::vector<uint64_t> touched;
  int64_t merge = 0;
  while (int64_t(vocab.size()) < options.vocab_size && !heap.empty()) {
    const HeapEntry top = heap.top();
    heap.pop();
    const uint64_t key = pair_key(top.a, top.b);
    const auto pc = pair_count.find(key);
    const int64_t current = pc == pair_count.end() ? 0 : pc->second;
    if (current != top.count) {  // stale: re-queue a decreased count (an increase was pushed already)
      if (current > 0 && current < top.count) heap.push({current, top.a, top.b});
      continue;
    }
    if (current < options.min_frequency) break;
    const std::string& ta = vocab[std::size_t(top.a)];
    const std::string& tb = vocab[std::size_t(top.b)];
    const int32_t c = add_token(ta + tb.substr(is_continuation(tb) ? 2 : 0));
    touched.clear();
    auto bump = [&](int32_t x, int32_t y, int64_t delta, int32_t wi) {
      const uint64_t k = pair_key(x, y);
      int64_t& v = pair_count[k];
      v += delta;
      if (delta > 0) {
        touched.push_back(k);
        auto& where = pair_words[k];
        if (where.empty() || where.back() != wi) where.push_back(wi);
      }
    };
    const std::vector<int32_t> where = std::move(pair_words[key]);
    pair_words.erase(key);
    for (const int32_t wi : where) {
      if (visited[std::size_t(wi)] == merge) continue;  // listed twice
      visited[std::size_t(wi)] = merge;
      std::vector<int32_t>& s = syms[std::size_t(wi)];
      const int64_t f = freq[std::size_t(wi)];
      for (std::size_t i = 0; i + 1 < s.size();) {
        if (s[i] != top.a || s[i + 1] != top.b) {
          ++i;
          continue;
        }
        if (i > 0) {
          bump(s[i - 1], top.a, -f, wi);
          bump(s[i - 1], c, f, wi);
        }
        bump(top.a, top.b, -f, wi);
        if (i + 2 < s.size()) {
          bump(top.b, s[i + 2], -f, wi);
          bump(c, s[i + 2], f, wi);
        }
        s[i] = c;
        s.erase(s.begin() + std::ptrdiff_t(i) + 1);
        ++i;
      }
    }
    pair_count.erase(key);
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (const uint64_t k : touched) {
      const int64_t v = pair_count[k];
      if (v > 0) heap.push({v, int32_t(k >> 32), int32_t(uint32_t(k))});
    }
    ++merge;
  }
  return WordPiece(std::move(vocab), options);
}

}  // namespace mg::data
