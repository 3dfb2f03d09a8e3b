// Tests of the verse datasets (data/text/verse_datasets.h): split sizes and disjointness, class
// counts and majority baselines for testament and book, batch shapes and labels, MLM batches
// over the KJV (dynamic masking by epoch), and argument errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <vector>

#include "data/loader.h"
#include "data/text/verse_datasets.h"
#include "test_util.h"
#include "text_fixture.h"

using namespace mg::data;
using mg::test::text::kjv;
using mg::test::text::kjv_tokenizer;

TEST_CASE("verse datasets: the held-out split rule", "[data]") {
  CHECK(split_name(Split::HeldOut) == std::string("HeldOut"));
  int held = 0;
  for (int64_t i = 0; i < 100; ++i) {
    CHECK(in_split(i, Split::All));
    CHECK(in_split(i, Split::Train) != in_split(i, Split::HeldOut));
    held += in_split(i, Split::HeldOut);
  }
  CHECK(held == 10);
  CHECK(in_split(9, Split::HeldOut));
  CHECK(in_split(19, Split::HeldOut));
  CHECK(in_split(0, Split::Train));
  CHECK(in_split(4, Split::HeldOut, 5));
  MG_REQUIRE_ERROR(in_split(5, Split::Train, 0), "holdout_every must be >= 2");  // was a division by zero
  MG_REQUIRE_ERROR(in_split(-1, Split::Train), "verse index must be >= 0");
}

TEST_CASE("verse datasets: testament classification", "[data]") {
  MG_REQUIRE_KJV();
  const WordPiece& tok = kjv_tokenizer();
  const VerseClassificationDataset train(kjv(), tok, {.target = VerseTarget::Testament, .split = Split::Train});
  const VerseClassificationDataset test(kjv(), tok, {.target = VerseTarget::Testament, .split = Split::HeldOut});
  REQUIRE(train.size() == 27992);
  REQUIRE(test.size() == 3110);
  CHECK(train.num_classes() == 2);
  CHECK(train.class_name(0) == "Old Testament");
  CHECK(train.class_name(1) == "New Testament");
  CHECK(test.class_counts() == std::vector<int64_t>{2314, 796});
  CHECK(train.class_counts() == std::vector<int64_t>{23145 - 2314, 7957 - 796});
  CHECK(train.majority_class() == 0);
  CHECK(test.majority_baseline() == Approx(2314.0 / 3110.0));
  WARN(train.summary() << "\n" << test.summary());
  // No overlap, and together they are the corpus.
  std::set<int64_t> seen;
  for (int64_t i = 0; i < train.size(); ++i) seen.insert(train.corpus_index(i));
  for (int64_t i = 0; i < test.size(); ++i) {
    REQUIRE(seen.count(test.corpus_index(i)) == 0);
    seen.insert(test.corpus_index(i));
  }
  CHECK(seen.size() == kjv().size());
  // Labels follow the book: Matthew 1:1 is New Testament.
  for (int64_t i = 0; i < train.size(); ++i) {
    REQUIRE(train.label(i) == (kjv()[std::size_t(train.corpus_index(i))].book >= 39 ? 1 : 0));
  }
}

TEST_CASE("verse datasets: book classification and batches", "[data]") {
  MG_REQUIRE_KJV();
  const WordPiece& tok = kjv_tokenizer();
  const VerseClassificationDataset all(kjv(), tok, {.target = VerseTarget::Book, .split = Split::All});
  const VerseClassificationDataset train(kjv(), tok, {.target = VerseTarget::Book, .split = Split::Train});
  const VerseClassificationDataset test(kjv(), tok, {.target = VerseTarget::Book, .seq_len = 32,
                                                     .split = Split::HeldOut});
  CHECK(all.size() == 31102);
  CHECK(all.num_classes() == 66);
  CHECK(all.class_name(18) == "Psalms");
  const auto counts = all.class_counts();
  CHECK(counts[0] == 1533);
  CHECK(counts[18] == 2461);
  CHECK(counts[65] == 404);
  CHECK(test.class_counts()[18] == 246);
  CHECK(train.class_counts()[18] == 2215);
  CHECK(test.majority_class() == 18);
  CHECK(train.majority_class() == 18);
  CHECK(test.majority_baseline() == Approx(246.0 / 3110.0));
  for (int c = 0; c < 66; ++c) CHECK(test.class_counts()[std::size_t(c)] > 0);  // every book is held out
  WARN(train.summary() << "\n" << test.summary());

  const Batch b = test.get_batch({0, 5, 3109});
  REQUIRE(b.at("input_ids").shape() == mg::Shape{3, 32});
  REQUIRE(b.at("attention_mask").shape() == mg::Shape{3, 32});
  REQUIRE(b.at("target").shape() == mg::Shape{3});
  CHECK(b.at("target").dtype() == mg::DType::I64);
  CHECK(mg::test::values(b.at("target")) == std::vector<double>{0, 0, 65});
  // Row 0 is Genesis 1:10, "And God called the dry land Earth; ...".
  CHECK(kjv()[std::size_t(test.corpus_index(0))].verse == 10);
  const int64_t* ids = b.at("input_ids").data<int64_t>();
  CHECK(ids[0] == SpecialTokenIds{}.cls);
  CHECK(tok.decode(std::vector<int32_t>(ids, ids + 7)) == "and god called the dry land");
  MG_REQUIRE_ERROR(test.get_batch({3110}), "example index 3110 is out of range for 3110 examples");
  const Batch none = test.get_batch({});
  CHECK(none.at("input_ids").shape() == mg::Shape{0, 32});
  CHECK(none.at("target").shape() == mg::Shape{0});
}

