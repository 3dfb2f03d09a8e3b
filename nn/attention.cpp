#include "mixgrad/nn/attention.h"

#include <cmath>
#include <limits>

#include "mixgrad/core/factory.h"
#include "mixgrad/nn/init.h"
#include "mixgrad/ops/attention.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn {

MultiheadAttention::MultiheadAttention(Options o) : Module("MultiheadAttention"), options_(o) {
  MG_CHECK(o.embed_dim > 0 && o.num_heads > 0 && o.embed_dim % o.num_heads == 0, Error,
           "MultiheadAttention: num_heads (", o.num_heads, ") must be positive and divide embed_dim (", o.embed_dim,
           ")");
  MG_CHECK(o.dropout >= 0 && o.dropout <= 1, Error, "MultiheadAttention: dropout must be in [0, 1], got ", o.dropout);
  MG_CHECK(o.kdim >= 0 && o.vdim >= 0, Error, "MultiheadAttention: kdim and vdim must be >= 0 (0: embed_dim), got ",
           o.kdim, " and ", o.vdim);
  const int64_t e = o.embed_dim;
  if (options_.kdim == 0) options_.kdim = e;
  if (options_.vdim == 0) options_.vdim = e;
  if (options_.kdim == e && options_.vdim == e) {
    in_proj_weight = register_parameter("in_proj_weight", empty({3 * e, e}));
  } else {  // PyTorch's separate projections (its _qkv_same_embed_dim = False)
    q_proj_weight = register_parameter("q_proj_weight", empty({e, e}));
    k_proj_weight = register_parameter("k_proj_weight", empty({e, options_.kdim}));
    v_proj_weight = register_parameter("v_proj_weight", empty({e, options_.vdim}));
  }
  if (o.bias) in_proj_bias = register_parameter("in_proj_bias", empty({3 * e}));
  if (o.add_bias_kv) {
    bias_k = register_parameter("bias_k", empty({1, 1, e}));
    bias_v = register_parameter("bias_v", empty({1, 1, e}));
  }
  out_proj = register_module<Linear>("out_proj", {.in = e, .out = e, .bias = o.bias});
  reset_parameters();
}

void MultiheadAttention::reset_parameters() {
  if (in_proj_weight.defined()) {
    init::xavier_uniform_(in_proj_weight);
  } else {
    init::xavier_uniform_(q_proj_weight);
    init::xavier_uniform_(k_proj_weight);
    init::xavier_uniform_(v_proj_weight);
  }
  if (in_proj_bias.defined()) init::zeros_(in_proj_bias);
  if (bias_k.defined()) {
    init::xavier_normal_(bias_k);
    init::xavier_normal_(bias_v);
  }
  if (out_proj->bias.defined()) init::zeros_(out_proj->bias);
}

Tensor MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const Tensor& key_padding_mask, const Tensor& attn_mask) {
  return attend_any(query, key, value, key_padding_mask, attn_mask, nullptr);
}

std::pair<Tensor, Tensor> MultiheadAttention::forward_with_weights(const Tensor& query, const Tensor& key,
                                                                   const Tensor& value, const Tensor& key_padding_mask,
                                                                   const Tensor& attn_mask, bool average_attn_weights) {
  Tensor weights;  // [B, H, L, S]; B = 1 for an unbatched query
  Tensor out = attend_any(query, key, value, key_padding_mask, attn_mask, &weights);
  if (average_attn_weights) weights = mean(weights, {1});
  return {out, query.dim() == 2 ? weights.squeeze(0) : weights};
}

