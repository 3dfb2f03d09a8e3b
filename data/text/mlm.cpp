// Sequence building and the MLM collator. One Philox block per (example, position): word 0 is the
// selection priority, words 1 and 3 the mask/random/keep draw, word 2 the random token.
#include "mixgrad/data/text/mlm.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "mixgrad/core/error.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/data/text/wordpiece.h"

namespace mg::data {

std::vector<int32_t> make_bert_sequence(const std::vector<int32_t>& tokens, int64_t seq_len,
                                        const SpecialTokenIds& specials) {
  MG_CHECK(seq_len >= 2, Error, "make_bert_sequence: seq_len must be >= 2 ([CLS] and [SEP]), got ", seq_len);
  std::vector<int32_t> seq(std::size_t(seq_len), specials.pad);
  const std::size_t n = std::min(tokens.size(), std::size_t(seq_len - 2));
  seq[0] = specials.cls;
  std::copy(tokens.begin(), tokens.begin() + std::ptrdiff_t(n), seq.begin() + 1);
  seq[n + 1] = specials.sep;
  return seq;
}

BertPair make_bert_pair(const std::vector<int32_t>& a, const std::vector<int32_t>& b, int64_t seq_len,
                        const SpecialTokenIds& specials) {
  MG_CHECK(seq_len >= 3, Error, "make_bert_pair: seq_len must be >= 3 ([CLS] and two [SEP]), got ", seq_len);
  // The tokenizers library's LongestFirst: with n1 <= n2 the shorter keeps its length when the
  // longer can fill the rest, else both get half the room (the longer one the odd token).
  const int64_t room = seq_len - 3;
  int64_t n1 = int64_t(a.size()), n2 = int64_t(b.size());
  if (n1 + n2 > room) {
    const bool swap = n1 > n2;
    if (swap) std::swap(n1, n2);
    n2 = n1 > room ? n1 : std::max(n1, room - n1);
    if (n1 + n2 > room) {
      n1 = room / 2;
      n2 = n1 + room % 2;
    }
    if (swap) std::swap(n1, n2);
    n1 = std::min<int64_t>(n1, int64_t(a.size()));
    n2 = std::min<int64_t>(n2, int64_t(b.size()));
  }
  BertPair p;
  p.ids.assign(std::size_t(seq_len), specials.pad);
  p.token_types.assign(std::size_t(seq_len), 0);
  std::size_t at = 0;
  p.ids[at++] = specials.cls;
  for (int64_t i = 0; i < n1; ++i) p.ids[at++] = a[std::size_t(i)];
  p.ids[at++] = specials.sep;
  for (int64_t i = 0; i < n2; ++i) {
    p.token_types[at] = 1;
    p.ids[at++] = b[std::size_t(i)];
  }
  p.token_types[at] = 1;
  p.ids[at++] = specials.sep;
  return p;
}

Batch make_pair_batch(const std::vector<BertPair>& pairs, int32_t pad_id) {
  MG_CHECK(!pairs.empty(), Error, "make_pair_batch: no pairs");
  std::vector<std::vector<int32_t>> ids;
  std::vector<int64_t> types;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    MG_CHECK(pairs[i].token_types.size() == pairs[i].ids.size(), ShapeError, "make_pair_batch: pair ", i, " has ",
             pairs[i].ids.size(), " ids but ", pairs[i].token_types.size(), " token types");
    ids.push_back(pairs[i].ids);
    types.insert(types.end(), pairs[i].token_types.begin(), pairs[i].token_types.end());
  }
  Batch batch = make_sequence_batch(ids, pad_id);  // checks the lengths
  batch.add("token_type_ids", from_vector(types, {int64_t(pairs.size()), int64_t(pairs[0].ids.size())}));  // [B, L]
  return batch;
}

Batch make_sequence_batch(const std::vector<std::vector<int32_t>>& sequences, int32_t pad_id) {
  MG_CHECK(!sequences.empty(), Error, "make_sequence_batch: no sequences");
  const std::size_t B = sequences.size(), L = sequences[0].size();
  std::vector<int64_t> ids(B * L), mask(B * L);
  for (std::size_t b = 0; b < B; ++b) {
    MG_CHECK(sequences[b].size() == L, ShapeError, "make_sequence_batch: sequence ", b, " has length ",
             sequences[b].size(), " but sequence 0 has ", L);
    // The padding is the run of [PAD] after the last other token (sequences are padded on the
    // right): a [PAD] written in the text itself is content and is attended to, as in
    // transformers' tokenizer("a [PAD] b", padding="max_length").
    std::size_t content = L;
    while (content > 0 && sequences[b][content - 1] == pad_id) --content;
    for (std::size_t l = 0; l < L; ++l) {
      ids[b * L + l] = sequences[b][l];
      mask[b * L + l] = l < content;
    }
  }
  Batch batch;
  batch.add("input_ids", from_vector(ids, {int64_t(B), int64_t(L)}));        // [B, L]
  batch.add("attention_mask", from_vector(mask, {int64_t(B), int64_t(L)}));  // [B, L]
  return batch;
}

