#include "mixgrad/optim/adamax.h"

#include <cmath>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/optim/functors.h"
#include "mixgrad/optim/opmath_blocks.h"

namespace mg::optim {

Adamax::Adamax(const Tensors& params, AdamaxOptions options) : Adamax(std::vector<ParamGroupSpec>{{params}}, options) {}

Adamax::Adamax(const std::vector<ParamGroupSpec>& groups, AdamaxOptions defaults)
    : TwoBufferOptimizer("Adamax", options_to_map(defaults)) {
  init_groups(groups);
}

void Adamax::check_options(const OptionMap& m) const {
  check_bool_options<AdamaxOptions>(m, "Adamax");
  const AdamaxOptions o = options_from_map<AdamaxOptions>(m, "Adamax");
  MG_CHECK(o.lr >= 0.0, Error, "Adamax: lr must be >= 0, got ", o.lr);
  MG_CHECK(o.eps >= 0.0, Error, "Adamax: eps must be >= 0, got ", o.eps);
  MG_CHECK(o.betas.first >= 0.0 && o.betas.first < 1.0, Error, "Adamax: beta1 must be in [0, 1), got ", o.betas.first);
  MG_CHECK(o.betas.second >= 0.0 && o.betas.second < 1.0, Error, "Adamax: beta2 must be in [0, 1), got ", o.betas.second);
  MG_CHECK(o.weight_decay >= 0.0, Error, "Adamax: weight_decay must be >= 0, got ", o.weight_decay);
}

void Adamax::step_group(ParamGroup& group) {
  const AdamaxOptions o = options_from_map<AdamaxOptions>(group.options, name());
  const double beta1 = o.betas.first, beta2 = o.betas.second;
  step_two_buffers(
      group, "exp_avg", "exp_inf", o.multi_tensor,
      [&](const ParamState&, int64_t t) { return -o.lr / fn::bias_correction(beta1, t); },  // -clr
      [](ParamState&, double) {},
      [&]<typename P>(const TensorSlot& s, double neg_clr, int64_t b, int64_t e) {
        using T = opmath_t<P>;
        const fn::AdamaxStep<T> f{T(1.0 - beta1), T(beta2), T(o.eps), T(o.weight_decay), T(neg_clr),
                                  T(o.maximize ? -1.0 : 1.0)};
        T* m = static_cast<T*>(s.state[0]);
        T* u = static_cast<T*>(s.state[1]);
        for_each_opmath_block(static_cast<P*>(s.param), static_cast<const P*>(s.grad), b, e,
                              [&](T* p, const T* g, int64_t i0, int64_t n) {
                                const fn::AdamaxStep<T> step = f;  // a local copy: no store can alias it
                                for (int64_t j = 0; j < n; ++j) step(p[j], g[j], m[i0 + j], u[i0 + j]);
                              });
      },
      [&](const Work& w, Tensor m, Tensor u, DType opmath, double neg_clr) {
        NoGradGuard no_grad;
        Tensor p = to(w.param, opmath);
        Tensor g = to(w.grad, opmath);
        if (o.maximize) g = neg(g);
        if (o.weight_decay != 0.0) g = add(g, p, o.weight_decay);
        m.copy_(aten_lerp(m, g, 1.0 - beta1));
        u.copy_(maximum(u * beta2, abs(g) + o.eps));
        p.add_(div(m * neg_clr, u));  // ATen's addcdiv: (value * m) / u
        if (!p.is_same(w.param)) Tensor(w.param).copy_(p);
      },
      [&](const MultiTensorKernels& k, const MultiTensorStepArgs& args, const std::vector<Work>&) {
        k.adamax(args, {.lr = o.lr, .beta1 = beta1, .beta2 = beta2, .eps = o.eps, .weight_decay = o.weight_decay,
                        .maximize = o.maximize});
      });
}

}  // namespace mg::optim
