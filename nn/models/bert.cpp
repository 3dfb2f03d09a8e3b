#include "mixgrad/nn/models/bert.h"

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/nn/init.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn::models {

BertConfig BertConfig::preset(const std::string& name, int64_t vocab) {
  if (name == "tiny") return tiny(vocab);
  if (name == "mini") return mini(vocab);
  if (name == "small") return small(vocab);
  if (name == "base") return base(vocab);
  MG_THROW(Error, "BertConfig: unknown preset \"", name, "\"; choose tiny, mini, small or base");
}

BertEmbeddings::BertEmbeddings(const BertConfig& c) : Module("BertEmbeddings"), config_(c) {
  word_embeddings = register_module<Embedding>("word_embeddings",
                                               {.num = c.vocab_size, .dim = c.hidden, .padding_idx = c.pad_token_id});
  position_embeddings = register_module<Embedding>("position_embeddings", {.num = c.max_position, .dim = c.hidden});
  token_type_embeddings = register_module<Embedding>("token_type_embeddings", {.num = c.type_vocab_size, .dim = c.hidden});
  norm = register_module<LayerNorm>("LayerNorm", {.shape = {c.hidden}, .eps = c.layer_norm_eps});
  dropout = register_module<Dropout>("dropout", {.p = c.dropout});
}

Tensor BertEmbeddings::forward(const Tensor& input_ids, const Tensor& token_type_ids) {
  auto scope = module_scope(*this);
  MG_CHECK(input_ids.defined() && input_ids.dim() == 2, ShapeError, "BertEmbeddings: expected input_ids [B, L], got ",
           input_ids.defined() ? str_cat(input_ids.shape()) : "undefined");
  const int64_t b = input_ids.size(0), l = input_ids.size(1);
  MG_CHECK(l <= config_.max_position, ShapeError, "BertEmbeddings: sequence length ", l,
           " exceeds max_position ", config_.max_position, "; got input_ids ", input_ids.shape());
  MG_CHECK(!token_type_ids.defined() || token_type_ids.shape() == input_ids.shape(), ShapeError,
           "BertEmbeddings: token_type_ids ", token_type_ids.shape(), " must have input_ids' shape ", input_ids.shape());
  const Tensor positions = arange(0, l, 1, {.dtype = DType::I64, .device = input_ids.device()}).reshape({1, l});
  const Tensor types =
      token_type_ids.defined() ? token_type_ids : zeros({b, l}, {.dtype = DType::I64, .device = input_ids.device()});
  Tensor h = add(add((*word_embeddings)(input_ids), (*position_embeddings)(positions)),
                 (*token_type_embeddings)(types));  // [B, L, H]
  return (*dropout)((*norm)(h));
}

BertModel::BertModel(BertConfig c, bool add_pooler) : Module("BertModel"), config_(c) {
  MG_CHECK(c.vocab_size > 0 && c.hidden > 0 && c.layers > 0 && c.heads > 0 && c.hidden % c.heads == 0 &&
               c.intermediate > 0 && c.max_position > 0 && c.type_vocab_size > 0,
           Error, "BertModel: invalid config (vocab_size=", c.vocab_size, ", hidden=", c.hidden, ", layers=", c.layers,
           ", heads=", c.heads, ", intermediate=", c.intermediate, ", max_position=", c.max_position,
           ", type_vocab_size=", c.type_vocab_size, "): every size must be positive and heads must divide hidden");
  embeddings = register_module("embeddings", std::make_shared<BertEmbeddings>(c));
  encoder = register_module("encoder", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < c.layers; ++i) {
    encoder->push_back(make<TransformerEncoderLayer>({.d_model = c.hidden,
                                                      .nhead = c.heads,
                                                      .dim_feedforward = c.intermediate,
                                                      .dropout = c.dropout,
                                                      // Hugging Face's BertIntermediate has no dropout
                                                      // after its GELU (BertOutput's is dropout2)
                                                      .activation_dropout = 0.0,
                                                      .activation = Activation::GELU,
                                                      .layer_norm_eps = c.layer_norm_eps,
                                                      .norm_first = false}));
  }
  if (add_pooler) pooler = register_module<Linear>("pooler", {.in = c.hidden, .out = c.hidden});
  bert_init(*this, c.initializer_range);
}

BertOutput BertModel::forward(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask) {
  auto scope = module_scope(*this);
  Tensor padding;  // bool [B, L], true = padding (the key_padding_mask convention)
  if (attention_mask.defined()) {
    MG_CHECK(attention_mask.shape() == input_ids.shape(), ShapeError, "BertModel: attention_mask ",
             attention_mask.shape(), " must have input_ids' shape ", input_ids.shape());
    padding = eq(attention_mask, scalar_like(0, attention_mask));
  }
  Tensor h = embeddings->forward(input_ids, token_type_ids);  // [B, L, H]
  {
    auto encoder_scope = module_scope(*encoder);  // a ModuleList is not called: open its scope here
    for (const auto& layer : *encoder) {
      const auto l = std::static_pointer_cast<TransformerEncoderLayer>(layer);
      if (checkpoint_layers_ && is_training()) {
        // The layer by shared_ptr: the graph keeps it alive until the backward recomputes it.
        // (call: the layer's forward hooks run, also when the backward recomputes it.)
        h = checkpoint(
            [l](const Tensors& in) {
              return Tensors{l->call(in[0], [&](const Tensor& x) { return l->forward(x, Tensor(), in[1]); })};
            },
            {h, padding}, checkpoint_options_)[0];
      } else {
        h = l->call(h, [&](const Tensor& x) { return l->forward(x, Tensor(), padding); });
      }
    }
  }
  if (!pooler) return {h, Tensor()};
  const Tensor first = h.select(1, 0);  // [B, H] the [CLS] position
  return {h, tanh((*pooler)(first))};
}

std::string BertModel::extra_repr() const {
  return str_cat("vocab_size=", config_.vocab_size, ", hidden=", config_.hidden, ", layers=", config_.layers,
                 ", heads=", config_.heads, ", intermediate=", config_.intermediate);
}

BertForMaskedLM::BertForMaskedLM(BertConfig c) : Module("BertForMaskedLM") {
  bert = register_module("bert", std::make_shared<BertModel>(c, /*add_pooler=*/false));
  transform = register_module<Linear>("transform", {.in = c.hidden, .out = c.hidden});
  transform_norm = register_module<LayerNorm>("transform_norm", {.shape = {c.hidden}, .eps = c.layer_norm_eps});
  decoder_bias = register_parameter("decoder_bias", zeros({c.vocab_size}));
  bert_init(*transform, c.initializer_range);
}

Tensor BertForMaskedLM::forward(const Tensor& input_ids, const Tensor& token_type_ids, const Tensor& attention_mask) {
  auto scope = module_scope(*this);
  const Tensor h = bert->forward(input_ids, token_type_ids, attention_mask).sequence;   // [B, L, H]
  const Tensor t = (*transform_norm)(gelu((*transform)(h)));                           // [B, L, H]
  // The decoder reuses the word-embedding matrix [V, H]: logits = t E^T + b.
  return linear(t, bert->embeddings->word_embeddings->weight, decoder_bias);           // [B, L, V]
}

BertForSequenceClassification::BertForSequenceClassification(BertConfig c, int64_t num_labels)
    : Module("BertForSequenceClassification") {
  MG_CHECK(num_labels > 0, Error, "BertForSequenceClassification: num_labels must be positive, got ", num_labels);
  bert = register_module("bert", std::make_shared<BertModel>(c));
  dropout = register_module<Dropout>("dropout", {.p = c.dropout});
  classifier = register_module<Linear>("classifier", {.in = c.hidden, .out = num_labels});
  bert_init(*classifier, c.initializer_range);
}

Tensor BertForSequenceClassification::forward(const Tensor& input_ids, const Tensor& token_type_ids,
                                              const Tensor& attention_mask) {
  auto scope = module_scope(*this);
  const Tensor pooled = bert->forward(input_ids, token_type_ids, attention_mask).pooled;  // [B, H]
  return (*classifier)((*dropout)(pooled));                                              // [B, num_labels]
}

void bert_init(Module& root, double range) {
  for (const auto& [name, m] : root.named_modules()) {
    if (auto* l = dynamic_cast<const Linear*>(m)) {
      init::normal_(l->weight, 0.0, range);
      if (l->bias.defined()) init::zeros_(l->bias);
    } else if (auto* e = dynamic_cast<const Embedding*>(m)) {
      init::normal_(e->weight, 0.0, range);
      if (e->padding_idx() >= 0) {
        NoGradGuard no_grad;
        e->weight.select(0, e->padding_idx()).zero_();
      }
    } else if (auto* n = dynamic_cast<const LayerNorm*>(m)) {
      if (n->weight.defined()) init::ones_(n->weight);
      if (n->bias.defined()) init::zeros_(n->bias);
    } else if (auto* a = dynamic_cast<const MultiheadAttention*>(m)) {
      init::normal_(a->in_proj_weight, 0.0, range);
      if (a->in_proj_bias.defined()) init::zeros_(a->in_proj_bias);
    }
  }
}

}  // namespace mg::nn::models
