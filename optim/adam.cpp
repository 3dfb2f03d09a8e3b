#include "mixgrad/optim/adam.h"

#include <cmath>

#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/optim/functors.h"

namespace mg::optim {

namespace {

// Host scalars of one tensor's update (they depend on its own step count t).
struct AdamScalars {
  double neg_step_size;          // -lr / (1 - beta1^t)
  double bias_correction2_sqrt;  // sqrt(1 - beta2^t)
};

template <typename P>
void adam_chunk(const TensorSlot& t, const AdamOptions& o, bool decoupled, const AdamScalars& s, int64_t b,
                int64_t e) {
  using T = opmath_t<P>;
  const auto [beta1, beta2] = o.betas;
  const fn::AdamStep<T> f{T(beta1),
                          T(beta2),
                          T(1.0 - beta1),
                          T(1.0 - beta2),
                          T(o.eps),
                          T(decoupled ? 0.0 : o.weight_decay),
                          T(decoupled ? 1.0 - o.lr * o.weight_decay : 1.0),
                          T(s.neg_step_size),
                          T(s.bias_correction2_sqrt),
                          decoupled,
                          o.amsgrad};
  P* p = static_cast<P*>(t.param);
  const P* g = static_cast<const P*>(t.grad);
  T* m = static_cast<T*>(t.state[0]);
  T* v = static_cast<T*>(t.state[1]);
  T* vmax = static_cast<T*>(t.state[2]);
  if (vmax) {
    for (int64_t i = b; i < e; ++i) {
      T pi = T(p[i]);
      f(pi, T(g[i]), m[i], v[i], vmax[i]);
      p[i] = P(pi);
    }
  } else {
    T unused = T(0);
    for (int64_t i = b; i < e; ++i) {
      T pi = T(p[i]);
      f(pi, T(g[i]), m[i], v[i], unused);
      p[i] = P(pi);
    }
  }
}

void check_adam(const OptionMap& m, const std::string& name) {
  const AdamOptions o = options_from_map<AdamOptions>(m, name);
  check_bool_options<AdamOptions>(m, name);
  MG_CHECK(o.lr >= 0.0, Error, name, ": lr must be >= 0, got ", o.lr);
  MG_CHECK(o.eps >= 0.0, Error, name, ": eps must be >= 0, got ", o.eps);
  MG_CHECK(o.betas.first >= 0.0 && o.betas.first < 1.0, Error, name, ": beta1 must be in [0, 1), got ",
           o.betas.first);
  MG_CHECK(o.betas.second >= 0.0 && o.betas.second < 1.0, Error, name, ": beta2 must be in [0, 1), got ",
           o.betas.second);
  MG_CHECK(o.weight_decay >= 0.0, Error, name, ": weight_decay must be >= 0, got ", o.weight_decay);
}

// The update of one group, shared by Adam (decoupled = false) and AdamW (decoupled = true).
// `buffer(w, name)` returns w's zero-initialised state buffer.
template <typename WorkT, typename BufferFn>
void adam_group(const std::vector<WorkT>& work, const AdamOptions& o, bool decoupled, const BufferFn& buffer) {
  std::vector<TensorSlot> slots;
  for (const WorkT& w : work) {
    TensorSlot s{w.param.dtype(), w.param.numel(), w.param.data_ptr(), w.grad.data_ptr(), {}};
    s.state[0] = buffer(w, "exp_avg").data_ptr();
    s.state[1] = buffer(w, "exp_avg_sq").data_ptr();
    if (o.amsgrad) s.state[2] = buffer(w, "max_exp_avg_sq").data_ptr();
    slots.push_back(s);
  }
  std::vector<AdamScalars> scalars;
  for (const WorkT& w : work) {
    const double t = double(++w.state->step);
    const double bias_correction1 = 1.0 - std::pow(o.betas.first, t);
    const double bias_correction2 = 1.0 - std::pow(o.betas.second, t);
    scalars.push_back({-(o.lr / bias_correction1), std::sqrt(bias_correction2)});
  }
  for_each_chunk(slots, o.multi_tensor, [&](int64_t, const TensorChunk& c) {
    const TensorSlot& t = slots[c.tensor];
    visit_floating(t.dtype, decoupled ? "AdamW" : "Adam", [&]<typename P>() {
      adam_chunk<P>(t, o, decoupled, scalars[c.tensor], c.begin, c.end);
    });
  });
  for (const WorkT& w : work) w.param.bump_version();
}

}  // namespace

Adam::Adam(const Tensors& params, AdamOptions options) : Adam(std::vector<ParamGroupSpec>{{params}}, options) {}

Adam::Adam(const std::vector<ParamGroupSpec>& groups, AdamOptions defaults)
    : Optimizer("Adam", options_to_map(defaults)) {
  init_groups(groups);
}

void Adam::check_options(const OptionMap& m) const { check_adam(m, "Adam"); }

void Adam::step_group(ParamGroup& group) {
  adam_group(collect(group), options_from_map<AdamOptions>(group.options, name()), /*decoupled=*/false,
             [&](const Work& w, const char* n) { return buffer(w, n, /*zero=*/true); });
}

AdamW::AdamW(const Tensors& params, AdamWOptions options)
    : AdamW(std::vector<ParamGroupSpec>{{params}}, options) {}

AdamW::AdamW(const std::vector<ParamGroupSpec>& groups, AdamWOptions defaults)
    : Optimizer("AdamW", options_to_map(defaults)) {
  init_groups(groups);
}

void AdamW::check_options(const OptionMap& m) const { check_adam(m, "AdamW"); }

void AdamW::step_group(ParamGroup& group) {
  // AdamWOptions and AdamOptions have the same fields; the kernel takes the latter.
  adam_group(collect(group), options_from_map<AdamOptions>(group.options, name()), /*decoupled=*/true,
             [&](const Work& w, const char* n) { return buffer(w, n, /*zero=*/true); });
}

}  // namespace mg::optim
