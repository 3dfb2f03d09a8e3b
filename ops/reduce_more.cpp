// The remaining reductions — prod, amax/amin (and max(x)/min(x) over all elements), max/min along
// a dim with indices, argmax/argmin, var/std, norm, logsumexp — and cumsum: public functions,
// inference and backward rules. Kernels: ops/cpu/reduce_more_kernels.cpp. Every backward rule is
// written with public ops (so double backward works) and states its derivative. Denominators that
// can be 0 are replaced by 1 before dividing and the result masked with where(), so neither the
// gradient nor its own gradient picks up a NaN from the masked branch.
#include <cmath>

#include "mixgrad/ops/backward_ctx.h"
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/infer.h"
#include "mixgrad/ops/logical.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/reduce_common.h"
#include "mixgrad/ops/register.h"

namespace mg {
namespace {

// Output dtype of prod and cumsum: floats keep theirs, integers and bool widen to i64 (as sum).
DType widened_dtype(DType t) { return is_floating(t) ? t : DType::I64; }

// The dims reduced by an op along attrs.dim: {dim}, or none for a 0-d input.
std::vector<int64_t> dim_as_dims(int64_t ndim, int64_t dim) {
  return ndim == 0 ? std::vector<int64_t>{} : std::vector<int64_t>{dim};
}

// Rejects a reduction over a dim of size 0 (max, min, argmax, norm with p = ±inf have no identity).
void check_nonempty_dims(const char* op, const Tensor& x, const std::vector<int64_t>& dims) {
  for (int64_t d : dims) {
    MG_CHECK(x.shape()[d] != 0, IndexError, op, ": cannot reduce over an empty dim (dim ", d,
             " has size 0); got ", describe(x), " reduced over dims ", dims,
             "\n  hint: this reduction has no identity; check the slice is non-empty first");
  }
}

InferResult infer_prod(const Tensors& in, const OpAttrs& a) {
  return {{{reduced_shape(in[0].shape(), a.dims, a.keepdim), widened_dtype(in[0].dtype())}}, in[0].dtype()};
}

InferResult infer_extremum(const char* op, const Tensors& in, const OpAttrs& a) {
  check_nonempty_dims(op, in[0], a.dims);
  return {{{reduced_shape(in[0].shape(), a.dims, a.keepdim), in[0].dtype()}}, in[0].dtype()};
}
InferResult infer_amax(const Tensors& in, const OpAttrs& a) { return infer_extremum("amax", in, a); }
InferResult infer_amin(const Tensors& in, const OpAttrs& a) { return infer_extremum("amin", in, a); }

// (values, i64 indices) or just indices, along attrs.dim.
InferResult infer_along_dim(const char* op, const Tensors& in, const OpAttrs& a, bool with_values) {
  const std::vector<int64_t> dims = dim_as_dims(in[0].dim(), a.dim);
  check_nonempty_dims(op, in[0], dims);
  const Shape shape = reduced_shape(in[0].shape(), dims, a.keepdim);
  if (!with_values) return {{{shape, DType::I64}}, in[0].dtype()};
  return {{{shape, in[0].dtype()}, {shape, DType::I64}}, in[0].dtype()};
}
InferResult infer_max_dim(const Tensors& in, const OpAttrs& a) { return infer_along_dim("max", in, a, true); }
InferResult infer_min_dim(const Tensors& in, const OpAttrs& a) { return infer_along_dim("min", in, a, true); }
InferResult infer_argmax(const Tensors& in, const OpAttrs& a) { return infer_along_dim("argmax", in, a, false); }
InferResult infer_argmin(const Tensors& in, const OpAttrs& a) { return infer_along_dim("argmin", in, a, false); }

InferResult infer_floating_reduce(const char* op, const Tensors& in, const OpAttrs& a) {
  check_floating(op, in[0]);
  return {{{reduced_shape(in[0].shape(), a.dims, a.keepdim), in[0].dtype()}}, in[0].dtype()};
}
InferResult infer_var(const Tensors& in, const OpAttrs& a) { return infer_floating_reduce("var", in, a); }
InferResult infer_std(const Tensors& in, const OpAttrs& a) { return infer_floating_reduce("std", in, a); }
InferResult infer_logsumexp(const Tensors& in, const OpAttrs& a) {
  return infer_floating_reduce("logsumexp", in, a);
}
InferResult infer_norm(const Tensors& in, const OpAttrs& a) {
  // ±inf and negative p have no identity over an empty set (the max, the min, a sum of inf
  // powers); PyTorch refuses them too.
  if (std::isinf(a.alpha) || a.alpha < 0) check_nonempty_dims("norm", in[0], a.dims);
  return infer_floating_reduce("norm", in, a);
}

InferResult infer_cumsum(const Tensors& in, const OpAttrs&) {
  return {{{in[0].shape(), widened_dtype(in[0].dtype())}}, in[0].dtype()};
}

// ---- backward helpers ----
Tensor zero_like_scalar(const Tensor& t) { return scalar_like(0.0, t); }
Tensor one_like_scalar(const Tensor& t) { return scalar_like(1.0, t); }
// A reduced tensor (gradient or output) broadcast back over the input shape.
Tensor expanded(const BackwardCtx& c, const Tensor& reduced) {
  return expand_reduced(reduced, c.input_shape(0), c.attrs().dims, c.attrs().keepdim);
}
// t with 0 replaced by 1, for use as a denominator whose 0 entries are masked afterwards.
Tensor nonzero_or_one(const Tensor& t) { return where(eq(t, zero_like_scalar(t)), one_like_scalar(t), t); }
// max(0, N - correction): the divisor of var / std.
double var_divisor(const BackwardCtx& c) {
  const double n = double(reduced_count(c.input_shape(0), c.attrs().dims));
  return std::max(0.0, n - c.attrs().alpha);
}

// ---- backward rules ----
// d prod / d x_i = prod_{j != i} x_j, written so that its own gradient is right too (double
// backward through slices holding zeros, as PyTorch's prod_safe_zeros_backward). Per slice, with
// P the product of its nonzero elements, Q the product of its zero elements (0 in value, but a
// function of them), S their sum (0 in value) and Z their count:
//   at a nonzero x_i:  Q P / x_i         (P / x_i when Z == 0; for Z >= 1 a 0 that still moves
//                                         with the zeros: d/dx_zero is P / x_i when Z == 1)
//   at a zero x_i:     P                 when Z == 1
//                      P (S - x_i)       when Z == 2 (the other zero, times P)
//                      0                 when Z >= 3 (and so are its first derivatives)
// Exact to the second derivative; only third derivatives with three or more zeros are lost.
Tensors prod_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor x = c.input(0);
  const std::vector<int64_t>& dims = c.attrs().dims;
  const Tensor zero = zero_like_scalar(x), one = one_like_scalar(x);
  const Tensor is_zero = eq(x, zero);
  const Tensor x_safe = where(is_zero, one, x);
  const Tensor p = prod(x_safe, dims, /*keepdim=*/true);                     // [kept] P
  const Tensor q = prod(where(is_zero, x, one), dims, /*keepdim=*/true);     // [kept] Q
  const Tensor s = sum(where(is_zero, x, zero), dims, /*keepdim=*/true);     // [kept] S
  const Tensor zeros_n = sum(is_zero, dims, /*keepdim=*/true);               // [kept] i64 Z
  const Tensor at_zero = where(eq(zeros_n, scalar_like(1.0, zeros_n)), p,
                               where(eq(zeros_n, scalar_like(2.0, zeros_n)), p * (s - x), zero));
  return {expanded(c, g[0]) * where(is_zero, at_zero, q * p / x_safe)};
}

// d amax / d x_i = [x_i == amax] / (number of ties in the slice): the gradient is split evenly
// among tied maxima (amin alike). A NaN result equals no element: its slice's gradient is NaN, as
// PyTorch's amax (0/0), so a GradScaler sees it, rather than a silent 0. max()/min() over all
// elements (attrs.mode = kEvenlyToNan) split it among the NaN elements instead, as PyTorch's
// evenly_distribute_backward.
constexpr int64_t kEvenlyToNan = 1;
// g / count, for a gradient split among `count` elements: f16/bf16 divide in f32 and round once
// (the count itself in f16 is inf from 65520 on, which made every share 0; in bf16 it rounds
// from 257 on).
Tensor divided_by_count(const Tensor& g, const Tensor& count) {
  const DType dt = g.dtype();
  if (dt != DType::F16 && dt != DType::BF16) return g / to(count, dt);
  return to(to(g, DType::F32) / to(count, DType::F32), dt);
}
Tensors extremum_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor x = c.input(0);
  const Tensor result = expanded(c, c.output(0));
  Tensor is_extremum = eq(x, result);
  if (c.attrs().mode == kEvenlyToNan) is_extremum = where(ne(result, result), ne(x, x), is_extremum);
  const Tensor ties = sum(is_extremum, c.attrs().dims, /*keepdim=*/true);  // [kept] i64
  const Tensor ge = expanded(c, g[0]);
  const Tensor none = expanded(c, eq(ties, zero_like_scalar(ties)));  // a NaN result
  return {where(is_extremum, divided_by_count(ge, ties), where(none, scalar_like(NAN, ge), zero_like_scalar(ge)))};
}

