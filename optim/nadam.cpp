#include "mixgrad/optim/nadam.h"

#include <cmath>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/optim/functors.h"
#include "mixgrad/optim/opmath_blocks.h"

namespace mg::optim {

namespace {

double mu_of(double beta1, double momentum_decay, int64_t t) {
  return beta1 * (1.0 - 0.5 * std::pow(0.96, double(t) * momentum_decay));
}

// The host scalars of one update (step t).
struct NadamCoeffs {
  double bias_correction2, coef_grad, coef_avg;
  double mu_product;  // prod_{i<=t} mu_i, kept as the parameter's "mu_product"
};

}  // namespace

NAdam::NAdam(const Tensors& params, NAdamOptions options) : NAdam(std::vector<ParamGroupSpec>{{params}}, options) {}

NAdam::NAdam(const std::vector<ParamGroupSpec>& groups, NAdamOptions defaults)
    : TwoBufferOptimizer("NAdam", options_to_map(defaults)) {
  init_groups(groups);
}

void NAdam::check_options(const OptionMap& m) const {
  check_bool_options<NAdamOptions>(m, "NAdam");
  const NAdamOptions o = options_from_map<NAdamOptions>(m, "NAdam");
  MG_CHECK(o.lr >= 0.0, Error, "NAdam: lr must be >= 0, got ", o.lr);
  MG_CHECK(o.eps >= 0.0, Error, "NAdam: eps must be >= 0, got ", o.eps);
  MG_CHECK(o.betas.first >= 0.0 && o.betas.first < 1.0, Error, "NAdam: beta1 must be in [0, 1), got ", o.betas.first);
  MG_CHECK(o.betas.second >= 0.0 && o.betas.second < 1.0, Error, "NAdam: beta2 must be in [0, 1), got ", o.betas.second);
  MG_CHECK(o.weight_decay >= 0.0, Error, "NAdam: weight_decay must be >= 0, got ", o.weight_decay);
  MG_CHECK(o.momentum_decay >= 0.0, Error, "NAdam: momentum_decay must be >= 0, got ", o.momentum_decay);
}

void NAdam::step_group(ParamGroup& group) {
  const NAdamOptions o = options_from_map<NAdamOptions>(group.options, name());
  const double beta1 = o.betas.first, beta2 = o.betas.second, md = o.momentum_decay;
  const double decay = 1.0 - o.lr * o.weight_decay;
  step_two_buffers(
      group, "exp_avg", "exp_avg_sq", o.multi_tensor,
      [&](const ParamState& st, int64_t t) {
        const double mu = mu_of(beta1, md, t), mu_next = mu_of(beta1, md, t + 1);
        // The product so far: the parameter's own (PyTorch's state), or, for a state saved without
        // it, rebuilt from the group's current beta1 and momentum_decay.
        double before = 1.0;
        if (const auto it = st.scalars.find("mu_product"); it != st.scalars.end()) {
          before = it->second;
        } else {
          for (int64_t i = 1; i < t; ++i) before *= mu_of(beta1, md, i);
        }
        const double product = before * mu;
        return NadamCoeffs{1.0 - std::pow(beta2, double(t)), -o.lr * (1.0 - mu) / (1.0 - product),
                           (-o.lr * mu_next) / (1.0 - product * mu_next), product};
      },
      [](ParamState& st, const NadamCoeffs& c) { st.scalars["mu_product"] = c.mu_product; },
      [&]<typename P>(const TensorSlot& s, const NadamCoeffs& c, int64_t b, int64_t e) {
        using T = opmath_t<P>;
        const fn::NadamStep<T> f{T(1.0 - beta1), T(beta2),   T(1.0 - beta2),         T(o.eps),
                                 T(o.weight_decay), o.decoupled_weight_decay, T(decay), T(c.bias_correction2),
                                 T(c.coef_grad), T(c.coef_avg), T(o.maximize ? -1.0 : 1.0)};
        T* m = static_cast<T*>(s.state[0]);
        T* v = static_cast<T*>(s.state[1]);
        for_each_opmath_block(static_cast<P*>(s.param), static_cast<const P*>(s.grad), b, e,
                              [&](T* p, const T* g, int64_t i0, int64_t n) {
                                const fn::NadamStep<T> step = f;
                                for (int64_t j = 0; j < n; ++j) step(p[j], g[j], m[i0 + j], v[i0 + j]);
                              });
      },
      [&](const Work& w, Tensor m, Tensor v, DType opmath, const NadamCoeffs& c) {
        NoGradGuard no_grad;
        auto [p, g] = adam_like_start(w.param, w.grad, m, v, opmath, o.maximize, o.weight_decay,
                                      o.decoupled_weight_decay, o.lr, beta1, beta2);
        const Tensor d = sqrt(v / c.bias_correction2) + o.eps;
        p.add_(div(g * c.coef_grad, d));  // ATen's addcdiv: (value * g) / d
        p.add_(div(m * c.coef_avg, d));
        if (!p.is_same(w.param)) Tensor(w.param).copy_(p);
      });
}

}  // namespace mg::optim