Tensor MultiheadAttention::attend_any(const Tensor& query, const Tensor& key, const Tensor& value,
                                      const Tensor& key_padding_mask, const Tensor& attn_mask, Tensor* weights) {
  if (!query.defined() || query.dim() != 2) {
    return attend(query, key, value, key_padding_mask, attn_mask, weights, options_.batch_first);
  }
  // Unbatched, as PyTorch: query [L, E], key [S, kdim], value [S, vdim], key_padding_mask [S],
  // attn_mask [L, S] or [H, L, S]; run as a batch of one.
  const std::string name = layer_name();
  auto shape_of = [](const Tensor& t) { return t.defined() ? str_cat(t.shape()) : std::string("undefined"); };
  MG_CHECK(key.defined() && value.defined() && key.dim() == 2 && value.dim() == 2, ShapeError, name,
           ": an unbatched query [L, ", options_.embed_dim, "] takes key [S, ", options_.kdim, "] and value [S, ",
           options_.vdim, "], got query ", query.shape(), ", key ", shape_of(key), ", value ", shape_of(value));
  MG_CHECK(!key_padding_mask.defined() || key_padding_mask.dim() == 1, ShapeError, name,
           ": an unbatched query takes key_padding_mask [S], got key_padding_mask ", key_padding_mask.shape());
  const Tensor out = attend(query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0),
                            key_padding_mask.defined() ? key_padding_mask.unsqueeze(0) : key_padding_mask, attn_mask,
                            weights, /*batch_first=*/true);
  return out.squeeze(0);
}

