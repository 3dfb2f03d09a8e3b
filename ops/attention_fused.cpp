// The fused attention ops' rules (shape/dtype inference, backward) and their entry point; the
// kernels are ops/cpu/attention_kernels.cpp and cuda/kernels/attention.cu. When they run:
// ops/attention_fused.h.
#include "mixgrad/ops/attention_fused.h"

#include <cmath>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/core/graph_rng.h"
#include "mixgrad/ops/attention_args.h"
#include "mixgrad/ops/backward_ctx.h"
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/infer.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/op_rule.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/register.h"

namespace mg {
namespace {

DType stats_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

Shape with_last_two(const Tensor& t, int64_t a, int64_t b) {
  Shape s(t.shape().begin(), t.shape().end() - 2);
  s.push_back(a);
  s.push_back(b);
  return s;
}

// The checks both ops share: q [B.., Lq, E], k [B.., Lk, E], v [B.., Lk, Ev] of one floating dtype
// and equal leading dims, and the mask (the input at `mask_at`) broadcastable to [B.., Lq, Lk].
void check_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask,
               const AttentionArgs& a, const OpAttrs& attrs) {
  // Dropout reads its Philox stream from attrs.ints ({seed, offset[, device base]}, as
  // fused_attention reserves it): without them every call would draw the same stream (0, 0).
  MG_CHECK(!(a.dropout_p > 0.0) || attrs.ints.size() == 2 || attrs.ints.size() == 3, Error, op, ": dropout p = ",
           a.dropout_p, " needs its Philox stream in attrs.ints ({seed, offset[, device base]}), got ",
           attrs.ints.size(), " ints\n  hint: call scaled_dot_product_attention, which reserves it");
  check_floating(op, q);
  MG_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), DTypeError, op,
           ": query, key and value must have one dtype, got ", describe(q), ", ", describe(k), ", ", describe(v));
  MG_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), ShapeError, op,
           ": expected query, key and value with the same number of dims (at least 2), got ", describe(q), ", ",
           describe(k), ", ", describe(v));
  for (int64_t d = 0; d + 2 < q.dim(); ++d) {
    MG_CHECK(k.size(d) == q.size(d) && v.size(d) == q.size(d), ShapeError, op,
             ": query, key and value must have the same leading dims, got ", describe(q), ", ", describe(k), ", ",
             describe(v));
  }
  MG_CHECK(k.size(-1) == q.size(-1) && v.size(-2) == k.size(-2), ShapeError, op,
           ": expected query [.., Lq, E], key [.., Lk, E] and value [.., Lk, Ev], got ", describe(q), ", ",
           describe(k), ", ", describe(v));
  MG_CHECK(a.dropout_p >= 0.0 && a.dropout_p < 1.0, Error, op, ": dropout p must be in [0, 1), got ", a.dropout_p);
  if (mask) {
    const Tensor& m = *mask;
    MG_CHECK(a.bool_mask ? m.dtype() == DType::Bool : m.dtype() == q.dtype(), DTypeError, op, ": expected a ",
             a.bool_mask ? "bool" : dtype_name(q.dtype()), " mask (attrs.mode), got ", describe(m));
    const Shape want = with_last_two(q, q.size(-2), k.size(-2));
    MG_CHECK(m.dim() <= q.dim() && broadcast_shapes(m.shape(), want, op) == want, ShapeError, op, ": mask ",
             describe(m), " cannot be broadcast to the scores ", want);
  }
}

InferResult infer_attention(const Tensors& in, const OpAttrs& attrs) {
  const AttentionArgs a = AttentionArgs::from(attrs);
  MG_CHECK(in.size() == (a.mask ? 4u : 3u), Error, "attention: expected (q, k, v", a.mask ? ", mask" : "",
           ") as attrs.mode says, got ", in.size(), " inputs");
  const Tensor &q = in[0], &k = in[1], &v = in[2];
  check_qkv("attention", q, k, v, a.mask ? &in[3] : nullptr, a, attrs);
  return {{{with_last_two(q, q.size(-2), v.size(-1)), q.dtype()},
           {with_last_two(q, q.size(-2), 2), stats_dtype(q.dtype())}},
          q.dtype()};
}