MlmCollator::MlmCollator(const WordPiece& tokenizer, Options options)
    : MlmCollator(tokenizer.vocab_size(), tokenizer.specials(), options) {}

MlmCollator::MlmCollator(int64_t vocab_size, const SpecialTokenIds& specials, Options options)
    : vocab_size_(vocab_size), specials_(specials), options_(options) {
  const int32_t ids[] = {specials.pad, specials.unk, specials.cls, specials.sep, specials.mask};
  std::copy(std::begin(ids), std::end(ids), sorted_specials_);
  std::sort(std::begin(sorted_specials_), std::end(sorted_specials_));
  for (int k = 0; k < 5; ++k) {
    MG_CHECK(sorted_specials_[k] >= 0 && sorted_specials_[k] < vocab_size, Error, "MlmCollator: special token id ",
             sorted_specials_[k], " is outside the vocabulary of ", vocab_size);
    MG_CHECK(k == 0 || sorted_specials_[k] != sorted_specials_[k - 1], Error,
             "MlmCollator: two special tokens share the id ", sorted_specials_[k]);
  }
  MG_CHECK(vocab_size > 5, Error, "MlmCollator: vocab_size must exceed the 5 special tokens, got ", vocab_size);
  // Token ids are int32 (the random replacement draws one below vocab_size - 5).
  MG_CHECK(vocab_size <= std::numeric_limits<int32_t>::max(), Error, "MlmCollator: vocab_size ", vocab_size,
           " exceeds the int32 token ids (at most ", std::numeric_limits<int32_t>::max(), ")");
  MG_CHECK(options.select_prob > 0 && options.select_prob <= 1, Error,
           "MlmCollator: select_prob must be in (0, 1], got ", options.select_prob);
  MG_CHECK(options.mask_prob >= 0 && options.random_prob >= 0 && options.mask_prob + options.random_prob <= 1,
           Error, "MlmCollator: mask_prob and random_prob must be >= 0 with a sum <= 1, got ", options.mask_prob,
           " and ", options.random_prob);
}

void MlmCollator::mask_row(int32_t* ids, int64_t* target, int64_t length, int64_t example_id,
                           const BatchContext& ctx, std::size_t position) const {
  // Candidates with their priority; the lowest priorities are selected, ties by position.
  thread_local std::vector<std::pair<uint32_t, int64_t>> cand;
  cand.clear();
  for (int64_t p = 0; p < length; ++p) {
    target[p] = kIgnoreIndex;
    MG_CHECK(ids[p] >= 0 && ids[p] < vocab_size_, IndexError, "MlmCollator: token id ", ids[p], " at position ", p,
             " of example ", example_id, " is outside the vocabulary of ", vocab_size_);
    if (!specials_.contains(ids[p])) {
      cand.emplace_back(example_words(ctx, position, example_id, kMaskStream, uint32_t(p)).v[0], p);
    }
  }
  if (cand.empty()) return;
  const std::size_t n_select = std::min(
      cand.size(), std::max<std::size_t>(1, std::size_t(std::llround(options_.select_prob * double(cand.size())))));
  std::partial_sort(cand.begin(), cand.begin() + std::ptrdiff_t(n_select), cand.end());
  const uint32_t n_regular = uint32_t(vocab_size_ - 5);
  for (std::size_t k = 0; k < n_select; ++k) {
    const int64_t p = cand[k].second;
    const Philox4 r = example_words(ctx, position, example_id, kMaskStream, uint32_t(p));
    target[p] = ids[p];
    const double u = philox_uniform_double(r.v[1], r.v[3]);
    if (u < options_.mask_prob) {
      ids[p] = specials_.mask;
    } else if (u < options_.mask_prob + options_.random_prob) {
      // The k-th non-special id (k + 5 when the specials are ids 0..4, as in a trained vocabulary).
      int32_t id = int32_t(random_below(r.v[2], n_regular));
      for (const int32_t s : sorted_specials_) id += id >= s;
      ids[p] = id;
    }
  }
}

Batch MlmCollator::collate(const std::vector<std::vector<int32_t>>& sequences,
                           const std::vector<int64_t>& example_ids, const BatchContext& ctx) const {
  MG_CHECK(sequences.size() == example_ids.size(), Error, "MlmCollator: ", sequences.size(), " sequences but ",
           example_ids.size(), " example ids");
  Batch batch = make_sequence_batch(sequences, specials_.pad);
  const int64_t B = int64_t(sequences.size()), L = int64_t(sequences[0].size());
  std::vector<int64_t> target(std::size_t(B * L));
  std::vector<int32_t> row(static_cast<std::size_t>(L));
  int64_t* ids = batch.at("input_ids").data<int64_t>();  // [B, L]
  for (int64_t b = 0; b < B; ++b) {
    std::copy(sequences[std::size_t(b)].begin(), sequences[std::size_t(b)].end(), row.begin());
    mask_row(row.data(), target.data() + b * L, L, example_ids[std::size_t(b)], ctx, std::size_t(b));
    std::copy(row.begin(), row.end(), ids + b * L);
  }
  batch.add("target", from_vector(target, {B, L}));  // [B, L]
  return batch;
}

}  // namespace mg::data
