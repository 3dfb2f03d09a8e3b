// Batch norm folded into the layer before it, for inference: PyTorch's torch.nn.utils.fusion
// (fuse_conv_bn_eval, fuse_linear_bn_eval). In eval mode batch norm is a per-channel affine map
// y = (x - mean) * gamma / sqrt(var + eps) + beta, so after a convolution or a linear layer it
// folds into that layer's weight (scaled per output channel) and bias: one layer instead of two
// passes over the activations, the same outputs up to rounding.
//
//   conv->eval(); bn->eval();
//   nn::fuse_bn_eval_(*conv, *bn);            // conv now computes bn(conv(x)); use it alone
//
// The fused values are computed in f64 and rounded once to the layer's dtype (PyTorch computes
// them in the layer's dtype). Transposed convolutions are not offered.
#pragma once
#include <utility>

#include "mixgrad/nn/conv.h"
#include "mixgrad/nn/conv1d.h"
#include "mixgrad/nn/conv3d.h"
#include "mixgrad/nn/linear.h"
#include "mixgrad/nn/normalization.h"

namespace mg::nn {

// The folded (weight, bias) of a layer whose weight has its output channels in dim 0 (a
// convolution's [out, in/groups, k...], a linear layer's [out, in]) followed by batch norm over
// those channels: weight * s per output channel and (bias - mean) * s + beta with
// s = gamma / sqrt(var + eps). bias, gamma and beta may be undefined (0, 1, 0); the running
// statistics may not. PyTorch's fuse_conv_bn_weights / fuse_linear_bn_weights.
std::pair<Tensor, Tensor> fuse_bn_weights(const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                                          const Tensor& running_var, double eps, const Tensor& bn_weight,
                                          const Tensor& bn_bias);

// In place: the layer's weight and bias become the folded ones (a bias is registered if it had
// none); both modules must be in eval mode and the batch norm must track running statistics.
// The layer's parameters keep their handles (an optimizer or hook holding them sees the new
// values). Afterwards the layer alone computes bn(layer(x)): replace the batch norm by Identity.
// (A layer made with bias = false gets one but still prints bias=false.)
void fuse_bn_eval_(Conv1d& conv, const BatchNorm& bn);
void fuse_bn_eval_(Conv2d& conv, const BatchNorm& bn);
void fuse_bn_eval_(Conv3d& conv, const BatchNorm& bn);
void fuse_bn_eval_(Linear& linear, const BatchNorm& bn);

}  // namespace mg::nn
