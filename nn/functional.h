// nn::functional: the stateless form of every layer, i.e. the ops themselves, gathered under one
// name as in LibTorch (`namespace F = mg::nn::functional;`). Each is the same function as
// mg::<name> (a dispatcher op, or a composite with its declared policy), so there is exactly one
// implementation.
//
//   namespace F = mg::nn::functional;
//   mg::Tensor y = F::relu(F::conv2d(x, w, b, {.padding = {1, 1}}));
#pragma once
#include "mixgrad/nn/dropout.h"
#include "mixgrad/nn/embedding_bag.h"
#include "mixgrad/nn/fold.h"
#include "mixgrad/nn/instance_norm.h"
#include "mixgrad/nn/reshape_layers.h"
#include "mixgrad/ops/adaptive_max_pool.h"
#include "mixgrad/ops/attention.h"
#include "mixgrad/ops/conv.h"
#include "mixgrad/ops/conv1d.h"
#include "mixgrad/ops/conv3d.h"
#include "mixgrad/ops/ctc_loss.h"
#include "mixgrad/ops/distance.h"
#include "mixgrad/ops/interpolate.h"
#include "mixgrad/ops/layer_composites.h"
#include "mixgrad/ops/fractional_max_pool.h"
#include "mixgrad/ops/grid_sample.h"
#include "mixgrad/ops/lp_pool.h"
#include "mixgrad/ops/max_unpool.h"
#include "mixgrad/ops/activation_composites.h"
#include "mixgrad/ops/loss.h"
#include "mixgrad/ops/margin_losses.h"
#include "mixgrad/ops/norm.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/pad.h"

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
using mg::bilinear;
using mg::glu;
using mg::hardshrink;
using mg::logsigmoid;
using mg::prelu;
using mg::rrelu;
using mg::gumbel_softmax;
using mg::softmin;
using mg::softshrink;
using mg::softsign;
using mg::tanhshrink;
using mg::threshold;
using mg::sigmoid;
using mg::silu;
using mg::softplus;
using mg::tanh;
// convolution, pooling, padding and resampling
using mg::adaptive_avg_pool1d;
using mg::adaptive_avg_pool2d;
using mg::adaptive_avg_pool3d;
using mg::adaptive_max_pool1d;
using mg::adaptive_max_pool2d;
using mg::adaptive_max_pool3d;
using mg::avg_pool1d;
using mg::avg_pool2d;
using mg::avg_pool3d;
using mg::channel_shuffle;
using mg::affine_grid;
using mg::grid_sample;
using mg::fractional_max_pool2d;
using mg::fractional_max_pool2d_with_indices;
using mg::fractional_max_pool3d;
using mg::fractional_max_pool3d_with_indices;
using mg::lp_pool1d;
using mg::lp_pool2d;
using mg::lp_pool3d;
using mg::max_pool1d_indices;
using mg::max_unpool1d;
using mg::max_unpool2d;
using mg::max_unpool3d;
using mg::max_pool2d_indices;
using mg::max_pool3d_indices;
using mg::conv1d;
using mg::conv2d;
using mg::conv3d;
using mg::conv_transpose3d;
using mg::conv_transpose1d;
using mg::conv_transpose2d;
using mg::interpolate;
using mg::max_pool1d;
using mg::max_pool2d;
using mg::max_pool3d;
using mg::pad;
using mg::pixel_shuffle;
using mg::pixel_unshuffle;
using mg::nn::fold;    // public ops composed in nn/fold.h
using mg::nn::unfold;
// normalisation, embedding, dropout, attention
using mg::batch_norm;
using mg::dropout;
using mg::embedding;
using mg::local_response_norm;
using mg::nn::alpha_dropout;    // public ops composed in nn/dropout.h and nn/embedding_bag.h
using mg::nn::channel_dropout;
using mg::nn::dropout1d;
using mg::nn::dropout2d;
using mg::nn::dropout3d;
using mg::nn::feature_alpha_dropout;
using mg::nn::instance_norm;
using mg::nn::embedding_bag;
using mg::group_norm;
using mg::layer_norm;
using mg::rms_norm;
using mg::scaled_dot_product_attention;
// softmax and losses
using mg::binary_cross_entropy;
using mg::binary_cross_entropy_with_logits;
using mg::cross_entropy;
using mg::ctc_loss;
using mg::kl_div;
using mg::l1_loss;
using mg::log_softmax;
using mg::mse_loss;
using mg::nll_loss;
using mg::huber_loss;
using mg::smooth_l1_loss;
using mg::softmax;
using mg::cosine_embedding_loss;
using mg::gaussian_nll_loss;
using mg::hinge_embedding_loss;
using mg::margin_ranking_loss;
using mg::multi_margin_loss;
using mg::multilabel_soft_margin_loss;
using mg::poisson_nll_loss;
using mg::soft_margin_loss;
using mg::triplet_margin_loss;
// distances
using mg::cosine_similarity;
using mg::pairwise_distance;
using mg::normalize;
using mg::pdist;
using mg::one_hot;
using mg::multilabel_margin_loss;
using mg::triplet_margin_with_distance_loss;

}  // namespace mg::nn::functional
