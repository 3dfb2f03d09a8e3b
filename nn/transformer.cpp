#include "mixgrad/nn/transformer.h"

#include "mixgrad/ops/ops.h"

namespace mg::nn {

namespace detail {

Tensor transformer_feed_forward(const Tensor& x, Linear& linear1, Dropout& dropout, Linear& linear2,
                                Dropout& dropout_out, Activation activation) {
  Tensor h = linear1(x);
  h = activation == Activation::GELU ? gelu(h) : relu(h);
  return dropout_out(linear2(dropout(h)));
}

void check_transformer_layer_options(const TransformerLayerOptions& o, const char* layer) {
  MG_CHECK(o.d_model > 0 && o.dim_feedforward > 0, Error, layer,
           ": d_model and dim_feedforward must be positive, got d_model=", o.d_model,
           ", dim_feedforward=", o.dim_feedforward);
  MG_CHECK(!o.activation_dropout || (*o.activation_dropout >= 0.0 && *o.activation_dropout <= 1.0), Error, layer,
           ": activation_dropout must be in [0, 1], got ", o.activation_dropout.value_or(0.0));
}

}  // namespace detail

TransformerEncoderLayer::TransformerEncoderLayer(Options o) : UnaryModule("TransformerEncoderLayer"), options_(o) {
  detail::check_transformer_layer_options(o, "TransformerEncoderLayer");
  // Registration order is PyTorch's, so state dicts list the same names in the same order.
  self_attn = register_module<MultiheadAttention>(
      "self_attn", {.embed_dim = o.d_model, .num_heads = o.nhead, .dropout = o.dropout, .bias = o.bias,
                    .batch_first = o.batch_first, .generator = o.generator});
  linear1 = register_module<Linear>("linear1", {.in = o.d_model, .out = o.dim_feedforward, .bias = o.bias});
  dropout = register_module<Dropout>("dropout", {.p = o.activation_dropout.value_or(o.dropout), .generator = o.generator});
  linear2 = register_module<Linear>("linear2", {.in = o.dim_feedforward, .out = o.d_model, .bias = o.bias});
  norm1 = register_module<LayerNorm>("norm1", {.shape = {o.d_model}, .eps = o.layer_norm_eps, .bias = o.bias});
  norm2 = register_module<LayerNorm>("norm2", {.shape = {o.d_model}, .eps = o.layer_norm_eps, .bias = o.bias});
  dropout1 = register_module<Dropout>("dropout1", {.p = o.dropout, .generator = o.generator});
  dropout2 = register_module<Dropout>("dropout2", {.p = o.dropout, .generator = o.generator});
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask,
                                        const Tensor& src_key_padding_mask) {
  auto scope = module_scope(*this);  // a no-op when entered through operator()
  MG_CHECK(src.defined() && (src.dim() == 3 || src.dim() == 2) && src.size(-1) == options_.d_model, ShapeError,
           "TransformerEncoderLayer(d_model=", options_.d_model, ", nhead=", options_.nhead, "): expected src ",
           options_.batch_first ? "[B, L, " : "[L, B, ", options_.d_model, "] or unbatched [L, ", options_.d_model,
           "], got src ", src.defined() ? str_cat(src.shape()) : "undefined");
  auto feed_forward = [&](const Tensor& x) {
    return detail::transformer_feed_forward(x, *linear1, *dropout, *linear2, *dropout2, options_.activation);
  };
  auto attend = [&](const Tensor& x) {
    return (*dropout1)(self_attn->forward(x, x, x, src_key_padding_mask, src_mask));
  };
  if (options_.norm_first) {
    Tensor x = add(src, attend((*norm1)(src)));
    return add(x, feed_forward((*norm2)(x)));
  }
  Tensor x = (*norm1)(add(src, attend(src)));
  return (*norm2)(add(x, feed_forward(x)));
}

}  // namespace mg::nn
