// The rest of PyTorch's activation functions, as composites of public ops (ops/composite.h):
// each computes in opmath (f32; f64 stays f64) and rounds once to the input's dtype, with its
// autocast policy in ops/composite_list.def (softmin fp32 like softmax; the others keep the
// input's dtype, as PyTorch's autocast leaves them). Gradients through the ops, with PyTorch's
// choices at the kinks (stated per function) and NaN propagated as PyTorch's kernels do.
//
//   mg::Tensor y = mg::glu(x);                       // x [..., 2n] -> a * sigmoid(b), [..., n]
//   mg::Tensor z = mg::prelu(x, weight);             // x [N, C, ...], weight [1] or [C]
#pragma once
#include <cstdint>

#include "mixgrad/core/generator.h"
#include "mixgrad/core/tensor.h"

namespace mg {

// softmax(-x) along dim.
Tensor softmin(const Tensor& x, int64_t dim);
// x split in halves a, b along dim (its size even): a * sigmoid(b).
Tensor glu(const Tensor& x, int64_t dim = -1);
// log(sigmoid(x)) = -softplus(-x) (exact in f64 for every x, without overflow).
Tensor logsigmoid(const Tensor& x);
// x / (1 + |x|).
Tensor softsign(const Tensor& x);
// x - tanh(x).
Tensor tanhshrink(const Tensor& x);
// 0 where -lambd <= x <= lambd, else x (gradient 0 on the closed interval); a negative lambd
// keeps every x (PyTorch accepts it). As PyTorch, lambd is first converted to x's dtype (0.3 is
// 0.30078125 for bf16); a finite lambd that overflows it is refused.
Tensor hardshrink(const Tensor& x, double lambd = 0.5);
// x - lambd where x > lambd, x + lambd where x < -lambd, else 0; lambd in [0, the largest finite
// value of x's dtype], converted to that dtype first, as PyTorch.
Tensor softshrink(const Tensor& x, double lambd = 0.5);
// value where x <= threshold, else x (gradient 0 where x <= threshold).
Tensor threshold(const Tensor& x, double threshold, double value);
// x where x > 0, else weight * x; weight [1] (shared) or [C] (per channel: dim 1 of x [N, C, ...];
// an input of fewer than 2 dims has one channel), as torch.nn.functional.prelu.
Tensor prelu(const Tensor& x, const Tensor& weight);
// Randomized leaky ReLU (Xu et al. 2015): x where x > 0, else a * x with, in training, a drawn
// per element from U(lower, upper) (the Philox stream of `gen`, the default generator when null)
// and, in eval, a = (lower + upper) / 2; the gradient is a where x <= 0. lower <= upper, both finite
// (lower may be negative, as in PyTorch).
Tensor rrelu(const Tensor& x, double lower = 1.0 / 8.0, double upper = 1.0 / 3.0, bool training = false,
             Generator* gen = nullptr);
// Gumbel-softmax (Jang et al. 2017; PyTorch's F.gumbel_softmax): softmax((logits + g) / tau) along
// dim with g = -log(-log(u)) Gumbel noise, u ~ U[0, 1) drawn per element from `gen` (the default
// generator when null). hard: the one-hot of each sample's argmax in the forward, the soft
// sample's gradient in the backward (y_hard - y_soft.detach() + y_soft, PyTorch's formula). tau > 0.
Tensor gumbel_softmax(const Tensor& logits, double tau = 1.0, bool hard = false, int64_t dim = -1,
                      Generator* gen = nullptr);

}  // namespace mg
