// The BERT model zoo: parameter counts equal Hugging Face's, tied decoder weights, padding
// semantics, forward/backward in f32 and bf16, bad input.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/factory.h"
#include "ops/loss.h"
#include "nn/models/bert.h"
#include "test_util.h"

using namespace mg;
using namespace mg::nn::models;
using mg::test::values;

namespace {

bool all_finite(const Tensor& t) {
  for (double v : values(t)) {
    if (!std::isfinite(v)) return false;
  }
  return true;
}

BertConfig small_config() {
  BertConfig c = BertConfig::mini(500);
  c.max_position = 64;
  c.dropout = 0.0;
  return c;
}

}  // namespace

TEST_CASE("BERT parameter counts equal Hugging Face's", "[nn][models]") {
  // transformers.BertModel(BertConfig()) (base, vocab 30522, with pooler): 109,482,240.
  BertModel base(BertConfig::base());
  CHECK(base.num_parameters() == 109482240);
  // Per encoder layer: 4 H^2 + 4 H (attention) + 2 H I + I + H (FFN) + 4 H (two layer norms).
  const int64_t h = 256, i = 1024, v = 8192;
  const int64_t layer = 4 * h * h + 4 * h + 2 * h * i + i + h + 4 * h;
  const int64_t embeddings = v * h + 512 * h + 2 * h + 2 * h;
  BertModel mini(BertConfig::mini(v));
  CHECK(mini.num_parameters() == embeddings + 4 * layer + h * h + h);
  // The MLM model has no pooler and adds transform (H^2 + H), its layer norm (2 H) and the
  // decoder bias (V); the decoder weight is the word-embedding matrix and is not counted twice.
  BertForMaskedLM mlm(BertConfig::mini(v));
  CHECK(mlm.num_parameters() == mini.num_parameters() - (h * h + h) + h * h + h + 2 * h + v);
  CHECK(BertConfig::preset("small").hidden == 512);
  MG_REQUIRE_ERROR(BertConfig::preset("huge"), "unknown preset \"huge\"; choose tiny, mini, small or base");
}

TEST_CASE("BERT-mini MLM forward and backward in f32 and bf16 with the decoder tied", "[nn][models]") {
  manual_seed(11);
  BertForMaskedLM mlm(small_config());
  Tensor ids = randint(1, 500, {2, 16});
  Tensor mask = ones({2, 16}, {.dtype = DType::I64});
  {
    NoGradGuard g;
    mask.select(0, 1).narrow(0, 12, 4).zero_();  // last 4 tokens of sequence 1 are padding
  }
  Tensor logits = mlm.forward(ids, Tensor(), mask);
  REQUIRE(logits.shape() == Shape{2, 16, 500});
  REQUIRE(all_finite(logits));
  Tensor target = randint(0, 500, {2, 16});
  cross_entropy(logits.reshape({32, 500}), target.reshape({32})).backward();
  for (auto& [name, p] : mlm.named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    REQUIRE(all_finite(p.grad()));
  }
  // Tied: rows of the word embedding never used as inputs still get a gradient from the decoder.
  const Tensor emb_grad = mlm.bert->embeddings->word_embeddings->weight.grad();
  const auto ids_v = values(ids);
  int64_t unused = 1;
  while (std::find(ids_v.begin(), ids_v.end(), static_cast<double>(unused)) != ids_v.end()) ++unused;
  double row = 0;
  for (double v : values(emb_grad.select(0, unused))) row += std::abs(v);
  REQUIRE(row > 0);
  // The padding row (pad_token_id 0) starts at zero; its gradient comes from the decoder only
  // (the lookup adds none), so it equals the gradient of an unused row's kind: nonzero.
  for (double v : values(mlm.bert->embeddings->word_embeddings->weight.select(0, 0))) REQUIRE(v == 0.0);

  // bf16: same weights, logits close to f32.
  const Tensor ref = logits.detach();
  mlm.zero_grad();
  mlm.to(DType::BF16);
  Tensor lowp = mlm.forward(ids, Tensor(), mask);
  REQUIRE(lowp.dtype() == DType::BF16);
  REQUIRE(all_finite(lowp));
  const auto a = values(lowp), b = values(ref);
  double diff = 0, scale = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    diff = std::max(diff, std::abs(a[k] - b[k]));
    scale = std::max(scale, std::abs(b[k]));
  }
  CHECK(diff < 0.05 * scale + 0.02);
  cross_entropy(lowp.reshape({32, 500}), target.reshape({32})).backward();
  REQUIRE(mlm.decoder_bias.grad().dtype() == DType::BF16);
  REQUIRE(all_finite(mlm.bert->embeddings->word_embeddings->weight.grad()));
}

