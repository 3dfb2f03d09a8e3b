// clip_grad_norm_ and clip_grad_value_. The total norm follows the summation rule
// (core/cascade_sum.h): each chunk of a gradient (multi_tensor.h's fixed chunks of kChunkSize, a
// power of two of leaves) sums |g|^p by the rule, and the chunks of all gradients, in order, are
// combined pairwise — so the norm is accurate to O(log n) ulps and the same at any thread count.
// Gradients off the CPU take the generic path (optim/generic_path.h): the same math with public
// ops, the norm from the sum/amax reductions (their own order; a few f32 ulps from the fused one),
// and the clip factor kept on the device, so nothing is read to the host unless
// error_if_nonfinite asks for the norm's value.
#include "mixgrad/optim/clip_grad.h"

#include <set>
#include <tuple>
#include <vector>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/cascade_sum.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/optim/functors.h"
#include "mixgrad/core/multi_tensor_kernels.h"
#include "mixgrad/ops/layout.h"
#include "mixgrad/optim/generic_path.h"
#include "mixgrad/optim/master_grad_check.h"
#include "mixgrad/optim/multi_tensor.h"

namespace mg::optim {

namespace {

// The gradients of `params` as dense tensors (contiguous or channels-last: the passes walk flat
// memory, so a channels-last gradient's norm sums in NHWC order); `originals` holds the strided
// ones that their dense copies must be written back to.
struct DenseGrads {
  Tensors dense;
  Tensors originals;  // parallel to dense: undefined when dense is the gradient itself
  std::vector<TensorSlot> slots;  // TensorSlot::param points at the (mutable) gradient

