#include "mixgrad/optim/adadelta.h"

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/optim/functors.h"
#include "mixgrad/optim/opmath_blocks.h"

namespace mg::optim {

Adadelta::Adadelta(const Tensors& params, AdadeltaOptions options)
    : Adadelta(std::vector<ParamGroupSpec>{{params}}, options) {}

Adadelta::Adadelta(const std::vector<ParamGroupSpec>& groups, AdadeltaOptions defaults)
    : TwoBufferOptimizer("Adadelta", options_to_map(defaults)) {
  init_groups(groups);
}

void Adadelta::check_options(const OptionMap& m) const {
  check_bool_options<AdadeltaOptions>(m, "Adadelta");
  const AdadeltaOptions o = options_from_map<AdadeltaOptions>(m, "Adadelta");
  MG_CHECK(o.lr >= 0.0, Error, "Adadelta: lr must be >= 0, got ", o.lr);
  MG_CHECK(o.rho >= 0.0 && o.rho <= 1.0, Error, "Adadelta: rho must be in [0, 1], got ", o.rho);
  MG_CHECK(o.eps >= 0.0, Error, "Adadelta: eps must be >= 0, got ", o.eps);
  MG_CHECK(o.weight_decay >= 0.0, Error, "Adadelta: weight_decay must be >= 0, got ", o.weight_decay);
}

void Adadelta::step_group(ParamGroup& group) {
  const AdadeltaOptions o = options_from_map<AdadeltaOptions>(group.options, name());
  step_two_buffers(
      group, "square_avg", "acc_delta", o.multi_tensor, [](const ParamState&, int64_t) { return 0; },
      [](ParamState&, int) {},
      [&]<typename P>(const TensorSlot& s, int, int64_t b, int64_t e) {
        using T = opmath_t<P>;
        const fn::AdadeltaStep<T> f{T(o.rho), T(1.0 - o.rho), T(o.eps), T(o.weight_decay), T(o.lr),
                                    T(o.maximize ? -1.0 : 1.0)};
        T* sq = static_cast<T*>(s.state[0]);
        T* acc = static_cast<T*>(s.state[1]);
        for_each_opmath_block(static_cast<P*>(s.param), static_cast<const P*>(s.grad), b, e,
                              [&](T* p, const T* g, int64_t i0, int64_t n) {
                                const fn::AdadeltaStep<T> step = f;
                                for (int64_t j = 0; j < n; ++j) step(p[j], g[j], sq[i0 + j], acc[i0 + j]);
                              });
      },
      [&](const Work& w, Tensor sq, Tensor acc, DType opmath, int) {
        NoGradGuard no_grad;
        Tensor p = to(w.param, opmath);
        Tensor g = to(w.grad, opmath);
        if (o.maximize) g = neg(g);
        if (o.weight_decay != 0.0) g = add(g, p, o.weight_decay);
        sq.mul_(o.rho).add_(mul(g * (1.0 - o.rho), g));
        const Tensor delta = div(sqrt(acc + o.eps), sqrt(sq + o.eps)) * g;
        acc.mul_(o.rho).add_(mul(delta * (1.0 - o.rho), delta));
        p.add_(delta, -o.lr);
        if (!p.is_same(w.param)) Tensor(w.param).copy_(p);
      },
      [&](const MultiTensorKernels& k, const MultiTensorStepArgs& args, const std::vector<Work>&) {
        k.adadelta(args, {.lr = o.lr, .rho = o.rho, .eps = o.eps, .weight_decay = o.weight_decay, .maximize = o.maximize});
      });
}

}  // namespace mg::optim
