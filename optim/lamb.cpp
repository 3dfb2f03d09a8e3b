// LAMB. The weight and update norms of each tensor follow the summation rule
// (core/cascade_sum.h): each fixed chunk (multi_tensor.h, a power of two of leaves) sums p^2 and
// u^2 in leaves of kSumLeaf elements (8 lanes) combined pairwise, and a tensor's chunk sums are
// combined pairwise — accurate to O(log n) ulps and the same on both paths at any thread count.
#include "mixgrad/optim/lamb.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/cascade_sum.h"
#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/optim/functors.h"
#include "mixgrad/optim/generic_path.h"

namespace mg::optim {

namespace {

template <typename T>
fn::LambStage1<T> stage1(const LAMBOptions& o, double bias_correction1, double bias_correction2) {
  const auto [beta1, beta2] = o.betas;
  return {T(beta1), T(beta2), T(1.0 - beta1), T(1.0 - beta2), T(bias_correction1), T(bias_correction2),
          T(o.eps), T(o.weight_decay), T(o.maximize ? -1.0 : 1.0)};
}

// Stage 1 on one chunk: updates the moments and returns sum p^2 and sum u^2 over the chunk,
// accumulated in opmath (f32, or f64 for f64 parameters) by the rule: 8-lane leaves of kSumLeaf
// elements (as lane_fold) pushed into a Cascade.
template <typename P>
void lamb_stage1_chunk(const TensorSlot& t, const fn::LambStage1<opmath_t<P>>& f, int64_t b, int64_t e,
                       double* p_sq, double* u_sq) {
  using T = opmath_t<P>;
  const P* p = static_cast<const P*>(t.param);
  const P* g = static_cast<const P*>(t.grad);
  T* m = static_cast<T*>(t.state[0]);
  T* v = static_cast<T*>(t.state[1]);
  Cascade<T> sp, su;
  for (int64_t l0 = b; l0 < e; l0 += kSumLeaf) {
    const int64_t l1 = std::min(e, l0 + kSumLeaf);
    T lp[8] = {}, lu[8] = {};
    int64_t i = l0;
    for (; i + 8 <= l1; i += 8) {
      for (int k = 0; k < 8; ++k) {
        const T pi = T(p[i + k]);
        const T u = f(pi, T(g[i + k]), m[i + k], v[i + k]);
        lp[k] += pi * pi;
        lu[k] += u * u;
      }
    }
    for (int k = 0; i < l1; ++i, ++k) {  // the tail into its lanes, as lane_fold
      const T pi = T(p[i]);
      const T u = f(pi, T(g[i]), m[i], v[i]);
      lp[k] += pi * pi;
      lu[k] += u * u;
    }
    sp.push(((lp[0] + lp[1]) + (lp[2] + lp[3])) + ((lp[4] + lp[5]) + (lp[6] + lp[7])));
    su.push(((lu[0] + lu[1]) + (lu[2] + lu[3])) + ((lu[4] + lu[5]) + (lu[6] + lu[7])));
  }
  *p_sq = double(sp.result(T(0)));  // exact: a float widens to double and narrows back unchanged
  *u_sq = double(su.result(T(0)));
}

// Stage 2 on one chunk: recomputes u from the stored moments and moves p by -(lr * ratio) * u.
template <typename P>
void lamb_stage2_chunk(const TensorSlot& t, const fn::LambStage1<opmath_t<P>>& f, double neg_step, int64_t b,
                       int64_t e) {
  using T = opmath_t<P>;
  const fn::LambApply<T> apply{T(neg_step)};
  P* p = static_cast<P*>(t.param);
  const T* m = static_cast<const T*>(t.state[0]);
  const T* v = static_cast<const T*>(t.state[1]);
  for (int64_t i = b; i < e; ++i) {
    const T pi = T(p[i]);
    p[i] = P(apply(pi, f.update(pi, m[i], v[i])));
  }
}

// The generic path (optim/generic_path.h): both stages written with public ops on one tensor.
// param, grad [any shape] on any device; m, v [same] opmath. The math runs on opmath copies
// (param itself when it is opmath); f16/bf16 params are rounded once by the final copy. Each op
// rounds to opmath (the fused loop may contract beta * m + (1 - beta) * g into an FMA), and the
// norms are the sum op's reductions (accumulated in f32, f64 for f64) in its own order, so the
// trust ratio and the update differ from the fused path by a few f32 ulps. The ratio stays a
// 0-d device tensor: no value goes to the host.
void lamb_generic(const Tensor& param, const Tensor& grad, Tensor m, Tensor v, DType opmath, const LAMBOptions& o,
                  double bias_correction1, double bias_correction2) {
  NoGradGuard no_grad;
  const auto [beta1, beta2] = o.betas;
  Tensor p = to(param, opmath);
  const Tensor g = o.maximize ? neg(to(grad, opmath)) : to(grad, opmath);
  m.mul_(beta1).add_(g, 1.0 - beta1);             // beta1 * m + (1 - beta1) * g
  v.mul_(beta2).add_(mul(g * (1.0 - beta2), g));  // beta2 * v + (1 - beta2) * g * g
  // u = (m / bc1) / (sqrt(v / bc2) + eps) + weight_decay * p
  const Tensor u = add((m / bias_correction1) / (sqrt(v / bias_correction2) + o.eps), p, o.weight_decay);
  const Tensor p_norm = sqrt(sum(p * p));  // sums accumulate in f32 (f64 for f64)
  const Tensor u_norm = sqrt(sum(u * u));
  const Tensor one = scalar_like(1.0, p_norm);
  const Tensor ratio = where(p_norm.ne(0.0), where(u_norm.ne(0.0), p_norm / u_norm, one), one);
  p.add_(u * (ratio * -o.lr));  // p - (lr * ratio) * u
  if (!p.is_same(param)) Tensor(param).copy_(p);
}

}  // namespace

LAMB::LAMB(const Tensors& params, LAMBOptions options) : LAMB(std::vector<ParamGroupSpec>{{params}}, options) {}

LAMB::LAMB(const std::vector<ParamGroupSpec>& groups, LAMBOptions defaults)
    : Optimizer("LAMB", options_to_map(defaults)) {
  init_groups(groups);
}

void LAMB::check_options(const OptionMap& m) const {
  check_bool_options<LAMBOptions>(m, "LAMB");
  const LAMBOptions o = options_from_map<LAMBOptions>(m, "LAMB");
  MG_CHECK(o.lr >= 0.0, Error, "LAMB: lr must be >= 0, got ", o.lr);
  MG_CHECK(o.eps >= 0.0, Error, "LAMB: eps must be >= 0, got ", o.eps);
  MG_CHECK(o.betas.first >= 0.0 && o.betas.first < 1.0, Error, "LAMB: beta1 must be in [0, 1), got ",
           o.betas.first);
  MG_CHECK(o.betas.second >= 0.0 && o.betas.second < 1.0, Error, "LAMB: beta2 must be in [0, 1), got ",
           o.betas.second);
  MG_CHECK(o.weight_decay >= 0.0, Error, "LAMB: weight_decay must be >= 0, got ", o.weight_decay);
}

void LAMB::step_group(ParamGroup& group) {
  const LAMBOptions o = options_from_map<LAMBOptions>(group.options, name());
  const std::vector<Work> work = collect(group);
  MultiTensorStepArgs args;
  if (const MultiTensorKernels* k = fused_step_args(group, work, args)) {
    // The device's fused kernels: both stages and the trust ratios on the device.
    for (const Work& w : work) {
      args.state[0].push_back(buffer(w, "exp_avg", /*zero=*/true));
      args.state[1].push_back(buffer(w, "exp_avg_sq", /*zero=*/true));
    }
    k->lamb(args, {.lr = o.lr, .beta1 = o.betas.first, .beta2 = o.betas.second, .eps = o.eps,
                   .weight_decay = o.weight_decay, .bias_correction = o.bias_correction, .maximize = o.maximize});
    finish_fused_step(work, k, args);
    return;
  }
  Tensors params;
  for (const Work& w : work) params.push_back(w.param);
  if (use_generic_path(params)) {
    for (const Work& w : work) {
      const int64_t t = ++w.state->step;
      const Tensor m = buffer(w, "exp_avg", /*zero=*/true), v = buffer(w, "exp_avg_sq", /*zero=*/true);
      lamb_generic(w.param, w.grad, m, v, opmath_dtype(w), o, o.bias_correction ? fn::bias_correction(o.betas.first, t) : 1.0,
                   o.bias_correction ? fn::bias_correction(o.betas.second, t) : 1.0);
    }
    return;
  }
  std::vector<TensorSlot> slots;
  for (const Work& w : work) {
    TensorSlot s = slot_of(w);
    s.state[0] = buffer(w, "exp_avg", /*zero=*/true).data_ptr();
    s.state[1] = buffer(w, "exp_avg_sq", /*zero=*/true).data_ptr();
    slots.push_back(s);
  }
  // Bias corrections of each tensor (its own step count).
  std::vector<std::pair<double, double>> corrections;
  for (const Work& w : work) {
    const int64_t t = ++w.state->step;
    corrections.emplace_back(o.bias_correction ? fn::bias_correction(o.betas.first, t) : 1.0,
                             o.bias_correction ? fn::bias_correction(o.betas.second, t) : 1.0);
  }

  // Stage 1: moments, and per-chunk sums of p^2 and u^2.
  const std::vector<TensorChunk> chunks = make_chunks(slots);
  std::vector<double> p_sq(chunks.size()), u_sq(chunks.size());
  for_each_chunk(slots, o.multi_tensor, [&](int64_t ci, const TensorChunk& c) {
    const TensorSlot& t = slots[c.tensor];
    const double bc1 = corrections[c.tensor].first, bc2 = corrections[c.tensor].second;
    visit_floating(t.dtype, "LAMB", [&]<typename P>() {
      lamb_stage1_chunk<P>(t, stage1<opmath_t<P>>(o, bc1, bc2), c.begin, c.end, &p_sq[ci], &u_sq[ci]);
    });
  });

  // Per tensor: the chunk sums combined pairwise by the rule (in opmath), the norms, the trust ratio.
  std::vector<double> neg_step(slots.size());
  for (std::size_t k = 0, ci = 0; k < slots.size(); ++k) {
    visit_floating(slots[k].dtype, "LAMB", [&]<typename P>() {
      using T = opmath_t<P>;
      Cascade<T> csp, csu;
      for (; ci < chunks.size() && chunks[ci].tensor == int64_t(k); ++ci) {
        csp.push(T(p_sq[ci]));
        csu.push(T(u_sq[ci]));
      }
      const T sp = csp.result(T(0)), su = csu.result(T(0));
      const T p_norm = std::sqrt(sp), u_norm = std::sqrt(su);
      const T ratio = (p_norm != T(0) && u_norm != T(0)) ? p_norm / u_norm : T(1);
      neg_step[k] = double(-(T(o.lr) * ratio));
    });
  }

  // Stage 2: the update with the trust ratio.
  for_each_chunk(slots, o.multi_tensor, [&](int64_t, const TensorChunk& c) {
    const TensorSlot& t = slots[c.tensor];
    const double bc1 = corrections[c.tensor].first, bc2 = corrections[c.tensor].second;
    visit_floating(t.dtype, "LAMB", [&]<typename P>() {
      lamb_stage2_chunk<P>(t, stage1<opmath_t<P>>(o, bc1, bc2), neg_step[c.tensor], c.begin, c.end);
    });
  });
  for (const Work& w : work) w.param.bump_version();
}

}  // namespace mg::optim