  explicit DenseGrads(const Tensors& grads) {
    for (const Tensor& g : grads) {
      const Tensor d = is_dense_layout(g) ? g : contiguous(g);
      dense.push_back(d);
      originals.push_back(d.is_same(g) ? Tensor() : g);
      slots.push_back({d.dtype(), d.numel(), d.data_ptr(), nullptr, {}});
    }
  }
  // Writes the dense copies back and bumps the gradients' versions.
  void finish() {
    for (std::size_t k = 0; k < dense.size(); ++k) {
      if (originals[k].defined()) {
        originals[k].copy_(dense[k]);
      } else {
        dense[k].bump_version();
      }
    }
  }
};

// The defined gradients of `params` (floating, all on one device).
Tensors grads_of(const Tensors& params, const char* op) {
  Tensors out;
  // A gradient listed twice (a parameter given twice, a list joined from two modules sharing a
  // layer) is one gradient: counted once in the norm and scaled once. Scaled twice, its two
  // chunks raced on the same memory in the parallel pass (PyTorch counts and scales it twice).
  std::set<std::tuple<const void*, Shape, Strides, DType>> seen;
  for (std::size_t k = 0; k < params.size(); ++k) {
    const Tensor& p = params[k];
    MG_CHECK(p.defined(), Error, op, ": parameter ", k, " is undefined");
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    MG_CHECK(g.is_floating_point(), DTypeError, op, ": the gradient of parameter ", k, " is ", describe(g));
    if (!seen.emplace(g.data_ptr(), g.shape(), g.strides(), g.dtype()).second) continue;
    out.push_back(g);
  }
  common_device(out, op, "gradient");
  return out;
}

DType opmath_of(const Tensor& g) { return g.dtype() == DType::F64 ? DType::F64 : DType::F32; }

// The total norm of the generic path: each gradient's sum of |g|^p (or max |g|) reduced in opmath
// (f32, f64 for f64), the partials combined in `acc`; undefined when no gradient has an element.
Tensor generic_total_norm(const Tensors& grads, double norm_type, DType acc) {
  const bool inf_norm = std::isinf(norm_type);
  Tensors partial;
  for (const Tensor& g : grads) {
    if (g.numel() == 0) continue;
    const Tensor x = to(g, opmath_of(g));
    Tensor part;
    if (inf_norm) part = amax(abs(x));  // keeps NaN
    else if (norm_type == 2.0) part = sum(x * x);
    else if (norm_type == 1.0) part = sum(abs(x));
    else part = sum(pow(abs(x), norm_type));
    partial.push_back(to(part, acc));
  }
  if (partial.empty()) return Tensor();
  const Tensor all = stack(partial);
  Tensor total = inf_norm ? amax(all) : sum(all);
  if (norm_type == 2.0) total = sqrt(total);
  else if (!inf_norm && norm_type != 1.0) total = pow(total, 1.0 / norm_type);
  return total;
}

// The generic path of clip_grad_norm_: the fused path's math with public ops. Each gradient's
// sum of |g|^p (or max |g|) is reduced in opmath (f32, f64 for f64), the partials are combined
// in f32 (f64 when `wide`), and the factor min(1, max_norm / (total + 1e-6)) — 1 where the total
// is inf/NaN, which leaves the gradients unchanged — multiplies every gradient in opmath, rounded
// once. Returns the total as a 0-d tensor on the gradients' device.
Tensor clip_grad_norm_generic(const Tensors& grads, double max_norm, double norm_type, bool error_if_nonfinite,
                              bool wide) {
  NoGradGuard no_grad;
  const DType acc = wide ? DType::F64 : DType::F32;
  Tensor total;
  const Device device = grads.empty() ? Device::cpu() : grads.front().device();
  const MultiTensorKernels* fused = multi_tensor_kernels(device.type);
  bool dense = true;
  for (const Tensor& g : grads) dense = dense && is_dense_layout(g);
  if (fused && norm_type == 2.0 && !wide && dense && !grads.empty()) {
    // The device's fused deterministic 2-norm (f32 within a chunk, chunks combined in order).
    const Tensor out = empty({1}, {.dtype = DType::F32, .device = device});
    fused->l2_norm(grads, out);
    total = reshape(out, {});
  } else {
    total = generic_total_norm(grads, norm_type, acc);
  }
  if (!total.defined()) return scalar_tensor(0.0, {.dtype = acc, .device = device});
  if (error_if_nonfinite) {
    const double norm = total.item<double>();  // one value to the host, asked for by the caller
    MG_CHECK(std::isfinite(norm), Error, "clip_grad_norm_: the total norm of order ", norm_type,
             " of the gradients is ", std::isnan(norm) ? std::string("nan") : str_cat(norm),
             ", so they cannot be clipped; they were left unchanged",
             "\n  hint: find the overflow (lower the lr or use a GradScaler), or pass error_if_nonfinite = false "
             "to get the non-finite norm back and skip the step");
  }
  const Tensor one = scalar_like(1.0, total);
  const Tensor finite = (total - total).eq(0.0);  // false for inf and NaN
  const Tensor coef = where(finite, clamp_max(max_norm / (total + 1e-6), 1.0), one);
  for (const Tensor& g : grads) {
    const DType dt = opmath_of(g);
    Tensor(g).copy_(mul(to(g, dt), to(coef, dt)));  // g * coef in opmath, rounded once (exact for 1)
  }
  return total;
}

// total (f32, or f64 when `wide`) from the per-chunk partials: their max, or their pairwise sum
// by the rule (chunk order).
template <typename A>
A combine(const std::vector<double>& partial, bool inf_norm) {
  if (inf_norm) {
    A acc = A(0);
    for (double v : partial) acc = fn::AbsMax<A>{}(acc, A(v));
    return acc;
  }
  std::vector<A> p(partial.begin(), partial.end());  // exact: each partial was an A
  return pairwise_combine(p.data(), int64_t(p.size()), A(0));
}

template <typename A>
A finish_norm(A total, double norm_type) {
  if (std::isinf(norm_type) || norm_type == 1.0) return total;
  if (norm_type == 2.0) return std::sqrt(total);
  return std::pow(total, A(1.0 / norm_type));
}

}  // namespace

Tensor clip_grad_norm_(const Tensors& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  MG_CHECK(max_norm >= 0.0, Error, "clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  MG_CHECK(norm_type > 0.0, Error, "clip_grad_norm_: norm_type must be > 0 (or INFINITY), got ", norm_type);
  const Tensors all_grads = grads_of(params, "clip_grad_norm_");
  detail::check_clip_targets(params, "clip_grad_norm_");
  bool wide = false;  // an f64 gradient: the total is f64
  for (const Tensor& g : all_grads) wide = wide || g.dtype() == DType::F64;
  if (use_generic_path(all_grads)) return clip_grad_norm_generic(all_grads, max_norm, norm_type, error_if_nonfinite, wide);
  DenseGrads grads(all_grads);
  const bool inf_norm = std::isinf(norm_type);

  // Pass 1: per-chunk sums of |g|^p by the rule (or max |g|), accumulated in f32 (f64 for f64
  // gradients).
  const std::vector<TensorChunk> chunks = make_chunks(grads.slots);
  std::vector<double> partial(chunks.size());
  for_each_chunk(grads.slots, /*fused=*/true, [&](int64_t ci, const TensorChunk& c) {
    const TensorSlot& t = grads.slots[c.tensor];
    visit_floating(t.dtype, "clip_grad_norm_", [&]<typename P>() {
      using T = opmath_t<P>;
      const P* g = static_cast<const P*>(t.param);
      T acc = T(0);
      if (inf_norm) {
        const fn::AbsMax<T> f;
        for (int64_t i = c.begin; i < c.end; ++i) acc = f(acc, T(g[i]));
      } else {
        // |g|^p with p's common values outside the loop, so the leaves vectorize
        const P* gc = g + c.begin;
        const int64_t n = c.end - c.begin;
        if (norm_type == 2.0) {
          acc = cascade_sum<T>(n, [&](int64_t i) { const T v = T(gc[i]); return v * v; });
        } else if (norm_type == 1.0) {
          acc = cascade_sum<T>(n, [&](int64_t i) { return std::fabs(T(gc[i])); });
        } else {
          const fn::NormPow<T> f{T(norm_type)};
          acc = cascade_sum<T>(n, [&](int64_t i) { return f(T(gc[i])); });
        }
      }
      partial[ci] = double(acc);
    });
  });

  double norm = 0.0, coef = 1.0;
  if (wide) {
    const double n = finish_norm(combine<double>(partial, inf_norm), norm_type);
    norm = n;
    coef = max_norm / (n + 1e-6);
  } else {
    const float n = finish_norm(combine<float>(partial, inf_norm), norm_type);
    norm = n;
    coef = double(float(max_norm) / (n + 1e-6f));
  }
  const Tensor result = scalar_tensor(norm, {.dtype = wide ? DType::F64 : DType::F32});

  if (!std::isfinite(norm)) {
    // Not scaled: a NaN factor would turn every gradient into NaN, and inf would zero them.
    MG_CHECK(!error_if_nonfinite, Error, "clip_grad_norm_: the total norm of order ", norm_type,
             " of the gradients is ", std::isnan(norm) ? std::string("nan") : str_cat(norm), ", so they cannot be clipped; they were left unchanged",
             "\n  hint: find the overflow (lower the lr or use a GradScaler), or pass error_if_nonfinite = false "
             "to get the non-finite norm back and skip the step");
    return result;
  }
  if (coef < 1.0) {
    // Pass 2: g *= coef in opmath, rounded once.
    for_each_chunk(grads.slots, /*fused=*/true, [&](int64_t, const TensorChunk& c) {
      const TensorSlot& t = grads.slots[c.tensor];
      visit_floating(t.dtype, "clip_grad_norm_", [&]<typename P>() {
        using T = opmath_t<P>;
        P* g = static_cast<P*>(t.param);
        const T s = T(coef);
        for (int64_t i = c.begin; i < c.end; ++i) g[i] = P(T(g[i]) * s);
      });
    });
    grads.finish();
  }
  return result;
}

void clip_grad_value_(const Tensors& params, double clip_value) {
  MG_CHECK(clip_value >= 0.0, Error, "clip_grad_value_: clip_value must be >= 0, got ", clip_value);
  const Tensors all_grads = grads_of(params, "clip_grad_value_");
  detail::check_clip_targets(params, "clip_grad_value_");
  if (use_generic_path(all_grads)) {
    NoGradGuard no_grad;
    for (const Tensor& g : all_grads) Tensor(g).clamp_(-clip_value, clip_value);  // NaN stays NaN; exact
    return;
  }
  DenseGrads grads(all_grads);
  for_each_chunk(grads.slots, /*fused=*/true, [&](int64_t, const TensorChunk& c) {
    const TensorSlot& t = grads.slots[c.tensor];
    visit_floating(t.dtype, "clip_grad_value_", [&]<typename P>() {
      using T = opmath_t<P>;
      const fn::ClampAbs<T> f{T(clip_value)};
      P* g = static_cast<P*>(t.param);
      for (int64_t i = c.begin; i < c.end; ++i) g[i] = P(f(T(g[i])));
    });
  });
  grads.finish();
}

}  // namespace mg::optim
