#include "mixgrad/nn/transformer_model.h"

#include <limits>

#include "mixgrad/core/factory.h"
#include "mixgrad/nn/init.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn {

Tensor generate_square_subsequent_mask(int64_t size, TensorOptions options) {
  MG_CHECK(size >= 0, ShapeError, "generate_square_subsequent_mask: size must be >= 0, got ", size);
  MG_CHECK(is_floating(options.dtype), DTypeError,
           "generate_square_subsequent_mask: the mask is added to the scores, so its dtype must be floating, got ",
           options.dtype, " (a bool mask: true above the diagonal, from arange comparisons)");
  const Tensor i = arange(0, size, 1, {.dtype = DType::I64, .device = options.device});
  const Tensor above = gt(i.unsqueeze(0), i.unsqueeze(1));  // [row, col]: col > row
  return masked_fill(zeros({size, size}, {.dtype = options.dtype, .device = options.device}), above,
                     -std::numeric_limits<double>::infinity());
}

namespace {

std::shared_ptr<LayerNorm> final_norm(Module& owner, bool wanted, const TransformerLayerOptions& o) {
  if (!wanted) return nullptr;
  return owner.register_module<LayerNorm>("norm", {.shape = {o.d_model}, .eps = o.layer_norm_eps, .bias = o.bias});
}

void check_num_layers(int64_t n, const char* stack) {
  MG_CHECK(n >= 1, Error, stack, ": num_layers must be >= 1, got ", n);
}

}  // namespace

TransformerEncoder::TransformerEncoder(Options o) : UnaryModule("TransformerEncoder"), options_(o) {
  check_num_layers(o.num_layers, "TransformerEncoder");
  layers = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < o.num_layers; ++i) layers->push_back(make<TransformerEncoderLayer>(o.layer));
  norm = final_norm(*this, o.norm, o.layer);
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask) {
  auto scope = module_scope(*this);
  Tensor x = src;
  for (std::size_t i = 0; i < layers->size(); ++i) {
    TransformerEncoderLayer& l = layer(i);
    x = l.call(x, [&](const Tensor& in) { return l.forward(in, mask, src_key_padding_mask); });  // runs its hooks
  }
  return norm ? (*norm)(x) : x;
}

TransformerDecoder::TransformerDecoder(Options o) : Module("TransformerDecoder"), options_(o) {
  check_num_layers(o.num_layers, "TransformerDecoder");
  layers = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < o.num_layers; ++i) layers->push_back(make<TransformerDecoderLayer>(o.layer));
  norm = final_norm(*this, o.norm, o.layer);
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const DecoderMasks& masks) {
  auto scope = module_scope(*this);
  Tensor x = tgt;
  for (std::size_t i = 0; i < layers->size(); ++i) x = layer(i).forward(x, memory, masks);
  return norm ? (*norm)(x) : x;
}

Transformer::Transformer(Options o) : Module("Transformer"), options_(o) {
  const TransformerLayerOptions layer{.d_model = o.d_model,
                                      .nhead = o.nhead,
                                      .dim_feedforward = o.dim_feedforward,
                                      .dropout = o.dropout,
                                      .activation = o.activation,
                                      .layer_norm_eps = o.layer_norm_eps,
                                      .norm_first = o.norm_first,
                                      .bias = o.bias,
                                      .batch_first = o.batch_first,
                                      .generator = o.generator};
  encoder = register_module<TransformerEncoder>(
      "encoder", {.layer = layer, .num_layers = o.num_encoder_layers, .norm = true});
  decoder = register_module<TransformerDecoder>(
      "decoder", {.layer = layer, .num_layers = o.num_decoder_layers, .norm = true});
  reset_parameters();
}

void Transformer::reset_parameters() {
  for (const auto& [name, p] : named_parameters())
    if (p.dim() > 1) init::xavier_uniform_(p);
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const TransformerMasks& masks) {
  auto scope = module_scope(*this);
  const int64_t e = options_.d_model;
  auto shape_of = [](const Tensor& t) { return t.defined() ? str_cat(t.shape()) : std::string("undefined"); };
  const bool bf = options_.batch_first;
  // batched, or both unbatched ([S, e] and [L, e]) as PyTorch
  MG_CHECK(src.defined() && tgt.defined() && src.dim() == tgt.dim() && (src.dim() == 3 || src.dim() == 2), ShapeError,
           "Transformer: expected src ", bf ? "[B, S, " : "[S, B, ", e, "] and tgt ", bf ? "[B, L, " : "[L, B, ", e,
           "] or both unbatched, src [S, ", e, "] and tgt [L, ", e, "], got src ", shape_of(src), ", tgt ", shape_of(tgt));
  const int64_t bd = bf ? 0 : 1;  // the batch dim
  MG_CHECK(src.dim() == 2 || src.size(bd) == tgt.size(bd), ShapeError,
           "Transformer: the batch sizes of src and tgt must be equal, got src ", src.shape(), ", tgt ", tgt.shape());
  MG_CHECK(src.size(-1) == e && tgt.size(-1) == e, ShapeError,
           "Transformer: the feature sizes of src and tgt must equal d_model (", e, "), got src ", src.shape(),
           ", tgt ", tgt.shape());
  const Tensor memory =
      encoder->call(src, [&](const Tensor& in) { return encoder->forward(in, masks.src_mask, masks.src_key_padding_mask); });
  return decoder->forward(tgt, memory,
                          {.tgt_mask = masks.tgt_mask,
                           .memory_mask = masks.memory_mask,
                           .tgt_key_padding_mask = masks.tgt_key_padding_mask,
                           .memory_key_padding_mask = masks.memory_key_padding_mask});
}

}  // namespace mg::nn
