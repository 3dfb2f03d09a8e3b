// BERT (Devlin et al. 2019): embeddings (learned word, position and token-type embeddings, layer
// norm, dropout), a post-norm GELU TransformerEncoderLayer stack, a tanh pooler over [CLS], and the
// two heads the examples train: masked-language modelling with the decoder tied to the word
// embeddings, and sequence classification. Parameter counts equal Hugging Face's BertModel
// (BERT-base: 109,482,240).
//
//   auto cfg = nn::models::BertConfig::mini(/*vocab_size=*/8192);
//   nn::models::BertForMaskedLM mlm(cfg);
//   mg::Tensor logits = mlm.forward(ids, {}, mask);   // ids i64 [B, L], mask [B, L] (1 = token) -> [B, L, V]
#pragma once
#include <memory>
#include <optional>

#include "mixgrad/nn/container.h"
#include "mixgrad/nn/dropout.h"
#include "mixgrad/nn/linear.h"
#include "mixgrad/nn/normalization.h"
#include "mixgrad/nn/transformer.h"
#include "mixgrad/ops/checkpoint.h"

namespace mg::nn::models {

struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden = 768;
  int64_t layers = 12;
  int64_t heads = 12;
  int64_t intermediate = 3072;
  int64_t max_position = 512;
  int64_t type_vocab_size = 2;
  double dropout = 0.1;            // hidden and attention-probability dropout
  double layer_norm_eps = 1e-12;
  double initializer_range = 0.02; // std of the normal init of weights and embeddings
  // The word embedding's padding row (zero at init, no gradient); std::nullopt: none, as a Hugging
  // Face config's `"pad_token_id": null`.
  std::optional<int64_t> pad_token_id = 0;

  // The compact models of Turc et al. 2019 ("Well-Read Students Learn Better") and BERT-base.
  static BertConfig tiny(int64_t vocab = 30522) { return sized(vocab, 128, 2, 2); }
  static BertConfig mini(int64_t vocab = 30522) { return sized(vocab, 256, 4, 4); }
  static BertConfig small(int64_t vocab = 30522) { return sized(vocab, 512, 4, 8); }
  static BertConfig base(int64_t vocab = 30522) { return sized(vocab, 768, 12, 12); }
  // "tiny", "mini", "small" or "base"; an error names the choices.
  static BertConfig preset(const std::string& name, int64_t vocab = 30522);

 private:
  static BertConfig sized(int64_t vocab, int64_t hidden, int64_t layers, int64_t heads) {
    BertConfig c;
    c.vocab_size = vocab;
    c.hidden = hidden;
    c.layers = layers;
    c.heads = heads;
    c.intermediate = 4 * hidden;
    return c;
  }
};

// Sum of word, position and token-type embeddings, then LayerNorm and dropout: [B, L] -> [B, L, H].
class BertEmbeddings : public Module {
 public:
  explicit BertEmbeddings(const BertConfig& config);
  // input_ids, token_type_ids: i64 [B, L] (token_type_ids undefined: all 0).
  Tensor forward(const Tensor& input_ids, const Tensor& token_type_ids);

  std::shared_ptr<Embedding> word_embeddings, position_embeddings, token_type_embeddings;
  std::shared_ptr<LayerNorm> norm;
  std::shared_ptr<Dropout> dropout;

 private:
  BertConfig config_;
};

struct BertOutput {
  Tensor sequence;  // [B, L, H] last encoder layer
  Tensor pooled;    // [B, H] tanh(dense(sequence[:, 0]))
};

class BertModel : public Module {
 public:
  // add_pooler = false drops the pooler (the MLM head does not use it, as in Hugging Face).
  explicit BertModel(BertConfig config, bool add_pooler = true);
  // input_ids i64 [B, L]; token_type_ids i64 [B, L] or undefined; attention_mask [B, L] (integer
  // or bool, nonzero = real token, 0 = padding) or undefined (all tokens real).
  BertOutput forward(const Tensor& input_ids, const Tensor& token_type_ids = Tensor(),
                     const Tensor& attention_mask = Tensor());
  const BertConfig& config() const { return config_; }
  // Activation checkpointing per encoder layer (Hugging Face's gradient_checkpointing_enable):
  // while training with grad mode on, each layer's activations are recomputed in backward instead
  // of kept (mg::checkpoint, ops/checkpoint.h): activation memory of one layer instead of all of
  // them, for one more forward pass. Off by default; `options` picks the checkpoint's form.
  void set_gradient_checkpointing(bool on, CheckpointOptions options = {}) {
    checkpoint_layers_ = on;
    checkpoint_options_ = options;
  }
  bool gradient_checkpointing() const { return checkpoint_layers_; }

  std::shared_ptr<BertEmbeddings> embeddings;
  std::shared_ptr<ModuleList> encoder;  // TransformerEncoderLayer x layers
  std::shared_ptr<Linear> pooler;  // null without pooler (BertOutput::pooled is then undefined)

 protected:
  std::string extra_repr() const override;

 private:
  BertConfig config_;
  bool checkpoint_layers_ = false;
  CheckpointOptions checkpoint_options_;
};

// BERT with the masked-language-modelling head: dense + GELU + LayerNorm, then a decoder whose
// weight IS the word-embedding matrix (tied: one tensor, counted and updated once) plus a bias [V].
class BertForMaskedLM : public Module {
 public:
  explicit BertForMaskedLM(BertConfig config);
  // -> logits [B, L, V]
  Tensor forward(const Tensor& input_ids, const Tensor& token_type_ids = Tensor(),
                 const Tensor& attention_mask = Tensor());

  std::shared_ptr<BertModel> bert;
  std::shared_ptr<Linear> transform;
  std::shared_ptr<LayerNorm> transform_norm;
  Tensor decoder_bias;  // [V]
};

// BERT + dropout + Linear(H, num_labels) on the pooled output.
class BertForSequenceClassification : public Module {
 public:
  BertForSequenceClassification(BertConfig config, int64_t num_labels);
  // -> logits [B, num_labels]
  Tensor forward(const Tensor& input_ids, const Tensor& token_type_ids = Tensor(),
                 const Tensor& attention_mask = Tensor());

  std::shared_ptr<BertModel> bert;
  std::shared_ptr<Dropout> dropout;
  std::shared_ptr<Linear> classifier;
};

// BERT's initialisation for every Linear, Embedding, LayerNorm and MultiheadAttention below `m`:
// weights N(0, range^2), biases 0, LayerNorm weight 1, embedding padding rows 0.
void bert_init(Module& m, double initializer_range);

}  // namespace mg::nn::models
