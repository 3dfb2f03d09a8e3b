// Op cases of the norm group: layer_norm, rms_norm, batch_norm (training and eval), group_norm,
// embedding, dropout. Inputs are small (f64 central differences), with variances well away from 0
// so the normalisations stay smooth; golden values computed in f64 with the math in comments.
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
}

}  // namespace mg::optable
