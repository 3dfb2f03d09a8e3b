// Op cases of fused attention (ops/attention_fused.h): `attention` called through the dispatcher
// (scaled_dot_product_attention would take its composite where the op has no kernel), plain, with
// bool and floating masks, causal, dropout on a fixed Philox stream, and strided operands; and
// `attention_backward` from statistics computed with public ops (independently of the forward
// kernel), returning dq, dk and dv flattened into one tensor. Added last, so the seeds of the
// earlier cases did not move.
#include <cmath>
#include <optional>

#include "core/factory.h"
#include "op_cases.h"
#include "ops/attention_args.h"
#include "ops/dispatcher.h"

namespace mg::optable {
namespace {

Gen normal(const Shape& s, uint64_t seed, double scale = 1.0) {
  std::vector<double> v = randn_values(shape_numel(s), seed);
  for (double& x : v) x *= scale;
  return [v, s](DType dt) { return make_input(v, s, dt); };
}
// A bool mask (true = attend) of the given pattern, whatever the dtype asked for.
Gen bool_mask(std::vector<double> v, Shape s) {
  return [v = std::move(v), s = std::move(s)](DType) { return to(make_input(v, s, DType::F64), DType::Bool); };
}

AttentionArgs args(double scale, bool mask, bool bool_mask, bool causal, double p = 0.0) {
  AttentionArgs a;
  a.scale = scale;
  a.mask = mask;
  a.bool_mask = bool_mask;
  a.causal = causal;
  a.dropout_p = p;
  a.seed = 1234;
  a.offset = 8;
  return a;
}

Tensor run_attention(const Tensors& in, const AttentionArgs& a) { return dispatch(OpId::attention, in, a.attrs())[0]; }

// The row statistics the forward returns, with public ops in the compute dtype: {max, 1/Σexp} of
// the masked scores (a row whose keys are all masked: {0, 0}).
Tensor row_stats(const Tensor& q, const Tensor& k, const Tensor* mask, const AttentionArgs& a) {
  const DType c = q.dtype() == DType::F64 ? DType::F64 : DType::F32;
  Tensor s = matmul(to(q, c), transpose(to(k, c), -1, -2)) * a.scale;
  if (mask) {
    s = mask->dtype() == DType::Bool ? masked_fill(s, eq(*mask, scalar_tensor(0.0, {.dtype = DType::Bool, .device = mask->device()})), -INFINITY) : s + to(*mask, c);
  }
  if (a.causal) {
    const TensorOptions i64{.dtype = DType::I64, .device = q.device()};
    s = masked_fill(s, gt(arange(0, k.size(-2), 1, i64).unsqueeze(0), arange(0, q.size(-2), 1, i64).unsqueeze(1)),
                    -INFINITY);
  }
  const Tensor m = amax(s, {-1}, true);
  const Tensor dead = eq(m, scalar_like(-INFINITY, m));
  const Tensor total = sum(exp(s - where(dead, scalar_like(0.0, m), m)), {-1}, true);
  const Tensor inv = where(dead, scalar_like(0.0, total), reciprocal(total));
  return cat({where(dead, scalar_like(0.0, m), m), inv}, -1);
}

// The statistics input of an attention_backward case, from its q, k (and mask) generators: in f32
// for f16/bf16/f32 (f64 for f64), as the forward returns them; computed on the CPU before the
// inputs move to a device. (An f64 reference run reads the same values widened.)
Gen stats_of(Gen q, Gen k, std::optional<Gen> mask, AttentionArgs a) {
  return [q, k, mask, a](DType dt) {
    const Tensor m = mask ? (*mask)(dt) : Tensor();
    return row_stats(q(dt), k(dt), mask ? &m : nullptr, a);
  };
}

// in: (grad, q, k, v, stats[, mask]) -> dq, dk, dv flattened.
Tensor run_attention_backward(const Tensors& in, const AttentionArgs& a) {
  const Tensors r = dispatch(OpId::attention_backward, in, a.attrs());
  return cat({reshape(r[0], {-1}), reshape(r[1], {-1}), reshape(r[2], {-1})});
}

// An attention_backward case: (grad, q, k, v, stats[, mask]).
OpCase backward_case(std::string name, Gen grad, Gen q, Gen k, Gen v, std::optional<Gen> mask, AttentionArgs a) {
  std::vector<Gen> gens{std::move(grad), q, k, std::move(v), stats_of(q, k, mask, a)};
  if (mask) gens.push_back(*mask);
  OpCase c = make_case(OpId::attention_backward, std::move(name), std::move(gens),
                       [a](const Tensors& in) { return run_attention_backward(in, a); }, {});
  c.own_dtype_inputs = {4};  // the statistics: f32 for f16/bf16
  return c;
}

}  // namespace

void add_attention_cases(std::vector<OpCase>& cases) {
  using O = OpId;
  // [B, Lq, E] x [B, Lk, E] x [B, Lk, Ev]
  cases.push_back(make_case(O::attention, "attention/plain",
                            {normal({2, 3, 4}, 9101), normal({2, 5, 4}, 9102), normal({2, 5, 3}, 9103)},
                            [](const Tensors& in) { return run_attention(in, args(0.5, false, false, false)); },
                            {0, 1, 2}));
  // [B, H, Lq, E] with a bool key-padding mask [B, 1, 1, Lk] and the causal mask: batch 1's first
  // query row sees only padding (a dead row: zero output and gradients).
  cases.push_back(make_case(
      O::attention, "attention/bool_mask_causal",
      {normal({2, 2, 4, 3}, 9104), normal({2, 2, 5, 3}, 9105), normal({2, 2, 5, 2}, 9106),
       bool_mask({1, 1, 1, 1, 0, 0, 1, 1, 1, 1}, {2, 1, 1, 5})},
      [](const Tensors& in) { return run_attention(in, args(0.7, true, true, true)); }, {0, 1, 2}));
  // A floating mask [Lq, Lk] added to the scores.
  cases.push_back(make_case(O::attention, "attention/float_mask",
                            {normal({3, 4, 2}, 9107), normal({3, 6, 2}, 9108), normal({3, 6, 5}, 9109),
                             normal({4, 6}, 9110, 2.0)},
                            [](const Tensors& in) { return run_attention(in, args(1.0, true, false, false)); },
                            {0, 1, 2}));
  // Dropout p = 0.3 on a fixed stream: the same mask in every dtype.
  cases.push_back(make_case(O::attention, "attention/dropout",
                            {normal({2, 4, 3}, 9111), normal({2, 6, 3}, 9112), normal({2, 6, 4}, 9113)},
                            [](const Tensors& in) { return run_attention(in, args(0.6, false, false, false, 0.3)); },
                            {0, 1, 2}));
  // Transposed (strided) q, k and v.
  cases.push_back(make_case(O::attention, "attention/strided",
                            {transposed(normal({2, 3, 4}, 9114)), transposed(normal({2, 3, 5}, 9115)),
                             transposed(normal({2, 2, 5}, 9116))},
                            [](const Tensors& in) { return run_attention(in, args(0.8, false, false, false)); },
                            {0, 1, 2}));
  cases.push_back(backward_case("attention_backward/plain", normal({2, 3, 3}, 9117), normal({2, 3, 4}, 9118),
                                normal({2, 5, 4}, 9119), normal({2, 5, 3}, 9120), std::nullopt,
                                args(0.5, false, false, false)));
  cases.push_back(backward_case("attention_backward/bool_mask_causal_dropout", normal({2, 4, 2}, 9121),
                                normal({2, 4, 3}, 9122), normal({2, 5, 3}, 9123), normal({2, 5, 2}, 9124),
                                bool_mask({1, 1, 1, 0, 0, 0, 0, 1, 1, 1}, {2, 1, 5}),
                                args(0.9, true, true, true, 0.25)));
  cases.push_back(backward_case("attention_backward/float_mask_strided", normal({3, 4, 2}, 9125),
                                transposed(normal({3, 2, 4}, 9126)), normal({3, 3, 2}, 9127),
                                transposed(normal({3, 2, 3}, 9128)), normal({3, 4, 3}, 9129, 2.0),
                                args(1.1, true, false, false)));
}

}  // namespace mg::optable
