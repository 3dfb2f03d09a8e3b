// Op cases of the conv group (conv2d, conv2d_backward_input, conv2d_backward_weight): a golden
// tiny conv, and random cases that cover stride, padding, dilation, groups, bias, non-square
// shapes and a non-contiguous input. The table drives f64 gradient checks and f16/bf16-vs-f64.
#include "autograd/grad_mode.h"
#include "op_cases.h"
#include "ops/conv.h"

namespace mg::optable {
namespace {




Gen normal(Shape s) {
  static uint64_t seed = 7000;
  const std::vector<double> v = randn_values(shape_numel(s), ++seed);
  return [v, s](DType dt) { return make_input(v, s, dt); };
}


// Output size of one spatial dim.
int64_t osz(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

}  // namespace

void add_conv_cases(std::vector<OpCase>& cases) {
  using O = OpId;
  // x = [[1, 2, 3], [4, 5, 6], [7, 8, 9]], w = [[1, 0], [0, 1]] (x[i][j] + x[i+1][j+1]), b = 0.5:
  // [[1 + 5, 2 + 6], [4 + 8, 5 + 9]] + 0.5 = [[6.5, 8.5], [12.5, 14.5]]
  OpCase g = make_case(O::conv2d, "conv2d/golden",
                       {fixed({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3}), fixed({1, 0, 0, 1}, {1, 1, 2, 2}),
                        fixed({0.5}, {1})},
                       [](const Tensors& in) { return conv2d(in[0], in[1], in[2]); }, {0, 1, 2});
  g.golden = {6.5, 8.5, 12.5, 14.5};
  g.golden_shape = {1, 1, 2, 2};
  cases.push_back(g);

  // stride [2, 1], padding [1, 0], bias, non-square input and kernel
  const Conv2dOptions o1{.stride = {2, 1}, .padding = {1, 0}};
  cases.push_back(make_case(O::conv2d, "conv2d/bias_stride_pad",
                            {normal({2, 3, 5, 4}), normal({4, 3, 3, 2}), normal({4})},
                            [o1](const Tensors& in) { return conv2d(in[0], in[1], in[2], o1); }, {0, 1, 2}));
  // groups 2, dilation [2, 1], padding [1, 2], stride [1, 2], no bias
  const Conv2dOptions o2{.stride = {1, 2}, .padding = {1, 2}, .dilation = {2, 1}, .groups = 2};
  cases.push_back(make_case(O::conv2d, "conv2d/groups_dilation",
                            {normal({2, 4, 6, 5}), normal({6, 2, 2, 3})},
                            [o2](const Tensors& in) { return conv2d(in[0], in[1], {}, o2); }, {0, 1}));
  // depthwise (groups = C) with a transposed (non-contiguous) input view and padding 1
  const Conv2dOptions o3{.padding = {1, 1}, .groups = 3};
  cases.push_back(make_case(O::conv2d, "conv2d/depthwise_strided_input",
                            {transposed(normal({1, 3, 5, 4})), normal({3, 1, 3, 3}), normal({3})},
                            [o3](const Tensors& in) { return conv2d(in[0], in[1], in[2], o3); }, {0, 1, 2}));

  // the gradient ops, with the geometry of the groups/dilation case: x [2, 4, 6, 5], w [6, 2, 2, 3]
  const int64_t ho = osz(6, 2, 1, 1, 2), wo = osz(5, 3, 2, 2, 1);
  cases.push_back(make_case(O::conv2d_backward_input, "conv2d_backward_input/groups_dilation",
                            {normal({2, 6, ho, wo}), normal({6, 2, 2, 3})},
                            [o2](const Tensors& in) { return conv2d_backward_input(in[0], in[1], {6, 5}, o2); },
                            {0, 1}));
  cases.push_back(make_case(O::conv2d_backward_weight, "conv2d_backward_weight/groups_dilation",
                            {normal({2, 4, 6, 5}), normal({2, 6, ho, wo})},
                            [o2](const Tensors& in) { return conv2d_backward_weight(in[0], in[1], {2, 3}, o2); },
                            {0, 1}));
  // stride 2 with padding: output rows that skip input rows (x [1, 2, 5, 5], w [3, 2, 3, 3])
  const Conv2dOptions o4{.stride = {2, 2}, .padding = {1, 1}};
  const int64_t h4 = osz(5, 3, 2, 1, 1);
  cases.push_back(make_case(O::conv2d_backward_input, "conv2d_backward_input/stride_pad",
                            {normal({1, 3, h4, h4}), normal({3, 2, 3, 3})},
                            [o4](const Tensors& in) { return conv2d_backward_input(in[0], in[1], {5, 5}, o4); },
                            {0, 1}));
  cases.push_back(make_case(O::conv2d_backward_weight, "conv2d_backward_weight/stride_pad",
                            {normal({1, 2, 5, 5}), normal({1, 3, h4, h4})},
                            [o4](const Tensors& in) { return conv2d_backward_weight(in[0], in[1], {3, 3}, o4); },
                            {0, 1}));

  // ---- transposed conv ----
  // x = [[1, 2], [3, 4]], w = [[1, 1], [1, 1]], stride 2: each input spreads over its own 2x2
  // block, plus bias 1: [[2, 2, 3, 3], [2, 2, 3, 3], [4, 4, 5, 5], [4, 4, 5, 5]]
  OpCase tg = make_case(O::conv_transpose2d, "conv_transpose2d/golden",
                        {fixed({1, 2, 3, 4}, {1, 1, 2, 2}), fixed({1, 1, 1, 1}, {1, 1, 2, 2}), fixed({1}, {1})},
                        [](const Tensors& in) { return conv_transpose2d(in[0], in[1], in[2], {.stride = {2, 2}}); },
                        {0, 1, 2});
  tg.golden = {2, 2, 3, 3, 2, 2, 3, 3, 4, 4, 5, 5, 4, 4, 5, 5};
  tg.golden_shape = {1, 1, 4, 4};
  cases.push_back(tg);
  // stride [2, 1], padding [1, 0], output_padding [1, 0], groups 2, dilation [1, 2], bias
  const Conv2dOptions ot{.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}, .groups = 2};
  cases.push_back(make_case(O::conv_transpose2d, "conv_transpose2d/stride_groups_outpad",
                            {normal({2, 4, 3, 4}), normal({4, 3, 3, 2}), normal({6})},
                            [ot](const Tensors& in) { return conv_transpose2d(in[0], in[1], in[2], ot, {1, 0}); },
                            {0, 1, 2}));

