// Datasets over KJV verses for BERT: masked-language-model pretraining, and sequence
// classification of a verse's testament (2 classes) or book (66 classes). The decision a reader
// must know: the held-out split is deterministic and shared by all of them — verse i of the
// corpus (0-based, canonical order) is held out when i % holdout_every == holdout_every - 1
// (every 10th verse by default: 3,110 of 31,102), so every book and chapter is represented on
// both sides and a model pretrained on the train split never saw a held-out verse.
//
// Both are mg::data::Datasets (data/dataset.h), so a DataLoader serves them; their batches hold
// "input_ids" and "attention_mask" i64 [B, L] and "target": i64 [B, L] for MLM (-100 where not
// predicted), i64 [B] class indices for classification.
//
//   auto bible = mg::data::read_kjv();
//   auto tok = mg::data::WordPiece::train(mg::data::verse_texts(bible), {.vocab_size = 8192});
//   auto test = std::make_shared<mg::data::VerseClassificationDataset>(
//       bible, tok, mg::data::VerseClassificationOptions{.target = mg::data::VerseTarget::Book,
//                                                        .split = mg::data::Split::HeldOut});
//   mg::data::Batch b = test->get_batch({0, 1, 2}, {});   // input_ids [3, 64], target [3]
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mixgrad/data/dataset.h"
#include "mixgrad/data/text/kjv.h"
#include "mixgrad/data/text/mlm.h"
#include "mixgrad/data/text/wordpiece.h"

namespace mg::data {

enum class Split { Train, HeldOut, All };
// The split's name as printed in errors ("Train", "HeldOut", "All").
const char* split_name(Split s);

// True when corpus verse `index` belongs to `split` under the every-n-th rule above.
bool in_split(int64_t index, Split split, int64_t holdout_every = 10);

// The texts of `verses`, for WordPiece::train.
std::vector<std::string> verse_texts(const std::vector<Verse>& verses);

struct MlmVerseOptions {
  int64_t seq_len = 64;  // [CLS] + up to seq_len - 2 tokens + [SEP], then [PAD]
  Split split = Split::Train;
  int64_t holdout_every = 10;
  MlmOptions mlm = {};
};

// Masked-language-model pretraining over verses. Each example is one verse; its masking is keyed
// by (ctx.seed, ctx.epoch, corpus verse index), so it is fixed for an epoch and changes between
// epochs (RoBERTa-style dynamic masking).
class MlmVerseDataset : public Dataset {
 public:
  using Options = MlmVerseOptions;
  MlmVerseDataset(const std::vector<Verse>& verses, const WordPiece& tokenizer, Options options = {});

  int64_t size() const override { return int64_t(tokens_.size()); }
  // "input_ids" [B, L] (masked), "attention_mask" [B, L], "target" [B, L] (-100 = not predicted).
  Batch get_batch(const std::vector<int64_t>& indices, const BatchContext& ctx) const override;
  std::string name() const override { return "MlmVerseDataset"; }

  int64_t corpus_index(int64_t i) const;  // the verse of example i in the full corpus
  const std::vector<int32_t>& tokens(int64_t i) const;  // its token ids (no specials, untruncated)
  int64_t num_truncated() const { return num_truncated_; }  // verses longer than seq_len - 2
  const Options& options() const { return options_; }

 private:
  Options options_;
  MlmCollator collator_;
  std::vector<std::vector<int32_t>> tokens_;
  std::vector<int64_t> corpus_index_;
  int64_t num_truncated_ = 0;
};

enum class VerseTarget { Testament, Book };

struct VerseClassificationOptions {
  VerseTarget target = VerseTarget::Testament;
  int64_t seq_len = 64;
  Split split = Split::Train;
  int64_t holdout_every = 10;
};

// Sequence classification: verse -> Old (0) / New (1) Testament, or verse -> book 0..65.
class VerseClassificationDataset : public Dataset {
 public:
  using Options = VerseClassificationOptions;
  VerseClassificationDataset(const std::vector<Verse>& verses, const WordPiece& tokenizer, Options options = {});

  int64_t size() const override { return int64_t(labels_.size()); }
  // "input_ids" [B, L], "attention_mask" [B, L], "target" [B] (no randomness: ctx is unused).
  Batch get_batch(const std::vector<int64_t>& indices, const BatchContext& ctx = {}) const override;
  std::string name() const override { return "VerseClassificationDataset"; }

  int64_t num_classes() const;
  std::string class_name(int64_t c) const;  // "Old Testament" / "New Testament" or the book name
  int64_t label(int64_t i) const;
  int64_t corpus_index(int64_t i) const;
  // Examples per class in this split [num_classes()].
  std::vector<int64_t> class_counts() const;
  // The most frequent class of this split (smallest index on ties) and the accuracy of always
  // predicting it here: the baseline a classifier must beat.
  int64_t majority_class() const;
  double majority_baseline() const;
  // "book, HeldOut: 3110 verses, 66 classes, majority class Psalms = 7.9%"
  std::string summary() const;
  const Options& options() const { return options_; }

 private:
  Options options_;
  int32_t pad_id_;                               // the tokenizer's [PAD]
  std::vector<std::vector<int32_t>> sequences_;  // [CLS] ... [SEP] [PAD]..., seq_len each
  std::vector<int64_t> labels_;
  std::vector<int64_t> corpus_index_;
};

}  // namespace mg::data
