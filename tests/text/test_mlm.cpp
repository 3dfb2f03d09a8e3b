// Tests of BERT sequence building and the MLM collator (data/text/mlm.h): layout and truncation,
// the 15% / 80-10-10 statistics on a fixed seed within binomial tolerances, labels, specials
// never selected, reproducibility from the seed and independence of batch composition.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "data/text/mlm.h"
#include "data/text/wordpiece.h"
#include "test_util.h"

using namespace mg::data;

namespace {

constexpr int64_t kVocab = 1000;
const SpecialTokenIds kSp{};  // a trained vocabulary's: ids 0..4

// `rows` sequences of length L with 0..L-2 regular tokens (ids 5..kVocab-1), [UNK]s sprinkled in.
std::vector<std::vector<int32_t>> random_sequences(int64_t rows, int64_t L, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> seqs;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int32_t> tokens(rng() % uint32_t(L - 1));
    for (int32_t& t : tokens) t = rng() % 50 == 0 ? kSp.unk : int32_t(5 + rng() % (kVocab - 5));
    seqs.push_back(make_bert_sequence(tokens, L, kSp));
  }
  return seqs;
}

std::vector<int64_t> iota_ids(std::size_t n, int64_t first = 0) {
  std::vector<int64_t> ids(n);
  for (std::size_t i = 0; i < n; ++i) ids[i] = first + int64_t(i);
  return ids;
}

std::vector<int64_t> row(const mg::Tensor& t, int64_t b) {
  const int64_t L = t.size(1);
  const int64_t* p = t.data<int64_t>() + b * L;
  return std::vector<int64_t>(p, p + L);
}

// |observed fraction - p| within 5 binomial standard deviations over n trials.
void check_binomial(int64_t hits, int64_t n, double p, const char* what) {
  const double frac = double(hits) / double(n);
  const double tol = 5.0 * std::sqrt(p * (1 - p) / double(n));
  INFO(what << ": " << hits << " of " << n << " = " << frac << ", expected " << p << " +- " << tol);
  CHECK(std::abs(frac - p) <= tol);
}

}  // namespace

TEST_CASE("mlm: [CLS] tokens [SEP] [PAD] sequences and attention mask", "[data]") {
  CHECK(make_bert_sequence({7, 8, 9}, 8, kSp) == std::vector<int32_t>{2, 7, 8, 9, 3, 0, 0, 0});
  CHECK(make_bert_sequence({7, 8, 9}, 5, kSp) == std::vector<int32_t>{2, 7, 8, 9, 3});
  CHECK(make_bert_sequence({7, 8, 9, 10, 11}, 4, kSp) == std::vector<int32_t>{2, 7, 8, 3});  // truncated
  CHECK(make_bert_sequence({}, 3, kSp) == std::vector<int32_t>{2, 3, 0});
  MG_REQUIRE_ERROR(make_bert_sequence({7}, 1, kSp), "seq_len must be >= 2");
  const Batch b = make_sequence_batch({make_bert_sequence({7, 8}, 6, kSp), make_bert_sequence({9}, 6, kSp)}, kSp.pad);
  REQUIRE(b.at("input_ids").shape() == mg::Shape{2, 6});
  CHECK(b.at("input_ids").dtype() == mg::DType::I64);
  CHECK(b.at("attention_mask").dtype() == mg::DType::I64);
  CHECK(row(b.at("input_ids"), 0) == std::vector<int64_t>{2, 7, 8, 3, 0, 0});
  CHECK(row(b.at("attention_mask"), 0) == std::vector<int64_t>{1, 1, 1, 1, 0, 0});
  CHECK(row(b.at("attention_mask"), 1) == std::vector<int64_t>{1, 1, 1, 0, 0, 0});
  CHECK_FALSE(b.contains("target"));
  MG_REQUIRE_ERROR(make_sequence_batch({{2, 3}, {2, 3, 0}}, 0), "sequence 1 has length 3 but sequence 0 has 2");
  // "a [PAD] b": the [PAD] written in the text is content (transformers 5.25 gives the attention
  // mask [1, 1, 1, 1, 1, 0, 0, 0] for max_length 8); only the trailing padding is masked.
  const Batch literal = make_sequence_batch({make_bert_sequence({7, kSp.pad, 8}, 8, kSp)}, kSp.pad);
  CHECK(row(literal.at("input_ids"), 0) == std::vector<int64_t>{2, 7, 0, 8, 3, 0, 0, 0});
  CHECK(row(literal.at("attention_mask"), 0) == std::vector<int64_t>{1, 1, 1, 1, 1, 0, 0, 0});
}