// d max(x, dim)[0] / d x_i = [i == index]: the gradient is scattered to the index position.
Tensors max_dim_bw(const BackwardCtx& c, const Tensors& g) {
  const Shape& shape = c.input_shape(0);
  if (shape.empty()) return {g[0]};  // 0-d: the value is x itself
  const int64_t dim = c.attrs().dim;
  const Shape kept = reduced_shape(shape, {dim}, /*keepdim=*/true);
  const Tensor index = reshape(c.output(1), kept);
  const Tensor base = zeros(shape, {.dtype = g[0].dtype(), .device = g[0].device()});
  return {scatter_add(base, dim, index, reshape(g[0], kept))};
}

// d var / d x_i = 2 (x_i - mean) / (N - correction). The gradient is scaled by 2 / (N - c) before
// it meets x - mean, as PyTorch's: in f16 a loss-scaled g times x - mean overflowed first.
Tensors var_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor x = c.input(0);
  const Tensor centered = x - mean(x, c.attrs().dims, /*keepdim=*/true);
  return {(expanded(c, g[0]) * (2.0 / var_divisor(c))) * centered};
}

// d std / d x_i = (x_i - mean) / ((N - correction) std), taken as 0 where std == 0; in PyTorch's
// order, g / (2 std) then var's backward: std * (N - correction) as one f16 factor overflowed
// from 65504 on and made the whole gradient 0.
Tensors std_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor x = c.input(0);
  const Tensor s = expanded(c, c.output(0));
  const Tensor centered = x - mean(x, c.attrs().dims, /*keepdim=*/true);
  const Tensor ge = expanded(c, g[0]);
  const Tensor g_var = where(eq(s, zero_like_scalar(s)), zero_like_scalar(ge), ge / (nonzero_or_one(s) * 2.0));
  return {(g_var * (2.0 / var_divisor(c))) * centered};
}