TEST_CASE("verse datasets: MLM pretraining batches", "[data]") {
  MG_REQUIRE_KJV();
  const WordPiece& tok = kjv_tokenizer();
  const MlmVerseDataset ds(kjv(), tok, {.seq_len = 64, .split = Split::Train});
  REQUIRE(ds.size() == 27992);
  WARN("MLM train split: " << ds.num_truncated() << " of " << ds.size() << " verses longer than 62 tokens");
  CHECK(ds.num_truncated() < ds.size() / 20);
  const Batch b = ds.get_batch({0, 1, 2, 3}, {.seed = 1, .epoch = 0});
  REQUIRE(b.at("input_ids").shape() == mg::Shape{4, 64});
  REQUIRE(b.at("target").shape() == mg::Shape{4, 64});
  // Row 0 is Genesis 1:1 (11 tokens): 2 selected; unselected tokens unchanged.
  const std::vector<double> target = mg::test::values(b.at("target"));
  const std::vector<double> ids = mg::test::values(b.at("input_ids"));
  int selected = 0;
  for (int l = 0; l < 64; ++l) {
    if (target[std::size_t(l)] != kIgnoreIndex) {
      ++selected;
      CHECK(target[std::size_t(l)] == ds.tokens(0)[std::size_t(l - 1)]);
    } else if (l >= 1 && l <= 11) {
      CHECK(ids[std::size_t(l)] == ds.tokens(0)[std::size_t(l - 1)]);
    }
  }
  CHECK(selected == 2);
  // Dynamic masking: fixed within an epoch, different across epochs.
  CHECK(mg::test::values(ds.get_batch({0, 1, 2, 3}, {.seed = 1, .epoch = 0}).at("target")) == target);
  CHECK(mg::test::values(ds.get_batch({0, 1, 2, 3}, {.seed = 1, .epoch = 1}).at("target")) != target);
  // The stream is keyed by the corpus verse, not the position in the split: held-out example 0
  // (corpus verse 9) masks as the same verse does in the All split.
  const MlmVerseDataset held(kjv(), tok, {.split = Split::HeldOut});
  const MlmVerseDataset all(kjv(), tok, {.split = Split::All});
  CHECK(mg::test::values(held.get_batch({0}, {.seed = 1}).at("input_ids")) ==
        mg::test::values(all.get_batch({9}, {.seed = 1}).at("input_ids")));
  // Over the whole split: ~15% of the text tokens are selected.
  int64_t cand = 0, sel = 0;
  std::vector<int64_t> every(std::size_t(ds.size()));
  for (std::size_t i = 0; i < every.size(); ++i) every[i] = int64_t(i);
  const Batch full = ds.get_batch(every, {.seed = 1});
  const int64_t* fi = full.at("input_ids").data<int64_t>();
  const int64_t* fl = full.at("target").data<int64_t>();
  for (int64_t k = 0; k < full.at("target").numel(); ++k) {
    sel += fl[k] != kIgnoreIndex;
    cand += (fl[k] != kIgnoreIndex) || !SpecialTokenIds{}.contains(int32_t(fi[k]));
  }
  WARN("MLM: " << sel << " of " << cand << " tokens selected (" << 100.0 * double(sel) / double(cand) << "%)");
  CHECK(std::abs(double(sel) / double(cand) - 0.15) < 0.005);
}

TEST_CASE("verse datasets: served by the DataLoader", "[data]") {
  MG_REQUIRE_KJV();
  const WordPiece& tok = kjv_tokenizer();
  auto ds = std::make_shared<const MlmVerseDataset>(kjv(), tok,
                                                    MlmVerseOptions{.seq_len = 32, .split = Split::HeldOut});
  DataLoader loader(ds, {.batch_size = 500, .shuffle = true, .seed = 3, .prefetch = 2});
  loader.start_epoch(1);
  std::vector<int> seen(std::size_t(ds->size()), 0);
  int64_t batches = 0;
  while (auto b = loader.next()) {
    REQUIRE(b->at("input_ids").size(1) == 32);
    // Each row is what the dataset gives for that example alone in this (seed, epoch).
    const std::vector<int64_t> idx = loader.batch_indices(1, batches);
    for (const int64_t i : idx) ++seen[std::size_t(i)];
    const Batch direct = ds->get_batch({idx.front()}, {.seed = 3, .epoch = 1});
    const std::vector<double> first_row = mg::test::values(b->at("target").select(0, 0));
    CHECK(first_row == mg::test::values(direct.at("target").select(0, 0)));
    ++batches;
  }
  CHECK(batches == 7);  // ceil(3110 / 500)
  CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
}

TEST_CASE("verse datasets: option errors", "[data]") {
  const WordPiece tok(WordPiece::special_tokens());
  const std::vector<Verse> none;
  MG_REQUIRE_ERROR(VerseClassificationDataset(none, tok, {.seq_len = 2}), "seq_len must be >= 3");
  MG_REQUIRE_ERROR(VerseClassificationDataset(none, tok, {.holdout_every = 1}), "holdout_every must be >= 2");
  MG_REQUIRE_ERROR(MlmVerseDataset(none, WordPiece::train({"abc abd"}, {.vocab_size = 20}), {.seq_len = 1}),
                   "seq_len must be >= 3");
  const VerseClassificationDataset empty(none, tok, {});
  CHECK(empty.size() == 0);
  CHECK(empty.majority_baseline() == 0.0);
  MG_REQUIRE_ERROR(empty.class_name(2), "class 2 is out of range for 2 classes");
}
