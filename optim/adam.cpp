#include "mixgrad/optim/adam.h"

#include <cmath>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/optim/functors.h"
#include "mixgrad/optim/generic_path.h"
#include "mixgrad/optim/opmath_blocks.h"

namespace mg::optim {

namespace {

// Host scalars of one tensor's update (they depend on its own step count t).
struct AdamScalars {
  double neg_step_size;          // -lr / (1 - beta1^t)
  double bias_correction2_sqrt;  // sqrt(1 - beta2^t)
};

// The scalars of an update with step count t (host, double).
AdamScalars adam_scalars(const AdamOptions& o, int64_t t) {
  const double bias_correction1 = fn::bias_correction(o.betas.first, t);
  const double bias_correction2 = fn::bias_correction(o.betas.second, t);
  return {-(o.lr / bias_correction1), std::sqrt(bias_correction2)};
}

// n elements of one block with the functor's flags as compile-time constants: g++ if-converts
// runtime flags into selects on a scalar bool, which it cannot vectorize; a copy of the functor
// whose flags are constants folds them away, and the loop vectorizes. The arithmetic is the
// functor's own (kL2 false only where weight_decay is 0, which the functor would skip too).
template <bool kDecoupled, bool kL2, bool kAmsgrad, typename T>
void adam_block(fn::AdamStep<T> f, T* p, const T* g, T* m, T* v, T* vmax, int64_t n) {
  f.decoupled = kDecoupled;
  f.amsgrad = kAmsgrad;
  if constexpr (!kL2) f.weight_decay = T(0);
  if constexpr (kAmsgrad) {
    for (int64_t j = 0; j < n; ++j) f(p[j], g[j], m[j], v[j], vmax[j]);
  } else {
    T unused = T(0);
    for (int64_t j = 0; j < n; ++j) f(p[j], g[j], m[j], v[j], unused);
  }
}

template <typename P>
void adam_chunk(const TensorSlot& t, const AdamOptions& o, bool decoupled, const AdamScalars& s, int64_t b,
                int64_t e) {
  using T = opmath_t<P>;
  const auto [beta1, beta2] = o.betas;
  const fn::AdamStep<T> f{T(beta1),
                          T(beta2),
                          T(1.0 - beta1),
                          T(1.0 - beta2),
                          T(o.eps),
                          T(decoupled ? 0.0 : o.weight_decay),
                          T(decoupled ? 1.0 - o.lr * o.weight_decay : 1.0),
                          T(s.neg_step_size),
                          T(s.bias_correction2_sqrt),
                          decoupled,
                          o.amsgrad,
                          T(o.maximize ? -1.0 : 1.0)};
  T* m = static_cast<T*>(t.state[0]);
  T* v = static_cast<T*>(t.state[1]);
  T* vmax = static_cast<T*>(t.state[2]);
  const bool l2 = !decoupled && f.weight_decay != T(0);
  for_each_opmath_block(static_cast<P*>(t.param), static_cast<const P*>(t.grad), b, e,
                        [&](T* p, const T* g, int64_t i0, int64_t n) {
                          T* x = vmax ? vmax + i0 : nullptr;
                          if (decoupled) {
                            if (vmax) adam_block<true, false, true>(f, p, g, m + i0, v + i0, x, n);
                            else adam_block<true, false, false>(f, p, g, m + i0, v + i0, x, n);
                          } else if (l2) {
                            if (vmax) adam_block<false, true, true>(f, p, g, m + i0, v + i0, x, n);
                            else adam_block<false, true, false>(f, p, g, m + i0, v + i0, x, n);
                          } else {
                            if (vmax) adam_block<false, false, true>(f, p, g, m + i0, v + i0, x, n);
                            else adam_block<false, false, false>(f, p, g, m + i0, v + i0, x, n);
                          }
                        });
}

// The generic path (optim/generic_path.h): fn::AdamStep written with public ops on one tensor.
// param, grad [any shape] on any device; m, v (and vmax with amsgrad, else undefined) [same]
// opmath. The math runs on opmath copies (param itself when it is opmath); f16/bf16 params are
// rounded once by the final copy, as on the fused path. Each op rounds to opmath: the moment
// updates round beta * m before adding (1 - beta) * g (the fused loop may contract that into one
// FMA), so f32 results differ from the fused path by a few ulps; the rest is the same sequence of
// correctly rounded operations (sqrt, divisions, the final add).
void adam_generic(const Tensor& param, const Tensor& grad, Tensor m, Tensor v, Tensor vmax, DType opmath,
                  const AdamOptions& o, bool decoupled, const AdamScalars& s) {
  NoGradGuard no_grad;
  const auto [beta1, beta2] = o.betas;
  Tensor p = to(param, opmath);
  Tensor g = to(grad, opmath);
  if (o.maximize) g = neg(g);
  if (decoupled) p.mul_(1.0 - o.lr * o.weight_decay);
  else if (o.weight_decay != 0.0) g = add(g, p, o.weight_decay);
  m.mul_(beta1).add_(g, 1.0 - beta1);             // beta1 * m + (1 - beta1) * g
  v.mul_(beta2).add_(mul(g * (1.0 - beta2), g));  // beta2 * v + (1 - beta2) * g * g
  Tensor second = v;
  if (o.amsgrad) {
    vmax.copy_(maximum(vmax, v));  // NaN propagates, as the functor's
    second = vmax;
  }
  const Tensor denom = sqrt(second) / s.bias_correction2_sqrt + o.eps;
  p.add_(m * s.neg_step_size / denom);
  if (!p.is_same(param)) Tensor(param).copy_(p);
}

template <typename Options>
void check_adam(const OptionMap& m, const std::string& name) {
  const Options o = options_from_map<Options>(m, name);
  check_bool_options<Options>(m, name);
  MG_CHECK(o.lr >= 0.0, Error, name, ": lr must be >= 0, got ", o.lr);
  MG_CHECK(o.eps >= 0.0, Error, name, ": eps must be >= 0, got ", o.eps);
  MG_CHECK(o.betas.first >= 0.0 && o.betas.first < 1.0, Error, name, ": beta1 must be in [0, 1), got ",
           o.betas.first);
  MG_CHECK(o.betas.second >= 0.0 && o.betas.second < 1.0, Error, name, ": beta2 must be in [0, 1), got ",
           o.betas.second);
  MG_CHECK(o.weight_decay >= 0.0, Error, name, ": weight_decay must be >= 0, got ", o.weight_decay);
}

// The update of one group's parameters with a gradient, shared by Adam and AdamW (their decay in
// o.decoupled_weight_decay). `buffer(w, name)` returns w's zero-initialised state buffer.
template <typename WorkT, typename BufferFn>
void adam_group(const std::vector<WorkT>& work, const AdamOptions& o, const BufferFn& buffer) {
  std::vector<AdamUpdateTensor> tensors;
  for (const WorkT& w : work) {
    tensors.push_back({w.param, w.grad, buffer(w, "exp_avg"), buffer(w, "exp_avg_sq"),
                       o.amsgrad ? buffer(w, "max_exp_avg_sq") : Tensor(), &w.state->step});
  }
  adam_update(tensors, o);
}

// The fused device path of one group: the state lists, then the device's Adam kernel
// (fn::AdamStep per element, bias corrections from the device step counts).
template <typename WorkT, typename BufferFn>
void adam_fused(const std::vector<WorkT>& work, const AdamOptions& o, bool decoupled, const MultiTensorKernels& k,
                MultiTensorStepArgs& args, const BufferFn& buffer) {
  for (const WorkT& w : work) {
    args.state[0].push_back(buffer(w, "exp_avg"));
    args.state[1].push_back(buffer(w, "exp_avg_sq"));
    args.state[2].push_back(o.amsgrad ? buffer(w, "max_exp_avg_sq") : Tensor());
  }
  k.adam(args, {.lr = o.lr, .beta1 = o.betas.first, .beta2 = o.betas.second, .eps = o.eps,
                .weight_decay = o.weight_decay, .decoupled = decoupled, .amsgrad = o.amsgrad, .maximize = o.maximize});
}

// AdamW's group options as the AdamOptions the shared code takes (decoupled weight decay).
AdamOptions as_adam(const AdamWOptions& w) {
  return {.lr = w.lr, .betas = w.betas, .eps = w.eps, .weight_decay = w.weight_decay, .amsgrad = w.amsgrad,
          .decoupled_weight_decay = true, .maximize = w.maximize, .multi_tensor = w.multi_tensor};
}

}  // namespace

void adam_update(const std::vector<AdamUpdateTensor>& tensors, const AdamOptions& o) {
  const bool decoupled = o.decoupled_weight_decay;
  Tensors params;
  for (const AdamUpdateTensor& t : tensors) params.push_back(t.param);
  if (use_generic_path(params)) {
    for (const AdamUpdateTensor& t : tensors) {
      const DType opmath = t.param.dtype() == DType::F64 ? DType::F64 : DType::F32;
      adam_generic(t.param, t.grad, t.exp_avg, t.exp_avg_sq, t.max_exp_avg_sq, opmath, o, decoupled,
                   adam_scalars(o, ++*t.step));
    }
    return;
  }
  std::vector<TensorSlot> slots;
  std::vector<AdamScalars> scalars;
  for (const AdamUpdateTensor& t : tensors) {
    TensorSlot s{t.param.dtype(), t.param.numel(), t.param.data_ptr(), t.grad.data_ptr(), {}};
    s.state[0] = t.exp_avg.data_ptr();
    s.state[1] = t.exp_avg_sq.data_ptr();
    if (o.amsgrad) s.state[2] = t.max_exp_avg_sq.data_ptr();
    slots.push_back(s);
    scalars.push_back(adam_scalars(o, ++*t.step));
  }
  for_each_chunk(slots, o.multi_tensor, [&](int64_t, const TensorChunk& c) {
    const TensorSlot& t = slots[c.tensor];
    visit_floating(t.dtype, decoupled ? "AdamW" : "Adam", [&]<typename P>() {
      adam_chunk<P>(t, o, decoupled, scalars[c.tensor], c.begin, c.end);
    });
  });
  for (const AdamUpdateTensor& t : tensors) t.param.bump_version();
}

// Options a state saved before they existed lacks; such a state loads with these values, which
// reproduce what it did then.
OptionMap Adam::options_added_later() const { return {{"maximize", 0.0}, {"decoupled_weight_decay", 0.0}}; }
OptionMap AdamW::options_added_later() const { return {{"maximize", 0.0}}; }

Adam::Adam(const Tensors& params, AdamOptions options) : Adam(std::vector<ParamGroupSpec>{{params}}, options) {}

Adam::Adam(const std::vector<ParamGroupSpec>& groups, AdamOptions defaults)
    : Optimizer("Adam", options_to_map(defaults)) {
  init_groups(groups);
}

void Adam::check_options(const OptionMap& m) const { check_adam<AdamOptions>(m, "Adam"); }

void Adam::step_group(ParamGroup& group) {
  const std::vector<Work> work = collect(group);
  const AdamOptions o = options_from_map<AdamOptions>(group.options, name());
  MultiTensorStepArgs args;
  if (const MultiTensorKernels* k = fused_step_args(group, work, args)) {
    adam_fused(work, o, o.decoupled_weight_decay, *k, args, [&](const Work& w, const char* n) { return buffer(w, n, true); });
    finish_fused_step(work, k, args);
    return;
  }
  adam_group(work, o, [&](const Work& w, const char* n) { return buffer(w, n, /*zero=*/true); });
}

AdamW::AdamW(const Tensors& params, AdamWOptions options)
    : AdamW(std::vector<ParamGroupSpec>{{params}}, options) {}

AdamW::AdamW(const std::vector<ParamGroupSpec>& groups, AdamWOptions defaults)
    : Optimizer("AdamW", options_to_map(defaults)) {
  init_groups(groups);
}

void AdamW::check_options(const OptionMap& m) const { check_adam<AdamWOptions>(m, "AdamW"); }

void AdamW::step_group(ParamGroup& group) {
  const std::vector<Work> work = collect(group);
  const AdamOptions o = as_adam(options_from_map<AdamWOptions>(group.options, name()));
  MultiTensorStepArgs args;
  if (const MultiTensorKernels* k = fused_step_args(group, work, args)) {
    adam_fused(work, o, /*decoupled=*/true, *k, args, [&](const Work& w, const char* n) { return buffer(w, n, true); });
    finish_fused_step(work, k, args);
    return;
  }
  adam_group(work, o, [&](const Work& w, const char* n) { return buffer(w, n, /*zero=*/true); });
}

}  // namespace mg::optim