// p = 2:    d ||x|| / d x_i = x_i / ||x||                      (0 where ||x|| == 0)
// p = 1:    sign(x_i)
// p = ±inf: sign(x_i) [|x_i| == ||x||] / (number of ties)       (as amax of |x|)
// p = 0:    0 (a count of nonzeros)
// other p:  sign(x_i) |x_i|^(p-1) / ||x||^(p-1)                (0 where ||x|| == 0; for p < 1 also
//           0 where x_i == 0)
Tensors norm_bw(const BackwardCtx& c, const Tensors& g) {
  const double p = c.attrs().alpha;
  const Tensor x = c.input(0);
  const Tensor ge = expanded(c, g[0]);
  const Tensor zero = zero_like_scalar(ge);
  if (p == 0.0) return {zeros_like(ge)};  // a count: 0 even for an inf or NaN gradient, as PyTorch's
  if (p == 1.0) return {ge * sign(x)};
  const Tensor n = expanded(c, c.output(0));
  if (std::isinf(p)) {
    const Tensor is_extremum = eq(abs(x), n);
    const Tensor ties = sum(is_extremum, c.attrs().dims, /*keepdim=*/true);
    return {where(is_extremum, divided_by_count(ge * sign(x), ties), zero)};
  }
  const Tensor n_is_zero = eq(n, zero_like_scalar(n));
  // x * (g / n), as PyTorch's: g * x first overflowed f16 for a loss-scaled g.
  if (p == 2.0) return {where(n_is_zero, zero, x * (ge / nonzero_or_one(n)))};
  // For p < 1, |0|^(p-1) is inf; sign(0) = 0 makes those entries 0 once |x| is replaced by 1 there.
  const Tensor base = p < 1.0 ? nonzero_or_one(abs(x)) : abs(x);
  const Tensor d = sign(x) * pow(base, p - 1.0) / pow(nonzero_or_one(n), p - 1.0);
  return {where(n_is_zero, zero, ge * d)};
}

