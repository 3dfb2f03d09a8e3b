#include "mixgrad/optim/adagrad.h"

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/optim/functors.h"
#include "mixgrad/optim/generic_path.h"
#include "mixgrad/optim/opmath_blocks.h"

namespace mg::optim {

namespace {

// -clr for an update with step count t (host, double): -lr / (1 + (t - 1) * lr_decay).
double neg_clr(const AdagradOptions& o, int64_t t) { return fn::adagrad_neg_clr(o.lr, o.lr_decay, t); }

template <typename P>
void adagrad_chunk(const TensorSlot& t, const AdagradOptions& o, double neg_step, int64_t b, int64_t e) {
  using T = opmath_t<P>;
  const fn::AdagradStep<T> f{T(neg_step), T(o.eps), T(o.weight_decay), T(o.maximize ? -1.0 : 1.0)};
  T* sum = static_cast<T*>(t.state[0]);
  for_each_opmath_block(static_cast<P*>(t.param), static_cast<const P*>(t.grad), b, e,
                        [&](T* p, const T* g, int64_t i0, int64_t n) {
                          const fn::AdagradStep<T> step = f;  // a local copy: no store can alias it
                          T* s = sum + i0;
                          for (int64_t j = 0; j < n; ++j) step(p[j], g[j], s[j]);
                        });
}

// The generic path (optim/generic_path.h): fn::AdagradStep written with public ops on one tensor.
void adagrad_generic(const Tensor& param, const Tensor& grad, Tensor sum, DType opmath, const AdagradOptions& o,
                     double neg_step) {
  NoGradGuard no_grad;
  Tensor p = to(param, opmath);
  Tensor g = to(grad, opmath);
  if (o.maximize) g = neg(g);
  if (o.weight_decay != 0.0) g = add(g, p, o.weight_decay);
  sum.add_(mul(g, g));
  p.add_(div(g, sqrt(sum) + o.eps), neg_step);
  if (!p.is_same(param)) Tensor(param).copy_(p);
}

}  // namespace

Adagrad::Adagrad(const Tensors& params, AdagradOptions options)
    : Adagrad(std::vector<ParamGroupSpec>{{params}}, options) {}

Adagrad::Adagrad(const std::vector<ParamGroupSpec>& groups, AdagradOptions defaults)
    : Optimizer("Adagrad", options_to_map(defaults)) {
  init_groups(groups);
}

void Adagrad::check_options(const OptionMap& m) const {
  check_bool_options<AdagradOptions>(m, "Adagrad");
  const AdagradOptions o = options_from_map<AdagradOptions>(m, "Adagrad");
  MG_CHECK(o.lr >= 0.0, Error, "Adagrad: lr must be >= 0, got ", o.lr);
  MG_CHECK(o.lr_decay >= 0.0, Error, "Adagrad: lr_decay must be >= 0, got ", o.lr_decay);
  MG_CHECK(o.eps >= 0.0, Error, "Adagrad: eps must be >= 0, got ", o.eps);
  MG_CHECK(o.weight_decay >= 0.0, Error, "Adagrad: weight_decay must be >= 0, got ", o.weight_decay);
  MG_CHECK(o.initial_accumulator_value >= 0.0, Error, "Adagrad: initial_accumulator_value must be >= 0, got ",
           o.initial_accumulator_value);
}

void Adagrad::step_group(ParamGroup& group) {
  const AdagradOptions o = options_from_map<AdagradOptions>(group.options, name());
  const std::vector<Work> work = collect(group);
  // The sum starts at the group's initial_accumulator_value when the parameter's state is made.
  const auto sum_of = [&](const Work& w) {
    bool created = false;
    Tensor s = buffer(w, "sum", /*zero=*/false, &created);
    if (created) s.fill_(o.initial_accumulator_value);
    return s;
  };
  MultiTensorStepArgs args;
  if (const MultiTensorKernels* k = fused_step_args(group, work, args)) {
    for (const Work& w : work) args.state[0].push_back(sum_of(w));
    k->adagrad(args, {.lr = o.lr, .lr_decay = o.lr_decay, .eps = o.eps, .weight_decay = o.weight_decay,
                      .maximize = o.maximize});
    finish_fused_step(work, k, args);
    return;
  }
  Tensors params;
  for (const Work& w : work) params.push_back(w.param);
  if (use_generic_path(params)) {
    for (const Work& w : work) {
      const Tensor s = sum_of(w);
      adagrad_generic(w.param, w.grad, s, opmath_dtype(w), o, neg_clr(o, ++w.state->step));
    }
    return;
  }
  std::vector<TensorSlot> slots;
  std::vector<double> steps;
  for (const Work& w : work) {
    TensorSlot slot = slot_of(w);
    slot.state[0] = sum_of(w).data_ptr();
    slots.push_back(slot);
    steps.push_back(neg_clr(o, ++w.state->step));
  }
  for_each_chunk(slots, o.multi_tensor, [&](int64_t, const TensorChunk& c) {
    const TensorSlot& t = slots[c.tensor];
    visit_floating(t.dtype, "Adagrad", [&]<typename P>() { adagrad_chunk<P>(t, o, steps[c.tensor], c.begin, c.end); });
  });
  for (const Work& w : work) w.param.bump_version();
}

}  // namespace mg::optim
