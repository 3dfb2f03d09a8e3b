#include "mixgrad/optim/rmsprop.h"

#include <array>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/optim/functors.h"
#include "mixgrad/optim/generic_path.h"
#include "mixgrad/optim/opmath_blocks.h"

namespace mg::optim {

namespace {

// n elements of one block with the functor's flags as compile-time constants, so the loop
// vectorizes (see adam_block in optim/adam.cpp); the arithmetic is the functor's own.
template <bool kCentered, bool kMomentum, typename T>
void rmsprop_block(fn::RmspropStep<T> f, T* p, const T* g, T* sq, T* ga, T* buf, int64_t n) {
  f.centered = kCentered;
  if constexpr (!kMomentum) f.momentum = T(0);
  T unused_ga = T(0), unused_buf = T(0);
  for (int64_t j = 0; j < n; ++j) {
    f(p[j], g[j], sq[j], kCentered ? ga[j] : unused_ga, kMomentum ? buf[j] : unused_buf);
  }
}

template <typename P>
void rmsprop_chunk(const TensorSlot& t, const RMSpropOptions& o, int64_t b, int64_t e) {
  using T = opmath_t<P>;
  const fn::RmspropStep<T> f{T(o.lr),       T(o.alpha),    T(1.0 - o.alpha), T(o.eps), T(o.weight_decay),
                             T(o.momentum), o.centered,    T(o.maximize ? -1.0 : 1.0)};
  T* sq = static_cast<T*>(t.state[0]);
  T* ga = static_cast<T*>(t.state[1]);
  T* buf = static_cast<T*>(t.state[2]);
  for_each_opmath_block(static_cast<P*>(t.param), static_cast<const P*>(t.grad), b, e,
                        [&](T* p, const T* g, int64_t i0, int64_t n) {
                          T* gai = ga ? ga + i0 : nullptr;
                          T* bufi = buf ? buf + i0 : nullptr;
                          if (ga && buf) rmsprop_block<true, true>(f, p, g, sq + i0, gai, bufi, n);
                          else if (ga) rmsprop_block<true, false>(f, p, g, sq + i0, gai, bufi, n);
                          else if (buf) rmsprop_block<false, true>(f, p, g, sq + i0, gai, bufi, n);
                          else rmsprop_block<false, false>(f, p, g, sq + i0, gai, bufi, n);
                        });
}

// The generic path (optim/generic_path.h): fn::RmspropStep written with public ops on one tensor.
// ga and buf are undefined unless centered / momentum > 0. Each op rounds to opmath, so f32
// results differ from the fused loop (which may contract a * b + c into one FMA) by a few ulps.
void rmsprop_generic(const Tensor& param, const Tensor& grad, Tensor sq, Tensor ga, Tensor buf, DType opmath,
                     const RMSpropOptions& o) {
  NoGradGuard no_grad;
  Tensor p = to(param, opmath);
  Tensor g = to(grad, opmath);
  if (o.maximize) g = neg(g);
  if (o.weight_decay != 0.0) g = add(g, p, o.weight_decay);
  sq.mul_(o.alpha).add_(mul(g * (1.0 - o.alpha), g));  // alpha * sq + (1 - alpha) * g * g
  Tensor avg;
  if (o.centered) {
    const double w = 1.0 - o.alpha;  // ATen's lerp(ga, g, w)
    if (w < 0.5) ga.add_(sub(g, ga) * w);
    else ga.copy_(sub(g, sub(g, ga) * (1.0 - w)));
    avg = sqrt(sub(sq, mul(ga, ga))) + o.eps;
  } else {
    avg = sqrt(sq) + o.eps;
  }
  if (o.momentum > 0.0) {
    buf.mul_(o.momentum).add_(div(g, avg));
    p.add_(buf, -o.lr);
  } else {
    p.add_(div(g, avg), -o.lr);
  }
  if (!p.is_same(param)) Tensor(param).copy_(p);
}

}  // namespace

RMSprop::RMSprop(const Tensors& params, RMSpropOptions options)
    : RMSprop(std::vector<ParamGroupSpec>{{params}}, options) {}

RMSprop::RMSprop(const std::vector<ParamGroupSpec>& groups, RMSpropOptions defaults)
    : Optimizer("RMSprop", options_to_map(defaults)) {
  init_groups(groups);
}

void RMSprop::check_options(const OptionMap& m) const {
  check_bool_options<RMSpropOptions>(m, "RMSprop");
  const RMSpropOptions o = options_from_map<RMSpropOptions>(m, "RMSprop");
  MG_CHECK(o.lr >= 0.0, Error, "RMSprop: lr must be >= 0, got ", o.lr);
  MG_CHECK(o.eps >= 0.0, Error, "RMSprop: eps must be >= 0, got ", o.eps);
  // PyTorch checks alpha >= 0 only; above 1 the squared average turns negative and its root NaN.
  MG_CHECK(o.alpha >= 0.0 && o.alpha <= 1.0, Error, "RMSprop: alpha must be in [0, 1], got ", o.alpha);
  MG_CHECK(o.momentum >= 0.0, Error, "RMSprop: momentum must be >= 0, got ", o.momentum);
  MG_CHECK(o.weight_decay >= 0.0, Error, "RMSprop: weight_decay must be >= 0, got ", o.weight_decay);
}

std::string RMSprop::graph_structure(const ParamGroup& group) const {
  return str_cat(group.option("centered") != 0.0 ? "centered;" : "not centered;",
                 group.option("momentum") > 0.0 ? "momentum;" : "no momentum;");
}

void RMSprop::step_group(ParamGroup& group) {
  const RMSpropOptions o = options_from_map<RMSpropOptions>(group.options, name());
  const std::vector<Work> work = collect(group);
  const auto buffers = [&](const Work& w) {
    return std::array<Tensor, 3>{buffer(w, "square_avg", /*zero=*/true),
                                 o.centered ? buffer(w, "grad_avg", /*zero=*/true) : Tensor(),
                                 o.momentum > 0.0 ? buffer(w, "momentum_buffer", /*zero=*/true) : Tensor()};
  };
  MultiTensorStepArgs args;
  if (const MultiTensorKernels* k = fused_step_args(group, work, args)) {
    for (const Work& w : work) {
      const std::array<Tensor, 3> s = buffers(w);
      for (int j = 0; j < 3; ++j) args.state[std::size_t(j)].push_back(s[std::size_t(j)]);
    }
    k->rmsprop(args, {.lr = o.lr, .alpha = o.alpha, .eps = o.eps, .weight_decay = o.weight_decay,
                      .momentum = o.momentum, .centered = o.centered, .maximize = o.maximize});
    finish_fused_step(work, k, args);
    return;
  }
  Tensors params;
  for (const Work& w : work) params.push_back(w.param);
  if (use_generic_path(params)) {
    for (const Work& w : work) {
      const std::array<Tensor, 3> s = buffers(w);
      rmsprop_generic(w.param, w.grad, s[0], s[1], s[2], opmath_dtype(w), o);
      w.state->step += 1;
    }
    return;
  }
  std::vector<TensorSlot> slots;
  for (const Work& w : work) {
    TensorSlot slot = slot_of(w);
    const std::array<Tensor, 3> s = buffers(w);
    for (int k = 0; k < 3; ++k) slot.state[k] = s[k].defined() ? s[k].data_ptr() : nullptr;
    slots.push_back(slot);
  }
  for_each_chunk(slots, o.multi_tensor, [&](int64_t, const TensorChunk& c) {
    const TensorSlot& t = slots[c.tensor];
    visit_floating(t.dtype, "RMSprop", [&]<typename P>() { rmsprop_chunk<P>(t, o, c.begin, c.end); });
  });
  for (const Work& w : work) {
    w.state->step += 1;
    w.param.bump_version();
  }
}

}  // namespace mg::optim