// d logsumexp / d x_i = exp(x_i - logsumexp) (the softmax over the reduced dims)
Tensors logsumexp_bw(const BackwardCtx& c, const Tensors& g) {
  return {expanded(c, g[0]) * exp(c.input(0) - expanded(c, c.output(0)))};
}

// d cumsum_j / d x_i = [i <= j], so dx_i = sum_{j >= i} g_j: the reverse cumulative sum, as the
// cumsum of g reversed along dim, reversed back (index_select with n-1 ... 0). Never
// sum(g) - cumsum(g) + g, which cancels (g = [1e8, 1, 1] in f32 gave [1e8, 1, 1], not [1e8, 2, 1])
// and spreads one inf or NaN to every position.
Tensor reverse_cumsum(const Tensor& t, int64_t dim) {
  const Tensor reversed = arange(t.size(dim) - 1, -1, -1, {.dtype = DType::I64, .device = t.device()});
  return index_select(cumsum(index_select(t, dim, reversed), dim), dim, reversed);
}
Tensors cumsum_bw(const BackwardCtx& c, const Tensors& g) {
  if (c.input_shape(0).empty()) return {g[0]};
  return {reverse_cumsum(g[0], c.attrs().dim)};
}
// cumprod along the last dim: dx_i = sum_{j >= i} g_j prod_{k <= j, k != i} x_k. Before a line's
// first zero z that is reverse_cumsum(g y)_i / x_i over the terms j < z (the later ones hold the
// zero: 0, which a NaN or inf after it must not turn into NaN); at z it is reverse_cumsum(g y')_z
// with y' = cumprod(x with x_z := 1), over the terms before the second zero; after z it is 0
// (x_z is a factor of every term). A line of one is a copy (gradient g, whatever x holds).
// Public ops, so the rule is differentiable again; a zero-free line costs the zero bookkeeping
// too (no host read decides). As PyTorch's, an inf before the first zero makes its terms inf / inf.
Tensors cumprod_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor x = c.input(0), y = c.output(0);
  if (x.dim() == 0 || x.size(-1) == 1) return {g[0]};  // y = x
  const int64_t d = x.dim() - 1;
  const Tensor one = one_like_scalar(x), zero_g = zero_like_scalar(g[0]);
  const Tensor is_zero = eq(x, zero_like_scalar(x));
  const Tensor zeros_so_far = cumsum(is_zero, d);  // i64
  const Tensor before_first = eq(zeros_so_far, zero_like_scalar(zeros_so_far));
  const Tensor upto_second = le(zeros_so_far, one_like_scalar(zeros_so_far));
  const Tensor first = logical_and(is_zero, eq(zeros_so_far, one_like_scalar(zeros_so_far)));
  const Tensor left = reverse_cumsum(where(before_first, g[0] * y, zero_g), d) / where(is_zero, one, x);
  const Tensor at_first = reverse_cumsum(where(upto_second, g[0] * cumprod(where(first, one, x), d), zero_g), d);
  return {where(before_first, left, where(first, at_first, zero_g))};
}

OpAttrs dim_attrs(const char* op, const Tensor& x, int64_t dim, bool keepdim) {
  MG_CHECK(x.defined(), Error, op, ": undefined input tensor");
  return {.dim = wrap_dim(dim, x.dim(), op), .keepdim = keepdim};
}

}  // namespace