InferResult infer_attention_backward(const Tensors& in, const OpAttrs& attrs) {
  const char* op = "attention_backward";
  const AttentionArgs a = AttentionArgs::from(attrs);
  MG_CHECK(in.size() == (a.mask ? 6u : 5u), Error, op, ": expected (grad, q, k, v, stats", a.mask ? ", mask" : "",
           ") as attrs.mode says, got ", in.size(), " inputs");
  const Tensor &g = in[0], &q = in[1], &k = in[2], &v = in[3], &st = in[4];
  check_qkv(op, q, k, v, a.mask ? &in[5] : nullptr, a, attrs);
  MG_CHECK(g.dtype() == q.dtype() && g.shape() == with_last_two(q, q.size(-2), v.size(-1)), ShapeError, op,
           ": expected grad ", with_last_two(q, q.size(-2), v.size(-1)), " ", dtype_name(q.dtype()), ", got ",
           describe(g));
  MG_CHECK(st.dtype() == stats_dtype(q.dtype()) && st.shape() == with_last_two(q, q.size(-2), 2), ShapeError, op,
           ": expected stats ", with_last_two(q, q.size(-2), 2), " ", dtype_name(stats_dtype(q.dtype())),
           " (the forward's second output), got ", describe(st));
  return {{{q.shape(), q.dtype()}, {k.shape(), q.dtype()}, {v.shape(), q.dtype()}}, q.dtype()};
}

Tensor to_compute(const Tensor& t) {
  return t.dtype() == DType::F16 || t.dtype() == DType::BF16 ? to(t, DType::F32) : t;
}

// The gradient from public ops when the backward is itself recorded (create_graph): the same
// formulas as the kernel (dv = P̃ᵀ g, dP = (g vᵀ) ⊙ keep / (1 - p), dS = P (dP - Σ P dP) s,
// dq = dS k, dk = dSᵀ q, P̃ the dropped P) in f32 (f64 for f64), differentiable on any device.
Tensors attention_bw_composite(const BackwardCtx& c, const Tensor& grad, const AttentionArgs& a) {
  const Tensor q = to_compute(c.input(0)), k = to_compute(c.input(1)), v = to_compute(c.input(2));
  const Tensor mask = a.mask ? c.input(3) : Tensor();
  const Tensor g = to_compute(grad);
  const Tensor m = mask.defined() && !a.bool_mask ? to(mask, q.dtype()) : mask;
  const Tensor p = attention_probs("attention_backward", q, k, m, a.causal, a.scale);
  Tensor keep;  // the forward's dropout, as 1 / (1 - p) or 0 per weight
  if (a.dropout_p > 0.0) {
    NoGradGuard no_grad;
    OpAttrs d{.ints = a.attrs().ints, .alpha = a.dropout_p};  // the same stream position (and capture base)
    const Tensor bits = dispatch(OpId::dropout, {ones(p.shape(), {.dtype = p.dtype(), .device = p.device()})}, d)[1];
    keep = where(bits, scalar_like(1.0 / (1.0 - a.dropout_p), p), scalar_like(0.0, p));
  }
  const Tensor pd = keep.defined() ? p * keep : p;
  const Tensor dpd = matmul(g, transpose(v, -1, -2));
  const Tensor dp = keep.defined() ? dpd * keep : dpd;
  // A dead row (every key masked: P all 0; a live row sums to 1) gets no gradient, as in the
  // kernel and the composite's where(dead, 0, w).
  const Tensor dead = eq(sum(p, {-1}, /*keepdim=*/true), scalar_like(0.0, p));
  const Tensor ds_live = p * (dp - sum(p * dp, {-1}, /*keepdim=*/true)) * a.scale;
  const Tensor ds = where(dead, scalar_like(0.0, ds_live), ds_live);
  Tensors grads(c.num_inputs());
  if (c.needs_grad(0)) grads[0] = matmul(ds, k);
  if (c.needs_grad(1)) grads[1] = matmul(transpose(ds, -1, -2), q);
  if (c.needs_grad(2)) grads[2] = matmul(transpose(pd, -1, -2), g);
  return grads;
}

