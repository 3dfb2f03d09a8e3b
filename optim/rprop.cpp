#include "mixgrad/optim/rprop.h"

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/optim/functors.h"
#include "mixgrad/optim/generic_path.h"
#include "mixgrad/optim/opmath_blocks.h"

namespace mg::optim {

namespace {

template <typename T>
fn::RpropStep<T> rprop_step(const RpropOptions& o) {
  return {T(o.etas.first), T(o.etas.second), T(o.step_sizes.first), T(o.step_sizes.second), T(o.maximize ? -1.0 : 1.0)};
}

template <typename P>
void rprop_chunk(const TensorSlot& t, const RpropOptions& o, int64_t b, int64_t e) {
  using T = opmath_t<P>;
  const fn::RpropStep<T> f = rprop_step<T>(o);
  T* prev = static_cast<T*>(t.state[0]);
  T* size = static_cast<T*>(t.state[1]);
  for_each_opmath_block(static_cast<P*>(t.param), static_cast<const P*>(t.grad), b, e,
                        [&](T* p, const T* g, int64_t i0, int64_t n) {
                          const fn::RpropStep<T> step = f;  // a local copy: no store can alias it
                          for (int64_t j = 0; j < n; ++j) step(p[j], g[j], prev[i0 + j], size[i0 + j]);
                        });
}

// The sign as ATen's: 1, -1, or 0 (zero and NaN).
Tensor aten_sign(const Tensor& x) {
  const Tensor zero = zeros_like(x);
  return where(gt(x, zero), full_like(x, 1.0), where(lt(x, zero), full_like(x, -1.0), zero));
}

// The generic path (optim/generic_path.h): fn::RpropStep written with public ops on one tensor.
void rprop_generic(const Tensor& param, const Tensor& grad, Tensor prev, Tensor step_size, DType opmath,
                   const RpropOptions& o) {
  NoGradGuard no_grad;
  Tensor p = to(param, opmath);
  Tensor g = to(grad, opmath);
  if (o.maximize) g = neg(g);
  const Tensor s = aten_sign(mul(g, prev));
  const Tensor zero = zeros_like(s);
  const Tensor factor =
      where(gt(s, zero), full_like(s, o.etas.second), where(lt(s, zero), full_like(s, o.etas.first), full_like(s, 1.0)));
  step_size.copy_(clamp(mul(step_size, factor), o.step_sizes.first, o.step_sizes.second));
  g = where(lt(s, zero), zero, g);
  p.sub_(mul(aten_sign(g), step_size));
  prev.copy_(g);
  if (!p.is_same(param)) Tensor(param).copy_(p);
}

}  // namespace

Rprop::Rprop(const Tensors& params, RpropOptions options) : Rprop(std::vector<ParamGroupSpec>{{params}}, options) {}

Rprop::Rprop(const std::vector<ParamGroupSpec>& groups, RpropOptions defaults)
    : Optimizer("Rprop", options_to_map(defaults)) {
  init_groups(groups);
}

void Rprop::check_options(const OptionMap& m) const {
  check_bool_options<RpropOptions>(m, "Rprop");
  const RpropOptions o = options_from_map<RpropOptions>(m, "Rprop");
  MG_CHECK(o.lr >= 0.0, Error, "Rprop: lr must be >= 0, got ", o.lr);
  MG_CHECK(0.0 < o.etas.first && o.etas.first < 1.0 && 1.0 < o.etas.second, Error,
           "Rprop: the etas must satisfy 0 < etaminus < 1 < etaplus, got (", o.etas.first, ", ", o.etas.second, ")");
  MG_CHECK(0.0 <= o.step_sizes.first && o.step_sizes.first <= o.step_sizes.second, Error,
           "Rprop: the step sizes must satisfy 0 <= step_size_min <= step_size_max, got (", o.step_sizes.first, ", ",
           o.step_sizes.second, ")");
}

void Rprop::step_group(ParamGroup& group) {
  const RpropOptions o = options_from_map<RpropOptions>(group.options, name());
  const std::vector<Work> work = collect(group);
  // Every step size starts at the group's lr of the parameter's first update, as PyTorch's. On the
  // fused CUDA path the kernel seeds it (a step the device skips makes the buffers but is no
  // update: a scheduler may change lr before the first real one); here while no update ran.
  const auto buffers = [&](const Work& w) {
    Tensor size = buffer(w, "step_size", /*zero=*/true);  // never uninitialised memory in a saved state
    return std::pair{buffer(w, "prev", /*zero=*/true), size};
  };
  const auto seed = [&](const Work& w, Tensor& size) {
    if (w.state->step == 0) size.fill_(o.lr);
  };
  MultiTensorStepArgs args;
  if (const MultiTensorKernels* k = fused_step_args(group, work, args)) {
    for (const Work& w : work) {
      auto [prev, size] = buffers(w);
      args.state[0].push_back(prev);
      args.state[1].push_back(size);
    }
    k->rprop(args, {.lr = o.lr, .etaminus = o.etas.first, .etaplus = o.etas.second, .step_size_min = o.step_sizes.first,
                    .step_size_max = o.step_sizes.second, .maximize = o.maximize});
    finish_fused_step(work, k, args);
    return;
  }
  Tensors params;
  for (const Work& w : work) params.push_back(w.param);
  if (use_generic_path(params)) {
    for (const Work& w : work) {
      auto [prev, size] = buffers(w);
      seed(w, size);
      ++w.state->step;
      rprop_generic(w.param, w.grad, prev, size, opmath_dtype(w), o);
    }
    return;
  }
  std::vector<TensorSlot> slots;
  for (const Work& w : work) {
    TensorSlot slot = slot_of(w);
    auto [prev, size] = buffers(w);
    seed(w, size);
    slot.state[0] = prev.data_ptr();
    slot.state[1] = size.data_ptr();
    slots.push_back(slot);
    ++w.state->step;
  }
  for_each_chunk(slots, o.multi_tensor, [&](int64_t, const TensorChunk& c) {
    const TensorSlot& t = slots[c.tensor];
    visit_floating(t.dtype, "Rprop", [&]<typename P>() { rprop_chunk<P>(t, o, c.begin, c.end); });
  });
  for (const Work& w : work) w.param.bump_version();
}

}  // namespace mg::optim