TEST_CASE("mlm: collator statistics on a fixed seed", "[data]") {
  const int64_t B = 20000, L = 48;
  const auto seqs = random_sequences(B, L, 1);
  const MlmCollator mlm(kVocab, kSp);
  const Batch batch = mlm.collate(seqs, iota_ids(seqs.size()), {.seed = 42, .epoch = 0});
  REQUIRE(batch.at("input_ids").shape() == mg::Shape{B, L});
  REQUIRE(batch.at("target").shape() == mg::Shape{B, L});
  REQUIRE(batch.at("target").dtype() == mg::DType::I64);
  const int64_t* ids = batch.at("input_ids").data<int64_t>();
  const int64_t* labels = batch.at("target").data<int64_t>();
  const int64_t* mask = batch.at("attention_mask").data<int64_t>();
  // Plain counters in the loop (a million positions); the invariants are checked once below.
  int64_t candidates = 0, expected_selected = 0, selected = 0, masked = 0, randomized = 0, kept = 0;
  int64_t rows_with_candidates_and_none = 0, bad_mask = 0, bad_special = 0, bad_unselected = 0;
  int64_t bad_label = 0, bad_random = 0;
  double random_sum = 0;
  for (int64_t b = 0; b < B; ++b) {
    int64_t row_candidates = 0, row_selected = 0;
    for (int64_t l = 0; l < L; ++l) {
      const int64_t orig = seqs[std::size_t(b)][std::size_t(l)], id = ids[b * L + l], lab = labels[b * L + l];
      bad_mask += mask[b * L + l] != (orig != kSp.pad);
      if (kSp.contains(int32_t(orig))) {  // specials ([UNK] included) are never selected
        bad_special += lab != kIgnoreIndex || id != orig;
        continue;
      }
      ++row_candidates;
      if (lab == kIgnoreIndex) {
        bad_unselected += id != orig;  // not selected: untouched
        continue;
      }
      bad_label += lab != orig;  // selected: the label is the original token
      ++row_selected;
      if (id == kSp.mask) {
        ++masked;
      } else if (id == orig) {
        ++kept;
      } else {
        bad_random += kSp.contains(int32_t(id)) || id >= kVocab;
        ++randomized;
        random_sum += double(id);
      }
    }
    candidates += row_candidates;
    selected += row_selected;
    if (row_candidates > 0) {
      expected_selected += std::max<int64_t>(1, std::llround(0.15 * double(row_candidates)));
      rows_with_candidates_and_none += row_selected == 0;
    }
  }
  CHECK(bad_mask == 0);
  CHECK(bad_special == 0);
  CHECK(bad_unselected == 0);
  CHECK(bad_label == 0);
  CHECK(bad_random == 0);
  // Exactly max(1, round(15%)) per sequence.
  CHECK(selected == expected_selected);
  CHECK(rows_with_candidates_and_none == 0);
  CHECK(std::abs(double(selected) / double(candidates) - 0.15) < 0.01);
  // 80 / 10 / 10; a random draw equals the original with probability 1/995.
  const double p_same = 1.0 / double(kVocab - 5);
  check_binomial(masked, selected, 0.8, "[MASK]");
  check_binomial(randomized, selected, 0.1 * (1 - p_same), "random");
  check_binomial(kept, selected, 0.1 + 0.1 * p_same, "kept");
  // Random tokens are uniform over 5..999: mean 502 (sd of the mean ~ 287/sqrt(n)).
  const double mean = random_sum / double(randomized);
  CHECK(std::abs(mean - 502.0) < 5 * 287.0 / std::sqrt(double(randomized)));
}

