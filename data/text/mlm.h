// BERT inputs: fixed-length sequences "[CLS] tokens [SEP] [PAD]..." with their attention mask,
// and the masked-language-model collator. The decision a reader must know: every random choice
// for an example comes from example_words(ctx, row, example id, kMaskStream, position)
// (data/dataset.h: the seed, the epoch, the id and the example's repeat in the epoch), so a row is
// the same whichever batch it lands in, in whatever order, on any thread, while a new epoch — or a
// repeat of the example within one — masks differently (dynamic masking).
//
//   mg::data::MlmCollator mlm(tok);
//   mg::data::Batch b = mlm.collate(sequences, example_ids, {.seed = 1, .epoch = 3});
//   // "input_ids" [B, L] with ~15% of tokens selected; "target" [B, L] original id or -100
#pragma once
#include <cstdint>
#include <vector>

#include "mixgrad/data/dataset.h"
#include "mixgrad/data/text/wordpiece.h"

namespace mg::data {

inline constexpr int64_t kIgnoreIndex = -100;  // targets not to predict (cross_entropy ignore_index)

// "[CLS] tokens [SEP]" padded with [PAD] to seq_len (>= 2); tokens beyond seq_len - 2 are cut.
// `specials`: the tokenizer's (WordPiece::specials()).
std::vector<int32_t> make_bert_sequence(const std::vector<int32_t>& tokens, int64_t seq_len,
                                        const SpecialTokenIds& specials);

// A sentence pair as BERT reads it (next-sentence prediction, NLI, QA): "[CLS] a [SEP] b [SEP]"
// padded with [PAD] to seq_len (>= 3), token type 0 for [CLS] a [SEP] (and the padding), 1 for
// b [SEP]. Too long, the pair is cut from the end of its texts by Hugging Face's "longest_first"
// rule (the longer text gives up tokens first; when both are too long they split the room, the
// longer text taking the odd token), so the ids equal transformers' tokenizer(a, b,
// truncation=True, max_length=seq_len, padding="max_length").
struct BertPair {
  std::vector<int32_t> ids;          // [seq_len]
  std::vector<int32_t> token_types;  // [seq_len]
};
BertPair make_bert_pair(const std::vector<int32_t>& a, const std::vector<int32_t>& b, int64_t seq_len,
                        const SpecialTokenIds& specials);
// A batch of pairs: "input_ids", "token_type_ids" and "attention_mask", i64 [B, L].
Batch make_pair_batch(const std::vector<BertPair>& pairs, int32_t pad_id);

// A batch of equal-length sequences: "input_ids" i64 [B, L] and "attention_mask" i64 [B, L]
// (1 = [CLS], text or [SEP]; 0 = the padding: the trailing run of the tokenizer's [PAD] id,
// `pad_id` — a [PAD] inside the text is attended to, as in Hugging Face's tokenizer).
Batch make_sequence_batch(const std::vector<std::vector<int32_t>>& sequences, int32_t pad_id);

struct MlmOptions {
  double select_prob = 0.15;  // fraction of the non-special tokens of a sequence to predict
  double mask_prob = 0.8;     // of the selected: replaced by [MASK]
  double random_prob = 0.1;   // of the selected: replaced by a uniform non-special token
                              // (the rest, 1 - mask - random, keep their token)
};

// The masked-language-model collator (BERT, Devlin et al. 2019). In each sequence the candidates
// are the non-special tokens (never [PAD] [UNK] [CLS] [SEP] [MASK]); exactly
// max(1, round(select_prob * candidates)) of them are selected (none when there are no
// candidates), those with the smallest random priorities, as Google's create_pretraining_data
// shuffles and takes the first. A selected token becomes [MASK] with mask_prob, a random token
// uniform over the vocabulary's non-special ids with random_prob (possibly its own id, as in
// BERT), else stays.
class MlmCollator {
 public:
  using Options = MlmOptions;
  // For `tokenizer`'s vocabulary (its size and special ids).
  explicit MlmCollator(const WordPiece& tokenizer, Options options = {});
  MlmCollator(int64_t vocab_size, const SpecialTokenIds& specials, Options options = {});

  // sequences: B equal-length id lists (make_bert_sequence); example_ids: the B dataset-wide ids
  // that key each row's random stream (0 <= id < 2^48); ctx: the seed and epoch (< 2^32).
  // Returns "input_ids" [B, L] (masked), "attention_mask" [B, L] and "target" [B, L] (the
  // original id at selected positions, -100 elsewhere), all i64.
  Batch collate(const std::vector<std::vector<int32_t>>& sequences, const std::vector<int64_t>& example_ids,
                const BatchContext& ctx) const;

  // Masks one row in place: ids [L] (changed) and target [L] (written); `position`: the row's place
  // in the batch, whose ctx.repeats entry gives a repeated example its own masking.
  void mask_row(int32_t* ids, int64_t* target, int64_t length, int64_t example_id, const BatchContext& ctx,
                std::size_t position = 0) const;

  int64_t vocab_size() const { return vocab_size_; }
  const SpecialTokenIds& specials() const { return specials_; }
  const Options& options() const { return options_; }

 private:
  int64_t vocab_size_;
  SpecialTokenIds specials_;
  int32_t sorted_specials_[5];  // ascending: the random token's k-th non-special id skips them
  Options options_;
};

}  // namespace mg::data