Tensors attention_bw(const BackwardCtx& c, const Tensors& g) {
  const AttentionArgs a = AttentionArgs::from(c.attrs());
  if (!g[0].defined()) return Tensors(c.num_inputs());  // only the output is differentiable
  if (GradMode::is_enabled()) return attention_bw_composite(c, g[0], a);
  const Tensor q = c.input(0);
  Tensors in{g[0].dtype() == q.dtype() ? g[0] : to(g[0], q.dtype()), q, c.input(1), c.input(2), c.output(1)};
  if (a.mask) in.push_back(c.input(3));
  const Tensors r = dispatch(OpId::attention_backward, in, c.attrs());
  Tensors grads(c.num_inputs());
  for (int i = 0; i < 3; ++i) {
    if (c.needs_grad(i)) grads[std::size_t(i)] = r[std::size_t(i)];
  }
  return grads;
}

}  // namespace

bool fused_attention_applies(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                             double dropout_p) {
  if (!is_floating(q.dtype()) || k.dtype() != q.dtype() || v.dtype() != q.dtype()) return false;
  if (k.device() != q.device() || v.device() != q.device()) return false;
  if (k.dim() != q.dim() || v.dim() != q.dim()) return false;
  for (int64_t d = 0; d + 2 < q.dim(); ++d) {
    if (k.size(d) != q.size(d) || v.size(d) != q.size(d)) return false;
  }
  if (!(dropout_p < 1.0)) return false;
  if (mask.defined()) {
    if (mask.device() != q.device() || mask.dim() > q.dim()) return false;
    // A mask that does not broadcast to the scores goes to the composite, which names the error
    // before its dropout takes anything from the generator.
    for (int64_t d = 1; d <= mask.dim(); ++d) {
      const int64_t want = d == 1 ? k.size(-2) : q.size(-d);
      if (mask.size(-d) != 1 && mask.size(-d) != want) return false;
    }
    if (mask.dtype() != DType::Bool) {
      if (!is_floating(mask.dtype())) return false;  // the composite names the error
      if (mask.requires_grad() && GradMode::is_enabled()) return false;  // the op gives the mask no gradient
    }
  }
  // Kernels for q's dtype and, for f32, for both dtypes autocast may lower it to (the op never
  // reads the autocast state itself: DESIGN §1; the dispatcher's hook casts).
  const DeviceType dev = q.device().type;
  const auto has = [&](DType t) { return has_kernel(OpId::attention, dev, t) && has_kernel(OpId::attention_backward, dev, t); };
  return has(q.dtype()) && (q.dtype() != DType::F32 || (has(DType::F16) && has(DType::BF16)));
}

Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double dropout_p,
                       bool is_causal, double scale, Generator* gen) {
  AttentionArgs a;
  a.scale = scale;
  a.dropout_p = dropout_p;
  a.causal = is_causal;
  Tensors in{q, k, v};
  if (mask.defined()) {
    a.mask = true;
    a.bool_mask = mask.dtype() == DType::Bool;
    // A floating mask in the operands' dtype, as the composite adds it (autocast then casts both).
    in.push_back(a.bool_mask || mask.dtype() == q.dtype() ? mask : to(mask, q.dtype()));
  }
  if (dropout_p > 0.0) {
    // The weights' Philox stream, reserved as dropout() on the [.., Lq, Lk] weights would.
    Generator& g = gen ? *gen : default_generator();
    // The CUDA kernels can read their stream position from device memory (graph-safe); the CPU's cannot.
    if (!q.device().is_cuda()) check_not_captured(g, "scaled_dot_product_attention's fused dropout on the CPU");
    const int64_t weights = shape_numel(with_last_two(q, q.size(-2), k.size(-2)));
    const PhiloxArgs r = reserve_graph_safe(g, uint64_t(weights + 3) / 4);
    a.seed = r.seed;
    a.offset = r.offset;
    a.device_base = int64_t(reinterpret_cast<std::intptr_t>(r.device_base));
  }
  return dispatch(OpId::attention, in, a.attrs())[0];
}

void register_attention_rules() {
  set_op_rule(OpId::attention,
              {.infer = infer_attention,
               .backward = attention_bw,
               .save = kSaveInput(0) | kSaveInput(1) | kSaveInput(2) | kSaveInput(3) | kSaveOutput(1)});
  set_op_rule(OpId::attention_backward, {.infer = infer_attention_backward});
}

}  // namespace mg
