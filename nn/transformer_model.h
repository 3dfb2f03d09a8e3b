// Stacks of Transformer layers and the whole encoder-decoder model (batch first by default), with PyTorch's
// names ("layers.0.self_attn.in_proj_weight", "encoder.norm.weight", ...) so state dicts move
// between torch.nn.TransformerEncoder / TransformerDecoder / Transformer and these:
//
//   nn::Transformer model({.d_model = 256, .nhead = 4, .num_encoder_layers = 3, .num_decoder_layers = 3,
//                          .dim_feedforward = 1024});
//   mg::Tensor y = model.forward(src, tgt, {.tgt_mask = nn::generate_square_subsequent_mask(tgt.size(1)),
//                                           .src_key_padding_mask = src_pad});   // [B, L, 256]
//
// Unlike PyTorch, whose stacks deep-copy one layer (so every layer of a TransformerEncoder starts
// with the same weights), each layer here is built, and initialised, on its own.
#pragma once
#include <cstdint>
#include <memory>

#include "mixgrad/nn/container.h"
#include "mixgrad/nn/transformer.h"
#include "mixgrad/nn/transformer_decoder.h"

namespace mg::nn {

// [size, size] mask with -inf above the diagonal and 0 elsewhere (PyTorch's
// Transformer.generate_square_subsequent_mask): position i attends to positions 0..i. Floating
// dtypes only (f32 by default).
Tensor generate_square_subsequent_mask(int64_t size, TensorOptions options = {});

struct TransformerEncoderOptions {
  TransformerLayerOptions layer;  // every layer's options
  int64_t num_layers = 1;
  bool norm = false;              // a final LayerNorm(d_model, layer_norm_eps, bias): PyTorch's `norm` argument
};

// num_layers TransformerEncoderLayers, then the optional final norm.
class TransformerEncoder : public UnaryModule {
 public:
  using Options = TransformerEncoderOptions;
  explicit TransformerEncoder(Options options);
  // src [B, S, d_model] ([S, B, d_model] with the layers' batch_first = false); mask and src_key_padding_mask as TransformerEncoderLayer's, given to every layer.
  Tensor forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask);
  Tensor forward(const Tensor& src) override { return forward(src, Tensor(), Tensor()); }
  TransformerEncoderLayer& layer(std::size_t i) const { return *layers->at<TransformerEncoderLayer>(i); }
  const Options& options() const { return options_; }

  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<LayerNorm> norm;  // null without Options::norm

 private:
  Options options_;
};

struct TransformerDecoderOptions {
  TransformerLayerOptions layer;
  int64_t num_layers = 1;
  bool norm = false;
};

// num_layers TransformerDecoderLayers over one memory, then the optional final norm.
class TransformerDecoder : public Module {
 public:
  using Options = TransformerDecoderOptions;
  explicit TransformerDecoder(Options options);
  // tgt [B, L, d_model], memory [B, S, d_model] (sequence first with the layers' batch_first =
  // false); the masks given to every layer.
  Tensor forward(const Tensor& tgt, const Tensor& memory, const DecoderMasks& masks = {});
  TransformerDecoderLayer& layer(std::size_t i) const { return *layers->at<TransformerDecoderLayer>(i); }
  const Options& options() const { return options_; }

  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<LayerNorm> norm;

 private:
  Options options_;
};

// PyTorch's defaults (the "Attention Is All You Need" base model).
struct TransformerOptions {
  int64_t d_model = 512;
  int64_t nhead = 8;
  int64_t num_encoder_layers = 6;
  int64_t num_decoder_layers = 6;
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  Activation activation = Activation::ReLU;
  double layer_norm_eps = 1e-5;
  bool norm_first = false;
  bool bias = true;
  bool batch_first = true;         // false: src [S, B, d_model], tgt [L, B, d_model] (PyTorch's default)
  Generator* generator = nullptr;  // dropout stream; the default generator when null
};

// Every mask optional, with MultiheadAttention's conventions: src_mask [S, S], tgt_mask [L, L],
// memory_mask [L, S] (bool, true = not allowed, or floating, added); the key padding masks bool
// [B, S], [B, L], [B, S] (true = padding). memory_key_padding_mask is usually src_key_padding_mask.
struct TransformerMasks {
  Tensor src_mask;
  Tensor tgt_mask;
  Tensor memory_mask;
  Tensor src_key_padding_mask;
  Tensor tgt_key_padding_mask;
  Tensor memory_key_padding_mask;
};

// encoder: TransformerEncoder with a final norm; decoder: TransformerDecoder with a final norm.
// Every parameter with more than one dim is re-drawn with xavier_uniform_ (PyTorch's
// _reset_parameters).
class Transformer : public Module {
 public:
  using Options = TransformerOptions;
  explicit Transformer(Options options = {});
  void reset_parameters();
  // src [B, S, d_model], tgt [B, L, d_model] -> [B, L, d_model]: decoder(tgt, encoder(src)); with
  // batch_first = false [S, B, d_model], [L, B, d_model] -> [L, B, d_model].
  Tensor forward(const Tensor& src, const Tensor& tgt, const TransformerMasks& masks = {});
  const Options& options() const { return options_; }

  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<TransformerDecoder> decoder;

 private:
  Options options_;
};

}  // namespace mg::nn
