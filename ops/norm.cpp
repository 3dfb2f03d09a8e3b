// The norm op group — layer_norm, rms_norm, batch_norm, group_norm, embedding, dropout: public
// functions, shape/dtype inference and backward rules. Kernels: ops/cpu/norm_kernels.cpp.
// The one decision a reader must know: the kernels compute statistics in f32 (f64 for f64) and also
// return them (mean, rstd). layer_norm, batch_norm (training) and group_norm have two backward
// paths: the ordinary first-order backward calls a fused *_backward op that reads those saved
// statistics (one pass over x and the gradient); a backward that is itself recorded
// (create_graph = true) recomputes the statistics with public ops in f32 (f64 for f64), so the
// gradient is differentiable (double backward, gradient penalties). Optional tensor inputs are
// omitted from the input list and flagged in attrs.mode (bit0 weight, bit1 bias, bit2 running stats).
#include <cstdint>
#include <numeric>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/graph_rng.h"
#include "mixgrad/ops/arg_checks.h"
#include "mixgrad/ops/backward_ctx.h"
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/infer.h"
#include "mixgrad/ops/layout.h"
#include "mixgrad/ops/norm.h"

#include <limits>
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/register.h"

namespace mg {
namespace {

constexpr int64_t kHasWeight = 1, kHasBias = 2, kHasRunning = 4;

// Statistics dtype: f64 for f64 inputs, f32 otherwise (the accumulation dtype).
DType stat_dtype(DType x) { return x == DType::F64 ? DType::F64 : DType::F32; }
// The dtype the backward rules compute in: f32 for f16/bf16, else the input's.
Tensor to_compute(const Tensor& t) { return is_floating(t.dtype()) && t.dtype() != DType::F64 && t.dtype() != DType::F32 ? to(t, DType::F32) : t; }

// Index of the optional input with flag `bit` (inputs after x are in flag order), -1 if absent.
int opt_index(int64_t mode, int64_t bit) {
  if (!(mode & bit)) return -1;
  int i = 1;
  for (int64_t b = 1; b < bit; b <<= 1) i += (mode & b) ? 1 : 0;
  return i;
}

Shape trailing(const Shape& s, int64_t k) { return Shape(s.end() - k, s.end()); }
std::vector<int64_t> trailing_dims(int64_t ndim, int64_t k) {
  std::vector<int64_t> d;
  for (int64_t i = ndim - k; i < ndim; ++i) d.push_back(i);
  return d;
}
// All dims but 1 of an [N, C, ...] tensor: the batch_norm reduction dims.
std::vector<int64_t> all_but_channel(int64_t ndim) {
  std::vector<int64_t> d{0};
  for (int64_t i = 2; i < ndim; ++i) d.push_back(i);
  return d;
}
// A [C] tensor viewed as [1, C, 1, ...] to broadcast over [N, C, ...].
Tensor channel_view(const Tensor& p, int64_t ndim) {
  Shape s(ndim, 1);
  s[1] = p.numel();
  return reshape(p, s);
}

// ---- inference ----
void check_param(const char* op, const char* what, const Tensor& x, const Tensor& p, const Shape& want,
                 const char* hint) {
  check_floating(op, p);
  MG_CHECK(p.shape() == want, ShapeError, op, ": expected ", what, " of shape ", want, " for input ",
           describe(x), ", got ", describe(p), hint);
  // The statistics are computed in f32 for any input but f64: f64 parameters or running
  // statistics beside such an input would be read and written back through f32, their precision
  // silently lost (a module moved to f64, its input not). PyTorch refuses this mix too.
  MG_CHECK(p.dtype() != DType::F64 || x.dtype() == DType::F64, DTypeError, op, ": ", what, " ", describe(p),
           " is f64 but input ", describe(x), " is not; the statistics would be computed in f32",
           "\n  hint: convert the module (module.to(dtype)) or the input so that they match");
}

// Shape with the last k sizes set to 1 (the keepdim shape of the per-row statistics).
Shape stat_shape(const Shape& s, int64_t k) {
  Shape r = s;
  for (int64_t i = int64_t(s.size()) - k; i < int64_t(s.size()); ++i) r[i] = 1;
  return r;
}

InferResult infer_trailing_norm(const char* op, const Tensors& in, const OpAttrs& a, bool with_mean) {
  const Tensor& x = in[0];
  check_floating(op, x);
  const int64_t k = a.dim;
  MG_CHECK(k >= 1 && k <= x.dim(), ShapeError, op, ": normalized_shape has ", k, " dims but the input is ",
           describe(x), "\n  hint: normalized_shape lists the trailing sizes of the input");
  const Shape want = trailing(x.shape(), k);
  const char* hint = "\n  hint: weight and bias have the normalized_shape (the trailing sizes of the input)";
  for (int64_t bit : {kHasWeight, kHasBias}) {
    const int i = opt_index(a.mode, bit);
    if (i >= 0) check_param(op, bit == kHasWeight ? "weight" : "bias", x, in.at(i), want, hint);
  }
  const TensorMeta stat{stat_shape(x.shape(), k), stat_dtype(x.dtype())};
  if (with_mean) return {{{x.shape(), x.dtype()}, stat, stat}, x.dtype()};
  return {{{x.shape(), x.dtype()}, stat}, x.dtype()};
}
InferResult infer_layer_norm(const Tensors& in, const OpAttrs& a) {
  return infer_trailing_norm("layer_norm", in, a, true);
}
InferResult infer_rms_norm(const Tensors& in, const OpAttrs& a) {
  return infer_trailing_norm("rms_norm", in, a, false);
}

InferResult infer_channel_norm(const char* op, const Tensors& in, const OpAttrs& a) {
  const Tensor& x = in[0];
  check_floating(op, x);
  MG_CHECK(x.dim() >= 2, ShapeError, op, ": expected an input [N, C, ...] with at least 2 dims, got ",
           describe(x));
  const int64_t c = x.shape()[1];
  const Shape want{c};
  const char* hint = "\n  hint: the parameters have one entry per channel (dim 1 of the input)";
  for (int64_t bit : {kHasWeight, kHasBias}) {
    const int i = opt_index(a.mode, bit);
    if (i >= 0) check_param(op, bit == kHasWeight ? "weight" : "bias", x, in.at(i), want, hint);
  }
  const int ir = opt_index(a.mode, kHasRunning);
  if (ir >= 0) {
    for (int j = 0; j < 2; ++j) {
      const Tensor& r = in.at(ir + j);
      check_param(op, j == 0 ? "running_mean" : "running_var", x, r, want, hint);
      MG_CHECK(r.is_contiguous(), Error, op, ": running statistics must be contiguous, got ", describe(r),
               "\n  hint: pass a dense buffer (it is updated in place)");
      // Updated in place outside autograd: a tensor that requires grad there is a parameter passed
      // in the wrong place (PyTorch's F.batch_norm takes the running statistics second).
      MG_CHECK(!r.requires_grad(), AutogradError, op, ": ", j == 0 ? "running_mean" : "running_var", " ",
               describe(r), " requires grad, but running statistics are buffers updated in place",
               "\n  hint: mg::batch_norm takes (x, weight, bias, running_mean, running_var, training, ...); "
               "PyTorch's F.batch_norm puts the running statistics before weight and bias");
    }
  }
  return {{{x.shape(), x.dtype()}}, x.dtype()};
}

InferResult infer_batch_norm(const Tensors& in, const OpAttrs& a) {
  InferResult r = infer_channel_norm("batch_norm", in, a);
  const Tensor& x = in[0];
  if (a.keepdim) {
    // Exactly one value per channel has no variance; none (an empty batch) is accepted, as PyTorch.
    MG_CHECK(x.numel() / std::max<int64_t>(1, x.shape()[1]) != 1, ShapeError,
             "batch_norm: expected more than 1 value per channel when training, got ", describe(x),
             "\n  hint: use a batch of at least 2 or call the layer in eval mode");
  } else {
    MG_CHECK(opt_index(a.mode, kHasRunning) >= 0, Error,
             "batch_norm: eval mode needs running_mean and running_var; got input ", describe(x),
             "\n  hint: pass the running statistics or use training=true");
  }
  r.outputs[0].format = layout_of(x);  // y keeps x's layout (channels-last stays NHWC)
  const TensorMeta stat{{x.shape()[1]}, stat_dtype(x.dtype())};
  r.outputs.push_back(stat);
  r.outputs.push_back(stat);
  return r;
}

InferResult infer_group_norm(const Tensors& in, const OpAttrs& a) {
  InferResult r = infer_channel_norm("group_norm", in, a);
  const Tensor& x = in[0];
  const int64_t g = a.dim, c = x.shape()[1];
  MG_CHECK(g >= 1 && c % g == 0, ShapeError, "group_norm: ", c, " channels cannot be split into ", g,
           " groups; got input ", describe(x), "\n  hint: num_groups must divide the channel count");
  r.outputs[0].format = layout_of(x);  // y keeps x's layout, as PyTorch's group_norm
  const TensorMeta stat{{x.shape()[0], g}, stat_dtype(x.dtype())};
  r.outputs.push_back(stat);
  r.outputs.push_back(stat);
  return r;
}

// The fused *_norm_backward ops: (grad, x, mean, rstd, [weight]) -> (dx, [dweight], [dbias]).
// grad has x's shape and dtype; the statistics have `stat` shape in the statistics dtype; weight
// (mode bit0) has the parameter shape `param`. dweight (when weight is given) and dbias (mode bit1)
// come out in the statistics dtype; the dispatcher casts them to each parameter's dtype.
InferResult infer_norm_backward(const char* op, const Tensors& in, const OpAttrs& a, const Shape& stat,
                                const Shape& param) {
  MG_CHECK(int(in.size()) == ((a.mode & kHasWeight) ? 5 : 4), Error, op, ": expected ",
           (a.mode & kHasWeight) ? 5 : 4, " inputs (grad, x, mean, rstd", (a.mode & kHasWeight) ? ", weight" : "",
           "), got ", in.size());
  const Tensor& g = in[0];
  const Tensor& x = in[1];
  check_floating(op, x);
  MG_CHECK(g.shape() == x.shape(), ShapeError, op, ": expected grad of the input's shape, got grad ", describe(g),
           " for input ", describe(x));
  check_same_dtype(op, g, x);
  const DType sd = stat_dtype(x.dtype());
  for (int i : {2, 3}) {
    const Tensor& st = in[i];
    MG_CHECK(st.shape() == stat && st.dtype() == sd, ShapeError, op, ": expected ", i == 2 ? "mean" : "rstd",
             " of shape ", stat, " in ", dtype_name(sd), " for input ", describe(x), ", got ", describe(st),
             "\n  hint: pass the statistics outputs 1 and 2 of the forward op");
  }
  if (a.mode & kHasWeight) {
    check_param(op, "weight", x, in[4], param, "\n  hint: pass the weight given to the forward op");
  }
  InferResult r{{{x.shape(), x.dtype()}}, x.dtype()};
  if (a.mode & kHasWeight) r.outputs.push_back({param, sd});
  if (a.mode & kHasBias) r.outputs.push_back({param, sd});
  return r;
}
InferResult infer_layer_norm_backward(const Tensors& in, const OpAttrs& a) {
  const Tensor& x = in.at(1);
  MG_CHECK(a.dim >= 1 && a.dim <= x.dim(), ShapeError, "layer_norm_backward: normalized_shape has ", a.dim,
           " dims but the input is ", describe(x));
  return infer_norm_backward("layer_norm_backward", in, a, stat_shape(x.shape(), a.dim), trailing(x.shape(), a.dim));
}
InferResult infer_batch_norm_backward(const Tensors& in, const OpAttrs& a) {
  const Tensor& x = in.at(1);
  MG_CHECK(x.dim() >= 2, ShapeError, "batch_norm_backward: expected an input [N, C, ...] with at least 2 dims, got ",
           describe(x));
  InferResult r = infer_norm_backward("batch_norm_backward", in, a, {x.shape()[1]}, {x.shape()[1]});
  r.outputs[0].format = layout_of(x);  // dx in x's layout
  return r;
}
InferResult infer_group_norm_backward(const Tensors& in, const OpAttrs& a) {
  const Tensor& x = in.at(1);
  MG_CHECK(x.dim() >= 2, ShapeError, "group_norm_backward: expected an input [N, C, ...] with at least 2 dims, got ",
           describe(x));
  const int64_t g = a.dim, c = x.shape()[1];
  MG_CHECK(g >= 1 && c % g == 0, ShapeError, "group_norm_backward: ", c, " channels cannot be split into ", g,
           " groups; got input ", describe(x));
  InferResult r = infer_norm_backward("group_norm_backward", in, a, {x.shape()[0], g}, {c});
  r.outputs[0].format = layout_of(x);  // dx in x's layout
  return r;
}

InferResult infer_embedding(const Tensors& in, const OpAttrs& a) {
  const Tensor& w = in[0];
  const Tensor& idx = in[1];
  check_floating("embedding", w);
  check_index_dtype("embedding", idx);
  MG_CHECK(w.dim() == 2, ShapeError, "embedding: expected a weight [num_embeddings, dim], got ", describe(w),
           " with indices ", describe(idx));
  MG_CHECK(a.dim == -1 || (a.dim >= 0 && a.dim < w.shape()[0]), IndexError, "embedding: padding_idx ", a.dim,
           " is out of range for a table of ", w.shape()[0], " rows; weight ", describe(w));
  Shape s = idx.shape();
  s.push_back(w.shape()[1]);
  return {{{s, w.dtype()}}, w.dtype()};
}

InferResult infer_dropout(const Tensors& in, const OpAttrs& a) {
  check_floating("dropout", in[0]);
  // A third int: the device {seed, base offset} of a CUDA graph capture (dropout() adds it).
  MG_CHECK(a.ints.size() == 2 || (a.ints.size() == 3 && in[0].device().is_cuda()), Error,
           "dropout: attrs.ints must be {seed, offset} (or {seed, offset, device base} on CUDA during a graph capture)");
  return {{{in[0].shape(), in[0].dtype()}, {in[0].shape(), DType::Bool}}, in[0].dtype()};
}

InferResult infer_dropout_backward(const Tensors& in, const OpAttrs& a) {
  check_floating("dropout_backward", in[0]);
  MG_CHECK(in[1].dtype() == DType::Bool, DTypeError, "dropout_backward: the keep mask must be bool, got ",
           dtype_name(in[1].dtype()));
  MG_CHECK(in[0].shape() == in[1].shape(), ShapeError, "dropout_backward: expected grad and mask of the same shape, got grad ",
           in[0].shape(), " and mask ", in[1].shape());
  MG_CHECK(a.alpha >= 0.0 && a.alpha < 1.0, Error, "dropout_backward: p must be in [0, 1), got ", a.alpha);
  return {{{in[0].shape(), in[0].dtype()}}, in[0].dtype()};
}

// ---- backward rules ----
// layer_norm, batch_norm (training) and group_norm have two paths. The fused *_backward op reads the
// statistics the forward kernel returned and makes one pass over x and the gradient instead of
// ~15 public ops that recompute them; it is what an ordinary backward runs. It is not
// differentiable, so when the backward is itself recorded (grad mode on during backward, i.e.
// create_graph = true) the rule builds the same gradient from public ops, whose graph gives
// double backward and runs on every device.
bool backward_is_recorded() { return GradMode::is_enabled(); }

// Puts the fused op's results into the rule's gradient list (only where a gradient is needed).
void take_fused(const BackwardCtx& c, const NormGrads& r, Tensors& grads) {
  const int iw = opt_index(c.attrs().mode, kHasWeight), ib = opt_index(c.attrs().mode, kHasBias);
  if (c.needs_grad(0)) grads[0] = r.dx;
  if (iw >= 0 && c.needs_grad(iw)) grads[iw] = r.dweight;
  if (ib >= 0 && c.needs_grad(ib)) grads[ib] = r.dbias;
}
// The forward's weight (undefined when absent) and whether a bias gradient is needed.
Tensor saved_weight(const BackwardCtx& c) {
  const int iw = opt_index(c.attrs().mode, kHasWeight);
  return iw >= 0 ? c.input(iw) : Tensor();
}
bool wants_dbias(const BackwardCtx& c) {
  const int ib = opt_index(c.attrs().mode, kHasBias);
  return ib >= 0 && c.needs_grad(ib);
}

// Normalised x over `dims` recomputed with public ops: xhat = (x - mean) * rstd with
// rstd = 1 / sqrt(var + eps) (biased var).
struct Normalized {
  Tensor xhat, rstd;
};
Normalized normalize(const Tensor& x, const std::vector<int64_t>& dims, double eps) {
  const Tensor xc = x - mean(x, dims, true);
  const Tensor rstd = rsqrt(mean(xc * xc, dims, true) + eps);
  return {xc * rstd, rstd};
}
// With y_i = xhat_i * w_i + b and gxhat = g * w, over the N normalised elements:
//   dx = rstd * (gxhat - mean(gxhat) - xhat * mean(gxhat * xhat))
Tensor normalized_dx(const Normalized& n, const Tensor& gxhat, const std::vector<int64_t>& dims) {
  return n.rstd * (gxhat - mean(gxhat, dims, true) - n.xhat * mean(gxhat * n.xhat, dims, true));
}

// layer_norm: dx as above; dweight = g * xhat and dbias = g (summed by the dispatcher to the
// weight's shape over the leading dims).
Tensors layer_norm_bw(const BackwardCtx& c, const Tensors& g) {
  const OpAttrs& a = c.attrs();
  if (!backward_is_recorded()) {
    Tensors grads(c.num_inputs());
    const Tensor x = c.input(0);
    take_fused(c, layer_norm_backward(g[0], x, c.output(1), c.output(2), trailing(x.shape(), a.dim), saved_weight(c),
                                      wants_dbias(c)),
               grads);
    return grads;
  }
  const Tensor x = to_compute(c.input(0));
  const Tensor gy = to_compute(g[0]);
  const std::vector<int64_t> dims = trailing_dims(x.dim(), a.dim);
  const Normalized n = normalize(x, dims, a.alpha);
  const int iw = opt_index(a.mode, kHasWeight), ib = opt_index(a.mode, kHasBias);
  Tensors grads(c.num_inputs());
  const Tensor gxhat = iw >= 0 ? gy * to_compute(c.input(iw)) : gy;
  if (c.needs_grad(0)) grads[0] = normalized_dx(n, gxhat, dims);
  if (iw >= 0 && c.needs_grad(iw)) grads[iw] = gy * n.xhat;
  if (ib >= 0 && c.needs_grad(ib)) grads[ib] = gy;
  return grads;
}

// rms_norm: y = x * r * w with r = 1 / sqrt(mean(x^2) + eps), xhat = x * r, gxhat = g * w:
//   dx = r * (gxhat - xhat * mean(gxhat * xhat)),   dweight = g * xhat
Tensors rms_norm_bw(const BackwardCtx& c, const Tensors& g) {
  const OpAttrs& a = c.attrs();
  const Tensor x = to_compute(c.input(0));
  const Tensor gy = to_compute(g[0]);
  const std::vector<int64_t> dims = trailing_dims(x.dim(), a.dim);
  const Tensor r = rsqrt(mean(x * x, dims, true) + a.alpha);
  const Tensor xhat = x * r;
  const int iw = opt_index(a.mode, kHasWeight);
  Tensors grads(c.num_inputs());
  const Tensor gxhat = iw >= 0 ? gy * to_compute(c.input(iw)) : gy;
  if (c.needs_grad(0)) grads[0] = r * (gxhat - xhat * mean(gxhat * xhat, dims, true));
  if (iw >= 0 && c.needs_grad(iw)) grads[iw] = gy * xhat;
  return grads;
}

// Per-channel parameter gradients of an [N, C, ...] norm: dweight = sum(g * xhat), dbias = sum(g)
// over every dim but 1.
void channel_param_grads(const BackwardCtx& c, const Tensor& gy, const Tensor& xhat, Tensors& grads) {
  const std::vector<int64_t> red = all_but_channel(gy.dim());
  const int iw = opt_index(c.attrs().mode, kHasWeight), ib = opt_index(c.attrs().mode, kHasBias);
  if (iw >= 0 && c.needs_grad(iw)) grads[iw] = sum(gy * xhat, red);
  if (ib >= 0 && c.needs_grad(ib)) grads[ib] = sum(gy, red);
}

// batch_norm, training: the layer_norm formula over dims {0, 2, ...} per channel (the batch
// statistics depend on x). Eval: the statistics are constants, so dx = g * w * rsqrt(running_var + eps).
Tensors batch_norm_bw(const BackwardCtx& c, const Tensors& g) {
  const OpAttrs& a = c.attrs();
  Tensors grads(c.num_inputs());
  if (a.keepdim && !backward_is_recorded()) {
    take_fused(c, batch_norm_backward(g[0], c.input(0), c.output(1), c.output(2), saved_weight(c), wants_dbias(c)),
               grads);
    return grads;
  }
  const Tensor x = to_compute(c.input(0));
  const Tensor gy = to_compute(g[0]);
  const int64_t nd = x.dim();
  const std::vector<int64_t> red = all_but_channel(nd);
  const int iw = opt_index(a.mode, kHasWeight);
  const Tensor gxhat = iw >= 0 ? gy * channel_view(to(c.input(iw), x.dtype()), nd) : gy;
  if (a.keepdim) {
    const Normalized n = normalize(x, red, a.alpha);
    if (c.needs_grad(0)) grads[0] = normalized_dx(n, gxhat, red);
    channel_param_grads(c, gy, n.xhat, grads);
  } else {
    const int ir = opt_index(a.mode, kHasRunning);
    const Tensor rm = channel_view(to(c.input(ir), x.dtype()), nd);
    const Tensor rstd = rsqrt(channel_view(to(c.input(ir + 1), x.dtype()), nd) + a.alpha);
    if (c.needs_grad(0)) grads[0] = gxhat * rstd;
    channel_param_grads(c, gy, (x - rm) * rstd, grads);
  }
  return grads;
}

// group_norm: x [N, C, ...] viewed as [N, G, M] is normalised over dim 2; dx is the layer_norm
// formula there, with gxhat = g * w (w per channel).
Tensors group_norm_bw(const BackwardCtx& c, const Tensors& g) {
  const OpAttrs& a = c.attrs();
  if (!backward_is_recorded()) {
    Tensors grads(c.num_inputs());
    take_fused(c, group_norm_backward(g[0], c.input(0), c.output(1), c.output(2), a.dim, saved_weight(c),
                                      wants_dbias(c)),
               grads);
    return grads;
  }
  const Tensor x = to_compute(c.input(0));
  const Tensor gy = to_compute(g[0]);
  const int64_t nd = x.dim(), n = x.shape()[0];
  const Shape grouped{n, a.dim, n == 0 ? 0 : x.numel() / (n * a.dim)};
  const int iw = opt_index(a.mode, kHasWeight);
  const Tensor gxhat = iw >= 0 ? gy * channel_view(to_compute(c.input(iw)), nd) : gy;
  const Normalized nz = normalize(reshape(x, grouped), {2}, a.alpha);
  Tensors grads(c.num_inputs());
  if (c.needs_grad(0)) grads[0] = reshape(normalized_dx(nz, reshape(gxhat, grouped), {2}), x.shape());
  channel_param_grads(c, gy, reshape(nz.xhat, x.shape()), grads);
  return grads;
}

// embedding: dweight[v] = sum of g[k] over the positions k with index v (repeated indices
// accumulate), except v == padding_idx, which gets none: a scatter_add into zeros [V, D]. With
// scale_grad_by_freq (attrs.mode 1) each g[k] is first divided by the count of its index, in
// opmath (f32 for f16/bf16) and rounded once.
Tensors embedding_bw(const BackwardCtx& c, const Tensors& g) {
  const Shape& ws = c.input_shape(0);
  const int64_t d = ws[1];
  const Tensor idx = reshape(to(c.input(1), DType::I64), {-1});  // [n]
  const int64_t n = idx.numel();
  Tensor g2 = reshape(g[0], {n, d});                               // [n, D]
  if (c.attrs().dim >= 0) {
    const Tensor pad = reshape(eq(idx, scalar_like(double(c.attrs().dim), idx)), {n, 1});
    g2 = where(pad, scalar_like(0.0, g2), g2);
  }
  const Tensor base = zeros(ws, {.dtype = g2.dtype(), .device = g2.device()});
  // Only reachable with a bad index on CUDA, whose forward reports it at the host's next wait
  // (the CPU's forward throws): a negative index is sent to ws[0], past the end, so this backward
  // never reads or writes through it whatever scatter_add's kernel does with it.
  const Tensor safe_idx =
      idx.device().is_cpu() ? idx : where(lt(idx, scalar_like(0.0, idx)), scalar_like(double(ws[0]), idx), idx);
  if (c.attrs().mode == 1 && n > 0) {
    const DType opmath = g2.dtype() == DType::F64 ? DType::F64 : DType::F32;
    // ws[0] + 1 rows: room for the out-of-range slot of safe_idx.
    const Tensor counts = scatter_add(zeros({ws[0] + 1}, {.dtype = opmath, .device = g2.device()}), 0, safe_idx,
                                      ones({n}, {.dtype = opmath, .device = g2.device()}));
    g2 = to(div(to(g2, opmath), reshape(index_select(counts, 0, safe_idx), {n, 1})), g2.dtype());
  }
  const Tensor index = contiguous(expand(reshape(safe_idx, {n, 1}), {n, d}));
  return {scatter_add(base, 0, index, g2), Tensor()};
}

// dropout: y = x * mask / (1 - p), so dx = g * mask / (1 - p) (the saved bool mask), one fused
// pass. dropout_backward is linear in grad: its gradient is dropout_backward of the incoming one.
Tensors dropout_bw(const BackwardCtx& c, const Tensors& g) {
  return {dropout_backward(g[0], c.output(1), c.attrs().alpha)};
}
Tensors dropout_backward_bw(const BackwardCtx& c, const Tensors& g) {
  return {dropout_backward(g[0], c.input(1), c.attrs().alpha), Tensor()};
}

uint32_t save_all_inputs(uint32_t) { return 0xFFFFu; }
// Also the statistics outputs (mean, rstd / invstd) that the fused backward reads.
uint32_t save_inputs_and_stats(uint32_t) { return 0xFFFFu | kSaveOutput(1) | kSaveOutput(2); }

}  // namespace

void register_norm_rules() {
  set_op_rule(OpId::layer_norm,
              {.infer = infer_layer_norm, .backward = layer_norm_bw, .saves = save_inputs_and_stats});
  set_op_rule(OpId::layer_norm_backward, {.infer = infer_layer_norm_backward});
  set_op_rule(OpId::rms_norm, {.infer = infer_rms_norm, .backward = rms_norm_bw, .saves = save_all_inputs});
  set_op_rule(OpId::batch_norm,
              {.infer = infer_batch_norm, .backward = batch_norm_bw, .saves = save_inputs_and_stats});
  set_op_rule(OpId::batch_norm_backward, {.infer = infer_batch_norm_backward});
  set_op_rule(OpId::group_norm,
              {.infer = infer_group_norm, .backward = group_norm_bw, .saves = save_inputs_and_stats});
  set_op_rule(OpId::group_norm_backward, {.infer = infer_group_norm_backward});
  set_op_rule(OpId::embedding, {.infer = infer_embedding, .backward = embedding_bw, .save = kSaveInput(1)});
  set_op_rule(OpId::dropout, {.infer = infer_dropout, .backward = dropout_bw, .save = kSaveOutput(1)});
  set_op_rule(OpId::dropout_backward,
              {.infer = infer_dropout_backward, .backward = dropout_backward_bw, .save = kSaveInput(1)});
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  check_defined("layer_norm", x);
  const int64_t k = int64_t(normalized_shape.size());
  MG_CHECK(k >= 1 && k <= x.dim() && trailing(x.shape(), k) == normalized_shape, ShapeError,
           "layer_norm: normalized_shape ", normalized_shape, " does not match the trailing sizes of input ",
           describe(x), "\n  hint: normalized_shape lists the last sizes of the input, e.g. [", 
           x.dim() > 0 ? x.shape().back() : 0, "]");
  OpAttrs a{.dim = k, .alpha = eps};
  Tensors in{x};
  if (weight.defined()) a.mode |= kHasWeight, in.push_back(weight);
  if (bias.defined()) a.mode |= kHasBias, in.push_back(bias);
  return dispatch(OpId::layer_norm, in, a)[0];
}

Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, std::optional<double> eps_opt) {
  check_defined("rms_norm", x);
  const double eps = eps_opt.value_or(x.dtype() == DType::F64 ? std::numeric_limits<double>::epsilon()
                                                              : double(std::numeric_limits<float>::epsilon()));
  const int64_t k = int64_t(normalized_shape.size());
  MG_CHECK(k >= 1 && k <= x.dim() && trailing(x.shape(), k) == normalized_shape, ShapeError,
           "rms_norm: normalized_shape ", normalized_shape, " does not match the trailing sizes of input ",
           describe(x), "\n  hint: normalized_shape lists the last sizes of the input");
  OpAttrs a{.dim = k, .alpha = eps};
  Tensors in{x};
  if (weight.defined()) a.mode |= kHasWeight, in.push_back(weight);
  return dispatch(OpId::rms_norm, in, a)[0];
}

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum, double eps) {
  check_defined("batch_norm", x);
  MG_CHECK(running_mean.defined() == running_var.defined(), Error,
           "batch_norm: pass both running_mean and running_var or neither");
  // Training divides by sqrt(var + eps): a constant channel would give NaN (PyTorch refuses too).
  MG_CHECK(!training || eps > 0, Error, "batch_norm: eps must be positive in training, got ", eps);
  OpAttrs a{.keepdim = training, .alpha = eps, .beta = momentum};
  Tensors in{x};
  if (weight.defined()) a.mode |= kHasWeight, in.push_back(weight);
  if (bias.defined()) a.mode |= kHasBias, in.push_back(bias);
  if (running_mean.defined()) a.mode |= kHasRunning, in.push_back(running_mean), in.push_back(running_var);
  return dispatch(OpId::batch_norm, in, a)[0];
}

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  check_defined("group_norm", x);
  OpAttrs a{.dim = num_groups, .alpha = eps};
  Tensors in{x};
  if (weight.defined()) a.mode |= kHasWeight, in.push_back(weight);
  if (bias.defined()) a.mode |= kHasBias, in.push_back(bias);
  return dispatch(OpId::group_norm, in, a)[0];
}

