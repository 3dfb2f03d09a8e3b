// Op cases of the loss group (ops/loss.h): softmax family, class losses and elementwise losses.
// Inputs stay away from the kinks of l1 / smooth_l1 (x - y near 0) and inside each loss's domain
// (probabilities in (0, 1)); golden values are worked out in the comments.
#include <cmath>

#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "op_cases.h"
#include "ops/loss.h"

namespace mg::optable {
namespace {


uint64_t next_seed() {
  static uint64_t seed = 5000;
  return ++seed;
}
Gen normal(Shape s, double scale = 1.0, double shift = 0.0) {
  std::vector<double> v = randn_values(shape_numel(s), next_seed());
  for (double& x : v) x = scale * x + shift;
  return fixed(v, s);
}
// Uniform in [lo, hi] (from the normal CDF of seeded normal values).
Gen uniform(Shape s, double lo, double hi) {
  std::vector<double> v = randn_values(shape_numel(s), next_seed());
  for (double& x : v) x = lo + (hi - lo) * 0.5 * std::erfc(-x / std::sqrt(2.0));
  return fixed(v, s);
}
// y + d with |d| in [0.2, 1.5] (away from the kink of l1 at x == y and from |d| == 1).
Gen shifted(const Gen& y, Shape s) {
  const std::vector<double> base = values(y(DType::F64));
  std::vector<double> d = randn_values(shape_numel(s), next_seed());
  std::vector<double> v(base.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double mag = 0.2 + 0.3 * std::fabs(d[i]);
    const double m = std::fabs(mag - 1.0) < 0.1 ? mag + 0.25 : mag;
    v[i] = base[i] + (d[i] >= 0 ? m : -m);
  }
  return fixed(v, s);
}
Gen index(std::vector<int64_t> v, Shape s) {
  return [v, s](DType) {
    const Tensor t = from_vector<int64_t>(v, s);
    return s.empty() ? reshape(t, {}) : t;
  };
}

OpCase& add(std::vector<OpCase>& cases, OpId op, std::string name, std::vector<Gen> gens, Run run,
            std::vector<int> grad_inputs) {
  cases.push_back(make_case(op, std::move(name), std::move(gens), std::move(run), std::move(grad_inputs)));
  return cases.back();
}
OpCase& gold(std::vector<OpCase>& cases, OpId op, std::string name, std::vector<Gen> gens, Run run,
             std::vector<int> grad_inputs, std::vector<double> want, Shape shape) {
  OpCase& c = add(cases, op, std::move(name), std::move(gens), std::move(run), std::move(grad_inputs));
  c.golden = std::move(want);
  c.golden_shape = std::move(shape);
  return c;
}

void softmax_cases(std::vector<OpCase>& cases) {
  using O = OpId;
  add(cases, O::softmax, "softmax/dim1", {normal({3, 5}, 2.0)}, [](const Tensors& in) { return softmax(in[0], 1); },
      {0});
  add(cases, O::softmax, "softmax/dim0_transposed", {transposed(normal({4, 3}, 2.0))},
      [](const Tensors& in) { return softmax(in[0], 0); }, {0});
  add(cases, O::softmax, "softmax/middle_dim", {normal({2, 3, 4})},
      [](const Tensors& in) { return softmax(in[0], -2); }, {0});
  add(cases, O::log_softmax, "log_softmax/dim1", {normal({3, 5}, 2.0)},
      [](const Tensors& in) { return log_softmax(in[0], -1); }, {0});
  add(cases, O::log_softmax, "log_softmax/middle_dim_transposed", {transposed(normal({2, 4, 3}))},
      [](const Tensors& in) { return log_softmax(in[0], 1); }, {0});
  // x = [[1, 2, 3], [0, 0, 0]]: row 0 e^k / (e + e^2 + e^3), row 1 1/3 each
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  const Gen g = fixed({1, 2, 3, 0, 0, 0}, {2, 3});
  gold(cases, O::softmax, "softmax/golden", {g}, [](const Tensors& in) { return softmax(in[0], 1); }, {0},
       {std::exp(1.0) / z, std::exp(2.0) / z, std::exp(3.0) / z, 1.0 / 3, 1.0 / 3, 1.0 / 3}, {2, 3});
  // log_softmax = x - log(sum exp x): row 0 k - log z, row 1 -log 3
  gold(cases, O::log_softmax, "log_softmax/golden", {g}, [](const Tensors& in) { return log_softmax(in[0], 1); },
       {0}, {1 - std::log(z), 2 - std::log(z), 3 - std::log(z), -std::log(3.0), -std::log(3.0), -std::log(3.0)},
       {2, 3});
  // (grad, y): the backward ops are polynomials in both inputs
  add(cases, O::softmax_backward, "softmax_backward", {normal({3, 4}), uniform({3, 4}, 0.05, 0.5)},
      [](const Tensors& in) { return softmax_backward(in[0], in[1], 1); }, {0, 1});
  add(cases, O::softmax_backward, "softmax_backward/dim0", {normal({3, 4}), uniform({3, 4}, 0.05, 0.5)},
      [](const Tensors& in) { return softmax_backward(in[0], in[1], 0); }, {0, 1});
  add(cases, O::log_softmax_backward, "log_softmax_backward", {normal({3, 4}), uniform({3, 4}, -3.0, -0.2)},
      [](const Tensors& in) { return log_softmax_backward(in[0], in[1], 1); }, {0, 1});
  // grad = [[1, 0], [0, 2]], y = [[0.25, 0.75], [0.5, 0.5]]:
  //   row 0: s = 0.25; y (g - s) = [0.25 * 0.75, 0.75 * -0.25] = [0.1875, -0.1875]
  //   row 1: s = 1;    y (g - s) = [0.5 * -1, 0.5 * 1] = [-0.5, 0.5]
  gold(cases, O::softmax_backward, "softmax_backward/golden",
       {fixed({1, 0, 0, 2}, {2, 2}), fixed({0.25, 0.75, 0.5, 0.5}, {2, 2})},
       [](const Tensors& in) { return softmax_backward(in[0], in[1], 1); }, {0, 1}, {0.1875, -0.1875, -0.5, 0.5},
       {2, 2});
}

void class_loss_cases(std::vector<OpCase>& cases) {
  using O = OpId;
  using R = Reduction;
  add(cases, O::cross_entropy, "cross_entropy/mean", {normal({4, 5}, 2.0), index({0, 4, 2, 2}, {4})},
      [](const Tensors& in) { return cross_entropy(in[0], in[1]); }, {0});
  add(cases, O::cross_entropy, "cross_entropy/sum_ignore_smoothing",
      {normal({4, 5}, 2.0), index({3, -100, 1, 0}, {4})},
      [](const Tensors& in) { return cross_entropy(in[0], in[1], R::Sum, -100, 0.2); }, {0});
  add(cases, O::cross_entropy, "cross_entropy/none_spatial", {normal({2, 3, 4}), index({0, 2, 1, 1, 2, 2, 0, 1}, {2, 4})},
      [](const Tensors& in) { return cross_entropy(in[0], in[1], R::None); }, {0});
  add(cases, O::cross_entropy, "cross_entropy/mean_spatial_ignore_smoothing_transposed",
      {transposed(normal({2, 4, 3})), index({0, 1, 5, 2, 5, 1, 1, 0}, {2, 4})},
      [](const Tensors& in) { return cross_entropy(in[0], in[1], R::Mean, 5, 0.1); }, {0});
  add(cases, O::cross_entropy, "cross_entropy/1d", {normal({5}), index({3}, {})},
      [](const Tensors& in) { return cross_entropy(in[0], in[1]); }, {0});
  // logits [[0, 0, 0], [1, 2, 3]], target [2, 0]; z = e + e^2 + e^3:
  //   loss0 = log 3, loss1 = log z - 1, mean = (log 3 + log z - 1) / 2
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  const double lz = std::log(z), l3 = std::log(3.0);
  gold(cases, O::cross_entropy, "cross_entropy/golden", {fixed({0, 0, 0, 1, 2, 3}, {2, 3}), index({2, 0}, {2})},
       [](const Tensors& in) { return cross_entropy(in[0], in[1]); }, {0}, {(l3 + lz - 1) / 2}, {});
  // + a row [5, 5, 5] with target -100 (ignored), eps = 0.3, none:
  //   loss0 = log 3 (nll and the smoothing term are both log 3)
  //   loss1 = 0.7 (log z - 1) + 0.3 (log z - mean(1, 2, 3)) = 0.7 (log z - 1) + 0.3 (log z - 2)
  //   loss2 = 0
  const Gen l3rows = fixed({0, 0, 0, 1, 2, 3, 5, 5, 5}, {3, 3});
  const double loss1 = 0.7 * (lz - 1) + 0.3 * (lz - 2);
  gold(cases, O::cross_entropy, "cross_entropy/golden_smoothing_ignore", {l3rows, index({2, 0, -100}, {3})},
       [](const Tensors& in) { return cross_entropy(in[0], in[1], R::None, -100, 0.3); }, {0}, {l3, loss1, 0.0},
       {3});
  // mean over the 2 non-ignored targets: (loss0 + loss1) / 2
  gold(cases, O::cross_entropy, "cross_entropy/golden_smoothing_ignore_mean", {l3rows, index({2, 0, -100}, {3})},
       [](const Tensors& in) { return cross_entropy(in[0], in[1], R::Mean, -100, 0.3); }, {0},
       {(l3 + loss1) / 2}, {});

  // (grad, logits, target)
  add(cases, O::cross_entropy_backward, "cross_entropy_backward/mean_smoothing",
      {normal({}), normal({4, 5}, 2.0), index({0, -100, 2, 4}, {4})},
      [](const Tensors& in) { return cross_entropy_backward(in[0], in[1], in[2], R::Mean, -100, 0.2); }, {0, 1});
  add(cases, O::cross_entropy_backward, "cross_entropy_backward/none_spatial",
      {normal({2, 4}), normal({2, 3, 4}), index({0, 2, 1, 1, 2, 2, 0, 1}, {2, 4})},
      [](const Tensors& in) { return cross_entropy_backward(in[0], in[1], in[2], R::None); }, {0, 1});
  add(cases, O::cross_entropy_backward, "cross_entropy_backward/sum",
      {normal({}), normal({3, 4}), index({3, 1, 0}, {3})},
      [](const Tensors& in) { return cross_entropy_backward(in[0], in[1], in[2], R::Sum); }, {0, 1});
  // grad 1, logits [[0, 0]], target [1], mean: softmax [0.5, 0.5] - onehot [0, 1] = [0.5, -0.5]
  gold(cases, O::cross_entropy_backward, "cross_entropy_backward/golden",
       {fixed({1}, {}), fixed({0, 0}, {1, 2}), index({1}, {1})},
       [](const Tensors& in) { return cross_entropy_backward(in[0], in[1], in[2]); }, {0, 1}, {0.5, -0.5}, {1, 2});

  add(cases, O::nll_loss, "nll_loss/mean_ignore", {normal({4, 5}), index({1, -100, 4, 0}, {4})},
      [](const Tensors& in) { return nll_loss(in[0], in[1]); }, {0});
  add(cases, O::nll_loss, "nll_loss/none_spatial", {normal({2, 3, 2}), index({0, 2, 1, 1}, {2, 2})},
      [](const Tensors& in) { return nll_loss(in[0], in[1], R::None); }, {0});
  // logp [[-1, -2], [-3, -0.5]], target [1, 0], sum: 2 + 3 = 5
  gold(cases, O::nll_loss, "nll_loss/golden", {fixed({-1, -2, -3, -0.5}, {2, 2}), index({1, 0}, {2})},
       [](const Tensors& in) { return nll_loss(in[0], in[1], R::Sum); }, {0}, {5.0}, {});
}

void pointwise_loss_cases(std::vector<OpCase>& cases) {
  using O = OpId;
  using R = Reduction;
  const Shape s{3, 4};
  const Gen y = normal(s);
  const Gen x = shifted(y, s);
  add(cases, O::mse_loss, "mse_loss/mean", {normal(s), normal(s)},
      [](const Tensors& in) { return mse_loss(in[0], in[1]); }, {0, 1});
  add(cases, O::mse_loss, "mse_loss/none_transposed", {transposed(normal({4, 3})), normal(s)},
      [](const Tensors& in) { return mse_loss(in[0], in[1], R::None); }, {0, 1});
  add(cases, O::l1_loss, "l1_loss/mean", {x, y}, [](const Tensors& in) { return l1_loss(in[0], in[1]); }, {0, 1});
  add(cases, O::l1_loss, "l1_loss/sum", {x, y}, [](const Tensors& in) { return l1_loss(in[0], in[1], R::Sum); },
      {0, 1});
  add(cases, O::smooth_l1_loss, "smooth_l1_loss/mean", {x, y},
      [](const Tensors& in) { return smooth_l1_loss(in[0], in[1]); }, {0, 1});
  add(cases, O::smooth_l1_loss, "smooth_l1_loss/none_beta0.5", {x, y},
      [](const Tensors& in) { return smooth_l1_loss(in[0], in[1], R::None, 0.5); }, {0, 1});
  // x = [1, 2, 3], y = [1.5, 2.5, 1]: d = [-0.5, -0.5, 2]
  //   mse mean (0.25 + 0.25 + 4) / 3 = 1.5; l1 mean (0.5 + 0.5 + 2) / 3 = 1;
  //   smooth_l1 (beta 1) none [0.5 * 0.25, 0.5 * 0.25, 2 - 0.5] = [0.125, 0.125, 1.5]
  const Gen gx = fixed({1, 2, 3}, {3}), gy = fixed({1.5, 2.5, 1}, {3});
  gold(cases, O::mse_loss, "mse_loss/golden", {gx, gy}, [](const Tensors& in) { return mse_loss(in[0], in[1]); },
       {0, 1}, {1.5}, {});
  gold(cases, O::l1_loss, "l1_loss/golden", {gx, gy}, [](const Tensors& in) { return l1_loss(in[0], in[1]); },
       {0, 1}, {1.0}, {});
  gold(cases, O::smooth_l1_loss, "smooth_l1_loss/golden", {gx, gy},
       [](const Tensors& in) { return smooth_l1_loss(in[0], in[1], R::None); }, {0, 1}, {0.125, 0.125, 1.5}, {3});

  add(cases, O::binary_cross_entropy_with_logits, "binary_cross_entropy_with_logits/mean", {normal(s, 2.0), uniform(s, 0.0, 1.0)},
      [](const Tensors& in) { return binary_cross_entropy_with_logits(in[0], in[1]); }, {0, 1});
  add(cases, O::binary_cross_entropy_with_logits, "binary_cross_entropy_with_logits/pos_weight_none",
      {normal(s, 2.0), uniform(s, 0.0, 1.0), uniform({4}, 0.5, 3.0)},
      [](const Tensors& in) { return binary_cross_entropy_with_logits(in[0], in[1], in[2], R::None); }, {0, 1, 2});
  // x = [0, 2], t = [1, 0], none: [log 2, 2 + log1p(e^-2)]
  gold(cases, O::binary_cross_entropy_with_logits, "binary_cross_entropy_with_logits/golden", {fixed({0, 2}, {2}), fixed({1, 0}, {2})},
       [](const Tensors& in) { return binary_cross_entropy_with_logits(in[0], in[1], Tensor(), R::None); }, {0, 1},
       {std::log(2.0), 2 + std::log1p(std::exp(-2.0))}, {2});
  // with pos_weight 3: x = 0, t = 1: (1 + 2) log 2; x = 2, t = 0 unchanged
  gold(cases, O::binary_cross_entropy_with_logits, "binary_cross_entropy_with_logits/golden_pos_weight",
       {fixed({0, 2}, {1, 2}), fixed({1, 0}, {1, 2}), fixed({3, 3}, {2})},
       [](const Tensors& in) { return binary_cross_entropy_with_logits(in[0], in[1], in[2], R::None); }, {0, 1, 2},
       {3 * std::log(2.0), 2 + std::log1p(std::exp(-2.0))}, {1, 2});

  add(cases, O::kl_div, "kl_div/batchmean", {normal(s, 0.5, -1.5), uniform(s, 0.05, 1.0)},
      [](const Tensors& in) { return kl_div(in[0], in[1], R::BatchMean); }, {0, 1});
  add(cases, O::kl_div, "kl_div/none_log_target", {normal(s, 0.5, -1.5), normal(s, 0.5, -1.5)},
      [](const Tensors& in) { return kl_div(in[0], in[1], R::None, true); }, {0, 1});
  // input [-1, -2], target [0.5, 0.5], sum: 0.5 (log 0.5 + 1) + 0.5 (log 0.5 + 2) = log 0.5 + 1.5;
  // a zero target contributes 0: [.., 0] with input -3 adds nothing
  gold(cases, O::kl_div, "kl_div/golden", {fixed({-1, -2, -3}, {3}), fixed({0.5, 0.5, 0}, {3})},
       [](const Tensors& in) { return kl_div(in[0], in[1], R::Sum); }, {0}, {std::log(0.5) + 1.5}, {});

  add(cases, O::binary_cross_entropy, "binary_cross_entropy/mean", {uniform(s, 0.05, 0.95), uniform(s, 0.0, 1.0)},
      [](const Tensors& in) { return binary_cross_entropy(in[0], in[1]); }, {0, 1});
  // p = [0.5, 0.25], t = [1, 0], none: [-log 0.5, -log 0.75]
  gold(cases, O::binary_cross_entropy, "binary_cross_entropy/golden", {fixed({0.5, 0.25}, {2}), fixed({1, 0}, {2})},
       [](const Tensors& in) { return binary_cross_entropy(in[0], in[1], R::None); }, {0, 1},
       {std::log(2.0), -std::log(0.75)}, {2});
}

}  // namespace

void add_loss_cases(std::vector<OpCase>& cases) {
  softmax_cases(cases);
  class_loss_cases(cases);
  pointwise_loss_cases(cases);
}

// Losses added after the table's seeds were fixed: called last (op_cases.cpp), so the inputs of
// every case before them stay as they were.
void add_late_loss_cases(std::vector<OpCase>& cases) {
  using O = OpId;
  using R = Reduction;
  const Shape s{3, 4};
  const Gen y = normal(s);
  const Gen x = shifted(y, s);
  add(cases, O::huber_loss, "huber_loss/mean", {x, y}, [](const Tensors& in) { return huber_loss(in[0], in[1]); },
      {0, 1});
  add(cases, O::huber_loss, "huber_loss/none_delta0.5", {x, y},
      [](const Tensors& in) { return huber_loss(in[0], in[1], R::None, 0.5); }, {0, 1});
  // x = [1, 2, 3], y = [1.5, 2.5, 1]: d = [-0.5, -0.5, 2]; delta 1: [0.125, 0.125, 1 * (2 - 0.5)];
  // delta 0.4: [0.4 (0.5 - 0.2), ..., 0.4 (2 - 0.2)] = [0.12, 0.12, 0.72]
  const Gen gx = fixed({1, 2, 3}, {3}), gy = fixed({1.5, 2.5, 1}, {3});
  gold(cases, O::huber_loss, "huber_loss/golden", {gx, gy},
       [](const Tensors& in) { return huber_loss(in[0], in[1], R::None); }, {0, 1}, {0.125, 0.125, 1.5}, {3});
  gold(cases, O::huber_loss, "huber_loss/golden_delta0.4", {gx, gy},
       [](const Tensors& in) { return huber_loss(in[0], in[1], R::None, 0.4); }, {0, 1}, {0.12, 0.12, 0.72}, {3});
}

}  // namespace mg::optable
