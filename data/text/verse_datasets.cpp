// Verse datasets: tokenise once at construction, build fixed-length rows per batch.
#include "mixgrad/data/text/verse_datasets.h"

#include <algorithm>
#include <cstdio>

#include "mixgrad/core/error.h"
#include "mixgrad/core/factory.h"

namespace mg::data {
namespace {

void check_split_options(const char* who, int64_t seq_len, int64_t holdout_every) {
  MG_CHECK(seq_len >= 3, Error, who, ": seq_len must be >= 3 ([CLS], a token, [SEP]), got ", seq_len);
  MG_CHECK(holdout_every >= 2, Error, who, ": holdout_every must be >= 2, got ", holdout_every);
}

void check_index(const char* who, int64_t i, int64_t size) {
  MG_CHECK(i >= 0 && i < size, IndexError, who, ": example index ", i, " is out of range for ", size, " examples");
}

// The batch of no examples: input_ids and attention_mask [0, L], target [0, target_tail...].
Batch empty_batch(int64_t seq_len, Shape target_tail) {
  Batch batch;
  batch.add("input_ids", zeros({0, seq_len}, {.dtype = DType::I64}));
  batch.add("attention_mask", zeros({0, seq_len}, {.dtype = DType::I64}));
  target_tail.insert(target_tail.begin(), 0);
  batch.add("target", zeros(target_tail, {.dtype = DType::I64}));
  return batch;
}

}  // namespace

const char* split_name(Split s) {
  switch (s) {
    case Split::Train: return "Train";
    case Split::HeldOut: return "HeldOut";
    case Split::All: return "All";
  }
  return "?";
}

bool in_split(int64_t index, Split split, int64_t holdout_every) {
  MG_CHECK(holdout_every >= 2, Error, "in_split: holdout_every must be >= 2, got ", holdout_every);
  MG_CHECK(index >= 0, IndexError, "in_split: verse index must be >= 0, got ", index);
  const bool held_out = index % holdout_every == holdout_every - 1;
  return split == Split::All || (split == Split::HeldOut) == held_out;
}

std::vector<std::string> verse_texts(const std::vector<Verse>& verses) {
  std::vector<std::string> texts;
  texts.reserve(verses.size());
  for (const Verse& v : verses) texts.push_back(v.text);
  return texts;
}

// ---- MlmVerseDataset ----

MlmVerseDataset::MlmVerseDataset(const std::vector<Verse>& verses, const WordPiece& tokenizer, Options options)
    : options_(options), collator_(tokenizer, options.mlm) {
  check_split_options("MlmVerseDataset", options_.seq_len, options_.holdout_every);
  for (std::size_t i = 0; i < verses.size(); ++i) {
    if (!in_split(int64_t(i), options_.split, options_.holdout_every)) continue;
    tokens_.push_back(tokenizer.encode(verses[i].text));
    corpus_index_.push_back(int64_t(i));
    num_truncated_ += int64_t(tokens_.back().size()) > options_.seq_len - 2;
  }
}

int64_t MlmVerseDataset::corpus_index(int64_t i) const {
  check_index("MlmVerseDataset", i, size());
  return corpus_index_[std::size_t(i)];
}

const std::vector<int32_t>& MlmVerseDataset::tokens(int64_t i) const {
  check_index("MlmVerseDataset", i, size());
  return tokens_[std::size_t(i)];
}

Batch MlmVerseDataset::get_batch(const std::vector<int64_t>& indices, const BatchContext& ctx) const {
  if (indices.empty()) return empty_batch(options_.seq_len, {options_.seq_len});
  std::vector<std::vector<int32_t>> seqs;
  std::vector<int64_t> keys;
  seqs.reserve(indices.size());
  for (const int64_t i : indices) {
    check_index("MlmVerseDataset", i, size());
    seqs.push_back(make_bert_sequence(tokens_[std::size_t(i)], options_.seq_len, collator_.specials()));
    keys.push_back(corpus_index_[std::size_t(i)]);
  }
  return collator_.collate(seqs, keys, ctx);
}

// ---- VerseClassificationDataset ----

VerseClassificationDataset::VerseClassificationDataset(const std::vector<Verse>& verses, const WordPiece& tokenizer,
                                                       Options options)
    : options_(options), pad_id_(tokenizer.specials().pad) {
  check_split_options("VerseClassificationDataset", options_.seq_len, options_.holdout_every);
  for (std::size_t i = 0; i < verses.size(); ++i) {
    if (!in_split(int64_t(i), options_.split, options_.holdout_every)) continue;
    const Verse& v = verses[i];
    MG_CHECK(v.book >= 0 && v.book < kKjvNumBooks, Error, "VerseClassificationDataset: verse ", i, " has book ",
             v.book, ", outside 0..", kKjvNumBooks - 1);
    sequences_.push_back(make_bert_sequence(tokenizer.encode(v.text), options_.seq_len, tokenizer.specials()));
    labels_.push_back(options_.target == VerseTarget::Testament ? int64_t(kjv_is_new_testament(v.book))
                                                                : int64_t(v.book));
    corpus_index_.push_back(int64_t(i));
  }
}

int64_t VerseClassificationDataset::num_classes() const {
  return options_.target == VerseTarget::Testament ? 2 : kKjvNumBooks;
}

std::string VerseClassificationDataset::class_name(int64_t c) const {
  MG_CHECK(c >= 0 && c < num_classes(), IndexError, "VerseClassificationDataset: class ", c,
           " is out of range for ", num_classes(), " classes");
  if (options_.target == VerseTarget::Testament) return c == 0 ? "Old Testament" : "New Testament";
  return std::string(kjv_book_names()[std::size_t(c)]);
}

int64_t VerseClassificationDataset::label(int64_t i) const {
  check_index("VerseClassificationDataset", i, size());
  return labels_[std::size_t(i)];
}

int64_t VerseClassificationDataset::corpus_index(int64_t i) const {
  check_index("VerseClassificationDataset", i, size());
  return corpus_index_[std::size_t(i)];
}

std::vector<int64_t> VerseClassificationDataset::class_counts() const {
  std::vector<int64_t> counts(std::size_t(num_classes()), 0);
  for (const int64_t l : labels_) ++counts[std::size_t(l)];
  return counts;
}

int64_t VerseClassificationDataset::majority_class() const {
  const std::vector<int64_t> counts = class_counts();
  return int64_t(std::max_element(counts.begin(), counts.end()) - counts.begin());
}

double VerseClassificationDataset::majority_baseline() const {
  if (labels_.empty()) return 0.0;
  return double(class_counts()[std::size_t(majority_class())]) / double(labels_.size());
}

std::string VerseClassificationDataset::summary() const {
  char pct[32];
  std::snprintf(pct, sizeof(pct), "%.1f%%", 100.0 * majority_baseline());
  return str_cat(options_.target == VerseTarget::Testament ? "testament" : "book", ", ", split_name(options_.split),
                 ": ", size(), " verses, ", num_classes(), " classes, majority class ",
                 size() ? class_name(majority_class()) : std::string("-"), " = ", pct);
}

Batch VerseClassificationDataset::get_batch(const std::vector<int64_t>& indices, const BatchContext&) const {
  if (indices.empty()) return empty_batch(options_.seq_len, {});
  std::vector<std::vector<int32_t>> seqs;
  std::vector<int64_t> target;
  seqs.reserve(indices.size());
  for (const int64_t i : indices) {
    check_index("VerseClassificationDataset", i, size());
    seqs.push_back(sequences_[std::size_t(i)]);
    target.push_back(labels_[std::size_t(i)]);
  }
  Batch batch = make_sequence_batch(seqs, pad_id_);
  batch.add("target", from_vector(target));  // [B]
  return batch;
}

}  // namespace mg::data
