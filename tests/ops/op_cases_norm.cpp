// Op cases of the norm group: layer_norm, rms_norm, batch_norm (training and eval), group_norm,
// their fused *_backward ops, embedding, dropout. Inputs are small (f64 central differences), with
// variances well away from 0 so the normalisations stay smooth; golden values computed in f64 with
// the math in comments. The *_backward cases compute the statistics they take with public ops
// (independently of the forward kernels) and return dx, dweight and dbias flattened into one tensor.
#include <utility>

#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "core/generator.h"
#include "op_cases.h"
#include "ops/norm.h"

namespace mg::optable {
namespace {

Gen normal(const Shape& s, uint64_t seed, double scale = 1.0, double shift = 0.0) {
  std::vector<double> v = randn_values(shape_numel(s), seed);
  for (double& x : v) x = scale * x + shift;
  return [v, s](DType dt) { return make_input(v, s, dt); };
}

// Forward statistics of x over `dims` with public ops, in f32 (f64 for f64 x) like the kernels:
// mean and rstd = 1 / sqrt(biased var + 1e-5).
std::pair<Tensor, Tensor> stats(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const Tensor xs = to(x, x.dtype() == DType::F64 ? DType::F64 : DType::F32);
  return {mean(xs, dims, keepdim), rsqrt(var(xs, dims, /*correction=*/0.0, keepdim) + 1e-5)};
}

// dx, then dweight and dbias when defined, flattened into one tensor of dx's dtype.
Tensor flat_grads(const NormGrads& r) {
  Tensors parts{reshape(r.dx, {-1})};
  for (const Tensor& p : {r.dweight, r.dbias}) {
    if (p.defined()) parts.push_back(reshape(to(p, r.dx.dtype()), {-1}));
  }
  return cat(parts);
}

// The fused backward cases. Inputs: (grad, x[, weight]); with_dbias also returns dbias.
Tensor run_layer_norm_backward(const Tensors& in, const Shape& normalized, bool with_dbias) {
  std::vector<int64_t> dims;
  for (int64_t i = in[1].dim() - int64_t(normalized.size()); i < in[1].dim(); ++i) dims.push_back(i);
  const auto [mu, rs] = stats(in[1], dims, true);
  return flat_grads(layer_norm_backward(in[0], in[1], mu, rs, normalized, in.size() > 2 ? in[2] : Tensor(),
                                        with_dbias));
}
Tensor run_batch_norm_backward(const Tensors& in, bool with_dbias) {
  std::vector<int64_t> dims{0};
  for (int64_t i = 2; i < in[1].dim(); ++i) dims.push_back(i);
  const auto [mu, rs] = stats(in[1], dims, false);
  return flat_grads(batch_norm_backward(in[0], in[1], mu, rs, in.size() > 2 ? in[2] : Tensor(), with_dbias));
}
Tensor run_group_norm_backward(const Tensors& in, int64_t groups, bool with_dbias) {
  const Tensor& x = in[1];
  const auto [mu, rs] = stats(reshape(x, {x.shape()[0], groups, -1}), {2}, false);  // [N, G]
  return flat_grads(group_norm_backward(in[0], x, mu, rs, groups, in.size() > 2 ? in[2] : Tensor(), with_dbias));
}

OpCase golden(OpCase c, std::vector<double> want, Shape shape) {
  c.golden = std::move(want);
  c.golden_shape = std::move(shape);
  return c;
}

}  // namespace

void add_norm_cases(std::vector<OpCase>& cases) {
  using O = OpId;
  const double eps = 1e-5;

  // ---- layer_norm ----
  cases.push_back(make_case(O::layer_norm, "layer_norm/weight_bias",
                            {normal({2, 3, 4}, 5001), normal({4}, 5002, 0.5, 1.0), normal({4}, 5003)},
                            [](const Tensors& in) { return layer_norm(in[0], {4}, in[1], in[2]); }, {0, 1, 2}));
  cases.push_back(make_case(O::layer_norm, "layer_norm/two_dims_plain", {normal({2, 3, 4}, 5004, 2.0, 1.0)},
                            [](const Tensors& in) { return layer_norm(in[0], {3, 4}); }, {0}));
  // Bias without weight (each affine variant has its own loop in the CPU kernel).
  cases.push_back(make_case(O::layer_norm, "layer_norm/bias_only", {normal({3, 5}, 5007), normal({5}, 5008)},
                            [](const Tensors& in) { return layer_norm(in[0], {5}, Tensor(), in[1]); }, {0, 1}));
  // Non-contiguous input: the transpose of a [4, 3] tensor, normalised over its last dim (3).
  cases.push_back(make_case(O::layer_norm, "layer_norm/strided", {normal({4, 3}, 5005), normal({4}, 5006)},
                            [](const Tensors& in) { return layer_norm(transpose(in[0], 0, 1), {4}, in[1]); },
                            {0, 1}));
  // x = [[0, 1, 2, 5], [3, 3, 1, 1]], w = [1, 2, 1, 0.5], b = [0, 0, 1, -1], eps = 1e-5:
  // row 0: mean 2, var (4 + 1 + 0 + 9) / 4 = 3.5, y = (x - 2) / sqrt(3.5 + eps) * w + b
  // row 1: mean 2, var 1, y = (x - 2) / sqrt(1 + eps) * w + b
  cases.push_back(golden(
      make_case(O::layer_norm, "layer_norm/golden",
                {fixed({0, 1, 2, 5, 3, 3, 1, 1}, {2, 4}), fixed({1, 2, 1, 0.5}, {4}), fixed({0, 0, 1, -1}, {4})},
                [eps](const Tensors& in) { return layer_norm(in[0], {4}, in[1], in[2], eps); }, {0, 1, 2}),
      {-1.0690434404458735, -1.0690434404458735, 1.0, -0.1982174196655948, 0.9999950000374997,
       1.9999900000749995, 4.999962500251698e-06, -1.49999750001875},
      {2, 4}));

  // ---- layer_norm_backward (not differentiable: golden and f16/bf16 checks only) ----
  cases.push_back(make_case(O::layer_norm_backward, "layer_norm_backward/weight_dbias",
                            {normal({2, 3, 4}, 5061), normal({2, 3, 4}, 5062, 1.5, 0.5), normal({4}, 5063, 0.5, 1.0)},
                            [](const Tensors& in) { return run_layer_norm_backward(in, {4}, true); }, {}));
  cases.push_back(make_case(O::layer_norm_backward, "layer_norm_backward/two_dims_plain",
                            {normal({2, 3, 4}, 5064), normal({2, 3, 4}, 5065, 2.0, 1.0)},
                            [](const Tensors& in) { return run_layer_norm_backward(in, {3, 4}, false); }, {}));
  // Non-contiguous grad and x (transposes of [5, 3] tensors), normalised over their last dim (5).
  cases.push_back(make_case(O::layer_norm_backward, "layer_norm_backward/strided",
                            {transposed(normal({5, 3}, 5066)), transposed(normal({5, 3}, 5067)), normal({5}, 5068)},
                            [](const Tensors& in) { return run_layer_norm_backward(in, {5}, true); }, {}));
  // x = [[0, 1, 2, 5], [3, 3, 1, 1]] (the layer_norm golden), g = [[1, -2, 0.5, 3], [0.25, -1, 2, -0.5]],
  // w = [1, 2, 1, 0.5]; per row xhat = (x - mean) * rstd, gxhat = g * w (row 0: mean 2, var 3.5;
  // row 1: mean 2, var 1), dx = rstd * (gxhat - mean(gxhat) - xhat * mean(gxhat * xhat));
  // dweight = sum over rows of g * xhat, dbias = [1.25, -3, 2.5, 2.5]. Output: dx (8), dweight, dbias.
  cases.push_back(golden(
      make_case(O::layer_norm_backward, "layer_norm_backward/golden",
                {fixed({1, -2, 0.5, 3, 0.25, -1, 2, -0.5}, {2, 4}), fixed({0, 1, 2, 5, 3, 3, 1, 1}, {2, 4}),
                 fixed({1, 2, 1, 0.5}, {4})},
                [](const Tensors& in) { return run_layer_norm_backward(in, {4}, true); }, {}),
      {1.164492329513743, -1.7562863612184767, 0.4008912901672026, 0.19090274153753106, 1.1249856251734356,
       -1.1250031249109387, 1.1250031249109387, -1.1249856251734356, -0.8190446904364985, 0.06904844040837377,
       -1.9999900000749995, 5.310692982025181, 1.25, -3, 2.5, 2.5},
      {16}));

  // ---- rms_norm ----
  cases.push_back(make_case(O::rms_norm, "rms_norm/weight", {normal({3, 5}, 5011), normal({5}, 5012, 0.5, 1.0)},
                            [](const Tensors& in) { return rms_norm(in[0], {5}, in[1]); }, {0, 1}));
  cases.push_back(make_case(O::rms_norm, "rms_norm/two_dims_plain", {normal({2, 2, 3}, 5013)},
                            [](const Tensors& in) { return rms_norm(in[0], {2, 3}); }, {0}));
  // x = [[1, 2, 2], [3, 0, 4]], w = [1, 2, 3]: mean(x^2) = 3 and 25/3, y = x / sqrt(ms + 1e-5) * w
  cases.push_back(golden(make_case(O::rms_norm, "rms_norm/golden",
                                   {fixed({1, 2, 2, 3, 0, 4}, {2, 3}), fixed({1, 2, 3}, {3})},
                                   [eps](const Tensors& in) { return rms_norm(in[0], {3}, in[1], eps); }, {0, 1}),
                         {0.5773493069415827, 2.309397227766331, 3.4640958416494962, 1.0392298610035968, 0.0,
                          4.156919444014387},
                         {2, 3}));

  // ---- batch_norm (inputs: x, weight, bias, running_mean, running_var) ----
  const auto bn_train = [](const Tensors& in) {
    return batch_norm(in[0], in[1], in[2], in[3], in[4], /*training=*/true);
  };
  const auto bn_eval = [](const Tensors& in) {
    return batch_norm(in[0], in[1], in[2], in[3], in[4], /*training=*/false);
  };
  cases.push_back(make_case(O::batch_norm, "batch_norm/train",
                            {normal({4, 3, 2}, 5021, 1.5, 0.5), normal({3}, 5022, 0.5, 1.0), normal({3}, 5023),
                             fixed({0, 0, 0}, {3}), fixed({1, 1, 1}, {3})},
                            bn_train, {0, 1, 2}));
  cases.push_back(make_case(O::batch_norm, "batch_norm/train_4d_plain", {normal({3, 2, 2, 2}, 5024)},
                            [](const Tensors& in) { return batch_norm(in[0], {}, {}, {}, {}, true); }, {0}));
  cases.push_back(make_case(O::batch_norm, "batch_norm/eval",
                            {normal({2, 3, 2, 2}, 5025), normal({3}, 5026, 0.5, 1.0), normal({3}, 5027),
                             fixed({0.5, -0.25, 1.0}, {3}), fixed({4.0, 0.25, 1.5}, {3})},
                            bn_eval, {0, 1, 2}));
  // x [2, 2, 2] = [[[1, 2], [0, 0]], [[3, 4], [2, 6]]], w = [1, 2], b = [0, 1], eps = 1e-5:
  // channel 0 values {1, 2, 3, 4}: mean 2.5, biased var 1.25; channel 1 {0, 0, 2, 6}: mean 2, var 6;
  // y = (x - mean) / sqrt(var + eps) * w + b
  cases.push_back(golden(make_case(O::batch_norm, "batch_norm/golden_train",
                                   {fixed({1, 2, 0, 0, 3, 4, 2, 6}, {2, 2, 2}), fixed({1, 2}, {2}),
                                    fixed({0, 1}, {2}), fixed({0, 0}, {2}), fixed({1, 1}, {2})},
                                   bn_train, {0, 1, 2}),
                         {-1.3416354199689269, -0.447211806656309, -0.6329918010295184, -0.6329918010295184,
                          0.447211806656309, 1.3416354199689269, 1.0, 4.265983602059037},
                         {2, 2, 2}));
  // Same x, w, b in eval with running_mean [0.5, 1], running_var [4, 0.25]:
  // y = (x - rm) / sqrt(rv + eps) * w + b
  cases.push_back(golden(make_case(O::batch_norm, "batch_norm/golden_eval",
                                   {fixed({1, 2, 0, 0, 3, 4, 2, 6}, {2, 2, 2}), fixed({1, 2}, {2}),
                                    fixed({0, 1}, {2}), fixed({0.5, 1}, {2}), fixed({4, 0.25}, {2})},
                                   bn_eval, {0, 1, 2}),
                         {0.24999968750058593, 0.7499990625017577, -2.9999200023999197, -2.9999200023999197,
                          1.2499984375029296, 1.7499978125041014, 4.99992000239992, 20.999600011999597},
                         {2, 2, 2}));

  // ---- batch_norm_backward (training statistics; not differentiable) ----
  cases.push_back(make_case(O::batch_norm_backward, "batch_norm_backward/weight_dbias",
                            {normal({4, 3, 2}, 5071), normal({4, 3, 2}, 5072, 1.5, 0.5), normal({3}, 5073, 0.5, 1.0)},
                            [](const Tensors& in) { return run_batch_norm_backward(in, true); }, {}));
  cases.push_back(make_case(O::batch_norm_backward, "batch_norm_backward/4d_plain",
                            {normal({3, 2, 2, 2}, 5074), normal({3, 2, 2, 2}, 5075)},
                            [](const Tensors& in) { return run_batch_norm_backward(in, false); }, {}));
  // [N, C] input: runs of one element (f16/bf16 are gathered into f32 first).
  cases.push_back(make_case(O::batch_norm_backward, "batch_norm_backward/2d",
                            {normal({6, 3}, 5076), normal({6, 3}, 5077, 2.0, -1.0), normal({3}, 5078, 0.5, 1.0)},
                            [](const Tensors& in) { return run_batch_norm_backward(in, true); }, {}));
  // x [2, 2, 2] = [[[1, 2], [0, 0]], [[3, 4], [2, 6]]] (the batch_norm golden: channel 0 {1, 2, 3, 4}
  // mean 2.5 var 1.25, channel 1 {0, 0, 2, 6} mean 2 var 6), g = [[[1, -1], [2, 0.5]], [[-0.5, 3], [1, -2]]],
  // w = [1, 2]: per channel the layer_norm formula over N and the trailing dim; dbias = [2.5, 1.5].
  cases.push_back(golden(
      make_case(O::batch_norm_backward, "batch_norm_backward/golden",
                {fixed({1, -1, 2, 0.5, -0.5, 3, 1, -2}, {2, 2, 2}), fixed({1, 2, 0, 0, 3, 4, 2, 6}, {2, 2, 2}),
                 fixed({1, 2}, {2})},
                [](const Tensors& in) { return run_batch_norm_backward(in, true); }, {}),
      {1.2074649015236618, -1.1627530227891942, 0.44227008700508, -0.7824737637670587, -1.2969119138205054,
       1.2522000350860378, 0.5103099378217245, -0.1701062610597458, 2.906876743266008, -5.307223353345934, 2.5,
       1.5},
      {12}));

  // ---- group_norm ----
  cases.push_back(make_case(O::group_norm, "group_norm/weight_bias",
                            {normal({2, 4, 3}, 5031), normal({4}, 5032, 0.5, 1.0), normal({4}, 5033)},
                            [](const Tensors& in) { return group_norm(in[0], 2, in[1], in[2]); }, {0, 1, 2}));
  cases.push_back(make_case(O::group_norm, "group_norm/4d_plain", {normal({2, 6, 2, 2}, 5034, 2.0)},
                            [](const Tensors& in) { return group_norm(in[0], 3); }, {0}));
  // x [1, 4, 2] = [[1, 2], [3, 6], [0, 2], [2, 4]], 2 groups, w = [1, 2, 3, 4], b = [0, 0, 1, 1]:
  // group 0 {1, 2, 3, 6}: mean 3, var 3.5; group 1 {0, 2, 2, 4}: mean 2, var 2;
  // y = (x - mean_g) / sqrt(var_g + 1e-5) * w_c + b_c
  cases.push_back(golden(
      make_case(O::group_norm, "group_norm/golden",
                {fixed({1, 2, 3, 6, 0, 2, 2, 4}, {1, 4, 2}), fixed({1, 2, 3, 4}, {4}), fixed({0, 0, 1, 1}, {4})},
                [eps](const Tensors& in) { return group_norm(in[0], 2, in[1], in[2], eps); }, {0, 1, 2}),
      {-1.0690434404458735, -0.5345217202229368, 0.0, 3.2071303213376208, -3.2426300805573423, 1.0, 1.0,
       6.656840107409789},
      {1, 4, 2}));

  // ---- group_norm_backward (not differentiable) ----
  cases.push_back(make_case(O::group_norm_backward, "group_norm_backward/weight_dbias",
                            {normal({2, 4, 3}, 5081), normal({2, 4, 3}, 5082, 1.5, 0.5), normal({4}, 5083, 0.5, 1.0)},
                            [](const Tensors& in) { return run_group_norm_backward(in, 2, true); }, {}));
  cases.push_back(make_case(O::group_norm_backward, "group_norm_backward/4d_plain",
                            {normal({2, 6, 2, 2}, 5084), normal({2, 6, 2, 2}, 5085, 2.0)},
                            [](const Tensors& in) { return run_group_norm_backward(in, 3, false); }, {}));
  // x [1, 4, 2] = [[1, 2], [3, 6], [0, 2], [2, 4]] (the group_norm golden: group 0 mean 3 var 3.5,
  // group 1 mean 2 var 2), g = [[0.5, -1], [2, 1], [-2, 0.25], [1, 3]], w = [1, 2, 3, 4]: per group
  // the layer_norm formula with gxhat = g * w_c; dweight_c = sum(g * xhat) over the channel's
  // positions, dbias = [-0.5, 3, -1.75, 4].
  cases.push_back(golden(
      make_case(O::group_norm_backward, "group_norm_backward/golden",
                {fixed({0.5, -1, 2, 1, -2, 0.25, 1, 3}, {1, 4, 2}), fixed({1, 2, 3, 6, 0, 2, 2, 4}, {1, 4, 2}),
                 fixed({1, 2, 3, 4}, {4})},
                [](const Tensors& in) { return run_group_norm_backward(in, 2, true); }, {}),
      {-0.0095463397473108, -1.0404090028055955, 1.403119515585209, -0.3531641730323029, 0.22093849712918961,
       -1.3700159635133085, 0.9280753301219186, 0.22100213626220017, 0.0, 1.6035651606688104, 2.8284200537048947,
       4.242630080557342, -0.5, 3, -1.75, 4},
      {16}));

  // ---- embedding ----
  const auto idx = [](std::vector<int64_t> v, Shape s) {
    return Gen([v, s](DType) { return from_vector<int64_t>(v, s); });
  };
  // Repeated indices accumulate their gradients (row 2 three times, row 0 twice).
  cases.push_back(make_case(O::embedding, "embedding/repeated", {normal({5, 3}, 5041), idx({0, 2, 2, 4, 0, 2}, {2, 3})},
                            [](const Tensors& in) { return embedding(in[0], in[1]); }, {0}));
  // Row 2 is padding: by definition it gets no gradient although the forward reads it, so central
  // differences do not apply (tests/ops/test_norm.cpp checks the exact gradient); low precision only.
  OpCase pad = make_case(O::embedding, "embedding/padding", {normal({5, 3}, 5042), idx({1, 2, 2, 3}, {4})},
                         [](const Tensors& in) { return embedding(in[0], in[1], 2); }, {0});
  pad.not_differentiable = true;
  pad.grad_inputs.clear();
  cases.push_back(std::move(pad));
  // weight [[0, 1], [2, 3], [4, 5], [6, 7]], indices [3, 0, 3] -> rows 3, 0, 3
  cases.push_back(golden(make_case(O::embedding, "embedding/golden",
                                   {fixed({0, 1, 2, 3, 4, 5, 6, 7}, {4, 2}), idx({3, 0, 3}, {3})},
                                   [](const Tensors& in) { return embedding(in[0], in[1]); }, {0}),
                         {6, 7, 0, 1, 6, 7}, {3, 2}));

  // ---- dropout (a fresh seeded generator per run, so every run draws the same mask) ----
  cases.push_back(make_case(O::dropout, "dropout/p0.3", {normal({5, 8}, 5051)},
                            [](const Tensors& in) {
                              Generator gen(1234);
                              return dropout(in[0], 0.3, true, &gen);
                            },
                            {0}));
  // dropout_backward with a fixed keep mask (every third element dropped), p = 0.25
  {
    const Shape s{5, 8};
    const Gen keep = [s](DType) {
      std::vector<double> v(std::size_t(shape_numel(s)));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = (i % 3 == 1) ? 0.0 : 1.0;
      return to(make_input(v, s, DType::F64), DType::Bool);
    };
    cases.push_back(make_case(O::dropout_backward, "dropout_backward/p0.25", {normal(s, 6061), keep},
                              [](const Tensors& in) { return dropout_backward(in[0], in[1], 0.25); }, {0}));
  }
}

}  // namespace mg::optable
