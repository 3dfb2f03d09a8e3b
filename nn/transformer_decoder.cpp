#include "mixgrad/nn/transformer_decoder.h"

#include "mixgrad/ops/ops.h"

namespace mg::nn {

TransformerDecoderLayer::TransformerDecoderLayer(Options o) : Module("TransformerDecoderLayer"), options_(o) {
  detail::check_transformer_layer_options(o, "TransformerDecoderLayer");
  // Registration order is PyTorch's, so state dicts list the same names in the same order.
  const MultiheadAttention::Options attention{
      .embed_dim = o.d_model, .num_heads = o.nhead, .dropout = o.dropout, .bias = o.bias,
      .batch_first = o.batch_first, .generator = o.generator};
  self_attn = register_module<MultiheadAttention>("self_attn", attention);
  multihead_attn = register_module<MultiheadAttention>("multihead_attn", attention);
  linear1 = register_module<Linear>("linear1", {.in = o.d_model, .out = o.dim_feedforward, .bias = o.bias});
  dropout = register_module<Dropout>("dropout", {.p = o.activation_dropout.value_or(o.dropout), .generator = o.generator});
  linear2 = register_module<Linear>("linear2", {.in = o.dim_feedforward, .out = o.d_model, .bias = o.bias});
  const LayerNorm::Options norm{.shape = {o.d_model}, .eps = o.layer_norm_eps, .bias = o.bias};
  norm1 = register_module<LayerNorm>("norm1", norm);
  norm2 = register_module<LayerNorm>("norm2", norm);
  norm3 = register_module<LayerNorm>("norm3", norm);
  dropout1 = register_module<Dropout>("dropout1", {.p = o.dropout, .generator = o.generator});
  dropout2 = register_module<Dropout>("dropout2", {.p = o.dropout, .generator = o.generator});
  dropout3 = register_module<Dropout>("dropout3", {.p = o.dropout, .generator = o.generator});
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, const DecoderMasks& masks) {
  auto scope = module_scope(*this);
  const int64_t e = options_.d_model;
  auto shape_of = [](const Tensor& t) { return t.defined() ? str_cat(t.shape()) : std::string("undefined"); };
  const bool bf = options_.batch_first;
  const int64_t bd = bf ? 0 : 1;  // the batch dim
  // batched, or both unbatched ([L, e] and [S, e]) as PyTorch
  const bool ranks_ok = tgt.defined() && memory.defined() && tgt.dim() == memory.dim() &&
                        (tgt.dim() == 3 || tgt.dim() == 2);
  MG_CHECK(ranks_ok && tgt.size(-1) == e && memory.size(-1) == e && (tgt.dim() == 2 || tgt.size(bd) == memory.size(bd)),
           ShapeError, "TransformerDecoderLayer(d_model=", e, ", nhead=", options_.nhead, "): expected tgt ",
           bf ? "[B, L, " : "[L, B, ", e, "] and memory ", bf ? "[B, S, " : "[S, B, ", e, "] (or unbatched [L, ", e,
           "] and [S, ", e, "]), got tgt ", shape_of(tgt), ", memory ", shape_of(memory));
  auto self_block = [&](const Tensor& x) {
    return (*dropout1)(self_attn->forward(x, x, x, masks.tgt_key_padding_mask, masks.tgt_mask));
  };
  auto memory_block = [&](const Tensor& x) {
    return (*dropout2)(
        multihead_attn->forward(x, memory, memory, masks.memory_key_padding_mask, masks.memory_mask));
  };
  auto feed_forward = [&](const Tensor& x) {
    return detail::transformer_feed_forward(x, *linear1, *dropout, *linear2, *dropout3, options_.activation);
  };
  if (options_.norm_first) {
    Tensor x = add(tgt, self_block((*norm1)(tgt)));
    x = add(x, memory_block((*norm2)(x)));
    return add(x, feed_forward((*norm3)(x)));
  }
  Tensor x = (*norm1)(add(tgt, self_block(tgt)));
  x = (*norm2)(add(x, memory_block(x)));
  return (*norm3)(add(x, feed_forward(x)));
}

}  // namespace mg::nn
