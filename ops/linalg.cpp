// Linear-algebra ops (matmul, mm, bmm, addmm, baddbmm, linear): public functions, shape/dtype
// inference and backward rules. Operands must share one floating dtype — no silent promotion
// (autocast lowers them before inference when it is on). Backward rules are written with these
// same public ops, so double backward works; gradients of broadcast operands come back in the
// broadcast shape and the dispatcher sums them to the input's shape.
#include "mixgrad/ops/backward_ctx.h"
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/infer.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/register.h"

namespace mg {
namespace {

// ---- inference ----

void check_operands(const char* op, const Tensors& in) {
  for (const Tensor& t : in) check_floating(op, t);
  for (std::size_t i = 1; i < in.size(); ++i) check_same_dtype(op, in[0], in[i]);
}

void check_rank(const char* op, const Tensor& a, const Tensor& b, int64_t rank, const char* hint) {
  MG_CHECK(a.dim() == rank && b.dim() == rank, ShapeError, op, ": expected ", rank,
           "-D tensors, got a ", describe(a), " and b ", describe(b), "\n  hint: ", hint);
}

void check_inner(const char* op, const Tensor& a, const Tensor& b) {
  MG_CHECK(a.size(-1) == b.size(-2), ShapeError, op, ": a has ", a.size(-1),
           " columns but b has ", b.size(-2), " rows; got a ", describe(a), ", b ", describe(b));
}

// c must broadcast to `shape` without growing it (it is added to the product).
void check_addend(const char* op, const Tensor& c, const Shape& shape) {
  bool ok = c.dim() <= int64_t(shape.size());
  for (int64_t i = 1; ok && i <= c.dim(); ++i) {
    const int64_t cs = c.shape()[std::size_t(c.dim() - i)];
    ok = cs == 1 || cs == shape[shape.size() - std::size_t(i)];
  }
  MG_CHECK(ok, ShapeError, op, ": c ", describe(c), " cannot be broadcast to the product's shape ",
           shape);
}

InferResult infer_matmul(const Tensors& in, const OpAttrs&) {
  const Tensor& a = in[0];
  const Tensor& b = in[1];
  check_operands("matmul", in);
  MG_CHECK(a.dim() >= 1 && b.dim() >= 1, ShapeError,
           "matmul: both operands need at least 1 dimension, got a ", describe(a), " and b ",
           describe(b), "\n  hint: multiply by a 0-d tensor with mul");
  const int64_t kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  MG_CHECK(a.size(-1) == kb, ShapeError, "matmul: a's last dim (", a.size(-1), ") does not match b's ",
           b.dim() == 1 ? "size" : "second to last dim", " (", kb, "); got a ", describe(a), ", b ",
           describe(b));
  const Shape ba = a.dim() > 2 ? Shape(a.shape().begin(), a.shape().end() - 2) : Shape{};
  const Shape bb = b.dim() > 2 ? Shape(b.shape().begin(), b.shape().end() - 2) : Shape{};
  const std::size_t nd = std::max(ba.size(), bb.size());
  Shape out(nd);
  for (std::size_t i = 0; i < nd; ++i) {
    const int64_t sa = i < nd - ba.size() ? 1 : ba[i - (nd - ba.size())];
    const int64_t sb = i < nd - bb.size() ? 1 : bb[i - (nd - bb.size())];
    MG_CHECK(sa == sb || sa == 1 || sb == 1, ShapeError, "matmul: batch dims ", ba, " and ", bb,
             " cannot be broadcast together; got a ", describe(a), ", b ", describe(b));
    out[i] = sa == 1 ? sb : sa;
  }
  if (a.dim() >= 2) out.push_back(a.size(-2));
  if (b.dim() >= 2) out.push_back(b.size(-1));
  return {{{out, a.dtype()}}, a.dtype()};
}

InferResult infer_mm(const Tensors& in, const OpAttrs&) {
  check_operands("mm", in);
  check_rank("mm", in[0], in[1], 2, "use matmul for 1-D or batched operands");
  check_inner("mm", in[0], in[1]);
  return {{{{in[0].size(0), in[1].size(1)}, in[0].dtype()}}, in[0].dtype()};
}

void check_bmm(const char* op, const Tensor& a, const Tensor& b) {
  check_rank(op, a, b, 3, "use matmul to broadcast batch dims, mm for 2-D operands");
  MG_CHECK(a.size(0) == b.size(0), ShapeError, op, ": batch sizes differ (", a.size(0), " and ",
           b.size(0), "); got a ", describe(a), ", b ", describe(b),
           "\n  hint: use matmul to broadcast batch dims");
  check_inner(op, a, b);
}

InferResult infer_bmm(const Tensors& in, const OpAttrs&) {
  check_operands("bmm", in);
  check_bmm("bmm", in[0], in[1]);
  return {{{{in[0].size(0), in[0].size(1), in[1].size(2)}, in[0].dtype()}}, in[0].dtype()};
}

InferResult infer_addmm(const Tensors& in, const OpAttrs&) {
  check_operands("addmm", in);
  check_rank("addmm", in[1], in[2], 2, "use baddbmm for batched operands");
  check_inner("addmm", in[1], in[2]);
  const Shape shape{in[1].size(0), in[2].size(1)};
  check_addend("addmm", in[0], shape);
  return {{{shape, in[0].dtype()}}, in[0].dtype()};
}

InferResult infer_baddbmm(const Tensors& in, const OpAttrs&) {
  check_operands("baddbmm", in);
  check_bmm("baddbmm", in[1], in[2]);
  const Shape shape{in[1].size(0), in[1].size(1), in[2].size(2)};
  check_addend("baddbmm", in[0], shape);
  return {{{shape, in[0].dtype()}}, in[0].dtype()};
}

InferResult infer_linear(const Tensors& in, const OpAttrs&) {
  MG_CHECK(in.size() == 2 || in.size() == 3, Error,
           "linear: expected (input, weight) or (input, weight, bias), got ", in.size(), " tensors");
  check_operands("linear", in);
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  MG_CHECK(w.dim() == 2, ShapeError, "linear: expected a 2-D weight [out, in], got weight ",
           describe(w));
  MG_CHECK(x.dim() >= 1, ShapeError, "linear: expected an input [..., in] with at least 1 dim, got input ",
           describe(x));
  MG_CHECK(x.size(-1) == w.size(1), ShapeError, "linear: input has ", x.size(-1),
           " features but weight expects ", w.size(1), "; got input ", describe(x), ", weight ",
           describe(w));
  if (in.size() == 3) {
    MG_CHECK(in[2].dim() == 1 && in[2].size(0) == w.size(0), ShapeError,
             "linear: expected a bias of shape ", Shape{w.size(0)}, ", got bias ", describe(in[2]));
  }
  Shape out = x.shape();
  out.back() = w.size(0);
  return {{{out, x.dtype()}}, x.dtype()};
}

// ---- backward rules ----

Tensor mT(const Tensor& x) { return transpose(x, -1, -2); }

// x [..., d] as a matrix [rows, d], rows = the product of the leading dims. Written out rather
// than reshape(x, {-1, d}), which cannot infer -1 beside a 0 (an empty batch or d = 0).
Tensor as_rows(const Tensor& x) {
  int64_t rows = 1;
  for (int64_t i = 0; i + 1 < x.dim(); ++i) rows *= x.size(i);
  return reshape(x, {rows, x.size(-1)});
}

// x [B..., r, c] as [B, r, c], B = the product of the batch dims (written out, as as_rows).
Tensor as_batches(const Tensor& x) {
  int64_t batches = 1;
  for (int64_t i = 0; i + 2 < x.dim(); ++i) batches *= x.size(i);
  return reshape(x, {batches, x.size(-2), x.size(-1)});
}

// sum over the batch of x[b] @ y[b]^T for x [B, r, m], y [B, c, m]: one GEMM [r, B m] @ [B m, c],
// so a shared operand's gradient is accumulated in f32 and rounded once (per-batch products
// summed afterwards were rounded twice in f16/bf16, and a partial past the range was inf, or NaN
// beside an opposite one, where the total was finite).
Tensor batch_summed_product(const Tensor& x, const Tensor& y) {
  const int64_t batches = x.size(0), r = x.size(1), m = x.size(2), c = y.size(1);
  const Tensor xs = reshape(permute(x, {1, 0, 2}), {r, batches * m});  // [r, B m]
  const Tensor ys = reshape(permute(y, {0, 2, 1}), {batches * m, c});  // [B m, c]
  return mm(xs, ys);                                                  // [r, c]
}

// Saves for y = f(.., a, b) with gradients da needing b and db needing a (inputs ia, ib).
template <int ia, int ib>
uint32_t product_saves(uint32_t needs) {
  return ((needs >> ia) & 1u ? kSaveInput(ib) : 0u) | ((needs >> ib) & 1u ? kSaveInput(ia) : 0u);
}

// y = a @ b (2-D): dA = g @ b^T, dB = a^T @ g
Tensors mm_bw(const BackwardCtx& c, const Tensors& g) {
  return {c.needs_grad(0) ? mm(g[0], mT(c.input(1))) : Tensor(),
          c.needs_grad(1) ? mm(mT(c.input(0)), g[0]) : Tensor()};
}

// y[i] = a[i] @ b[i]: dA[i] = g[i] @ b[i]^T, dB[i] = a[i]^T @ g[i]
Tensors bmm_bw(const BackwardCtx& c, const Tensors& g) {
  return {c.needs_grad(0) ? bmm(g[0], mT(c.input(1))) : Tensor(),
          c.needs_grad(1) ? bmm(mT(c.input(0)), g[0]) : Tensor()};
}

// y = a @ b (numpy): with 1-D operands promoted to a row [1, k] (a) or a column [k, 1] (b) and
// the batch dims broadcast, dA = g @ b^T and dB = a^T @ g. The promoted dim is squeezed away
// again; gradients over broadcast batch dims come back in the broadcast shape and the dispatcher
// sums them to the operand's shape. 1-D · 1-D: y = sum_i a_i b_i, so dA = g b, dB = g a.
Tensors matmul_bw(const BackwardCtx& c, const Tensors& grads) {
  const Tensor& g = grads[0];
  const int64_t da = int64_t(c.input_shape(0).size());
  const int64_t db = int64_t(c.input_shape(1).size());
  const bool need_a = c.needs_grad(0), need_b = c.needs_grad(1);
  const Tensor a = need_b ? c.input(0) : Tensor();
  const Tensor b = need_a ? c.input(1) : Tensor();
  Tensor ga, gb;
  if (da == 1 && db == 1) {
    if (need_a) ga = g * b;
    if (need_b) gb = g * a;
  } else if (da == 1) {
    // a [k], b [..., k, m], g [..., m]
    const Tensor g2 = unsqueeze(g, -2);                              // [..., 1, m]
    if (need_a) {
      // a shared by every batch entry: one GEMM, sum_b b[b] g[b] = [k, B m] @ [B m, 1].
      ga = db > 2 ? squeeze(batch_summed_product(as_batches(b), as_batches(g2)), -1)  // [k]
                  : squeeze(matmul(g2, mT(b)), -2);
    }
    if (need_b) gb = matmul(unsqueeze(a, -1), g2);                   // [..., k, m]
  } else if (db == 1) {
    // a [..., n, k], b [k], g [..., n]
    const Tensor g2 = unsqueeze(g, -1);                              // [..., n, 1]
    if (need_a) ga = matmul(g2, unsqueeze(b, 0));                    // [..., n, k]
    if (need_b) {
      // b shared by every row of every batch entry: one GEMM over the flattened rows, [k, N] @ [N, 1].
      gb = da > 2 ? squeeze(mm(mT(as_rows(a)), as_rows(g2)), -1) : squeeze(matmul(mT(a), g2), -1);  // [k]
    }
  } else {
    // a [..., n, k], b [..., k, m], g [bcast..., n, m]
    if (need_a) {
      if (da == 2 && db > 2) {
        // a shared by every batch entry: one GEMM, sum_b g[b] b[b]^T = [n, B m] @ [B m, k].
        ga = batch_summed_product(as_batches(g), as_batches(b));     // [n, k]
      } else {
        ga = matmul(g, mT(b));                                       // [bcast..., n, k]
      }
    }
    if (need_b) {
      if (db == 2 && da > 2) {
        // b shared by every batch entry: one GEMM over the flattened rows, [k, N] @ [N, m].
        gb = mm(mT(as_rows(a)), as_rows(g));                         // [k, m]
      } else {
        gb = matmul(mT(a), g);                                       // [bcast..., k, m]
      }
    }
  }
  return {ga, gb};
}

// y = beta c + alpha a @ b: dC = beta g (summed to c's shape), dA = alpha g @ b^T,
// dB = alpha a^T @ g. The batched form (baddbmm) is the same per batch entry.
template <bool batched>
Tensors addmm_bw(const BackwardCtx& c, const Tensors& g) {
  const double alpha = c.attrs().alpha, beta = c.attrs().beta;
  auto prod = [](const Tensor& x, const Tensor& y) { return batched ? bmm(x, y) : mm(x, y); };
  auto scaled = [](const Tensor& x, double s) { return s == 1.0 ? x : x * s; };
  Tensor gc, ga, gb;
  if (c.needs_grad(0)) gc = scaled(g[0], beta);
  if (c.needs_grad(1)) ga = scaled(prod(g[0], mT(c.input(2))), alpha);
  if (c.needs_grad(2)) gb = scaled(prod(mT(c.input(1)), g[0]), alpha);
  return {gc, ga, gb};
}

// y = x @ W^T + bias, x [..., in], W [out, in], g [..., out]:
// dx = g @ W, dW = g^T @ x over all leading dims flattened ([out, N] @ [N, in]),
// dbias = g summed over the leading dims (the dispatcher's sum_to to [out]).
Tensors linear_bw(const BackwardCtx& c, const Tensors& grads) {
  const Tensor& g = grads[0];
  Tensor gx, gw, gbias;
  if (c.needs_grad(0)) gx = matmul(g, c.input(1));
  if (c.needs_grad(1)) {
    gw = mm(mT(as_rows(g)), as_rows(c.input(0)));
  }
  if (c.num_inputs() > 2 && c.needs_grad(2)) gbias = g;
  return {gx, gw, gbias};
}

}  // namespace

void register_linalg_rules() {
  set_op_rule(OpId::matmul, {.infer = infer_matmul, .backward = matmul_bw, .saves = product_saves<0, 1>});
  set_op_rule(OpId::mm, {.infer = infer_mm, .backward = mm_bw, .saves = product_saves<0, 1>});
  set_op_rule(OpId::bmm, {.infer = infer_bmm, .backward = bmm_bw, .saves = product_saves<0, 1>});
  set_op_rule(OpId::addmm, {.infer = infer_addmm, .backward = addmm_bw<false>, .saves = product_saves<1, 2>});
  set_op_rule(OpId::baddbmm, {.infer = infer_baddbmm, .backward = addmm_bw<true>, .saves = product_saves<1, 2>});
  set_op_rule(OpId::linear, {.infer = infer_linear, .backward = linear_bw, .saves = product_saves<0, 1>});
}

// ---- public API ----
Tensor matmul(const Tensor& a, const Tensor& b) { return dispatch1(OpId::matmul, {a, b}); }
Tensor mm(const Tensor& a, const Tensor& b) { return dispatch1(OpId::mm, {a, b}); }
Tensor bmm(const Tensor& a, const Tensor& b) { return dispatch1(OpId::bmm, {a, b}); }
Tensor addmm(const Tensor& c, const Tensor& a, const Tensor& b, double beta, double alpha) {
  return dispatch1(OpId::addmm, {c, a, b}, {.alpha = alpha, .beta = beta});
}
Tensor baddbmm(const Tensor& c, const Tensor& a, const Tensor& b, double beta, double alpha) {
  return dispatch1(OpId::baddbmm, {c, a, b}, {.alpha = alpha, .beta = beta});
}
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  // PyTorch's other forms, on the one linear op (so its cast policy applies): a 1-D weight [in]
  // gives [...] (one output feature, its dim dropped), and a 0-d or [1] bias adds to every output
  // feature. Anything else goes to the op unchanged, whose checks name it.
  if (weight.defined() && weight.dim() == 1) {
    const Tensor row = unsqueeze(weight, 0);
    const bool scalar_bias = bias.defined() && bias.numel() == 1 && bias.dim() <= 1;
    Tensor y = linear(x, row, scalar_bias ? reshape(bias, {1}) : bias);
    return squeeze(y, -1);
  }
  if (bias.defined() && weight.defined() && weight.dim() == 2 && bias.numel() == 1 && bias.dim() <= 1 &&
      weight.size(0) != 1) {
    return linear(x, weight, contiguous(expand(reshape(bias, {1}), {weight.size(0)})));
  }
  if (bias.defined()) return dispatch1(OpId::linear, {x, weight, bias});
  return dispatch1(OpId::linear, {x, weight});
}

}  // namespace mg
