#include "mixgrad/optim/sgd.h"

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/optim/functors.h"
#include "mixgrad/optim/generic_path.h"
#include "mixgrad/optim/opmath_blocks.h"

namespace mg::optim {

namespace {

// One chunk of one tensor: p, g in the parameter's dtype P, the momentum buffer in opmath; the
// functor runs over opmath blocks (optim/opmath_blocks.h), so the loop vectorizes.
template <typename P>
void sgd_chunk(const TensorSlot& t, const SGDOptions& o, bool first, int64_t b, int64_t e) {
  using T = opmath_t<P>;
  const fn::SgdStep<T> f{T(o.lr),       T(o.momentum), T(1.0 - o.dampening), T(o.weight_decay),
                         o.nesterov,     first,         T(o.maximize ? -1.0 : 1.0)};
  T* buf = static_cast<T*>(t.state[0]);
  for_each_opmath_block(static_cast<P*>(t.param), static_cast<const P*>(t.grad), b, e,
                        [&](T* p, const T* g, int64_t i0, int64_t n) {
                          const fn::SgdStep<T> step = f;  // a local copy: no store can alias it
                          if (buf) {
                            T* m = buf + i0;
                            for (int64_t j = 0; j < n; ++j) step(p[j], g[j], m[j]);
                          } else {
                            T unused = T(0);
                            for (int64_t j = 0; j < n; ++j) step(p[j], g[j], unused);
                          }
                        });
}

// The generic path (optim/generic_path.h): fn::SgdStep written with public ops on one tensor.
// param, grad [any shape] on any device; buf [same] opmath, or undefined without momentum; the
// math runs on opmath copies (param itself when it is opmath) and f16/bf16 params are rounded
// once by the final copy, as on the fused path. Each op rounds to opmath: buf * momentum is
// rounded before (1 - dampening) * g is added (the fused loop may fuse that into one FMA), so f32
// results differ from the fused path by an ulp or two, f64 by ~1e-16 relative.
void sgd_generic(const Tensor& param, const Tensor& grad, Tensor buf, DType opmath, const SGDOptions& o,
                 bool first) {
  NoGradGuard no_grad;
  Tensor p = to(param, opmath);
  Tensor g = to(grad, opmath);
  if (o.maximize) g = neg(g);
  if (o.weight_decay != 0.0) g = add(g, p, o.weight_decay);  // g + weight_decay * p
  if (o.momentum != 0.0) {
    if (first) buf.copy_(g);
    else buf.mul_(o.momentum).add_(g, 1.0 - o.dampening);  // momentum * buf + (1 - dampening) * g
    g = o.nesterov ? add(g, buf, o.momentum) : buf;
  }
  p.add_(g, -o.lr);
  if (!p.is_same(param)) Tensor(param).copy_(p);
}

}  // namespace

SGD::SGD(const Tensors& params, SGDOptions options) : SGD(std::vector<ParamGroupSpec>{{params}}, options) {}

SGD::SGD(const std::vector<ParamGroupSpec>& groups, SGDOptions defaults)
    : Optimizer("SGD", options_to_map(defaults)) {
  init_groups(groups);
}

void SGD::check_options(const OptionMap& m) const {
  check_bool_options<SGDOptions>(m, "SGD");
  const SGDOptions o = options_from_map<SGDOptions>(m, "SGD");
  MG_CHECK(o.lr >= 0.0, Error, "SGD: lr must be >= 0, got ", o.lr);
  MG_CHECK(o.momentum >= 0.0, Error, "SGD: momentum must be >= 0, got ", o.momentum);
  MG_CHECK(o.weight_decay >= 0.0, Error, "SGD: weight_decay must be >= 0, got ", o.weight_decay);
  MG_CHECK(o.dampening == o.dampening, Error, "SGD: dampening must be a number, got ", o.dampening);
  MG_CHECK(!o.nesterov || o.dampening == 0.0, Error, "SGD: nesterov momentum needs dampening = 0; got dampening ",
           o.dampening, "\n  hint: set .dampening = 0 or .nesterov = false");
}

// Only where a group is made, as PyTorch's __init__: OneCycleLR or CyclicLR may later cycle the
// momentum down to 0, and such a step is a plain SGD step (the buffer kept for the next one).
void SGD::check_new_group_options(const OptionMap& m) const {
  const SGDOptions o = options_from_map<SGDOptions>(m, "SGD");
  MG_CHECK(!o.nesterov || o.momentum > 0.0, Error, "SGD: nesterov momentum needs momentum > 0 and dampening = 0; got momentum ",
           o.momentum, ", dampening ", o.dampening, "\n  hint: set .momentum (e.g. 0.9) or .nesterov = false");
}

std::string SGD::graph_structure(const ParamGroup& group) const {
  return group.option("momentum") != 0.0 ? "momentum;" : "no momentum;";
}

void SGD::step_group(ParamGroup& group) {
  const SGDOptions o = options_from_map<SGDOptions>(group.options, name());
  const std::vector<Work> work = collect(group);
  MultiTensorStepArgs args;
  if (const MultiTensorKernels* k = fused_step_args(group, work, args)) {
    // The device's fused kernel: the buffer starts as the gradient where the device step count
    // still equals its value when the buffer was created (0 unless momentum was switched on, or a
    // state without a buffer loaded, after steps), so a first step the found-inf flag skipped
    // leaves it to the next one.
    // A buffer made here is zero-filled, so one saved before its first update (every step so far
    // skipped) holds zeros, not stale memory. Made during a CUDA graph capture, its creation step
    // would be re-copied at every replay and the buffer restart each time: refused (buffer()).
    for (const Work& w : work) {
      bool created = false;
      // buffer() refuses to create one inside a CUDA graph capture (it would restart at every replay).
      args.state[0].push_back(o.momentum != 0.0 ? buffer(w, "momentum_buffer", /*zero=*/true, &created) : Tensor());
      if (created) w.state->device_first_step = clone(w.state->device_step);  // stream-ordered, no wait
      args.state[1].push_back(o.momentum != 0.0 ? w.state->device_first_step : Tensor());
    }
    k->sgd(args, {.lr = o.lr, .momentum = o.momentum, .dampening = o.dampening, .weight_decay = o.weight_decay,
                  .nesterov = o.nesterov, .maximize = o.maximize});
    finish_fused_step(work, k, args);
    return;
  }
  Tensors params;
  for (const Work& w : work) params.push_back(w.param);
  if (use_generic_path(params)) {
    for (const Work& w : work) {
      bool created = false;
      const Tensor buf = o.momentum != 0.0 ? buffer(w, "momentum_buffer", /*zero=*/false, &created) : Tensor();
      sgd_generic(w.param, w.grad, buf, opmath_dtype(w), o, created);
      w.state->step += 1;
    }
    return;
  }
  std::vector<TensorSlot> slots;
  std::vector<char> first;
  for (const Work& w : work) {
    TensorSlot s = slot_of(w);
    bool created = false;
    if (o.momentum != 0.0) s.state[0] = buffer(w, "momentum_buffer", /*zero=*/false, &created).data_ptr();
    first.push_back(created);
    slots.push_back(s);
  }
  for_each_chunk(slots, o.multi_tensor, [&](int64_t, const TensorChunk& c) {
    const TensorSlot& t = slots[c.tensor];
    visit_floating(t.dtype, "SGD", [&]<typename P>() { sgd_chunk<P>(t, o, first[c.tensor], c.begin, c.end); });
  });
  for (const Work& w : work) {
    w.state->step += 1;
    w.param.bump_version();
  }
}

}  // namespace mg::optim
