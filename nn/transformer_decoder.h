// TransformerDecoderLayer (batch first; sequence first with batch_first = false): self-attention over the target, attention from the target
// to the encoder's output (memory), and the feed-forward block; post-norm (original Transformer)
// or pre-norm. PyTorch's submodule names and order, so its state dict loads into
// torch.nn.TransformerDecoderLayer and back.
//
//   auto layer = nn::make<nn::TransformerDecoderLayer>({.d_model = 256, .nhead = 4, .dim_feedforward = 1024});
//   mg::Tensor causal = nn::generate_square_subsequent_mask(tgt.size(1));
//   mg::Tensor y = layer->forward(tgt, memory, {.tgt_mask = causal});   // tgt [B, L, 256], memory [B, S, 256]
#pragma once
#include <memory>

#include "mixgrad/nn/transformer.h"

namespace mg::nn {

// The masks of a decoder's forward, each optional (undefined), with MultiheadAttention's
// conventions: tgt_mask [L, L] and memory_mask [L, S] (or [B*H, ...]) bool (true = not allowed)
// or floating (added to the scores); the key padding masks bool [B, L] and [B, S] (true = padding).
struct DecoderMasks {
  Tensor tgt_mask;
  Tensor memory_mask;
  Tensor tgt_key_padding_mask;
  Tensor memory_key_padding_mask;
};

using TransformerDecoderLayerOptions = TransformerLayerOptions;

// Post-norm: x = norm1(x + dropout1(self_attn(x)));
//            x = norm2(x + dropout2(multihead_attn(x, memory)));
//            x = norm3(x + dropout3(linear2(dropout(act(linear1(x)))))).
// Pre-norm:  x = x + dropout1(self_attn(norm1(x))); x = x + dropout2(multihead_attn(norm2(x), memory));
//            x = x + dropout3(linear2(dropout(act(linear1(norm3(x)))))).
class TransformerDecoderLayer : public Module {
 public:
  using Options = TransformerDecoderLayerOptions;
  explicit TransformerDecoderLayer(Options options);
  // tgt [B, L, d_model], memory [B, S, d_model] -> [B, L, d_model] (with batch_first = false
  // [L, B, d_model], [S, B, d_model] -> [L, B, d_model]).
  Tensor forward(const Tensor& tgt, const Tensor& memory, const DecoderMasks& masks = {});
  const Options& options() const { return options_; }

  std::shared_ptr<MultiheadAttention> self_attn, multihead_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2, dropout3;
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;

 private:
  Options options_;
};

}  // namespace mg::nn
