// TransformerEncoderLayer (batch first, or sequence first with batch_first = false), post-norm (original Transformer, BERT) or pre-norm, with
// PyTorch's submodule names so its state dict loads into torch.nn.TransformerEncoderLayer and back.
//
//   auto layer = nn::make<nn::TransformerEncoderLayer>({.d_model = 256, .nhead = 4, .dim_feedforward = 1024});
//   mg::Tensor y = layer->forward(x, {}, pad);      // x [B, L, 256], pad bool [B, L] (true = padding)
#pragma once
#include <optional>
#include <memory>

#include "mixgrad/core/generator.h"
#include "mixgrad/nn/attention.h"
#include "mixgrad/nn/dropout.h"
#include "mixgrad/nn/linear.h"
#include "mixgrad/nn/normalization.h"

namespace mg::nn {

enum class Activation { ReLU, GELU };

// The options of one encoder or decoder layer (PyTorch's constructor arguments).
struct TransformerLayerOptions {
  int64_t d_model = 0;
  int64_t nhead = 1;
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  // The feed-forward's dropout after the activation (the submodule "dropout"): `dropout` when
  // unset, as PyTorch's layers. BERT sets 0: Hugging Face's BERT has no dropout there.
  std::optional<double> activation_dropout;
  Activation activation = Activation::ReLU;
  double layer_norm_eps = 1e-5;
  bool norm_first = false;         // false: x = norm(x + f(x)); true: x = x + f(norm(x))
  bool bias = true;
  // false: PyTorch's default layout, sequence first (src [L, B, d_model]); the masks keep their shapes
  bool batch_first = true;
  Generator* generator = nullptr;  // dropout stream; the default generator when null
};
using TransformerEncoderLayerOptions = TransformerLayerOptions;

// Post-norm: x = norm1(x + dropout1(self_attn(x))); x = norm2(x + dropout2(linear2(dropout(act(linear1(x)))))).
// Pre-norm:  x = x + dropout1(self_attn(norm1(x))); x = x + dropout2(linear2(dropout(act(linear1(norm2(x)))))).
class TransformerEncoderLayer : public UnaryModule {
 public:
  using Options = TransformerEncoderLayerOptions;
  explicit TransformerEncoderLayer(Options options);
  // src [B, L, d_model] ([L, B, d_model] with batch_first = false); src_mask and src_key_padding_mask as MultiheadAttention's attn_mask and
  // key_padding_mask.
  Tensor forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask);
  Tensor forward(const Tensor& src) override { return forward(src, Tensor(), Tensor()); }
  const Options& options() const { return options_; }

  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2;
  std::shared_ptr<LayerNorm> norm1, norm2;

 private:
  Options options_;
};

namespace detail {
// The layers' feed-forward block: dropout_out(linear2(dropout(act(linear1(x))))).
Tensor transformer_feed_forward(const Tensor& x, Linear& linear1, Dropout& dropout, Linear& linear2,
                                Dropout& dropout_out, Activation activation);
// d_model and dim_feedforward checked, naming the layer (MultiheadAttention checks nhead and dropout).
void check_transformer_layer_options(const TransformerLayerOptions& o, const char* layer);
}  // namespace detail

}  // namespace mg::nn
