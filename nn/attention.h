// MultiheadAttention with PyTorch's parameter names and mask conventions (batch first by default;
// batch_first = false takes PyTorch's default sequence-first layout).
//
//   auto mha = nn::make<nn::MultiheadAttention>({.embed_dim = 256, .num_heads = 4});
//   mg::Tensor y = mha->forward(x, x, x, /*key_padding_mask=*/pad);   // x [B, L, 256] -> [B, L, 256]
#pragma once
#include <memory>
#include <utility>

#include "mixgrad/core/generator.h"
#include "mixgrad/nn/linear.h"
#include "mixgrad/nn/module.h"

namespace mg::nn {

struct MultiheadAttentionOptions {
  int64_t embed_dim = 0;          // E, split over the heads
  int64_t num_heads = 1;          // H, must divide E
  double dropout = 0.0;           // on the attention weights, in training
  bool bias = true;               // in_proj_bias and out_proj.bias
  int64_t kdim = 0;               // features of key (0: embed_dim)
  int64_t vdim = 0;               // features of value (0: embed_dim)
  bool add_bias_kv = false;       // learned bias_k, bias_v appended to the keys and values (one more key)
  bool add_zero_attn = false;     // a key and value of zeros appended after the projections (one more key)
  bool batch_first = true;        // false: PyTorch's default layout, sequence first (query [L, B, E], ...)
  Generator* generator = nullptr; // dropout stream; the default generator when null
};

// out = out_proj(concat_h softmax(q_h k_h^T / sqrt(E/H) + mask) v_h) with [q; k; v] = in_proj(x).
// The score and value products are lower-precision ops, the softmax an fp32 op (DESIGN §4).
// Parameters: in_proj_weight [3E, E] (xavier_uniform), in_proj_bias [3E] (zeros), out_proj
// (Linear E -> E, bias zeros) — the names and inits of torch.nn.MultiheadAttention. With a kdim or
// vdim other than E, as PyTorch: q_proj_weight [E, E], k_proj_weight [E, kdim] and v_proj_weight
// [E, vdim] (each xavier_uniform) replace in_proj_weight. add_bias_kv appends bias_k and bias_v
// ([1, 1, E], xavier_normal) to the projected keys and values, and add_zero_attn a key and a value
// of zeros to each head's (in that order, as PyTorch): the masks gain a column that never excludes
// them, so a query whose keys are all masked attends to them.
class MultiheadAttention : public Module {
 public:
  using Options = MultiheadAttentionOptions;
  explicit MultiheadAttention(Options options);
  void reset_parameters();

  // query [B, L, E], key [B, S, kdim], value [B, S, vdim] -> [B, L, E]; with batch_first = false
  // query [L, B, E], key [S, B, kdim], value [S, B, vdim] -> [L, B, E] (a transposed view). The
  // masks and the attention weights have the same shapes in both layouts. Unbatched, as PyTorch:
  // query [L, E], key [S, kdim], value [S, vdim], key_padding_mask [S], attn_mask [L, S] or
  // [H, L, S] -> [L, E] (weights [L, S] or [H, L, S]).
  // key_padding_mask: bool [B, S], true = this key is padding (ignored), as PyTorch.
  // attn_mask: bool [L, S] or [B*H, L, S] with true = NOT allowed to attend (PyTorch's
  //   convention), or floating, added to the scores (e.g. -inf above the diagonal for causal).
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value,
                 const Tensor& key_padding_mask = Tensor(), const Tensor& attn_mask = Tensor());
  // forward() and the attention weights (PyTorch's need_weights = true): softmax of the scores
  // with both masks applied, after dropout in training, averaged over the heads [B, L, S]
  // (average_attn_weights) or per head [B, H, L, S]. The output is forward()'s bit for bit in f64
  // and f32; for f16/bf16 (or under autocast) it comes from the composite, whose scores are
  // rounded where the fused op's are not, so it and the weights differ from forward() in the
  // last bits.
  std::pair<Tensor, Tensor> forward_with_weights(const Tensor& query, const Tensor& key, const Tensor& value,
                                                 const Tensor& key_padding_mask = Tensor(),
                                                 const Tensor& attn_mask = Tensor(), bool average_attn_weights = true);

  Tensor in_proj_weight;  // [3E, E], or undefined with a kdim or vdim other than E
  Tensor q_proj_weight;   // [E, E], [E, kdim], [E, vdim]: only with a kdim or vdim other than E
  Tensor k_proj_weight;
  Tensor v_proj_weight;
  Tensor in_proj_bias;    // [3E] or undefined
  Tensor bias_k;          // [1, 1, E]: only with add_bias_kv
  Tensor bias_v;
  std::shared_ptr<Linear> out_proj;

 protected:
  std::string extra_repr() const override;

 private:
  // forward()'s body: an unbatched query run as a batch of one, then attend().
  Tensor attend_any(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& key_padding_mask,
                    const Tensor& attn_mask, Tensor* weights);
  // Batched inputs in the given layout; fills *weights ([B, H, L, S]) when given.
  Tensor attend(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& key_padding_mask,
                const Tensor& attn_mask, Tensor* weights, bool batch_first);
  Options options_;
};

}  // namespace mg::nn