void register_reduce_rules_extra() {
  const uint32_t in0 = kSaveInput(0), in0_out0 = kSaveInput(0) | kSaveOutput(0);
  set_op_rule(OpId::prod, {.infer = infer_prod, .backward = prod_bw, .save = in0});
  set_op_rule(OpId::amax, {.infer = infer_amax, .backward = extremum_bw, .save = in0_out0});
  set_op_rule(OpId::amin, {.infer = infer_amin, .backward = extremum_bw, .save = in0_out0});
  set_op_rule(OpId::max_dim, {.infer = infer_max_dim, .backward = max_dim_bw, .save = kSaveOutput(1)});
  set_op_rule(OpId::min_dim, {.infer = infer_min_dim, .backward = max_dim_bw, .save = kSaveOutput(1)});
  set_op_rule(OpId::argmax, {.infer = infer_argmax});
  set_op_rule(OpId::argmin, {.infer = infer_argmin});
  set_op_rule(OpId::var, {.infer = infer_var, .backward = var_bw, .save = in0});
  set_op_rule(OpId::std, {.infer = infer_std, .backward = std_bw, .save = in0_out0});
  set_op_rule(OpId::norm, {.infer = infer_norm, .backward = norm_bw, .save = in0_out0});
  set_op_rule(OpId::logsumexp, {.infer = infer_logsumexp, .backward = logsumexp_bw, .save = in0_out0});
  set_op_rule(OpId::cumsum, {.infer = infer_cumsum, .backward = cumsum_bw});
  set_op_rule(OpId::cumprod, {.infer = infer_cumsum, .backward = cumprod_bw, .save = in0 | kSaveOutput(0)});
}

Tensor prod(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return dispatch1(OpId::prod, {x}, reduce_attrs("prod", x, dims, keepdim));
}
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return dispatch1(OpId::amax, {x}, reduce_attrs("amax", x, dims, keepdim));
}
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return dispatch1(OpId::amin, {x}, reduce_attrs("amin", x, dims, keepdim));
}

Tensor max(const Tensor& x) {
  MG_CHECK(x.defined(), Error, "max: undefined input tensor");
  MG_CHECK(x.numel() > 0, IndexError, "max: cannot reduce an empty tensor; got ", describe(x));
  OpAttrs a = reduce_attrs("max", x, {}, false);
  a.mode = kEvenlyToNan;
  return dispatch1(OpId::amax, {x}, a);
}
Tensor min(const Tensor& x) {
  MG_CHECK(x.defined(), Error, "min: undefined input tensor");
  MG_CHECK(x.numel() > 0, IndexError, "min: cannot reduce an empty tensor; got ", describe(x));
  OpAttrs a = reduce_attrs("min", x, {}, false);
  a.mode = kEvenlyToNan;
  return dispatch1(OpId::amin, {x}, a);
}

std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  Tensors out = dispatch(OpId::max_dim, {x}, dim_attrs("max", x, dim, keepdim));
  return {out[0], out[1]};
}
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  Tensors out = dispatch(OpId::min_dim, {x}, dim_attrs("min", x, dim, keepdim));
  return {out[0], out[1]};
}
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return dispatch1(OpId::argmax, {x}, dim_attrs("argmax", x, dim, keepdim));
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  return dispatch1(OpId::argmin, {x}, dim_attrs("argmin", x, dim, keepdim));
}

Tensor var(const Tensor& x, const std::vector<int64_t>& dims, double correction, bool keepdim) {
  OpAttrs a = reduce_attrs("var", x, dims, keepdim);
  a.alpha = correction;
  return dispatch1(OpId::var, {x}, a);
}
Tensor std(const Tensor& x, const std::vector<int64_t>& dims, double correction, bool keepdim) {
  OpAttrs a = reduce_attrs("std", x, dims, keepdim);
  a.alpha = correction;
  return dispatch1(OpId::std, {x}, a);
}

Tensor norm(const Tensor& x, double p, const std::vector<int64_t>& dims, bool keepdim) {
  MG_CHECK(!std::isnan(p), Error, "norm: p must be a number (0, 1, 2, any real, or ±INFINITY), got NaN");
  OpAttrs a = reduce_attrs("norm", x, dims, keepdim);
  a.alpha = p;
  return dispatch1(OpId::norm, {x}, a);
}

Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return dispatch1(OpId::logsumexp, {x}, reduce_attrs("logsumexp", x, dims, keepdim));
}

Tensor cumsum(const Tensor& x, int64_t dim) {
  return dispatch1(OpId::cumsum, {x}, dim_attrs("cumsum", x, dim, false));
}

// The op scans the last dim: another dim goes there and back (two copies).
Tensor cumprod(const Tensor& x, int64_t dim) {
  MG_CHECK(x.defined(), Error, "cumprod: undefined input tensor");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "cumprod");
  const int64_t last = x.dim() - 1;
  if (x.dim() == 0 || d == last) return dispatch1(OpId::cumprod, {x});
  return contiguous(transpose(dispatch1(OpId::cumprod, {transpose(x, d, last)}), d, last));
}

}  // namespace mg
