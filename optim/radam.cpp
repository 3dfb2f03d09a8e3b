#include "mixgrad/optim/radam.h"

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/optim/functors.h"
#include "mixgrad/optim/opmath_blocks.h"

namespace mg::optim {


RAdam::RAdam(const Tensors& params, RAdamOptions options) : RAdam(std::vector<ParamGroupSpec>{{params}}, options) {}

RAdam::RAdam(const std::vector<ParamGroupSpec>& groups, RAdamOptions defaults)
    : TwoBufferOptimizer("RAdam", options_to_map(defaults)) {
  init_groups(groups);
}

void RAdam::check_options(const OptionMap& m) const {
  check_bool_options<RAdamOptions>(m, "RAdam");
  const RAdamOptions o = options_from_map<RAdamOptions>(m, "RAdam");
  MG_CHECK(o.lr >= 0.0, Error, "RAdam: lr must be >= 0, got ", o.lr);
  MG_CHECK(o.eps >= 0.0, Error, "RAdam: eps must be >= 0, got ", o.eps);
  MG_CHECK(o.betas.first >= 0.0 && o.betas.first < 1.0, Error, "RAdam: beta1 must be in [0, 1), got ", o.betas.first);
  MG_CHECK(o.betas.second >= 0.0 && o.betas.second < 1.0, Error, "RAdam: beta2 must be in [0, 1), got ", o.betas.second);
  MG_CHECK(o.weight_decay >= 0.0, Error, "RAdam: weight_decay must be >= 0, got ", o.weight_decay);
}

void RAdam::step_group(ParamGroup& group) {
  const RAdamOptions o = options_from_map<RAdamOptions>(group.options, name());
  const double beta1 = o.betas.first, beta2 = o.betas.second;
  const double decay = 1.0 - o.lr * o.weight_decay;
  step_two_buffers(
      group, "exp_avg", "exp_avg_sq", o.multi_tensor,
      [&](const ParamState&, int64_t t) { return fn::radam_scalars(beta1, beta2, t); },
      [](ParamState&, const fn::RadamScalars&) {},
      [&]<typename P>(const TensorSlot& s, const fn::RadamScalars& c, int64_t b, int64_t e) {
        using T = opmath_t<P>;
        const fn::RadamStep<T> f{T(1.0 - beta1),      T(beta2),    T(1.0 - beta2), T(o.eps),
                                 T(o.weight_decay),   o.decoupled_weight_decay, T(decay),
                                 T(c.bias_correction1), T(o.lr),   c.rectified,    T(c.rect),
                                 T(c.sqrt_bias_correction2), T(o.maximize ? -1.0 : 1.0)};
        T* m = static_cast<T*>(s.state[0]);
        T* v = static_cast<T*>(s.state[1]);
        const auto loop = [&]<fn::WeightDecayMode M, int Rectified>() {
          for_each_opmath_block(static_cast<P*>(s.param), static_cast<const P*>(s.grad), b, e,
                                [&](T* p, const T* g, int64_t i0, int64_t n) {
                                  const fn::RadamStep<T> step = f;  // a local copy: no store can alias it
                                  for (int64_t j = 0; j < n; ++j)
                                    step.template operator()<M, Rectified>(p[j], g[j], m[i0 + j], v[i0 + j]);
                                });
        };
        const auto with_rect = [&]<fn::WeightDecayMode M>() {  // vectorizable loops: no runtime test inside
          if (c.rectified) loop.template operator()<M, 1>();
          else loop.template operator()<M, 0>();
        };
        switch (fn::weight_decay_mode(o.weight_decay, o.decoupled_weight_decay)) {
          case fn::WeightDecayMode::L2: with_rect.template operator()<fn::WeightDecayMode::L2>(); break;
          case fn::WeightDecayMode::Decoupled: with_rect.template operator()<fn::WeightDecayMode::Decoupled>(); break;
          default: with_rect.template operator()<fn::WeightDecayMode::None>(); break;
        }
      },
      [&](const Work& w, Tensor m, Tensor v, DType opmath, const fn::RadamScalars& c) {
        NoGradGuard no_grad;
        auto [p, g] = adam_like_start(w.param, w.grad, m, v, opmath, o.maximize, o.weight_decay,
                                      o.decoupled_weight_decay, o.lr, beta1, beta2);
        const Tensor corrected = m / c.bias_correction1;
        // PyTorch's float / tensor is reciprocal(tensor) * float
        if (c.rectified) p.sub_(corrected * o.lr * ((1.0 / (sqrt(v) + o.eps)) * c.sqrt_bias_correction2) * c.rect);
        else p.sub_(corrected * o.lr);
        if (!p.is_same(w.param)) Tensor(w.param).copy_(p);
      },
      [&](const MultiTensorKernels& k, const MultiTensorStepArgs& args, const std::vector<Work>&) {
        k.radam(args, {.lr = o.lr, .beta1 = beta1, .beta2 = beta2, .eps = o.eps, .weight_decay = o.weight_decay,
                       .decoupled = o.decoupled_weight_decay, .maximize = o.maximize});
      });
}

}  // namespace mg::optim
