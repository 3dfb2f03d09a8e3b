#include "mixgrad/optim/asgd.h"

#include <cmath>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/optim/functors.h"
#include "mixgrad/optim/generic_path.h"
#include "mixgrad/optim/opmath_blocks.h"

namespace mg::optim {

namespace {

// The step's scalars of one parameter: eta and mu before it. lr and 1 at its first update (step
// count 0); else the state's, or, for a state saved without them, those of its step count and the
// group's current options (as NAdam rebuilds its mu_product).
struct AsgdScalars {
  double eta, mu;
};

AsgdScalars scalars_of(const ParamState& st, const ASGDOptions& o) {
  if (st.step == 0) return {o.lr, 1.0};
  const auto eta = st.scalars.find("eta"), mu = st.scalars.find("mu");
  return {eta != st.scalars.end() ? eta->second : fn::asgd_eta(o.lr, o.lambd, o.alpha, st.step),
          mu != st.scalars.end() ? mu->second : fn::asgd_mu(o.t0, st.step)};
}

template <typename T>
fn::AsgdStep<T> asgd_step(const ASGDOptions& o, const AsgdScalars& c) {
  return {T(1.0 - fn::product_rounded(o.lambd, c.eta)), T(-c.eta), T(o.weight_decay), T(c.mu), c.mu != 1.0, T(o.maximize ? -1.0 : 1.0)};
}

template <typename P>
void asgd_chunk(const TensorSlot& t, const ASGDOptions& o, const AsgdScalars& c, int64_t b, int64_t e) {
  using T = opmath_t<P>;
  const fn::AsgdStep<T> f = asgd_step<T>(o, c);
  T* ax = static_cast<T*>(t.state[0]);
  for_each_opmath_block(static_cast<P*>(t.param), static_cast<const P*>(t.grad), b, e,
                        [&](T* p, const T* g, int64_t i0, int64_t n) {
                          const fn::AsgdStep<T> step = f;  // a local copy: no store can alias it
                          for (int64_t j = 0; j < n; ++j) step(p[j], g[j], ax[i0 + j]);
                        });
}

// The generic path (optim/generic_path.h): fn::AsgdStep written with public ops on one tensor.
void asgd_generic(const Tensor& param, const Tensor& grad, Tensor ax, DType opmath, const ASGDOptions& o,
                  const AsgdScalars& c) {
  NoGradGuard no_grad;
  Tensor p = to(param, opmath);
  Tensor g = to(grad, opmath);
  if (o.maximize) g = neg(g);
  if (o.weight_decay != 0.0) g = add(g, p, o.weight_decay);
  p.mul_(1.0 - fn::product_rounded(o.lambd, c.eta));
  p.add_(g, -c.eta);
  if (c.mu != 1.0) ax.add_(sub(p, ax) * c.mu);
  else ax.copy_(p);
  if (!p.is_same(param)) Tensor(param).copy_(p);
}

// eta and mu after the parameter's t-th update.
void advance(ParamState& st, const ASGDOptions& o, int64_t t) {
  st.scalars["eta"] = fn::asgd_eta(o.lr, o.lambd, o.alpha, t);
  st.scalars["mu"] = fn::asgd_mu(o.t0, t);
}

}  // namespace

ASGD::ASGD(const Tensors& params, ASGDOptions options) : ASGD(std::vector<ParamGroupSpec>{{params}}, options) {}

ASGD::ASGD(const std::vector<ParamGroupSpec>& groups, ASGDOptions defaults)
    : Optimizer("ASGD", options_to_map(defaults)) {
  init_groups(groups);
}

void ASGD::check_options(const OptionMap& m) const {
  check_bool_options<ASGDOptions>(m, "ASGD");
  const ASGDOptions o = options_from_map<ASGDOptions>(m, "ASGD");
  MG_CHECK(o.lr >= 0.0, Error, "ASGD: lr must be >= 0, got ", o.lr);
  MG_CHECK(o.lambd >= 0.0, Error, "ASGD: lambd must be >= 0, got ", o.lambd);
  MG_CHECK(std::isfinite(o.alpha) && o.alpha >= 0.0, Error, "ASGD: alpha must be finite and >= 0, got ", o.alpha);
  MG_CHECK(!std::isnan(o.t0), Error, "ASGD: t0 must not be NaN (inf: never average)");
  MG_CHECK(o.weight_decay >= 0.0, Error, "ASGD: weight_decay must be >= 0, got ", o.weight_decay);
}

void ASGD::step_group(ParamGroup& group) {
  const ASGDOptions o = options_from_map<ASGDOptions>(group.options, name());
  const std::vector<Work> work = collect(group);
  MultiTensorStepArgs args;
  if (const MultiTensorKernels* k = fused_step_args(group, work, args)) {
    // eta and mu live on the device from the parameter's first fused step on, made then from the
    // host values (current: the device step counter is made in the same call); the kernel uses lr
    // and 1 instead while the parameter has had no update.
    for (const Work& w : work) {
      ParamState& st = *w.state;
      args.state[0].push_back(buffer(w, "ax", /*zero=*/true));
      const AsgdScalars c = scalars_of(st, o);
      Tensor& eta = st.device_scalars["eta"];
      Tensor& mu = st.device_scalars["mu"];
      if (!eta.defined() || !mu.defined()) {
        MG_ASSERT(!graph_capturing() && !st.step_on_device, "ASGD: eta and mu made after the device step counter");
        eta = full({1}, c.eta, {.dtype = DType::F64, .device = w.param.device()});
        mu = full({1}, c.mu, {.dtype = DType::F64, .device = w.param.device()});
      }
      args.state[1].push_back(eta);
      args.state[2].push_back(mu);
    }
    k->asgd(args, {.lr = o.lr, .lambd = o.lambd, .alpha = o.alpha, .t0 = o.t0, .weight_decay = o.weight_decay,
                   .maximize = o.maximize});
    finish_fused_step(work, k, args);
    return;
  }
  // Every buffer and scalar is read before any step is counted.
  std::vector<Tensor> axes;
  std::vector<AsgdScalars> scalars;
  for (const Work& w : work) {
    axes.push_back(buffer(w, "ax", /*zero=*/true));
    scalars.push_back(scalars_of(*w.state, o));
  }
  Tensors params;
  for (const Work& w : work) params.push_back(w.param);
  if (use_generic_path(params)) {
    for (std::size_t i = 0; i < work.size(); ++i) {
      asgd_generic(work[i].param, work[i].grad, axes[i], opmath_dtype(work[i]), o, scalars[i]);
      advance(*work[i].state, o, ++work[i].state->step);
    }
    return;
  }
  std::vector<TensorSlot> slots;
  for (std::size_t i = 0; i < work.size(); ++i) {
    TensorSlot slot = slot_of(work[i]);
    slot.state[0] = axes[i].data_ptr();
    slots.push_back(slot);
  }
  for_each_chunk(slots, o.multi_tensor, [&](int64_t, const TensorChunk& c) {
    const TensorSlot& t = slots[c.tensor];
    visit_floating(t.dtype, "ASGD", [&]<typename P>() { asgd_chunk<P>(t, o, scalars[c.tensor], c.begin, c.end); });
  });
  for (const Work& w : work) {
    advance(*w.state, o, ++w.state->step);
    w.param.bump_version();
  }
}

}  // namespace mg::optim