TEST_CASE("mlm: every position is equally likely to be selected", "[data]") {
  const int64_t B = 20000, L = 22;  // 20 tokens per row: exactly 3 selected
  std::vector<std::vector<int32_t>> seqs;
  for (int64_t b = 0; b < B; ++b) seqs.push_back(make_bert_sequence(std::vector<int32_t>(20, 100), L, kSp));
  const Batch batch = MlmCollator(kVocab, kSp).collate(seqs, iota_ids(seqs.size()), {.seed = 7, .epoch = 3});
  std::vector<int64_t> hits(L, 0);
  const int64_t* labels = batch.at("target").data<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    int64_t in_row = 0;
    for (int64_t l = 0; l < L; ++l) {
      const bool sel = labels[b * L + l] != kIgnoreIndex;
      hits[std::size_t(l)] += sel;
      in_row += sel;
    }
    REQUIRE(in_row == 3);
  }
  CHECK(hits[0] == 0);       // [CLS]
  CHECK(hits[L - 1] == 0);   // [SEP]
  for (int64_t l = 1; l <= 20; ++l) check_binomial(hits[std::size_t(l)], B, 0.15, "position");
}

TEST_CASE("mlm: reproducible from the seed, independent of batch composition", "[data]") {
  const auto seqs = random_sequences(64, 32, 3);
  const MlmCollator mlm(kVocab, kSp);
  const auto ids = iota_ids(seqs.size(), 1000);
  const BatchContext ctx{.seed = 5, .epoch = 2};
  const Batch a = mlm.collate(seqs, ids, ctx);
  const Batch again = mlm.collate(seqs, ids, ctx);
  CHECK(mg::test::values(a.at("input_ids")) == mg::test::values(again.at("input_ids")));
  CHECK(mg::test::values(a.at("target")) == mg::test::values(again.at("target")));
  // The same examples in another order and other company give the same rows.
  const std::vector<std::size_t> pick = {17, 3, 40};
  std::vector<std::vector<int32_t>> sub;
  std::vector<int64_t> sub_ids;
  for (std::size_t k : pick) {
    sub.push_back(seqs[k]);
    sub_ids.push_back(ids[k]);
  }
  const Batch b = mlm.collate(sub, sub_ids, ctx);
  for (std::size_t k = 0; k < pick.size(); ++k) {
    CHECK(row(b.at("input_ids"), int64_t(k)) == row(a.at("input_ids"), int64_t(pick[k])));
    CHECK(row(b.at("target"), int64_t(k)) == row(a.at("target"), int64_t(pick[k])));
  }
  // Another epoch, seed or example id masks differently.
  auto differing_rows = [&](const Batch& x) {
    int n = 0;
    for (int64_t r = 0; r < 64; ++r) n += row(x.at("target"), r) != row(a.at("target"), r);
    return n;
  };
  CHECK(differing_rows(mlm.collate(seqs, ids, {.seed = 5, .epoch = 3})) > 50);
  CHECK(differing_rows(mlm.collate(seqs, ids, {.seed = 6, .epoch = 2})) > 50);
  CHECK(differing_rows(mlm.collate(seqs, iota_ids(seqs.size(), 0), ctx)) > 50);
  MG_REQUIRE_ERROR(mlm.collate(seqs, ids, {.seed = 5, .epoch = int64_t(1) << 32}), "random_words: expected");
}

TEST_CASE("mlm: collator edge cases and errors", "[data]") {
  const MlmCollator mlm(kVocab, kSp);
  // Only specials: nothing selected. One token: always selected.
  const Batch b = mlm.collate({make_bert_sequence({}, 4, kSp), make_bert_sequence({9}, 4, kSp)}, {0, 1}, {.seed = 1});
  CHECK(row(b.at("target"), 0) == std::vector<int64_t>{-100, -100, -100, -100});
  CHECK(row(b.at("target"), 1) == std::vector<int64_t>{-100, 9, -100, -100});
  // All selected, all masked.
  const MlmCollator all(kVocab, kSp, {.select_prob = 1.0, .mask_prob = 1.0, .random_prob = 0.0});
  const Batch m = all.collate({make_bert_sequence({9, 10, 11}, 6, kSp)}, {0}, {});
  CHECK(row(m.at("input_ids"), 0) == std::vector<int64_t>{2, 4, 4, 4, 3, 0});
  CHECK(row(m.at("target"), 0) == std::vector<int64_t>{-100, 9, 10, 11, -100, -100});
  MG_REQUIRE_ERROR(MlmCollator(5, kSp), "vocab_size must exceed the 5 special tokens");
  // The random replacement is an int32 token id: a larger vocabulary would give negative ids.
  MG_REQUIRE_ERROR(MlmCollator(int64_t(1) << 33, kSp), "exceeds the int32 token ids");
  MG_REQUIRE_ERROR(MlmCollator(100, kSp, {.select_prob = 0}), "select_prob must be in (0, 1]");
  MG_REQUIRE_ERROR(MlmCollator(100, kSp, {.mask_prob = 0.8, .random_prob = 0.3}), "with a sum <= 1");
  MG_REQUIRE_ERROR(mlm.collate({make_bert_sequence({9}, 4, kSp)}, {0, 1}, {}), "1 sequences but 2 example ids");
  MG_REQUIRE_ERROR(mlm.collate({make_bert_sequence({kVocab}, 4, kSp)}, {0}, {}),
                   "token id 1000 at position 1 of example 0 is outside the vocabulary of 1000");
}