TEST_CASE("BERT ignores padded keys: real positions do not depend on padding tokens", "[nn][models]") {
  manual_seed(5);
  BertModel bert(small_config());
  bert.eval();
  Tensor ids = randint(1, 500, {1, 10});
  Tensor mask = from_vector<int64_t>({1, 1, 1, 1, 1, 1, 1, 0, 0, 0}, {1, 10});
  Tensor other = ids.clone();
  {
    NoGradGuard g;
    other.narrow(1, 7, 3).fill_(42);  // change only the padding tokens
  }
  NoGradGuard g;
  const Tensor a = bert.forward(ids, Tensor(), mask).sequence.narrow(1, 0, 7);
  const Tensor b = bert.forward(other, Tensor(), mask).sequence.narrow(1, 0, 7);
  const auto va = values(a), vb = values(b);
  for (std::size_t k = 0; k < va.size(); ++k) REQUIRE(std::abs(va[k] - vb[k]) < 1e-5);
  // Without the mask they differ (the test can fail).
  const Tensor c = bert.forward(other).sequence.narrow(1, 0, 7);
  const auto vc = values(c);
  double d = 0;
  for (std::size_t k = 0; k < va.size(); ++k) d = std::max(d, std::abs(va[k] - vc[k]));
  REQUIRE(d > 1e-3);
}

TEST_CASE("BertForSequenceClassification gives [B, labels] logits with gradients", "[nn][models]") {
  manual_seed(2);
  BertForSequenceClassification clf(small_config(), 66);
  Tensor ids = randint(1, 500, {3, 8});
  Tensor logits = clf.forward(ids, zeros({3, 8}, {.dtype = DType::I64}));
  REQUIRE(logits.shape() == Shape{3, 66});
  cross_entropy(logits, from_vector<int64_t>({0, 65, 7}, {3})).backward();
  REQUIRE(all_finite(clf.classifier->weight.grad()));
  REQUIRE(all_finite(clf.bert->embeddings->position_embeddings->weight.grad()));
}

TEST_CASE("BERT rejects bad inputs with the layer and shapes named", "[nn][models][errors]") {
  BertForMaskedLM mlm(small_config());
  MG_REQUIRE_ERROR(mlm.forward(zeros({2, 100}, {.dtype = DType::I64})), "sequence length 100 exceeds max_position 64");
  MG_REQUIRE_ERROR(mlm.forward(zeros({2, 8}, {.dtype = DType::I64}), Tensor(), ones({2, 9})),
                   "attention_mask [2, 9] must have input_ids' shape [2, 8]");
  MG_REQUIRE_ERROR(mlm.forward(full({1, 4}, 500, {.dtype = DType::I64})), "Embedding(500, 256, padding_idx=0)");
  MG_REQUIRE_ERROR(mlm.forward(zeros({2, 8})), "expected i64 or i32 indices");
  MG_REQUIRE_ERROR(BertModel(BertConfig{.hidden = 100, .heads = 3}), "heads must divide hidden");
  MG_REQUIRE_ERROR(BertModel(BertConfig{.max_position = 0}), "max_position=0");
}

TEST_CASE("BERT's encoder layers drop out where Hugging Face's BERT does: not after the GELU", "[nn][models]") {
  // transformers' BertIntermediate is dense + GELU with no dropout; BertOutput's dropout is the
  // layer's dropout2. Each layer kept PyTorch's TransformerEncoderLayer's third dropout (p = 0.1
  // on [B, L, intermediate] in training) before.
  BertConfig c = small_config();
  c.dropout = 0.1;
  const BertModel m(c);
  int checked = 0;
  for (const auto& [name, mod] : m.named_modules()) {
    if (!name.starts_with("encoder.")) continue;
    if (name.ends_with(".dropout")) {
      CHECK(mod->layer_name() == "Dropout(p=0)");
      ++checked;
    } else if (name.ends_with(".dropout1") || name.ends_with(".dropout2")) {
      CHECK(mod->layer_name() == "Dropout(p=0.1)");
    }
  }
  CHECK(checked == c.layers);
  // PyTorch's own layer keeps it, and it can be set.
  CHECK(nn::TransformerEncoderLayer({.d_model = 8, .nhead = 2, .dropout = 0.2}).dropout->layer_name() == "Dropout(p=0.2)");
  CHECK(nn::TransformerEncoderLayer({.d_model = 8, .nhead = 2, .activation_dropout = 0.3}).dropout->layer_name() ==
        "Dropout(p=0.3)");
  MG_REQUIRE_ERROR(nn::TransformerEncoderLayer({.d_model = 8, .nhead = 2, .activation_dropout = 1.5}),
                   "activation_dropout must be in [0, 1]");
}
