// nn::functional: the stateless form of every layer, i.e. the ops themselves, gathered under one
// name as in LibTorch (`namespace F = mg::nn::functional;`). Each is the same dispatcher op as
// mg::<name>, with the same autocast policy, so there is exactly one implementation.
//
//   namespace F = mg::nn::functional;
//   mg::Tensor y = F::relu(F::conv2d(x, w, b, {.padding = {1, 1}}));
#pragma once
#include "mixgrad/ops/attention.h"
#include "mixgrad/ops/conv.h"
#include "mixgrad/ops/loss.h"
#include "mixgrad/ops/norm.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn::functional {

// linear algebra and activations
using mg::celu;
using mg::elu;
using mg::gelu;
using mg::hardsigmoid;
using mg::hardswish;
using mg::hardtanh;
using mg::leaky_relu;
using mg::linear;
using mg::mish;
using mg::relu;
using mg::relu6;
using mg::selu;
using mg::sigmoid;
using mg::silu;
using mg::softplus;
using mg::tanh;
// convolution and pooling
using mg::adaptive_avg_pool2d;
using mg::avg_pool2d;
using mg::conv2d;
using mg::conv_transpose2d;
using mg::max_pool2d;
// normalisation, embedding, dropout, attention
using mg::batch_norm;
using mg::dropout;
using mg::embedding;
using mg::group_norm;
using mg::layer_norm;
using mg::rms_norm;
using mg::scaled_dot_product_attention;
// softmax and losses
using mg::binary_cross_entropy;
using mg::binary_cross_entropy_with_logits;
using mg::cross_entropy;
using mg::kl_div;
using mg::l1_loss;
using mg::log_softmax;
using mg::mse_loss;
using mg::nll_loss;
using mg::huber_loss;
using mg::smooth_l1_loss;
using mg::softmax;

}  // namespace mg::nn::functional