TEST_CASE("mlm: a vocabulary with its specials elsewhere (Hugging Face's layout)", "[data]") {
  const SpecialTokenIds hf{.pad = 0, .unk = 100, .cls = 101, .sep = 102, .mask = 103};
  CHECK(make_bert_sequence({7, 8}, 5, hf) == std::vector<int32_t>{101, 7, 8, 102, 0});
  const Batch s = make_sequence_batch({make_bert_sequence({7}, 4, hf)}, hf.pad);
  CHECK(row(s.at("attention_mask"), 0) == std::vector<int64_t>{1, 1, 1, 0});
  // Every token selected and replaced at random: the draws cover the 995 non-special ids (0 is
  // [PAD], so a draw is 1..99 or 104..999) and never a special, uniformly.
  const int64_t B = 4000, L = 34;
  std::vector<std::vector<int32_t>> seqs;
  std::mt19937 rng(9);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int32_t> tokens(32);
    for (int32_t& t : tokens) t = int32_t(104 + rng() % (kVocab - 104));
    tokens[5] = hf.unk;  // never selected
    seqs.push_back(make_bert_sequence(tokens, L, hf));
  }
  const MlmCollator mlm(kVocab, hf, {.select_prob = 1.0, .mask_prob = 0.0, .random_prob = 1.0});
  const Batch batch = mlm.collate(seqs, iota_ids(seqs.size()), {.seed = 3});
  const int64_t* ids = batch.at("input_ids").data<int64_t>();
  const int64_t* labels = batch.at("target").data<int64_t>();
  int64_t special_draws = 0, low = 0, n = 0, unk_selected = 0;
  for (int64_t b = 0; b < B; ++b) {
    unk_selected += labels[b * L + 6] != kIgnoreIndex;  // position 6: the [UNK] after [CLS] + 5 tokens
    for (int64_t l = 1; l < L - 1; ++l) {
      if (l == 6) continue;
      const int64_t id = ids[b * L + l];
      special_draws += hf.contains(int32_t(id)) || id < 0 || id >= kVocab;
      low += id < 100;  // 99 of the 995 non-special ids
      ++n;
    }
  }
  CHECK(unk_selected == 0);
  CHECK(special_draws == 0);
  check_binomial(low, n, 99.0 / 995.0, "draws below [UNK]");
  MG_REQUIRE_ERROR(MlmCollator(100, hf), "special token id 100 is outside the vocabulary of 100");
  MG_REQUIRE_ERROR(MlmCollator(200, SpecialTokenIds{.pad = 0, .unk = 0}), "two special tokens share the id 0");
  // The trained layout draws exactly as before (k-th non-special id = k + 5).
  const MlmCollator trained(kVocab, SpecialTokenIds{}, {.select_prob = 1.0, .mask_prob = 0.0, .random_prob = 1.0});
  const MlmCollator shifted(kVocab, SpecialTokenIds{.pad = 995, .unk = 996, .cls = 997, .sep = 998, .mask = 999},
                            {.select_prob = 1.0, .mask_prob = 0.0, .random_prob = 1.0});
  const std::vector<std::vector<int32_t>> one = {{2, 10, 20, 30, 3}};
  const std::vector<std::vector<int32_t>> one_shifted = {{997, 10, 20, 30, 998}};
  const Batch a = trained.collate(one, {7}, {.seed = 1});
  const Batch c = shifted.collate(one_shifted, {7}, {.seed = 1});
  for (int64_t l = 1; l < 4; ++l) CHECK(row(a.at("input_ids"), 0)[std::size_t(l)] == row(c.at("input_ids"), 0)[std::size_t(l)] + 5);
}