namespace {

// Runs a fused norm backward op: grad is cast to x's dtype, the weight and dbias flags go into
// attrs.mode, and the outputs are unpacked into NormGrads.
NormGrads norm_backward(OpId op, const Tensor& grad, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                        const Tensor& weight, bool with_dbias, OpAttrs a) {
  const char* name = op_name(op);
  for (const Tensor* t : {&grad, &x, &mean, &rstd}) check_defined(name, *t);
  Tensors in{grad.dtype() == x.dtype() || !is_floating(x.dtype()) ? grad : to(grad, x.dtype()), x, mean, rstd};
  if (weight.defined()) a.mode |= kHasWeight, in.push_back(weight);
  if (with_dbias) a.mode |= kHasBias;
  const Tensors out = dispatch(op, in, a);
  NormGrads r{.dx = out[0]};
  int k = 1;
  if (weight.defined()) r.dweight = out[k++];
  if (with_dbias) r.dbias = out[k++];
  return r;
}

}  // namespace

NormGrads layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                              const Shape& normalized_shape, const Tensor& weight, bool with_dbias) {
  check_defined("layer_norm_backward", x);
  const int64_t k = int64_t(normalized_shape.size());
  MG_CHECK(k >= 1 && k <= x.dim() && trailing(x.shape(), k) == normalized_shape, ShapeError,
           "layer_norm_backward: normalized_shape ", normalized_shape,
           " does not match the trailing sizes of input ", describe(x));
  return norm_backward(OpId::layer_norm_backward, grad, x, mean, rstd, weight, with_dbias, {.dim = k});
}

