#include "mixgrad/nn/transformer.h"

#include "mixgrad/ops/ops.h"

namespace mg::nn {

TransformerEncoderLayer::TransformerEncoderLayer(Options o) : UnaryModule("TransformerEncoderLayer"), options_(o) {
  MG_CHECK(o.d_model > 0 && o.dim_feedforward > 0, Error,
           "TransformerEncoderLayer: d_model and dim_feedforward must be positive, got d_model=", o.d_model,
           ", dim_feedforward=", o.dim_feedforward);
  // Registration order is PyTorch's, so state dicts list the same names in the same order.
  self_attn = register_module<MultiheadAttention>(
      "self_attn", {.embed_dim = o.d_model, .num_heads = o.nhead, .dropout = o.dropout, .bias = o.bias,
                    .generator = o.generator});
  linear1 = register_module<Linear>("linear1", {.in = o.d_model, .out = o.dim_feedforward, .bias = o.bias});
  dropout = register_module<Dropout>("dropout", {.p = o.dropout, .generator = o.generator});
  linear2 = register_module<Linear>("linear2", {.in = o.dim_feedforward, .out = o.d_model, .bias = o.bias});
  norm1 = register_module<LayerNorm>("norm1", {.shape = {o.d_model}, .eps = o.layer_norm_eps, .bias = o.bias});
  norm2 = register_module<LayerNorm>("norm2", {.shape = {o.d_model}, .eps = o.layer_norm_eps, .bias = o.bias});
  dropout1 = register_module<Dropout>("dropout1", {.p = o.dropout, .generator = o.generator});
  dropout2 = register_module<Dropout>("dropout2", {.p = o.dropout, .generator = o.generator});
}

Tensor TransformerEncoderLayer::feed_forward(const Tensor& x) {
  Tensor h = (*linear1)(x);
  h = options_.activation == Activation::GELU ? gelu(h) : relu(h);
  return (*dropout2)((*linear2)((*dropout)(h)));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask,
                                        const Tensor& src_key_padding_mask) {
  auto scope = module_scope(*this);  // a no-op when entered through operator()
  MG_CHECK(src.defined() && src.dim() == 3 && src.size(2) == options_.d_model, ShapeError,
           "TransformerEncoderLayer(d_model=", options_.d_model, ", nhead=", options_.nhead, "): expected src [B, L, ",
           options_.d_model, "], got src ", src.defined() ? str_cat(src.shape()) : "undefined");
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
