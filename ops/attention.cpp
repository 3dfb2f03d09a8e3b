#include "mixgrad/ops/attention.h"

#include <cmath>
#include <utility>

#include "mixgrad/core/autocast_state.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/ops/attention_fused.h"
#include "mixgrad/ops/loss.h"
#include "mixgrad/ops/norm.h"
#include "mixgrad/ops/ops.h"

namespace mg {

double attention_scale(const Tensor& q, std::optional<double> scale) {
  // E = 0: the scores are empty sums (0) whatever the scale, so the weights are uniform, as
  // PyTorch's; the default 1/sqrt(0) = inf would make them inf * 0 = NaN.
  const int64_t e = q.size(-1);
  return scale.value_or(e == 0 ? 1.0 : 1.0 / std::sqrt(double(e)));
}

Tensor attention_probs(const char* op, const Tensor& q, const Tensor& k, const Tensor& mask, bool is_causal,
                       double s) {
  const int64_t lq = q.size(-2), lk = k.size(-2);
  // [..., Lq, Lk], lower precision under autocast. Scores rounded to f16 (f16 operands, or f16
  // autocast) take the scale on q before the product, as PyTorch scales its operands: an unscaled
  // q.k above 65504 (8188 * sqrt(E) for E = 64) would be inf before the scale could bring it
  // down. Otherwise (f32's range) the scale follows the product, as the fused kernels apply it,
  // so the two paths agree bit for bit in f32/f64.
  const AutocastState& ac = autocast_state(q.device().type);
  const bool f16_scores = q.dtype() == DType::F16 || k.dtype() == DType::F16 ||
                          (ac.enabled && ac.dtype == DType::F16 && q.dtype() != DType::F64);
  Tensor scores = f16_scores ? matmul(q * s, transpose(k, -1, -2)) : matmul(q, transpose(k, -1, -2)) * s;
  if (mask.defined()) {
    const Shape want = scores.shape();
    const Shape b = broadcast_shapes(mask.shape(), want, op);
    MG_CHECK(b == want, ShapeError, op, ": mask ", describe(mask), " cannot be broadcast to the scores [..., ",
             lq, ", ", lk, "] = ", want);
    if (mask.dtype() == DType::Bool) {
      // false where masked: compared with a bool scalar (scalar_like would make it an i64)
      scores = masked_fill(scores, eq(mask, scalar_tensor(0.0, {.dtype = DType::Bool, .device = mask.device()})), -INFINITY);
    } else {
      MG_CHECK(is_floating(mask.dtype()), DTypeError, op,
               ": expected a bool or floating mask, got ", describe(mask));
      // In the scores' dtype (as PyTorch requires of its float masks), so the weights keep the
      // dtype of the value product: an f32 mask must not turn a bf16 model's attention into f32.
      scores = scores + (mask.dtype() == scores.dtype() ? mask : mask.to(scores.dtype()));
    }
  }
  if (is_causal) {
    const TensorOptions i64{.dtype = DType::I64, .device = q.device()};
    const Tensor above = gt(arange(0, lk, 1, i64).unsqueeze(0), arange(0, lq, 1, i64).unsqueeze(1));  // [Lq, Lk]
    scores = masked_fill(scores, above, -INFINITY);
  }
  if (lk > 0) {  // no keys: nothing to mask, and no row maximum to take
    // A query row whose keys are all masked (a causal mask over left padding, say) gets zero
    // weights, as PyTorch's safe softmax: softmax of an all -inf row is NaN, and the NaN reached
    // every key and value gradient through the backward (0 * NaN) even when the loss never read
    // the row. Such rows are softmaxed from zeros instead (finite) and then zeroed, so their
    // gradients are 0. Without a mask a row is dead only when every score overflowed to -inf;
    // it is treated the same, as the fused kernels treat any row whose maximum is -inf.
    const Tensor row_max = amax(scores, {-1}, /*keepdim=*/true);  // [..., Lq, 1]
    const Tensor dead = eq(row_max, scalar_like(-INFINITY, row_max));
    const Tensor w = softmax(where(dead, scalar_like(0.0, scores), scores), -1);
    return where(dead, scalar_like(0.0, w), w);
  }
  return softmax(scores, -1);  // [..., Lq, Lk], f32 under autocast
}

namespace {

// The weights of scaled_dot_product_attention (check_operands ran first; the mask is checked
// here); `op` names the caller in errors.
Tensor attention_weights(const char* op, const Tensor& q, const Tensor& k, const Tensor& mask, double dropout_p,
                         bool is_causal, std::optional<double> scale, Generator* gen) {
  MG_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, Error, op, ": dropout_p must be in [0, 1], got ", dropout_p);
  Tensor weights = attention_probs(op, q, k, mask, is_causal, attention_scale(q, scale));
  if (dropout_p > 0.0) weights = dropout(weights, dropout_p, /*training=*/true, gen);
  return weights;
}

// q, k (and v when given) defined, at least 2-D, with matching features (and positions).
void check_operands(const char* op, const Tensor& q, const Tensor& k, const Tensor* v) {
  MG_CHECK(q.defined() && k.defined() && (!v || v->defined()), Error, op, ": query, key",
           v ? " and value" : "", " must be defined");
  MG_CHECK(q.dim() >= 2 && k.dim() >= 2 && (!v || v->dim() >= 2), ShapeError, op, ": expected query, key",
           v ? " and value" : "", " with at least 2 dims ([..., L, E]); got query ", describe(q), ", key ",
           describe(k), v ? ", value " + describe(*v) : std::string());
  MG_CHECK(k.size(-1) == q.size(-1), ShapeError, op, ": query has ", q.size(-1), " features but key has ",
           k.size(-1), "; got query ", describe(q), ", key ", describe(k));
  MG_CHECK(!v || v->size(-2) == k.size(-2), ShapeError, op, ": key has ", k.size(-2), " positions but value has ",
           v ? v->size(-2) : 0, "; got key ", describe(k), ", value ", v ? describe(*v) : std::string());
}

// Grouped-query attention's key or value [..., Hkv, L, E] with each head repeated `groups` times
// in place ([..., Hkv * groups, L, E], head h at h*groups .. h*groups+groups-1): the gradient sums
// over each group through expand's backward.
Tensor repeat_heads(const Tensor& t, int64_t groups) {
  if (groups == 1) return t;
  Shape grouped = t.shape();
  grouped.insert(grouped.end() - 2, groups);  // [..., Hkv, groups, L, E]
  Shape heads = t.shape();
  heads[heads.size() - 3] *= groups;
  return reshape(expand(t.unsqueeze(-3), grouped), heads);
}

// enable_gqa's checks (PyTorch's): q, k and v have a head dim (-3), and the key's and the value's
// head counts each divide the query's. Returns the query heads per key head and per value head.
std::pair<int64_t, int64_t> gqa_groups(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  MG_CHECK(q.dim() >= 3 && k.dim() >= 3 && v.dim() >= 3, ShapeError, op,
           ": enable_gqa needs query, key and value with a head dim ([..., H, L, E]); got query ", describe(q),
           ", key ", describe(k), ", value ", describe(v));
  const int64_t hq = q.size(-3), hk = k.size(-3), hv = v.size(-3);
  auto divides = [hq](int64_t h) { return h > 0 ? hq % h == 0 : hq == 0; };
  MG_CHECK(divides(hk) && divides(hv), ShapeError, op,
           ": enable_gqa needs the key's and the value's heads to divide the query's; got query ", describe(q),
           " (", hq, " heads), key ", describe(k), " (", hk, "), value ", describe(v), " (", hv, ")");
  return {hk > 0 ? hq / hk : 1, hv > 0 ? hq / hv : 1};
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                    double dropout_p, bool is_causal, std::optional<double> scale,
                                    Generator* gen, bool enable_gqa) {
  const char* op = "scaled_dot_product_attention";
  check_operands(op, q, k, &v);
  if (enable_gqa) {
    const auto [k_groups, v_groups] = gqa_groups(op, q, k, v);
    if (k_groups != 1 || v_groups != 1) {
      return scaled_dot_product_attention(q, repeat_heads(k, k_groups), repeat_heads(v, v_groups), mask, dropout_p,
                                          is_causal, scale, gen);
    }
  }
  MG_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, Error, op, ": dropout_p must be in [0, 1], got ", dropout_p);
  if (fused_attention_applies(q, k, v, mask, dropout_p)) {
    return fused_attention(q, k, v, mask, dropout_p, is_causal, attention_scale(q, scale), gen);
  }
  return matmul(attention_weights(op, q, k, mask, dropout_p, is_causal, scale, gen), v);  // [..., Lq, Ev]
}

Tensor scaled_dot_product_attention_weights(const Tensor& q, const Tensor& k, const Tensor& mask, double dropout_p,
                                            bool is_causal, std::optional<double> scale, Generator* gen) {
  const char* op = "scaled_dot_product_attention_weights";
  check_operands(op, q, k, nullptr);
  return attention_weights(op, q, k, mask, dropout_p, is_causal, scale, gen);
}

}  // namespace mg