Tensor MultiheadAttention::attend(const Tensor& query, const Tensor& key, const Tensor& value,
                                  const Tensor& key_padding_mask, const Tensor& attn_mask, Tensor* weights,
                                  bool batch_first) {
  auto scope = module_scope(*this);
  const int64_t e = options_.embed_dim, h = options_.num_heads, d = e / h;
  const int64_t kdim = options_.kdim, vdim = options_.vdim;
  const std::string name = layer_name();
  // Checked in the layout given (batch_first = false: sequence first), then run batch first.
  const bool bf = batch_first;
  const int64_t bd = bf ? 0 : 1, sd = bf ? 1 : 0;  // the batch and sequence dims as given
  const char* q_layout = bf ? "[B, L, " : "[L, B, ";
  auto shape_of = [](const Tensor& t) { return t.defined() ? str_cat(t.shape()) : std::string("undefined"); };
  MG_CHECK(query.defined() && query.dim() == 3 && query.size(2) == e, ShapeError, name,
           ": expected query ", q_layout, e, "], got query ", shape_of(query));
  const int64_t b = query.size(bd), l = query.size(sd);
  MG_CHECK(key.defined() && value.defined() && key.dim() == 3 && value.dim() == 3 && key.size(bd) == b &&
               value.size(bd) == b && key.size(2) == kdim && value.size(2) == vdim && key.size(sd) == value.size(sd),
           ShapeError, name, ": expected key ", bf ? "[" : "[S, ", bf ? str_cat(b, ", S, ") : str_cat(b, ", "), kdim,
           "] and value ", bf ? "[" : "[S, ", bf ? str_cat(b, ", S, ") : str_cat(b, ", "), vdim,
           "] (batch of the query), got query ", query.shape(), ", key ", shape_of(key), ", value ", shape_of(value));
  const int64_t s = key.size(sd);
  auto batch_major = [&](const Tensor& t) { return bf ? t : t.transpose(0, 1); };

  // Projections with slices of the packed in_proj weight (or the separate ones): q/k/v
  // [B, *, E | kdim | vdim] -> [B, *, E].
  auto project = [&](const Tensor& x, int64_t which) {
    const Tensor w = in_proj_weight.defined() ? in_proj_weight.narrow(0, which * e, e)
                     : which == 0           ? q_proj_weight
                     : which == 1           ? k_proj_weight
                                            : v_proj_weight;
    const Tensor bias = in_proj_bias.defined() ? in_proj_bias.narrow(0, which * e, e) : Tensor();
    return linear(x, w, bias);
  };
  Tensor k_e = project(batch_major(key), 1), v_e = project(batch_major(value), 2);
  if (options_.add_bias_kv) {  // one more key and value: the learned biases, the same for every batch
    k_e = cat({k_e, bias_k.expand({b, 1, e})}, 1);
    v_e = cat({v_e, bias_v.expand({b, 1, e})}, 1);
  }
  // [B, *, E] -> [B, H, *, d]
  auto heads = [&](const Tensor& x) { return x.reshape({b, x.size(1), h, d}).transpose(1, 2); };
  const Tensor q = heads(project(batch_major(query), 0));
  Tensor k = heads(k_e), v = heads(v_e);
  if (options_.add_zero_attn) {  // and a key and value of zeros in every head
    const Tensor zero = zeros({b, h, 1, d}, {.dtype = k.dtype(), .device = k.device()});
    k = cat({k, zero}, 2);
    v = cat({v, zero}, 2);
  }
  const int64_t extra = k.size(2) - s;  // keys added above, never masked

  // One additive mask [B or 1, H or 1, L, S] from both masks (true = excluded -> -inf).
  Tensor mask;
  const double neg_inf = -std::numeric_limits<double>::infinity();
  if (attn_mask.defined()) {
    const bool ok = (attn_mask.dim() == 2 && attn_mask.size(0) == l && attn_mask.size(1) == s) ||
                    (attn_mask.dim() == 3 && attn_mask.size(0) == b * h && attn_mask.size(1) == l &&
                     attn_mask.size(2) == s);
    MG_CHECK(attn_mask.dtype() == DType::Bool || is_floating(attn_mask.dtype()), DTypeError, name,
             ": attn_mask must be bool (true = not allowed) or floating (added to the scores), got ",
             describe(attn_mask));
    MG_CHECK(ok, ShapeError, name, ": expected attn_mask [", l, ", ", s, "] or [", b * h, ", ", l, ", ", s,
             "] (B*H, L, S), got attn_mask ", attn_mask.shape(), " for query ", query.shape(), ", key ", key.shape());
    Tensor m = attn_mask.dtype() == DType::Bool
                   ? masked_fill(zeros(attn_mask.shape(), {.device = attn_mask.device()}), attn_mask, neg_inf)
                   : attn_mask;
    mask = attn_mask.dim() == 3 ? m.reshape({b, h, l, s}) : m;
  }
  if (key_padding_mask.defined()) {
    MG_CHECK(key_padding_mask.dim() == 2 && key_padding_mask.size(0) == b && key_padding_mask.size(1) == s,
             ShapeError, name, ": expected key_padding_mask [", b, ", ", s, "] (B, S), got key_padding_mask ",
             key_padding_mask.shape(), " for key ", key.shape());
    MG_CHECK(key_padding_mask.dtype() == DType::Bool, DTypeError, name,
             ": key_padding_mask must be bool (true = padding), got ", describe(key_padding_mask));
    Tensor pad = masked_fill(zeros({b, 1, 1, s}, {.device = key_padding_mask.device()}),
                             key_padding_mask.reshape({b, 1, 1, s}), neg_inf);
    mask = mask.defined() ? add(mask, pad) : pad;
  }
  if (mask.defined() && extra > 0) {  // the added keys: columns of 0 (allowed)
    Shape cols = mask.shape();
    cols.back() = extra;
    mask = cat({mask, zeros(cols, {.dtype = mask.dtype(), .device = mask.device()})}, -1);
  }

  const double p = is_training() ? options_.dropout : 0.0;
  Tensor att;
  if (weights) {  // the same ops as scaled_dot_product_attention, with the weights kept
    *weights = scaled_dot_product_attention_weights(q, k, mask, p, false, std::nullopt, options_.generator);
    att = matmul(*weights, v);
  } else {
    att = scaled_dot_product_attention(q, k, v, mask, p, false, std::nullopt, options_.generator);
  }
  // [B, H, L, d] -> [B, L, E] (or [L, B, E])
  return batch_major((*out_proj)(att.transpose(1, 2).reshape({b, l, e})));
}

std::string MultiheadAttention::extra_repr() const {
  std::string s = str_cat("embed_dim=", options_.embed_dim, ", num_heads=", options_.num_heads, ", dropout=",
                          options_.dropout);
  if (options_.kdim != options_.embed_dim) s += str_cat(", kdim=", options_.kdim);
  if (options_.vdim != options_.embed_dim) s += str_cat(", vdim=", options_.vdim);
  if (options_.add_bias_kv) s += ", add_bias_kv=True";
  if (options_.add_zero_attn) s += ", add_zero_attn=True";
  if (!options_.batch_first) s += ", batch_first=False";
  return s;
}

}  // namespace mg::nn
