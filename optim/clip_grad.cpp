#include "mixgrad/optim/clip_grad.h"

#include <vector>

#include "mixgrad/core/factory.h"
#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/optim/functors.h"
#include "mixgrad/optim/multi_tensor.h"

namespace mg::optim {

namespace {

// The gradients of `params` as dense tensors; `originals` holds the non-contiguous ones that
// their dense copies must be written back to.
struct DenseGrads {
  Tensors dense;
  Tensors originals;  // parallel to dense: undefined when dense is the gradient itself
  std::vector<TensorSlot> slots;  // TensorSlot::param points at the (mutable) gradient

  DenseGrads(const Tensors& params, const char* op) {
    for (std::size_t k = 0; k < params.size(); ++k) {
      const Tensor& p = params[k];
      MG_CHECK(p.defined(), Error, op, ": parameter ", k, " is undefined");
      const Tensor g = p.grad();
      if (!g.defined()) continue;
      MG_CHECK(g.device().is_cpu(), NotImplementedError, op, ": the gradient of parameter ", k, " is ",
               describe(g), "; gradient clipping runs on the CPU for now");
      MG_CHECK(g.is_floating_point(), DTypeError, op, ": the gradient of parameter ", k, " is ", describe(g));
      const Tensor d = contiguous(g);
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

// total (f32, or f64 when `wide`) from the per-chunk partials, added in chunk order.
template <typename A>
A combine(const std::vector<double>& partial, bool inf_norm) {
  A acc = A(0);
  for (double v : partial) acc = inf_norm ? fn::AbsMax<A>{}(acc, A(v)) : acc + A(v);
  return acc;
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
  DenseGrads grads(params, "clip_grad_norm_");
  const bool inf_norm = std::isinf(norm_type);
  bool wide = false;  // an f64 gradient: the total is f64
  for (const TensorSlot& s : grads.slots) wide = wide || s.dtype == DType::F64;

  // Pass 1: per-chunk sums of |g|^p (or max |g|), accumulated in f32 (f64 for f64 gradients).
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
        const fn::NormPow<T> f{T(norm_type)};
        for (int64_t i = c.begin; i < c.end; ++i) acc += f(T(g[i]));
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
  DenseGrads grads(params, "clip_grad_value_");
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
