// Connectionist temporal classification loss (Graves et al. 2006), PyTorch's F.ctc_loss: the
// negative log-likelihood of each target sequence summed over every alignment of it to the
// input's T steps (labels separated by blanks, repeats merged).
//
//   log_probs [T, N, C] (log-softmax over C; unbatched [T, C]), targets [N, S] padded or 1-D with the
//   N targets concatenated, input_lengths and target_lengths (N each) ->
//   None: [N];  Sum: the sum;  Mean: the mean over the batch of each loss / its target length (min 1).
//
// A composite of public ops with the fp32 autocast policy (PyTorch's autocast lists ctc_loss as
// fp32): the alpha recursion of the forward-backward algorithm runs in log space over the
// extended labels [blank, l1, blank, l2, ..., blank], one step of ops per time step up to the
// longest input, and autograd differentiates it (twice too). "log 0" is -1e30 (f32; -1e300 in
// f64), not -inf, and -inf log-probabilities (masked logits) are clamped to it, so no NaN arises
// in the values or gradients. A sample whose likelihood stays below half of that — its target
// cannot be aligned (too long for its input), or a path needs a log-probability near -1e30 —
// gives inf (0 with zero_infinity) and a zero gradient (PyTorch's gradient is NaN there without
// zero_infinity). Cost: about a dozen ops per step on [N, 2S + 1] tensors; autograd keeps about
// four such tensors per step (PyTorch's kernel: one). The targets and a few host tables are read
// and copied once per call (a synchronisation on a GPU, and no CUDA graph capture); the tensor
// form of the lengths reads them too.
//
// PyTorch's own backward returns a gradient with respect to log_probs that already includes the
// log-softmax's (exp(log_probs) minus the alignment posteriors); this one is the true derivative of
// the loss, so the two agree through a log_softmax — the usual way it is used — and not directly.
//
//   mg::Tensor loss = mg::ctc_loss(log_softmax(logits, 2), targets, input_lengths, target_lengths);
#pragma once
#include <cstdint>
#include <vector>

#include "mixgrad/core/tensor.h"
#include "mixgrad/ops/loss.h"

namespace mg {

Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const std::vector<int64_t>& input_lengths,
                const std::vector<int64_t>& target_lengths, int64_t blank = 0, Reduction reduction = Reduction::Mean,
                bool zero_infinity = false);
// The lengths as integer tensors [N] (0-d for unbatched input), read on the host.
Tensor ctc_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& input_lengths,
                const Tensor& target_lengths, int64_t blank = 0, Reduction reduction = Reduction::Mean,
                bool zero_infinity = false);

}  // namespace mg
