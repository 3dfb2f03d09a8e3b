#include "mixgrad/optim/nadam.h"

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/optim/functors.h"
#include "mixgrad/optim/opmath_blocks.h"

namespace mg::optim {

namespace {

// The product of the mu's before update t: the parameter's own (PyTorch's state), or, for a state
// saved without it, rebuilt from the group's current beta1 and momentum_decay.
double mu_product_before(const ParamState& st, double beta1, double momentum_decay, int64_t t) {
  if (const auto it = st.scalars.find("mu_product"); it != st.scalars.end()) return it->second;
  double before = 1.0;
  for (int64_t i = 1; i < t; ++i) before = fn::product_rounded(before, fn::nadam_mu(beta1, momentum_decay, i));
  return before;
}

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
        return fn::nadam_scalars(o.lr, beta1, beta2, md, t, mu_product_before(st, beta1, md, t));
      },
      [](ParamState& st, const fn::NadamScalars& c) { st.scalars["mu_product"] = c.mu_product; },
      [&]<typename P>(const TensorSlot& s, const fn::NadamScalars& c, int64_t b, int64_t e) {
        using T = opmath_t<P>;
        const fn::NadamStep<T> f{T(1.0 - beta1), T(beta2),   T(1.0 - beta2),         T(o.eps),
                                 T(o.weight_decay), o.decoupled_weight_decay, T(decay), T(c.bias_correction2),
                                 T(c.coef_grad), T(c.coef_avg), T(o.maximize ? -1.0 : 1.0)};
        T* m = static_cast<T*>(s.state[0]);
        T* v = static_cast<T*>(s.state[1]);
        const auto loop = [&]<fn::WeightDecayMode M>() {
          for_each_opmath_block(static_cast<P*>(s.param), static_cast<const P*>(s.grad), b, e,
                                [&](T* p, const T* g, int64_t i0, int64_t n) {
                                  const fn::NadamStep<T> step = f;  // a local copy: no store can alias it
                                  for (int64_t j = 0; j < n; ++j) step.template operator()<M>(p[j], g[j], m[i0 + j], v[i0 + j]);
                                });
        };
        switch (fn::weight_decay_mode(o.weight_decay, o.decoupled_weight_decay)) {  // vectorizable loops
          case fn::WeightDecayMode::L2: loop.template operator()<fn::WeightDecayMode::L2>(); break;
          case fn::WeightDecayMode::Decoupled: loop.template operator()<fn::WeightDecayMode::Decoupled>(); break;
          default: loop.template operator()<fn::WeightDecayMode::None>(); break;
        }
      },
      [&](const Work& w, Tensor m, Tensor v, DType opmath, const fn::NadamScalars& c) {
        NoGradGuard no_grad;
        auto [p, g] = adam_like_start(w.param, w.grad, m, v, opmath, o.maximize, o.weight_decay,
                                      o.decoupled_weight_decay, o.lr, beta1, beta2);
        const Tensor d = sqrt(v / c.bias_correction2) + o.eps;
        p.add_(div(g * c.coef_grad, d));  // ATen's addcdiv: (value * g) / d
        p.add_(div(m * c.coef_avg, d));
        if (!p.is_same(w.param)) Tensor(w.param).copy_(p);
      },
      [&](const MultiTensorKernels& k, MultiTensorStepArgs& args, const std::vector<Work>& work) {
        // The product lives on the device from the first fused update on, made then from the host
        // value (whose step count is current: the device counter is made in the same call).
        for (const Work& w : work) {
          ParamState& st = *w.state;
          Tensor& product = st.device_scalars["mu_product"];
          if (!product.defined()) {
            MG_ASSERT(!graph_capturing() && !st.step_on_device, "NAdam: mu_product made after the device step counter");
            product = full({1}, mu_product_before(st, beta1, md, st.step + 1),
                           {.dtype = DType::F64, .device = w.param.device()});
          }
          args.state[2].push_back(product);
        }
        k.nadam(args, {.lr = o.lr, .beta1 = beta1, .beta2 = beta2, .eps = o.eps, .weight_decay = o.weight_decay,
                       .momentum_decay = md, .decoupled = o.decoupled_weight_decay, .maximize = o.maximize});
      });
}

}  // namespace mg::optim