NormGrads batch_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                              const Tensor& weight, bool with_dbias) {
  return norm_backward(OpId::batch_norm_backward, grad, x, mean, invstd, weight, with_dbias, {});
}

NormGrads group_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                              int64_t num_groups, const Tensor& weight, bool with_dbias) {
  return norm_backward(OpId::group_norm_backward, grad, x, mean, rstd, weight, with_dbias, {.dim = num_groups});
}

Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx,
                 bool scale_grad_by_freq) {
  check_defined("embedding", weight);
  check_defined("embedding", indices);
  int64_t row = -1;  // the op's attribute: the padding row, or -1 for none
  if (padding_idx) {
    const int64_t v = weight.dim() == 2 ? weight.shape()[0] : 0;
    MG_CHECK(*padding_idx >= -v && *padding_idx < v, IndexError, "embedding: padding_idx ", *padding_idx,
             " is out of range for a table of ", v, " rows; weight ", describe(weight));
    row = *padding_idx < 0 ? *padding_idx + v : *padding_idx;
  }
  return dispatch1(OpId::embedding, {weight, indices}, {.dim = row, .mode = scale_grad_by_freq ? 1 : 0});
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  check_defined("dropout", x);
  MG_CHECK(p >= 0.0 && p <= 1.0, Error, "dropout: probability must be in [0, 1], got ", p);
  if (!training || p == 0.0) return x;
  if (p == 1.0) return x * 0.0;
  Generator& g = gen ? *gen : default_generator();
  const uint64_t blocks = uint64_t(x.numel() + 3) / 4;
  // The CUDA kernel can read its stream position from device memory (graph-safe); the CPU's cannot.
  if (!x.device().is_cuda()) check_not_captured(g, "dropout on the CPU");
  const PhiloxArgs r = reserve_graph_safe(g, blocks);
  // During a CUDA graph capture a third int carries the device {seed, base offset} the kernel adds ints[1] to.
  OpAttrs a{.ints = {int64_t(r.seed), int64_t(r.offset)}, .alpha = p};
  if (r.device_base != nullptr) a.ints.push_back(int64_t(reinterpret_cast<std::intptr_t>(r.device_base)));
  return dispatch(OpId::dropout, {x}, a)[0];
}

Tensor dropout_backward(const Tensor& grad, const Tensor& keep, double p) {
  check_defined("dropout_backward", grad);
  check_defined("dropout_backward", keep);
  return dispatch1(OpId::dropout_backward, {grad, keep}, {.alpha = p});
}

}  // namespace mg