  // ---- pooling ----
  const Gen x16 = fixed({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {1, 1, 4, 4});
  // 2x2 windows of [[1..4], [5..8], [9..12], [13..16]]: maxima 6, 8, 14, 16
  OpCase mg = make_case(O::max_pool2d, "max_pool2d/golden", {x16},
                        [](const Tensors& in) { return max_pool2d(in[0], {2, 2}); }, {0});
  mg.golden = {6, 8, 14, 16};
  mg.golden_shape = {1, 1, 2, 2};
  cases.push_back(mg);
  // overlapping windows (kernel [3, 2], stride [2, 1]) with -inf padding [1, 1]
  cases.push_back(make_case(O::max_pool2d, "max_pool2d/overlap_pad", {normal({2, 3, 5, 6})},
                            [](const Tensors& in) { return max_pool2d(in[0], {3, 2}, {2, 1}, {1, 1}); }, {0}));
  // dilation 2 (effective window 5), stride 2, padding 1 (at most half the kernel, as PyTorch), on a transposed view
  cases.push_back(make_case(O::max_pool2d, "max_pool2d/dilation", {transposed(normal({1, 2, 7, 8}))},
                            [](const Tensors& in) { return max_pool2d(in[0], {3, 3}, {2, 2}, {1, 1}, {2, 2}); },
                            {0}));
  // positions h * 4 + w of the maxima above: 5, 7, 13, 15
  OpCase mi = make_case(O::max_pool2d_indices, "max_pool2d_indices/golden", {x16},
                        [](const Tensors& in) { return max_pool2d_indices(in[0], {2, 2}); }, {});
  mi.not_differentiable = true;
  mi.out_dtype = DType::I64;
  mi.golden = {5, 7, 13, 15};
  mi.golden_shape = {1, 1, 2, 2};
  cases.push_back(mi);
  // ties: [[1, 1], [1, 1]] gives the first index 0; padding is never chosen over real elements
  OpCase mt = make_case(O::max_pool2d_indices, "max_pool2d_indices/ties_pad", {fixed({1, 1, 1, 1}, {1, 1, 2, 2})},
                        [](const Tensors& in) { return max_pool2d_indices(in[0], {2, 2}, {1, 1}, {1, 1}); }, {});
  // 3x3 outputs of 2x2 windows over the padded [4, 4]: each picks its first real element
  mt.not_differentiable = true;
  mt.out_dtype = DType::I64;
  mt.golden = {0, 0, 1, 0, 0, 1, 2, 2, 3};
  mt.golden_shape = {1, 1, 3, 3};
  cases.push_back(mt);

  // means of the 2x2 windows: (1 + 2 + 5 + 6) / 4 = 3.5, 5.5, 11.5, 13.5
  OpCase ag = make_case(O::avg_pool2d, "avg_pool2d/golden", {x16},
                        [](const Tensors& in) { return avg_pool2d(in[0], {2, 2}); }, {0});
  ag.golden = {3.5, 5.5, 11.5, 13.5};
  ag.golden_shape = {1, 1, 2, 2};
  cases.push_back(ag);
  // padding 1, kernel 2, stride 2 on [[1, 2], [3, 4]]: corner windows hold one real element;
  // count_include_pad=false divides by 1: [1, 2, 3, 4]; true divides by 4: [0.25, 0.5, 0.75, 1]
  OpCase ap = make_case(O::avg_pool2d, "avg_pool2d/golden_exclude_pad", {fixed({1, 2, 3, 4}, {1, 1, 2, 2})},
                        [](const Tensors& in) { return avg_pool2d(in[0], {2, 2}, {2, 2}, {1, 1}, false); }, {0});
  ap.golden = {1, 2, 3, 4};
  ap.golden_shape = {1, 1, 2, 2};
  cases.push_back(ap);
  OpCase ai = make_case(O::avg_pool2d, "avg_pool2d/golden_include_pad", {fixed({1, 2, 3, 4}, {1, 1, 2, 2})},
                        [](const Tensors& in) { return avg_pool2d(in[0], {2, 2}, {2, 2}, {1, 1}, true); }, {0});
  ai.golden = {0.25, 0.5, 0.75, 1};
  ai.golden_shape = {1, 1, 2, 2};
  cases.push_back(ai);
  cases.push_back(make_case(O::avg_pool2d, "avg_pool2d/overlap_pad", {normal({2, 2, 5, 6})},
                            [](const Tensors& in) { return avg_pool2d(in[0], {3, 3}, {2, 1}, {1, 1}, true); }, {0}));
  cases.push_back(make_case(O::avg_pool2d, "avg_pool2d/overlap_exclude_pad", {transposed(normal({2, 2, 6, 5}))},
                            [](const Tensors& in) { return avg_pool2d(in[0], {3, 2}, {1, 2}, {1, 1}, false); }, {0}));
  // g [2, 2, 3, 6] onto the maxima of x [2, 2, 5, 6] (kernel 3, stride [2, 1], padding 1: overlapping
  // windows, so an element can be the maximum of several); x is not differentiated
  cases.push_back(make_case(O::max_pool2d_backward, "max_pool2d_backward/overlap_pad",
                            {normal({2, 2, 3, 6}), normal({2, 2, 5, 6})},
                            [](const Tensors& in) {
                              const Tensor idx = max_pool2d_indices(in[1], {3, 3}, {2, 1}, {1, 1});
                              return max_pool2d_backward(in[0], idx, {5, 6}, {3, 3}, {2, 1}, {1, 1});
                            },
                            {0}));
  // x [2, 2, 5, 6], kernel 3, stride [2, 1], padding 1 -> [2, 2, 3, 6]
  cases.push_back(make_case(O::avg_pool2d_backward, "avg_pool2d_backward/overlap_pad", {normal({2, 2, 3, 6})},
                            [](const Tensors& in) {
                              return avg_pool2d_backward(in[0], {5, 6}, {3, 3}, {2, 1}, {1, 1}, false);
                            },
                            {0}));

  // [[1, 2, 3], [4, 5, 6], [7, 8, 9]] to 2x2: windows rows/cols [0, 2) and [1, 3):
  // (1 + 2 + 4 + 5) / 4 = 3, (2 + 3 + 5 + 6) / 4 = 4, 6, 7
  OpCase ad = make_case(O::adaptive_avg_pool2d, "adaptive_avg_pool2d/golden",
                        {fixed({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3})},
                        [](const Tensors& in) { return adaptive_avg_pool2d(in[0], {2, 2}); }, {0});
  ad.golden = {3, 4, 6, 7};
  ad.golden_shape = {1, 1, 2, 2};
  cases.push_back(ad);
  cases.push_back(make_case(O::adaptive_avg_pool2d, "adaptive_avg_pool2d/uneven", {normal({2, 3, 7, 5})},
                            [](const Tensors& in) { return adaptive_avg_pool2d(in[0], {3, 2}); }, {0}));
  cases.push_back(make_case(O::adaptive_avg_pool2d, "adaptive_avg_pool2d/global", {normal({2, 3, 4, 3})},
                            [](const Tensors& in) { return adaptive_avg_pool2d(in[0], {1, 1}); }, {0}));
  cases.push_back(make_case(O::adaptive_avg_pool2d_backward, "adaptive_avg_pool2d_backward/uneven",
                            {normal({2, 3, 3, 2})},
                            [](const Tensors& in) { return adaptive_avg_pool2d_backward(in[0], {7, 5}); }, {0}));
}

// Pooling with ceil_mode, added after the table's seeds were fixed: called last (op_cases.cpp).
void add_late_pool_cases(std::vector<OpCase>& cases) {
  using O = OpId;
  cases.push_back(make_case(O::max_pool2d, "max_pool2d/ceil_pad", {normal({2, 2, 7, 6})},
                            [](const Tensors& in) { return max_pool2d(in[0], {3, 3}, {2, 2}, {1, 1}, {1, 1}, true); },
                            {0}));
  cases.push_back(make_case(O::avg_pool2d, "avg_pool2d/ceil_include_pad", {normal({2, 2, 7, 6})},
                            [](const Tensors& in) { return avg_pool2d(in[0], {3, 3}, {2, 2}, {1, 1}, true, true); },
                            {0}));
  cases.push_back(make_case(O::avg_pool2d, "avg_pool2d/ceil_exclude_pad", {transposed(normal({2, 2, 6, 7}))},
                            [](const Tensors& in) { return avg_pool2d(in[0], {2, 3}, {2, 2}, {0, 1}, false, true); },
                            {0}));
}

}  // namespace mg::optable
